//! What every scenario shares: databases created and dropped per run, server
//! processes (with their CPU time and RSS read from /proc), the HTTP client,
//! a closed-loop load runner, latency percentiles and result tables.

use std::future::Future;
use std::io::BufRead as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result, anyhow, bail};
use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderValue};

/// Settings shared by every scenario.
pub struct Ctx {
    pub server_bin: PathBuf,
    /// `postgres://user@host:port` without a database; `None` skips PostgreSQL.
    pub pg_base: Option<String>,
    /// Measured seconds per load phase.
    pub seconds: f64,
    /// Unmeasured seconds before each load phase.
    pub warmup: f64,
    /// Scratch directory of this run (SQLite files, server logs); removed at the end.
    pub work_dir: PathBuf,
    pub clk_tck: u64,
    /// Autobuild's reference server, when `--reference` names a checkout.
    pub reference: Option<crate::reference::Reference>,
}

impl Ctx {
    pub fn phase(&self) -> Duration {
        Duration::from_secs_f64(self.seconds)
    }

    pub fn warmup(&self) -> Duration {
        Duration::from_secs_f64(self.warmup)
    }

    /// The backends to run: PostgreSQL only when configured.
    pub fn backends(&self, with_memory: bool) -> Vec<Backend> {
        let mut all = Vec::new();
        if with_memory {
            all.push(Backend::Memory);
        }
        all.push(Backend::SqliteFile);
        if self.pg_base.is_some() {
            all.push(Backend::Postgres);
        }
        all
    }
}

pub fn unique_suffix() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{:x}_{:x}", std::process::id(), nanos & 0xffff_ffff_ffff)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    Memory,
    SqliteFile,
    Postgres,
}

impl Backend {
    pub fn label(self) -> &'static str {
        match self {
            Backend::Memory => "sqlite::memory:",
            Backend::SqliteFile => "SQLite file",
            Backend::Postgres => "PostgreSQL",
        }
    }
}

/// A database created for one scenario and dropped after it.
pub struct Db {
    pub backend: Backend,
    pub url: String,
    /// SQLite: the file's path.
    pub path: Option<PathBuf>,
    pg: Option<abstore_testkit::scratch_pg::ScratchDb>,
}

impl Db {
    pub async fn create(ctx: &Ctx, backend: Backend) -> Result<Db> {
        match backend {
            Backend::Memory => Ok(Db {
                backend,
                url: "sqlite::memory:".into(),
                path: None,
                pg: None,
            }),
            Backend::SqliteFile => {
                let dir = ctx.work_dir.join(format!("sqlite-{}", unique_suffix()));
                std::fs::create_dir_all(&dir)?;
                let path = dir.join("abstore.db");
                Ok(Db {
                    backend,
                    url: format!("sqlite://{}", path.display()),
                    path: Some(path),
                    pg: None,
                })
            }
            Backend::Postgres => {
                let base = ctx
                    .pg_base
                    .clone()
                    .ok_or_else(|| anyhow!("PostgreSQL is not configured"))?;
                let db = abstore_testkit::scratch_pg::ScratchDb::create(
                    &format!("{base}/postgres"),
                    "abstore_bench",
                )
                .await
                .map_err(|e| anyhow!(e))?;
                Ok(Db {
                    backend,
                    url: db.url.clone(),
                    path: None,
                    pg: Some(db),
                })
            }
        }
    }

    /// Drop the database (PostgreSQL, forcing out leftover connections) or its files.
    pub async fn drop_db(self) -> Result<()> {
        if let Some(db) = self.pg {
            db.drop_db().await.map_err(|e| anyhow!(e))?;
        }
        if let Some(dir) = self.path.as_ref().and_then(|p| p.parent()) {
            let _ = std::fs::remove_dir_all(dir);
        }
        Ok(())
    }
}

/// Run `body` with a fresh database, dropping it afterwards even on failure.
pub async fn with_db<T, F, Fut>(ctx: &Ctx, backend: Backend, body: F) -> Result<T>
where
    F: FnOnce(Arc<Db>) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let db = Arc::new(Db::create(ctx, backend).await?);
    let result = body(db.clone()).await;
    match Arc::try_unwrap(db) {
        Ok(db) => {
            if let Err(err) = db.drop_db().await {
                eprintln!(
                    "warning: could not drop the {} database: {err:#}",
                    backend.label()
                );
            }
        }
        Err(_) => eprintln!("warning: database still referenced; not dropped"),
    }
    result
}

