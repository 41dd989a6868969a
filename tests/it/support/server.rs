//! The one way integration tests start `abstore serve`: [`Server::builder`]
//! with the test defaults (loopback port 0, in-memory SQLite, `memory://`
//! blobs, the debug binary), then what a test needs on top
//! (`.database(url)`, `.sqlite_file()`, `.secret(s)`, `.test_clock()`,
//! `.flag("--max-…", v)`, `.env(…)`, `.release()`, …), then one of:
//!
//! - [`ServerBuilder::start`]: a serving process (panics with its stderr
//!   otherwise);
//! - [`ServerBuilder::try_start`]: serving, or how it stopped (the flag
//!   edge tests: either is a pass);
//! - [`ServerBuilder::run`]: a start that must fail, run to its end;
//! - [`ServerBuilder::command`]: the process unspawned, for the tests that
//!   take its stdout themselves.
//!
//! A started server is killed when dropped. It waits for the line
//! `abstore listening on http://HOST:PORT` on stdout, keeps the metrics
//! line printed before it, keeps draining both pipes (stderr is kept for
//! failure reports), and can be stopped, signalled and restarted with the
//! same arguments.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

const READY_PREFIX: &str = "abstore listening on ";
const METRICS_PREFIX: &str = "abstore metrics on ";
const STARTUP_TIMEOUT: Duration = Duration::from_secs(120);
const STDERR_KEEP: usize = 64 * 1024;

/// How to start `abstore serve`; see the module documentation.
#[derive(Clone, Debug)]
pub struct ServerBuilder {
    program: PathBuf,
    /// `--listen`, `--database`, `--blobs`; `None`: not passed, so the
    /// binary's default (or its `ABSTORE_*` variable) applies.
    listen: Option<String>,
    database: Option<String>,
    blobs: Option<String>,
    /// A SQLite file in a directory of the server's own, removed with it.
    sqlite_file: bool,
    flags: Vec<String>,
    env: Vec<(String, String)>,
    dir: Option<PathBuf>,
    open_files: Option<u32>,
}

impl Server {
    /// `abstore serve --listen 127.0.0.1:0 --database sqlite::memory:
    /// --blobs memory://` from the debug binary.
    pub fn builder() -> ServerBuilder {
        ServerBuilder {
            program: PathBuf::from(super::bin()),
            listen: Some("127.0.0.1:0".to_owned()),
            database: Some("sqlite::memory:".to_owned()),
            blobs: Some("memory://".to_owned()),
            sqlite_file: false,
            flags: Vec::new(),
            env: Vec::new(),
            dir: None,
            open_files: None,
        }
    }
}

impl ServerBuilder {
    /// The release binary instead of the debug one ([`release_bin`]).
    pub fn release(mut self) -> Option<Self> {
        self.program = PathBuf::from(release_bin()?);
        Some(self)
    }

    /// The previous schema version's release binary ([`previous_bin`]).
    pub fn previous(mut self) -> Option<Self> {
        self.program = PathBuf::from(previous_bin()?);
        Some(self)
    }

    /// The program it runs.
    pub fn program(&self) -> &Path {
        &self.program
    }

    pub fn listen(mut self, address: &str) -> Self {
        self.listen = Some(address.to_owned());
        self
    }

    pub fn database(mut self, url: &str) -> Self {
        self.database = Some(url.to_owned());
        self.sqlite_file = false;
        self
    }

    /// A fresh SQLite file in a temporary directory the server owns (and
    /// keeps across restarts).
    pub fn sqlite_file(mut self) -> Self {
        self.database = None;
        self.sqlite_file = true;
        self
    }

    pub fn blobs(mut self, location: &str) -> Self {
        self.blobs = Some(location.to_owned());
        self
    }

    /// Pass none of `--listen`, `--database`, `--blobs`: the binary's own
    /// defaults, or the `ABSTORE_*` variables given with [`Self::env`]
    /// (the defaults are relative to [`Self::current_dir`]).
    pub fn binary_defaults(mut self) -> Self {
        self.listen = None;
        self.database = None;
        self.blobs = None;
        self.sqlite_file = false;
        self
    }

