//! Progress lines on stderr for long runs, at most one a second.

use std::time::{Duration, Instant};

const INTERVAL: Duration = Duration::from_secs(1);

pub struct Progress {
    label: &'static str,
    quiet: bool,
    start: Instant,
    last: Instant,
    records: u64,
    bytes: u64,
}

impl Progress {
    pub fn new(label: &'static str, quiet: bool) -> Progress {
        let now = Instant::now();
        Progress {
            label,
            quiet,
            start: now,
            last: now,
            records: 0,
            bytes: 0,
        }
    }

    /// Counts `records` more records of `bytes` bytes.
    pub fn add(&mut self, records: u64, bytes: u64) {
        self.records += records;
        self.bytes += bytes;
        if self.last.elapsed() >= INTERVAL {
            self.last = Instant::now();
            self.print("");
        }
    }

    /// The final line.
    pub fn finish(&self) {
        self.print(" (done)");
    }

    fn print(&self, suffix: &str) {
        if self.quiet {
            return;
        }
        let seconds = self.start.elapsed().as_secs_f64().max(1e-3);
        let mb = self.bytes as f64 / 1e6;
        eprintln!(
            "{}: {} records, {:.1} MB, {:.0} records/s, {:.1} MB/s{suffix}",
            self.label,
            self.records,
            mb,
            self.records as f64 / seconds,
            mb / seconds
        );
    }
}