/// One `abstore serve` process started by this run.
pub struct Server {
    child: Child,
    pub pid: u32,
    pub base: String,
    pub metrics: Option<String>,
    clk_tck: u64,
}

pub struct ServerOpts<'a> {
    pub db_url: &'a str,
    pub blobs: String,
    pub metrics: bool,
    pub extra: Vec<String>,
    /// Log file name under the work dir.
    pub name: String,
}

impl<'a> ServerOpts<'a> {
    pub fn new(db: &'a Db, name: impl Into<String>) -> Self {
        ServerOpts {
            db_url: &db.url,
            blobs: "memory://".into(),
            metrics: false,
            extra: Vec::new(),
            name: name.into(),
        }
    }
}

impl Server {
    pub async fn start(ctx: &Ctx, opts: ServerOpts<'_>) -> Result<Server> {
        let mut cmd = Command::new(&ctx.server_bin);
        cmd.arg("serve")
            .args([
                "--listen",
                "127.0.0.1:0",
                "--database",
                opts.db_url,
                "--blobs",
                &opts.blobs,
            ])
            .args(&opts.extra);
        if opts.metrics {
            cmd.args(["--metrics-listen", "127.0.0.1:0"]);
        }
        Self::spawn(ctx, cmd, &opts.name, "abstore listening on ").await
    }

