//! Shared by every integration test: the one way to start the server
//! ([`server`]: `Server::builder()…start()`), the runners of the other
//! commands, the identities clients send, a raw HTTP/1.1 client (exact
//! bytes on the wire: malformed escapes, NUL, dot segments, repeated
//! headers, invalid UTF-8 bodies, which `reqwest` would normalise or
//! refuse), the checks every response must pass, and PostgreSQL scratch
//! databases ([`cluster`] for a private PostgreSQL server).

pub mod cluster;
pub mod server;
pub mod sockets;

pub use server::{Server, ServerBuilder};

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const VERSION: &str = "0.8.0";
pub const PROTOCOL: &str = "2";
pub const CLOCK: &str = "2026-07-15T12:00:00.000Z";

/// The identity (`X-Autobuild-Version`, `X-Autobuild-Protocol-Version`) the
/// tests of protocol 3's routes send: the server answers those routes only to
/// protocol-3 clients, with their (0.9.0) catalogs.
pub const PROTOCOL3_CLIENT: (&str, &str) = ("0.9.0", "3");

/// `abstore serve` flags accepting today's identity and [`PROTOCOL3_CLIENT`]
/// ([`ServerBuilder::accept_protocol3`]).
pub const ACCEPT_PROTOCOL3: [&str; 4] =
    ["--accept-client", "0.8.0/2", "--accept-client", "0.9.0/3"];

/// A `reqwest` client that sends [`PROTOCOL3_CLIENT`] with every request.
pub fn protocol3_client() -> reqwest::Client {
    let (version, protocol) = PROTOCOL3_CLIENT;
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        "x-autobuild-version",
        reqwest::header::HeaderValue::from_static(version),
    );
    headers.insert(
        "x-autobuild-protocol-version",
        reqwest::header::HeaderValue::from_static(protocol),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .expect("reqwest client")
}

/// The program `name` on PATH, or (Bun) where `ABSTORE_TEST_BUN` points
/// (.ci/run installs it from npm under target/).
pub fn installed(name: &str) -> Option<std::path::PathBuf> {
    if name == "bun"
        && let Some(path) = std::env::var_os("ABSTORE_TEST_BUN")
    {
        return Some(path.into());
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    })
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_abstore")
}

/// The protocol's identity headers, for `reqwest` clients.
pub fn identity_headers() -> reqwest::header::HeaderMap {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        "x-autobuild-version",
        reqwest::header::HeaderValue::from_static(VERSION),
    );
    headers.insert(
        "x-autobuild-protocol-version",
        reqwest::header::HeaderValue::from_static(PROTOCOL),
    );
    headers
}

