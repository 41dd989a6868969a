//! The disk's own durable-write latency during a replay: a thread appends
//! 4 KiB to a file beside the store and `fsync`s it every 100 ms, as a
//! commit does, and the replay reports its p50 / p99 beside the appends'.
//!
//! An append waits for one durable commit, so its tail cannot be shorter
//! than the disk's `fsync` tail under the same load (docs/benchmarks.md,
//! "Issue 36, seventh pass"); measured in the same run, the two can be
//! compared. Ten `fsync`s a second of 4 KiB add little to the replay's own
//! writes.

use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};

const EVERY: Duration = Duration::from_millis(100);
const BLOCK: [u8; 4096] = [b'x'; 4096];

/// A running probe; [`Probe::stop`] ends it and gives its samples.
pub struct Probe {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<Vec<Duration>>>,
}

impl Probe {
    /// Starts probing with a file of its own in `dir` (removed at the end).
    pub fn start(dir: &Path) -> Result<Probe> {
        let path = dir.join(format!("fsync-probe-{}", std::process::id()));
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("fsync-probe".into())
            .spawn(move || {
                let mut samples = Vec::new();
                let outcome = (|| {
                    while !stopped.load(Ordering::Relaxed) {
                        file.write_all(&BLOCK)?;
                        let started = Instant::now();
                        file.sync_all()?;
                        samples.push(started.elapsed());
                        std::thread::sleep(EVERY);
                    }
                    Ok::<_, std::io::Error>(())
                })();
                let _ = std::fs::remove_file(&path);
                outcome.context("the fsync probe")?;
                Ok(samples)
            })?;
        Ok(Probe { stop, thread })
    }

    /// Stops the probe: its `fsync` latencies.
    pub fn stop(self) -> Result<Vec<Duration>> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("the fsync probe panicked"))?
    }
}
