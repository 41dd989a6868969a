//! The HTTP clients people use read whole histories in every encoding
//! (issue 49, item 9): curl, Python's urllib3, requests and httpx, Node's
//! fetch (undici), Bun's fetch (Autobuild's client) and Go's net/http, each
//! through its own decoder, against the binary on a SQLite file and on
//! PostgreSQL. Each reads short and long logs in identity, gzip, br and
//! zstd: a long log first from the database (the history cache cold), then
//! from the cache (warm), whole and from `since` values on and around chunk
//! boundaries, its last event, its end and past it; a short log whole (on
//! SQLite, from the short-log cache) and from its end. What each client
//! decoded must be, byte for byte, the server's identity answer.
//!
//! The clients' programs are small files in conformance/clients/ (Python's
//! packages pinned in its requirements.txt, installed by scripts/test into
//! a virtualenv under target/http-clients/). Each test names its client by a
//! token (`curl`, `python`, `node`, `bun`, `go`) so that scripts/test leaves
//! it out, counted as skipped, where the client is absent; .ci/run installs
//! them all. A coding a client does not decode at all (Go's standard library
//! has no brotli or zstd; Node's fetch decodes zstd only in later releases,
//! which read.mjs asks of it) is no cell of its row, and is said so on
//! stderr; Bun's row must have every cell.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::support;

use support::{PROTOCOL, Server, ServerBuilder, VERSION, client, with_pg};

/// Events per history chunk: small, so a long log is many frames.
const CHUNK: usize = 16;
/// A long log: six complete chunks and a prefix of four, ~150 KB (a
/// streamed answer: more than one 64 KiB piece).
const LONG: usize = 100;
/// A short log: one piece (on SQLite, kept whole in memory).
const SHORT: usize = 5;
/// Every coding the server answers in.
const CODINGS: [&str; 4] = ["identity", "gzip", "br", "zstd"];
/// The server's `--compress-min-bytes` default: a shorter answer may stay
/// identity whatever the client asks.
const COMPRESS_MIN_BYTES: usize = 1024;

/// One client program, as its test names it.
#[derive(Clone, Copy, Debug)]
enum Client {
    Curl,
    /// urllib3, requests and httpx, each in turn.
    Python,
    Node,
    Bun,
    Go,
}

impl Client {
    /// The readers this client's test runs (each reads its own logs, so
    /// each sees the history cache cold).
    fn readers(self) -> &'static [&'static str] {
        match self {
            Client::Curl => &["curl"],
            Client::Python => &["urllib3", "requests", "httpx"],
            Client::Node => &["node"],
            Client::Bun => &["bun"],
            Client::Go => &["go"],
        }
    }

    /// The program to run, or why it cannot run here.
    fn program(self) -> Result<PathBuf, String> {
        let (name, why) = match self {
            Client::Curl => ("curl", "curl is not installed"),
            Client::Python => {
                let venv = std::env::var_os("ABSTORE_TEST_PYTHON")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| {
                        Path::new(env!("CARGO_MANIFEST_DIR"))
                            .join("target/http-clients/python/bin/python")
                    });
                return if venv.is_file() {
                    Ok(venv)
                } else {
                    Err(format!(
                        "no virtualenv of conformance/clients/requirements.txt at {} \
                         (scripts/test makes it; or set ABSTORE_TEST_PYTHON)",
                        venv.display()
                    ))
                };
            }
            Client::Node => ("node", "node is not installed"),
            Client::Bun => ("bun", "bun is not installed (set ABSTORE_TEST_BUN)"),
            Client::Go => ("go", "go is not installed"),
        };
        support::installed(name).ok_or_else(|| why.to_owned())
    }
}

/// One read of the plan: what is asked, and what must come back.
struct Read {
    url: String,
    accept: &'static str,
    /// The output's file name, and how failures name the cell.
    name: String,
    what: String,
    expected: Vec<u8>,
}

/// An event of `n` bytes or so, with text that varies and is not all ASCII.
fn event(n: usize) -> Value {
    let words = [
        "publish",
        "lint",
        "flaky",
        "slow",
        "é tudo",
        "naïve",
        "日本語",
        "🚀",
    ];
    let summary: Vec<&str> = (0..160)
        .map(|i| words[(n * 7 + i * 3) % words.len()])
        .collect();
    json!({"actor": {"kind": "kernel"}, "type": "observation.recorded",
           "payload": {"id": format!("obs-{n}"), "kind": "followup",
                       "summary": summary.join(" "),
                       "files": [format!("src/{n}.ts")]}})
}