/// A `reqwest` client that sends the identity headers with every request.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .default_headers(identity_headers())
        .build()
        .expect("reqwest client")
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// One counter or gauge on a Prometheus `/metrics` page, summed over its
/// label sets, or one series when `name` carries them as rendered
/// (`abstore_storage_full_total{storage="blobs"}`); `None` when the page
/// does not carry it.
pub async fn metric(c: &reqwest::Client, metrics_url: &str, name: &str) -> Option<f64> {
    let text = c
        .get(metrics_url)
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("the metrics page");
    let values: Vec<f64> = text
        .lines()
        .filter(|line| {
            line.split(['{', ' ']).next() == Some(name) || line.split(' ').next() == Some(name)
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// A temporary path as command-line text (they are always UTF-8 here).
pub fn path_text(path: &std::path::Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

/// `abstore export` of `database` and `blobs` to `out`, which must succeed.
pub fn export(database: &str, blobs: &str, out: &std::path::Path) -> String {
    run_ok(&[
        "export",
        "--database",
        database,
        "--blobs",
        blobs,
        "--out",
        path_text(out),
        "--quiet",
    ])
}

/// `abstore import` of `file` (a dry run unless `apply`); returns
/// (success, stdout, stderr).
pub fn import(
    file: &std::path::Path,
    database: &str,
    blobs: &str,
    apply: bool,
) -> (bool, String, String) {
    let mut args = vec![
        "import",
        path_text(file),
        "--database",
        database,
        "--blobs",
        blobs,
        "--quiet",
    ];
    if apply {
        args.push("--apply");
    }
    run(&args)
}

/// An archive without its header line (the only one naming the source and
/// time).
pub fn archive_body(archive: &std::path::Path) -> String {
    let text = std::fs::read_to_string(archive).expect("read archive");
    let (_, rest) = text.split_once('\n').expect("a header line");
    rest.to_string()
}

/// Two archives hold the same records: equal after their headers.
pub fn assert_same_archive_body(a: &std::path::Path, b: &std::path::Path, what: &str) {
    let (a, b) = (archive_body(a), archive_body(b));
    for (i, (x, y)) in a.lines().zip(b.lines()).enumerate() {
        assert_eq!(x, y, "{what}: line {} differs", i + 2);
    }
    assert_eq!(
        a.lines().count(),
        b.lines().count(),
        "{what}: line counts differ"
    );
}

/// Run `abstore args…` to completion with `env` added; returns (success,
/// stdout, stderr).
pub fn run_with_env(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let out = std::process::Command::new(bin())
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run abstore");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Run `abstore args…` to completion; returns (success, stdout, stderr).
pub fn run(args: &[&str]) -> (bool, String, String) {
    run_with_env(args, &[])
}

/// Run `abstore args…`, which must succeed; returns its stdout.
pub fn run_ok(args: &[&str]) -> String {
    let (ok, stdout, stderr) = run(args);
    assert!(ok, "abstore {args:?} failed:\n{stderr}");
    stdout
}

/// One response, read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    /// The body, decoded when the answer was compressed.
    pub body: Vec<u8>,
    /// The answer's `Content-Encoding`, if any.
    pub encoding: Option<String>,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The JSON error shape (`{"error": string, "kind": known kind}`) for
    /// every status ≥ 400; panics naming `what` otherwise.
    pub fn assert_error_shape(&self, what: &str) {
        if self.status < 400 {
            return;
        }
        let v = self.json();
        let kind_ok = matches!(
            v["kind"].as_str(),
            Some("validation" | "auth" | "not-found" | "conflict" | "internal")
        );
        assert!(
            v["error"].is_string() && kind_ok,
            "{what}: error body is not the JSON error shape: {} {}",
            self.status,
            self.text()
        );
    }

    /// `status` and, for an error, `kind`; panics naming `what` otherwise.
    pub fn expect(&self, status: u16, kind: Option<&str>, what: &str) -> &Self {
        assert_eq!(self.status, status, "{what}: {}", self.text());
        self.assert_error_shape(what);
        if let Some(kind) = kind {
            assert_eq!(self.json()["kind"], kind, "{what}: {}", self.text());
        }
        self
    }
}

/// A request, written byte for byte.
pub struct Raw<'a> {
    pub method: &'a str,
    /// Sent verbatim as the request target.
    pub target: String,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Option<Vec<u8>>,
    /// The first `Host` header; `None`: the address sent to.
    pub host: Option<Vec<u8>>,
}

impl<'a> Raw<'a> {
    /// A machine-route request with both identity headers (and the token).
    pub fn new(method: &'a str, target: impl Into<String>, token: Option<&str>) -> Self {
        let mut headers = vec![
            (
                "X-Autobuild-Version".to_owned(),
                VERSION.as_bytes().to_vec(),
            ),
            (
                "X-Autobuild-Protocol-Version".to_owned(),
                PROTOCOL.as_bytes().to_vec(),
            ),
        ];
        if let Some(token) = token {
            headers.push((
                "Authorization".to_owned(),
                format!("Bearer {token}").into_bytes(),
            ));
        }
        Raw {
            method,
            target: target.into(),
            headers,
            body: None,
            host: None,
        }
    }

    /// The first `Host` header's value instead of the address sent to.
    pub fn host(mut self, host: impl Into<Vec<u8>>) -> Self {
        self.host = Some(host.into());
        self
    }

    pub fn json(mut self, body: &Value) -> Self {
        self.body = Some(body.to_string().into_bytes());
        self
    }

    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = Some(body.into());
        self
    }

    pub fn header(mut self, name: &str, value: impl Into<Vec<u8>>) -> Self {
        self.headers.push((name.to_owned(), value.into()));
        self
    }

    /// Send on a fresh connection (`Connection: close`) to `base`
    /// (`http://host:port`). `Err` means the connection was dropped or
    /// timed out without a complete response.
    pub async fn send(&self, base: &str) -> Result<Reply, String> {
        let addr = base.trim_start_matches("http://").trim_end_matches('/');
        let mut request =
            format!("{} {} HTTP/1.1\r\nHost: ", self.method, self.target).into_bytes();
        request.extend_from_slice(self.host.as_deref().unwrap_or(addr.as_bytes()));
        request.extend_from_slice(b"\r\n");
        for (name, value) in &self.headers {
            request.extend_from_slice(name.as_bytes());
            request.extend_from_slice(b": ");
            request.extend_from_slice(value);
            request.extend_from_slice(b"\r\n");
        }
        if let Some(body) = &self.body {
            request.extend_from_slice(b"Content-Type: application/json\r\n");
            request.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
        }
        request.extend_from_slice(b"Connection: close\r\n\r\n");
        if let Some(body) = &self.body {
            request.extend_from_slice(body);
        }
        let exchange = async {
            let mut stream = TcpStream::connect(addr)
                .await
                .map_err(|e| format!("connect: {e}"))?;
            stream
                .write_all(&request)
                .await
                .map_err(|e| format!("write: {e}"))?;
            let mut response = Vec::new();
            stream
                .read_to_end(&mut response)
                .await
                .map_err(|e| format!("read: {e}"))?;
            parse_response(&response)
        };
        tokio::time::timeout(Duration::from_secs(60), exchange)
            .await
            .map_err(|_| "no response within 60 s".to_owned())?
    }
}

/// Parse a `Connection: close` response (Content-Length or chunked body).
fn parse_response(bytes: &[u8]) -> Result<Reply, String> {
    let end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| {
            format!(
                "connection closed after {} bytes, no response head",
                bytes.len()
            )
        })?;
    let head = String::from_utf8_lossy(&bytes[..end]).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| format!("no status line in {head:?}"))?;
    let rest = &bytes[end + 4..];
    let chunked = head
        .lines()
        .any(|l| l.to_ascii_lowercase().starts_with("transfer-encoding:") && l.contains("chunked"));
    let body = if chunked {
        dechunk(rest)?
    } else {
        rest.to_vec()
    };
    let encoding = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("content-encoding")
            .then(|| value.trim().to_ascii_lowercase())
    });
    let body = match &encoding {
        Some(encoding) => decode(encoding, &body),
        None => body,
    };
    Ok(Reply {
        status,
        body,
        encoding,
    })
}