    /// `--flag value`.
    pub fn flag(mut self, flag: &str, value: &str) -> Self {
        self.flags.extend([flag.to_owned(), value.to_owned()]);
        self
    }

    /// One argument as it is: a switch (`--open`) or `--flag=value`.
    pub fn arg(mut self, arg: &str) -> Self {
        self.flags.push(arg.to_owned());
        self
    }

    /// Arguments as they are, in order.
    pub fn args<S: AsRef<str>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        self.flags
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// `--secret SECRET`: authenticated mode.
    pub fn secret(self, secret: &str) -> Self {
        self.flag("--secret", secret)
    }

    /// `--test-clock` at [`super::CLOCK`].
    pub fn test_clock(self) -> Self {
        self.flag("--test-clock", super::CLOCK)
    }

    /// Accept today's identity and [`super::PROTOCOL3_CLIENT`].
    pub fn accept_protocol3(self) -> Self {
        self.args(super::ACCEPT_PROTOCOL3)
    }

    /// Prometheus metrics on a loopback port of their own, the same across
    /// restarts ([`Server::metrics_url`]).
    pub fn metrics(self) -> Self {
        let address = format!("127.0.0.1:{}", super::free_port());
        self.flag("--metrics-listen", &address)
    }

    /// A variable set for the server alone.
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// The working directory the server runs in.
    pub fn current_dir(mut self, dir: &Path) -> Self {
        self.dir = Some(dir.to_owned());
        self
    }

    /// Run under `ulimit -n LIMIT` (through `sh`).
    pub fn open_files(mut self, limit: u32) -> Self {
        self.open_files = Some(limit);
        self
    }

    /// The arguments after the program: `serve …`.
    fn serve_args(&self, sqlite_dir: Option<&Path>) -> Vec<String> {
        let mut args = vec!["serve".to_owned()];
        let file = sqlite_dir.map(|dir| format!("sqlite://{}", dir.join("abstore.db").display()));
        for (flag, value) in [
            ("--listen", &self.listen),
            ("--database", &self.database.clone().or(file)),
            ("--blobs", &self.blobs),
        ] {
            if let Some(value) = value {
                args.extend([flag.to_owned(), value.clone()]);
            }
        }
        args.extend(self.flags.iter().cloned());
        args
    }

    /// What runs the server: the program and its arguments, the directory
    /// a `.sqlite_file()` lives in, and the variables.
    fn launch(self) -> Launch {
        let scratch = self
            .sqlite_file
            .then(|| tempfile::tempdir().expect("a directory for the SQLite file"));
        let serve = self.serve_args(scratch.as_ref().map(tempfile::TempDir::path));
        let program = self.program.display().to_string();
        let (program, args) = match self.open_files {
            None => (program, serve),
            // `$0` is the program, `$@` its arguments.
            Some(limit) => {
                let script = format!("ulimit -n {limit} && exec \"$0\" \"$@\"");
                let mut args = vec!["-c".to_owned(), script, program];
                args.extend(serve);
                ("sh".to_owned(), args)
            }
        };
        Launch {
            program,
            args,
            env: self.env,
            dir: self.dir,
            _scratch: scratch,
        }
    }

    /// Start it and wait until it listens; panics with its stderr if it
    /// cannot. A metrics port that [`metrics`](Self::metrics) found free
    /// but another process took meanwhile is chosen again (up to 3 times).
    pub async fn start(self) -> Server {
        let mut builder = self;
        let mut attempts = 0;
        loop {
            let args = builder.serve_args(None);
            let again = builder.clone();
            match builder.try_start().await {
                Ok(server) => return server,
                Err(failure)
                    if attempts < 3
                        && failure.stderr.contains("binding --metrics-listen")
                        && failure.stderr.contains("in use") =>
                {
                    attempts += 1;
                    builder = again.with_new_metrics_port();
                }
                Err(failure) => panic!("starting abstore {args:?}: {failure}"),
            }
        }
    }

    /// The same, with `--metrics-listen` on another free port.
    fn with_new_metrics_port(mut self) -> Self {
        if let Some(at) = self.flags.iter().position(|f| f == "--metrics-listen")
            && let Some(value) = self.flags.get_mut(at + 1)
        {
            *value = format!("127.0.0.1:{}", super::free_port());
        }
        self
    }

