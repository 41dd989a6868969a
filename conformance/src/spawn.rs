//! Starts an `abstore` binary for tests: waits for the line
//! `abstore listening on http://HOST:PORT` on stdout, exposes the base URL,
//! keeps draining both pipes (stderr is kept for failure reports), and can
//! stop and restart the process with the same arguments.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

const READY_PREFIX: &str = "abstore listening on ";
const STARTUP_TIMEOUT: Duration = Duration::from_secs(120);
const STDERR_KEEP: usize = 64 * 1024;

/// A running server process.
pub struct Server {
    bin: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
    url: String,
    stderr: Arc<Mutex<String>>,
}

impl Server {
    /// Spawns `bin args…` and waits until it reports its listening address.
    pub async fn start(bin: impl AsRef<Path>, args: &[&str]) -> anyhow::Result<Server> {
        let mut s = Server {
            bin: bin.as_ref().to_path_buf(),
            args: args.iter().map(|a| a.to_string()).collect(),
            child: None,
            url: String::new(),
            stderr: Arc::new(Mutex::new(String::new())),
        };
        s.launch().await?;
        Ok(s)
    }

    /// The base URL, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The running process's id (for tests that read `/proc/<pid>`).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// Everything the process wrote to stderr so far (the last 64 KiB), across
    /// restarts.
    pub fn stderr(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Kills the process and waits for it to exit.
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
        self.launch().await
    }

    async fn launch(&mut self) -> anyhow::Result<()> {
        let mut child = Command::new(&self.bin)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("spawning {}", self.bin.display()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow!("no stdout pipe"))?;
        let stderr = child
            .stderr
            .take()
            .ok_or_else(|| anyhow!("no stderr pipe"))?;
        drain(stderr, self.stderr.clone());

        let mut lines = BufReader::new(stdout).lines();
        let waited = tokio::time::timeout(STARTUP_TIMEOUT, async {
            while let Some(line) = lines.next_line().await? {
                if let Some(rest) = line.trim().strip_prefix(READY_PREFIX) {
                    return Ok::<_, std::io::Error>(Some(rest.trim().to_string()));
                }
            }
            Ok(None)
        })
        .await;
        let url = match waited {
            Ok(Ok(Some(url))) => url,
            Ok(Ok(None)) => {
                let status = child.wait().await.ok();
                tokio::time::sleep(Duration::from_millis(100)).await;
                bail!(
                    "{} exited ({status:?}) before printing `{READY_PREFIX}…`; stderr:\n{}",
                    self.bin.display(),
                    self.stderr()
                );
            }
            Ok(Err(e)) => bail!("reading server stdout: {e}; stderr:\n{}", self.stderr()),
            Err(_) => {
                child.start_kill().ok();
                bail!(
                    "{} did not print `{READY_PREFIX}…` within {STARTUP_TIMEOUT:?}; stderr:\n{}",
                    self.bin.display(),
                    self.stderr()
                );
            }
        };
        // Keep reading stdout so the server never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        self.url = url.trim_end_matches('/').to_string();
        self.child = Some(child);
        Ok(())
    }
}

fn drain(pipe: impl AsyncRead + Unpin + Send + 'static, into: Arc<Mutex<String>>) {
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
    });
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            child.start_kill().ok();
        }
    }
}