fn dechunk(mut bytes: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let line_end = bytes
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("truncated chunked body")?;
        let size_text = String::from_utf8_lossy(&bytes[..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| format!("bad chunk size {size_text:?}"))?;
        bytes = &bytes[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        if bytes.len() < size + 2 {
            return Err("truncated chunk".into());
        }
        out.extend_from_slice(&bytes[..size]);
        bytes = &bytes[size + 2..];
    }
}

/// `GET /readyz`, read whole.
pub async fn readiness(base: &str) -> Reply {
    Raw::new("GET", "/readyz", None)
        .send(base)
        .await
        .unwrap_or_else(|e| panic!("/readyz: {e}"))
}

/// Poll `/readyz` until it answers `status` (a blob probe's result stands
/// for 2 s); panics after 20 s.
pub async fn await_readiness(base: &str, status: u16) -> Reply {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let r = readiness(base).await;
        if r.status == status || std::time::Instant::now() > deadline {
            assert_eq!(r.status, status, "/readyz: {}", r.text());
            return r;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The server's resident set size in KiB (Linux `/proc`).
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Percent-encode one path segment completely (every byte outside
/// unreserved characters), so NUL and `/` travel inside the segment.
pub fn enc(segment: &str) -> String {
    abstore_conformance::util::enc(segment)
}

// ── PostgreSQL scratch databases ────────────────────────────────────────────

pub use abstore_testkit::scratch_pg::ScratchDb as PgDb;

/// A fresh database on `ABSTORE_TEST_POSTGRES_URL`; `None` (with a loud
/// banner) when it is unset outside CI, a panic under `CI=true`.
pub async fn pg_database(prefix: &str) -> Option<PgDb> {
    abstore_testkit::scratch_pg::for_test(
        &format!("PostgreSQL part of {prefix} tests"),
        &format!("abstore_{prefix}"),
    )
    .await
}

/// Drop a scratch database, warning when it cannot be.
pub async fn drop_pg(db: PgDb) {
    if let Err(e) = db.drop_db().await {
        eprintln!("warning: {e}");
    }
}

/// Run `f(database_url)` on a scratch database, dropping it even if `f` panics.
pub async fn with_pg<F, Fut>(prefix: &str, f: F)
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let Some(db) = pg_database(prefix).await else {
        return;
    };
    let outcome = tokio::spawn(f(db.url.clone())).await;
    drop_pg(db).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// Decode a `Content-Encoding` the server may choose (zstd, br, gzip).
/// `GET url` by `c` asking `accept`: the status, `Content-Encoding`, and the
/// body decoded; a compressed answer must say it varies by `Accept-Encoding`.
pub async fn get_decoded(
    c: &reqwest::Client,
    url: &str,
    accept: &str,
) -> (u16, Option<String>, Vec<u8>) {
    let res = c
        .get(url)
        .header("accept-encoding", accept)
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    let header = |name: &str| {
        res.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    let encoding = header("content-encoding");
    if encoding.is_some() {
        assert!(
            header("vary").is_some_and(|v| v.to_ascii_lowercase().contains("accept-encoding")),
            "{url}: a compressed answer varies by Accept-Encoding"
        );
    }
    let body = res.bytes().await.unwrap();
    let body = match &encoding {
        Some(encoding) => decode(encoding, &body),
        None => body.to_vec(),
    };
    (status, encoding, body)
}

pub fn decode(encoding: &str, body: &[u8]) -> Vec<u8> {
    use std::io::Read as _;
    let mut out = Vec::new();
    match encoding {
        "zstd" => out = zstd::decode_all(body).expect("a zstd body"),
        "br" => {
            brotli::Decompressor::new(body, 4096)
                .read_to_end(&mut out)
                .expect("a brotli body");
        }
        "gzip" => {
            flate2::read::GzDecoder::new(body)
                .read_to_end(&mut out)
                .expect("a gzip body");
        }
        other => panic!("unexpected content-encoding {other}"),
    }
    out
}