    /// Start it: serving, or how it stopped before it listened.
    pub async fn try_start(self) -> Result<Server, StartFailure> {
        let mut server = Server {
            launch: self.launch(),
            child: None,
            url: String::new(),
            metrics_url: None,
            stderr: Arc::default(),
        };
        let spawned = server.spawn().await;
        spawned.map(|()| server)
    }

    /// Run it to its end (a start that must fail, or `--help`): (success,
    /// stdout, stderr).
    pub fn run(self) -> (bool, String, String) {
        let launch = self.launch();
        let mut command = std::process::Command::new(&launch.program);
        command.args(&launch.args).envs(launch.env.iter().cloned());
        if let Some(dir) = &launch.dir {
            command.current_dir(dir);
        }
        let out = command.output().expect("run abstore");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// The process, not spawned: stdin closed, killed when dropped; the
    /// test chooses stdout and stderr. (A `.sqlite_file()` would be removed
    /// before the server ran: name the file with `.database(…)`.)
    pub fn command(self) -> Command {
        assert!(
            !self.sqlite_file,
            "ServerBuilder::command with .sqlite_file(): use .database(…)"
        );
        let launch = self.launch();
        launch.command()
    }
}

/// The release binary `scripts/test` built once (`ABSTORE_RELEASE_BIN`),
/// for the tests whose subject is release behaviour (overflow wraps instead
/// of panicking; docs/decisions.md, 21); `None`, said loudly (and a failure
/// under `scripts/test` or CI), when the tests run without it.
pub fn release_bin() -> Option<String> {
    match std::env::var("ABSTORE_RELEASE_BIN") {
        Ok(path) if std::path::Path::new(&path).is_file() => Some(path),
        _ => {
            abstore_testkit::skip::skipped(
                "adversarial tests on the release binary",
                "ABSTORE_RELEASE_BIN is unset; scripts/test builds target/release/abstore and sets it",
            );
            None
        }
    }
}

/// The release binary of the previous schema version (the commit before
/// the newest change to `migrations/postgres`), which `scripts/test` builds
/// once with `scripts/previous-release` and names in
/// `ABSTORE_PREVIOUS_BIN`, for the rolling-upgrade tests; `None`, said
/// loudly (and a failure under `scripts/test` or CI), without it.
fn previous_bin() -> Option<String> {
    match std::env::var("ABSTORE_PREVIOUS_BIN") {
        Ok(path) if std::path::Path::new(&path).is_file() => Some(path),
        _ => {
            abstore_testkit::skip::skipped(
                "tests against the previous schema version's binary",
                "ABSTORE_PREVIOUS_BIN is unset; scripts/test builds it with scripts/previous-release and sets it",
            );
            None
        }
    }
}

/// The process a [`ServerBuilder`] describes.
struct Launch {
    program: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    dir: Option<PathBuf>,
    /// The directory of a `.sqlite_file()`, removed when this is dropped.
    _scratch: Option<tempfile::TempDir>,
}

impl Launch {
    fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .envs(self.env.iter().cloned())
            .stdin(Stdio::null())
            .kill_on_drop(true);
        if let Some(dir) = &self.dir {
            command.current_dir(dir);
        }
        command
    }
}

/// A start that did not reach its listening line.
#[derive(Debug)]
pub struct StartFailure {
    /// How the process ended; `None` when it neither listened nor exited
    /// within the start-up bound (it was killed).
    pub status: Option<ExitStatus>,
    pub stderr: String,
    why: String,
}

impl std::fmt::Display for StartFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}; stderr:\n{}", self.why, self.stderr)
    }
}

/// A running `abstore serve`.
pub struct Server {
    launch: Launch,
    child: Option<Child>,
    url: String,
    metrics_url: Option<String>,
    stderr: Arc<Mutex<String>>,
}

impl Server {
    /// The base URL, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `http://HOST:PORT/metrics`, as the server printed it; panics when
    /// metrics were not asked for.
    pub fn metrics_url(&self) -> &str {
        self.metrics_url
            .as_deref()
            .expect("a server started with metrics")
    }