    /// Start `cmd` with stdout piped and stderr to `<work dir>/<name>.log`,
    /// and wait for the line `<ready><base URL>` on its stdout.
    pub async fn spawn(ctx: &Ctx, mut cmd: Command, name: &str, ready: &str) -> Result<Server> {
        let log_path = ctx.work_dir.join(format!("{name}.log"));
        let log = std::fs::File::create(&log_path)?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log));
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {:?}", cmd.get_program()))?;
        let pid = child.id();
        let stdout = child.stdout.take().context("no stdout")?;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        // Read the announcement lines, then keep draining stdout.
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
        let mut server = Server {
            child,
            pid,
            base: String::new(),
            metrics: None,
            clk_tck: ctx.clk_tck,
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let line = match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(line)) => line,
                Ok(None) => bail!("server exited before listening; see {}", log_path.display()),
                Err(_) => bail!(
                    "server did not announce its address within 60 s; see {}",
                    log_path.display()
                ),
            };
            if let Some(rest) = line.strip_prefix("abstore metrics on ") {
                server.metrics = Some(rest.trim().to_owned());
            } else if let Some(rest) = line.strip_prefix(ready) {
                server.base = rest.trim().trim_end_matches('/').to_owned();
                break;
            }
        }
        Ok(server)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// User + system CPU time consumed so far by the process and its
    /// children that have been waited for, from /proc/<pid>/stat.
    pub fn cpu(&self) -> Result<Duration> {
        process_cpu(self.pid, self.clk_tck)
    }

    /// Resident set size in bytes (VmRSS of /proc/<pid>/status).
    pub fn rss(&self) -> Result<u64> {
        self.status_kib("VmRSS:").map(|kib| kib * 1024)
    }

    /// The largest resident set since the process started, in bytes
    /// (VmHWM of /proc/<pid>/status).
    pub fn peak_rss(&self) -> Result<u64> {
        self.status_kib("VmHWM:").map(|kib| kib * 1024)
    }

    fn status_kib(&self, field: &str) -> Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))?;
        let line = status
            .lines()
            .find(|l| l.starts_with(field))
            .with_context(|| format!("no {field}"))?;
        Ok(line
            .split_whitespace()
            .nth(1)
            .with_context(|| format!("malformed {field}"))?
            .parse()?)
    }

    /// Threads of the process (for the notes).
    pub fn threads(&self) -> Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))?;
        let line = status
            .lines()
            .find(|l| l.starts_with("Threads:"))
            .context("no Threads")?;
        Ok(line
            .split_whitespace()
            .nth(1)
            .context("malformed Threads")?
            .parse()?)
    }

    /// `abstore_held_reads_in_flight` from the metrics listener.
    pub async fn held_reads(&self, http: &reqwest::Client) -> Result<u64> {
        let url = self
            .metrics
            .as_ref()
            .context("server started without --metrics-listen")?;
        let text = http.get(url).send().await?.text().await?;
        let line = text
            .lines()
            .find(|l| l.starts_with("abstore_held_reads_in_flight"))
            .context("no abstore_held_reads_in_flight gauge")?;
        let value: f64 = line
            .split_whitespace()
            .last()
            .context("malformed gauge")?
            .parse()?;
        Ok(value as u64)
    }

    /// Wait until exactly `n` reads are held (or `timeout` passes); returns the last count.
    pub async fn wait_held(
        &self,
        http: &reqwest::Client,
        n: u64,
        timeout: Duration,
    ) -> Result<u64> {
        let deadline = Instant::now() + timeout;
        loop {
            let held = self.held_reads(http).await?;
            if held >= n || Instant::now() >= deadline {
                return Ok(held);
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// SIGTERM, then SIGKILL after 10 s.
    pub async fn stop(mut self) -> Result<()> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The identity headers a client sends (`X-Autobuild-Version`,
/// `X-Autobuild-Protocol-Version`); docs/protocol-versions.md.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    pub version: &'static str,
    pub protocol: &'static str,
}

impl Identity {
    /// Autobuild 0.8.0, the released client: what every scenario sends
    /// unless it says otherwise, and what the server accepts by default.
    pub const PROTOCOL_2: Identity = Identity {
        version: "0.8.0",
        protocol: "2",
    };
    /// The next release. A server accepts it only when started with
    /// `--accept-client 0.9.0/3` ([`Identity::accept_arg`]).
    pub const PROTOCOL_3: Identity = Identity {
        version: "0.9.0",
        protocol: "3",
    };

    /// The value of `abstore serve --accept-client` for this identity.
    pub fn accept_arg(self) -> String {
        format!("{}/{}", self.version, self.protocol)
    }
}

/// User + system CPU time consumed so far by process `pid` and its children
/// that have been waited for, from /proc/<pid>/stat.
pub fn process_cpu(pid: u32, clk_tck: u64) -> Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .context("malformed stat")?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // Fields 14-17 of stat(5) (utime, stime, cutime, cstime); `after`
    // starts at field 3.
    let mut ticks = 0u64;
    for index in 11..=14 {
        let field = fields.get(index).context("short stat")?;
        ticks += field.parse::<u64>()?;
    }
    Ok(Duration::from_secs_f64(ticks as f64 / clk_tck as f64))
}

/// An HTTP client sending the protocol-2 identity headers.
pub fn client() -> reqwest::Client {
    client_with_timeout(Duration::from_secs(60))
}

pub fn client_with_timeout(timeout: Duration) -> reqwest::Client {
    client_as(Identity::PROTOCOL_2, timeout)
}

/// A keep-alive client sending `identity`'s headers.
pub fn client_as(identity: Identity, timeout: Duration) -> reqwest::Client {
    client_builder(identity, timeout)
        .pool_max_idle_per_host(usize::MAX)
        .build()
        .expect("an HTTP client")
}

/// A client that opens a new connection for every request, like a
/// command-line process that makes one request and exits.
pub fn one_shot_client(timeout: Duration) -> reqwest::Client {
    client_builder(Identity::PROTOCOL_2, timeout)
        .pool_max_idle_per_host(0)
        .build()
        .expect("an HTTP client")
}

fn client_builder(identity: Identity, timeout: Duration) -> reqwest::ClientBuilder {
    let mut headers = HeaderMap::new();
    headers.insert(
        "x-autobuild-version",
        HeaderValue::from_static(identity.version),
    );
    headers.insert(
        "x-autobuild-protocol-version",
        HeaderValue::from_static(identity.protocol),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .tcp_nodelay(true)
        .timeout(timeout)
}

/// POST a JSON body; fail unless the status is `expect`. Returns the response body.
pub async fn post(http: &reqwest::Client, url: &str, body: Bytes, expect: u16) -> Result<Bytes> {
    let response = http
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await?;
    let status = response.status();
    let body = response.bytes().await?;
    if status.as_u16() != expect {
        bail!(
            "POST {url}: {status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(300)])
        );
    }
    Ok(body)
}

pub async fn get(http: &reqwest::Client, url: &str) -> Result<Bytes> {
    let response = http.get(url).send().await?;
    let status = response.status();
    let body = response.bytes().await?;
    if status.as_u16() != 200 {
        bail!(
            "GET {url}: {status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(300)])
        );
    }
    Ok(body)
}

pub async fn create_build(http: &reqwest::Client, server: &Server, slug: &str) -> Result<()> {
    let body = serde_json::json!({ "slug": slug, "repo": "bench" }).to_string();
    post(http, &server.url("/builds"), body.into(), 201).await?;
    Ok(())
}

/// The event every append scenario writes.
pub fn event_body() -> Bytes {
    Bytes::from_static(
        br#"{"actor":{"kind":"kernel"},"type":"observation.recorded","payload":{"id":"o1","kind":"followup","summary":"s"}}"#,
    )
}

/// What a closed-loop load phase measured.
pub struct LoadResult {
    pub ok: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub elapsed: Duration,
    pub latencies: Vec<Duration>,
}

impl LoadResult {
    pub fn rate(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64()
    }

    pub fn p(&self, q: f64) -> Duration {
        percentile(&self.latencies, q)
    }

    pub fn note(&self) -> String {
        match &self.first_error {
            Some(err) => format!(
                "{} errors, first: {}",
                self.errors,
                err.chars().take(160).collect::<String>()
            ),
            None => String::new(),
        }
    }
}

/// `q` in 0..=1 of sorted durations.
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// `clients` workers, each running `op(worker, iteration)` back to back for
/// `duration` (and at most `max_per_worker` times).
pub async fn run_load<F, Fut>(clients: usize, duration: Duration, op: F) -> LoadResult
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    const MAX_PER_WORKER: u64 = 5_000_000;
    let op = Arc::new(op);
    let started = Instant::now();
    let deadline = started + duration;
    let mut workers = Vec::new();
    for worker in 0..clients {
        let op = op.clone();
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let (mut errors, mut first_error) = (0u64, None);
            let mut i = 0;
            while Instant::now() < deadline && i < MAX_PER_WORKER {
                let t = Instant::now();
                match op(worker, i).await {
                    Ok(()) => latencies.push(t.elapsed()),
                    Err(err) => {
                        errors += 1;
                        first_error.get_or_insert_with(|| format!("{err:#}"));
                        // Do not spin on a failing server.
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
                i += 1;
            }
            (latencies, errors, first_error)
        }));
    }
    let mut result = LoadResult {
        ok: 0,
        errors: 0,
        first_error: None,
        elapsed: Duration::ZERO,
        latencies: Vec::new(),
    };
    for worker in workers {
        match worker.await {
            Ok((latencies, errors, first_error)) => {
                result.ok += latencies.len() as u64;
                result.latencies.extend(latencies);
                result.errors += errors;
                if result.first_error.is_none() {
                    result.first_error = first_error;
                }
            }
            Err(err) => {
                result.errors += 1;
                result
                    .first_error
                    .get_or_insert_with(|| format!("worker panicked: {err}"));
            }
        }
    }
    result.elapsed = started.elapsed();
    result.latencies.sort_unstable();
    result
}

/// A warm-up phase (discarded) and a measured phase, with the server's CPU
/// time over the measured one. Returns the result and CPU µs per request.
pub async fn measure<F, Fut>(
    ctx: &Ctx,
    server: Option<&Server>,
    clients: usize,
    op: F,
) -> Result<(LoadResult, Option<f64>)>
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    let op = Arc::new(op);
    if ctx.warmup > 0.0 {
        let warm = op.clone();
        run_load(clients, ctx.warmup(), move |w, i| warm(w, i)).await;
    }
    let cpu0 = server.map(Server::cpu).transpose()?;
    let result = run_load(clients, ctx.phase(), move |w, i| op(w, i)).await;
    let cpu1 = server.map(Server::cpu).transpose()?;
    let per_request = match (cpu0, cpu1) {
        (Some(a), Some(b)) if result.ok > 0 => Some((b - a).as_secs_f64() * 1e6 / result.ok as f64),
        _ => None,
    };
    Ok((result, per_request))
}

pub fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.2}")
    } else {
        format!("{ms:.1}")
    }
}

pub fn rate(r: f64) -> String {
    format!("{r:.0}")
}

pub fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "–".to_owned(), |v| format!("{v:.digits$}"))
}

pub fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1024.0 * 1024.0))
}

/// A markdown table printed as it fills and again in `all`'s summary.
pub struct Table {
    pub title: String,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(title: &str, header: &[&str]) -> Table {
        Table {
            title: title.into(),
            header: header.iter().map(|s| (*s).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Add a row and print it at once (so a long run shows progress).
    pub fn push(&mut self, row: Vec<String>) {
        eprintln!("  {}", row.join(" | "));
        self.rows.push(row);
    }

    pub fn render(&self) -> String {
        let mut out = format!(
            "### {}\n\n| {} |\n|{}\n",
            self.title,
            self.header.join(" | "),
            "---|".repeat(self.header.len())
        );
        for row in &self.rows {
            out.push_str(&format!("| {} |\n", row.join(" | ")));
        }
        out
    }
}

/// The 1-minute load average (the machine is shared; reported with results).
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