/// A build `slug` with `count` events, appended by 8 clients at once.
async fn build(base: &str, slug: &str, count: usize) {
    let c = client();
    let res = c
        .post(format!("{base}/builds"))
        .json(&json!({"slug": slug, "repo": "acme/w"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 201, "{slug}");
    let mut writers = Vec::new();
    for w in 0..8 {
        let (c, url) = (c.clone(), format!("{base}/builds/{slug}/events"));
        writers.push(tokio::spawn(async move {
            for n in (w..count).step_by(8) {
                let res = c.post(&url).json(&event(n)).send().await.unwrap();
                assert_eq!(res.status().as_u16(), 201);
            }
        }));
    }
    for writer in writers {
        writer.await.unwrap();
    }
}

/// The identity answer of `slug`'s whole log, read by this test (the log's
/// first read: an ordinary one, from the store's rows).
async fn whole(base: &str, slug: &str) -> Vec<u8> {
    let res = client()
        .get(format!("{base}/builds/{slug}/events?since=0"))
        .header("accept-encoding", "identity")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    assert!(res.headers().get("content-encoding").is_none());
    res.bytes().await.unwrap().to_vec()
}

/// The answer to `since` of a log whose whole answer is `whole`: the same
/// events' texts, byte for byte, after `since`.
fn after(whole: &[u8], since: usize) -> Vec<u8> {
    let events: Vec<&RawValue> = serde_json::from_slice(whole).unwrap();
    let texts: Vec<&str> = events.iter().skip(since).map(|e| e.get()).collect();
    format!("[{}]", texts.join(",")).into_bytes()
}

/// Seed every reader's logs and plan their reads.
async fn plan(base: &str, readers: &[&str]) -> BTreeMap<String, Vec<Read>> {
    let mut plans = BTreeMap::new();
    for reader in readers {
        let mut reads = Vec::new();
        let short = format!("{reader}-short");
        build(base, &short, SHORT).await;
        let short_whole = whole(base, &short).await;
        for accept in CODINGS {
            let long = format!("{reader}-{accept}");
            build(base, &long, LONG).await;
            let long_whole = whole(base, &long).await;
            let mut read = |path: String, since: usize, whole: &[u8], what: &str| {
                let name = format!("{}-{accept}", reads.len());
                reads.push(Read {
                    url: format!("{base}{path}"),
                    accept,
                    what: format!("{reader}, {accept}: {what} ({path})"),
                    name,
                    expected: after(whole, since),
                });
            };
            let events = format!("/builds/{long}/events");
            // The first read after this test's ordinary one: the chunks read
            // from the database, compressed and kept; then from the cache.
            read(
                format!("{events}?since=0"),
                0,
                &long_whole,
                "whole, cache cold",
            );
            read(
                format!("{events}?since=0"),
                0,
                &long_whole,
                "whole, cache warm",
            );
            read(events.clone(), 0, &long_whole, "whole without since");
            for since in [
                CHUNK - 1,
                CHUNK,
                CHUNK + 1,
                3 * CHUNK - 1,
                3 * CHUNK,
                3 * CHUNK + 1,
                6 * CHUNK - 1,
                6 * CHUNK,
                6 * CHUNK + 1,
                LONG - 1,
                LONG,
                LONG + 50,
            ] {
                read(
                    format!("{events}?since={since}"),
                    since,
                    &long_whole,
                    "since",
                );
            }
            let events = format!("/builds/{short}/events");
            read(events.clone(), 0, &short_whole, "short log");
            read(events.clone(), 0, &short_whole, "short log again");
            read(format!("{events}?since=0"), 0, &short_whole, "short log");
            read(
                format!("{events}?since={}", SHORT - 1),
                SHORT - 1,
                &short_whole,
                "short log's last",
            );
            read(
                format!("{events}?since={SHORT}"),
                SHORT,
                &short_whole,
                "short log's end",
            );
        }
        plans.insert((*reader).to_owned(), reads);
    }
    plans
}

/// What a client reported of one read.
#[derive(serde::Deserialize)]
struct Meta {
    status: Option<u16>,
    encoding: Option<String>,
    error: Option<String>,
}

/// Run `reader` of `client` over `reads`, its outputs in `out`.
async fn run(client: Client, program: &Path, reader: &str, reads: &[Read], out: &Path) {
    std::fs::create_dir_all(out).unwrap();
    let plan = json!({
        "headers": {"x-autobuild-version": VERSION, "x-autobuild-protocol-version": PROTOCOL},
        "reads": reads.iter().map(|r| json!({"url": r.url, "accept": r.accept, "name": r.name}))
            .collect::<Vec<_>>(),
    });
    let plan_path = out.join("plan.json");
    std::fs::write(&plan_path, plan.to_string()).unwrap();
    let clients = Path::new(env!("CARGO_MANIFEST_DIR")).join("conformance/clients");
    let mut command = tokio::process::Command::new(program);
    match client {
        Client::Curl => return curl(program, reads, out).await,
        Client::Python => command
            .arg(clients.join("read.py"))
            .arg(&plan_path)
            .arg(reader)
            .arg(out),
        Client::Node | Client::Bun => command
            .arg(clients.join("read.mjs"))
            .arg(&plan_path)
            .arg(out),
        Client::Go => command
            .arg("run")
            .arg(clients.join("read.go"))
            .arg(&plan_path)
            .arg(out)
            // Go's build cache: the test's own, not the home directory's.
            .env("GOCACHE", out.join("go-cache")),
    };
    let ran = tokio::time::timeout(Duration::from_secs(300), command.output())
        .await
        .unwrap_or_else(|_| panic!("{reader} did not finish its reads in 300 s"))
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    assert!(
        ran.status.success(),
        "{reader} failed: {}{}",
        String::from_utf8_lossy(&ran.stdout),
        String::from_utf8_lossy(&ran.stderr)
    );
}

/// curl reads each answer as its users do (`--compressed`: it decodes what
/// it asked for), one process a read.
async fn curl(program: &Path, reads: &[Read], out: &Path) {
    std::fs::write(
        out.join("decodes.json"),
        r#"["identity","gzip","br","zstd"]"#,
    )
    .unwrap();
    for read in reads {
        let body = out.join(&read.name);
        let head = out.join(format!("{}.head", read.name));
        let ran = tokio::process::Command::new(program)
            .args([
                "--silent",
                "--show-error",
                "--compressed",
                "--max-time",
                "60",
            ])
            .args(["--header", &format!("Accept-Encoding: {}", read.accept)])
            .args(["--header", &format!("X-Autobuild-Version: {VERSION}")])
            .args([
                "--header",
                &format!("X-Autobuild-Protocol-Version: {PROTOCOL}"),
            ])
            .arg("--dump-header")
            .arg(&head)
            .arg("--output")
            .arg(&body)
            .arg(&read.url)
            .output()
            .await
            .unwrap();
        let head = std::fs::read_to_string(&head).unwrap_or_default();
        let header = |name: &str| {
            head.lines().find_map(|line| {
                let (key, value) = line.split_once(':')?;
                key.eq_ignore_ascii_case(name)
                    .then(|| value.trim().to_owned())
            })
        };
        let status = head
            .lines()
            .next()
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|code| code.parse::<u16>().ok());
        let error =
            (!ran.status.success()).then(|| String::from_utf8_lossy(&ran.stderr).into_owned());
        let meta =
            json!({"status": status, "encoding": header("content-encoding"), "error": error});
        std::fs::write(out.join(format!("{}.json", read.name)), meta.to_string()).unwrap();
        if !body.exists() {
            std::fs::write(&body, b"").unwrap();
        }
    }
}

/// Every cell of `reader`'s row: what it decoded is the identity answer.
fn check(reader: &str, reads: &[Read], out: &Path) -> Vec<String> {
    let decodes: Vec<String> =
        serde_json::from_slice(&std::fs::read(out.join("decodes.json")).unwrap()).unwrap();
    let mut failures = Vec::new();
    let mut not_cells = std::collections::BTreeSet::new();
    let mut cells = 0;
    for read in reads {
        if !decodes.iter().any(|c| c == read.accept) {
            not_cells.insert(read.accept);
            continue;
        }
        cells += 1;
        let meta: Meta = serde_json::from_slice(
            &std::fs::read(out.join(format!("{}.json", read.name))).unwrap(),
        )
        .unwrap();
        let body = std::fs::read(out.join(&read.name)).unwrap();
        if let Some(error) = meta.error {
            failures.push(format!("{}: the client failed: {error}", read.what));
            continue;
        }
        if meta.status != Some(200) {
            failures.push(format!("{}: status {:?}", read.what, meta.status));
            continue;
        }
        // The cell tested its coding: a compressible answer came in it.
        let encoding = meta.encoding.as_deref();
        let right = match read.accept {
            "identity" => encoding.is_none(),
            accept if read.expected.len() >= COMPRESS_MIN_BYTES => encoding == Some(accept),
            accept => encoding.is_none() || encoding == Some(accept),
        };
        if !right {
            failures.push(format!(
                "{}: answered with Content-Encoding {encoding:?}",
                read.what
            ));
            continue;
        }
        if body != read.expected {
            let same = body
                .iter()
                .zip(&read.expected)
                .take_while(|(a, b)| a == b)
                .count();
            failures.push(format!(
                "{}: decoded {} bytes, the identity answer is {} (they differ from byte {same})",
                read.what,
                body.len(),
                read.expected.len()
            ));
        }
    }
    // Autobuild's client decodes everything the server answers in.
    assert!(
        reader != "bun" || not_cells.is_empty(),
        "Bun's fetch no longer decodes {not_cells:?}"
    );
    for coding in not_cells {
        eprintln!("{reader} does not decode {coding}: no cell of its row");
    }
    eprintln!("{reader}: {cells} cells checked, {} failed", failures.len());
    failures
}

/// Every reader of `client` reads every log in every coding it decodes,
/// against `server` (a SQLite file or PostgreSQL).
async fn histories_read_whole(client: Client, server: ServerBuilder) {
    let program = match client.program() {
        Ok(program) => program,
        Err(why) => {
            abstore_testkit::skip::skipped(&format!("whole histories read by {client:?}"), &why);
            return;
        }
    };
    let server = server
        .flag("--history-chunk-events", &CHUNK.to_string())
        .start()
        .await;
    let base = server.url().to_owned();
    let plans = plan(&base, client.readers()).await;
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for (reader, reads) in &plans {
        let out = dir.path().join(reader);
        run(client, &program, reader, reads, &out).await;
        failures.extend(check(reader, reads, &out));
    }
    assert!(
        failures.is_empty(),
        "{} cells did not decode to the identity answer:\n{}\n{}",
        failures.len(),
        failures.join("\n"),
        server.stderr()
    );
}

async fn on_sqlite(client: Client) {
    histories_read_whole(client, Server::builder().sqlite_file()).await;
}

async fn on_postgres(client: Client) {
    with_pg("http_clients", move |database| async move {
        histories_read_whole(client, Server::builder().database(&database)).await;
    })
    .await;
}

#[tokio::test]
async fn histories_read_whole_in_every_encoding_through_curl_on_a_sqlite_file() {
    on_sqlite(Client::Curl).await;
}

#[tokio::test]
async fn histories_read_whole_in_every_encoding_through_curl_on_postgres() {
    on_postgres(Client::Curl).await;
}

#[tokio::test]
async fn histories_read_whole_in_every_encoding_through_python_on_a_sqlite_file() {
    on_sqlite(Client::Python).await;
}

#[tokio::test]
async fn histories_read_whole_in_every_encoding_through_python_on_postgres() {
    on_postgres(Client::Python).await;
}

#[tokio::test]
async fn histories_read_whole_in_every_encoding_through_node_on_a_sqlite_file() {
    on_sqlite(Client::Node).await;
}

#[tokio::test]
async fn histories_read_whole_in_every_encoding_through_node_on_postgres() {
    on_postgres(Client::Node).await;
}

#[tokio::test]
async fn histories_read_whole_in_every_encoding_through_bun_on_a_sqlite_file() {
    on_sqlite(Client::Bun).await;
}

#[tokio::test]
async fn histories_read_whole_in_every_encoding_through_bun_on_postgres() {
    on_postgres(Client::Bun).await;
}

#[tokio::test]
async fn histories_read_whole_in_every_encoding_through_go_on_a_sqlite_file() {
    on_sqlite(Client::Go).await;
}

#[tokio::test]
async fn histories_read_whole_in_every_encoding_through_go_on_postgres() {
    on_postgres(Client::Go).await;
}