    /// The running process's id (for RSS readings and signals in tests).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// Everything the process wrote to stderr so far (the last 64 KiB), across
    /// restarts.
    pub fn stderr(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Send `signal` (`TERM`, `HUP`, …) to the process.
    pub fn signal(&self, signal: &str) {
        let pid = self.pid().expect("a running server").to_string();
        let sent = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .expect("kill");
        assert!(sent.success(), "kill -{signal} {pid}");
    }

    /// Wait (at most `within`) for the process to exit by itself; panics
    /// if it does not.
    pub async fn exit_status(&mut self, within: Duration) -> ExitStatus {
        let child = self.child.as_mut().expect("a running server");
        let status = tokio::time::timeout(within, child.wait())
            .await
            .unwrap_or_else(|_| panic!("the server did not exit within {within:?}"))
            .expect("waiting for the server");
        self.child = None;
        status
    }

    /// Kills the process (SIGKILL) and waits for it to exit.
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.start_kill().ok();
            child
                .wait()
                .await
                .context("waiting for the server to exit")?;
        }
        Ok(())
    }

    /// Stops the process and starts it again with the same arguments. The URL
    /// changes when the arguments ask for port 0.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.stop().await?;
        self.spawn().await.map_err(|failure| anyhow!("{failure}"))
    }

    async fn spawn(&mut self) -> Result<(), StartFailure> {
        let fail = |why: String, status, stderr: &Arc<Mutex<String>>| StartFailure {
            status,
            stderr: stderr.lock().map(|s| s.clone()).unwrap_or_default(),
            why,
        };
        let mut child = self
            .launch
            .command()
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                let why = format!("spawning {}: {e}", self.launch.program);
                fail(why, None, &self.stderr)
            })?;
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(fail("no pipes".to_owned(), None, &self.stderr));
        };
        let drained = drain(stderr, self.stderr.clone());
        let mut lines = BufReader::new(stdout).lines();
        let mut metrics_url = None;
        let waited = tokio::time::timeout(STARTUP_TIMEOUT, async {
            while let Some(line) = lines.next_line().await? {
                let line = line.trim();
                if let Some(url) = line.strip_prefix(METRICS_PREFIX) {
                    metrics_url = Some(url.to_owned());
                }
                if let Some(url) = line.strip_prefix(READY_PREFIX) {
                    return Ok::<_, std::io::Error>(Some(url.to_owned()));
                }
            }
            Ok(None)
        })
        .await;
        let url = match waited {
            Ok(Ok(Some(url))) => url,
            Ok(Ok(None)) => {
                let status = child.wait().await.ok();
                // The whole of stderr, which says why (bounded: a process
                // it left behind could hold the pipe open).
                let _ = tokio::time::timeout(Duration::from_secs(10), drained).await;
                let why = format!("exited ({status:?}) before printing `{READY_PREFIX}…`");
                return Err(fail(why, status, &self.stderr));
            }
            Ok(Err(e)) => {
                let why = format!("reading the server's stdout: {e}");
                return Err(fail(why, None, &self.stderr));
            }
            Err(_) => {
                child.start_kill().ok();
                let why = format!("did not print `{READY_PREFIX}…` within {STARTUP_TIMEOUT:?}");
                return Err(fail(why, None, &self.stderr));
            }
        };
        // Keep reading stdout so the server never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        self.url = url.trim_end_matches('/').to_owned();
        self.metrics_url = metrics_url;
        self.child = Some(child);
        Ok(())
    }
}

/// Keep the last [`STDERR_KEEP`] bytes of `pipe` in `into`, until it closes.
fn drain(
    pipe: impl AsyncRead + Unpin + Send + 'static,
    into: Arc<Mutex<String>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut lines = BufReader::new(pipe).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Ok(mut buf) = into.lock() {
                buf.push_str(&line);
                buf.push('\n');
                if buf.len() > STDERR_KEEP {
                    let mut cut = buf.len() - STDERR_KEEP;
                    while !buf.is_char_boundary(cut) {
                        cut += 1;
                    }
                    buf.drain(..cut);
                }
            }
        }
    })
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            child.start_kill().ok();
        }
    }
}
