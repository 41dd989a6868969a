//! What the replay's clients record: per kind of request, how many were
//! made, how many failed, the response bytes and each latency; plus the
//! durations of dashboard frames and dispatcher ticks.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::harness::percentile;

/// The kinds of request the model makes (docs/benchmarks/autobuild-replay.md
/// lists which Autobuild call each comes from).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `GET /repos/{repo}/events?since=0`
    JournalWhole,
    /// `GET /repos/{repo}/events?since=N`, N > 0
    JournalDelta,
    /// `GET /builds/{slug}/events?since=0`
    BuildWhole,
    /// `GET /builds/{slug}/events?since=N`
    BuildDelta,
    /// `GET /builds/{slug}/events?since=N&wait=25`
    HeldRead,
    /// `GET /builds`
    ListBuilds,
    /// `GET /repos/{repo}/build-digests` (protocol 3)
    BuildDigests,
    /// `GET /repos/{repo}/state-events` (protocol 3)
    StateEvents,
    /// `POST /repos` and `GET /repos/{repo}`
    Repo,
    /// `GET /repos/{repo}/artifacts?kind=…&rev=…`
    Artifact,
    /// `POST /builds/{slug}/events`
    Append,
    /// `POST /repos/{repo}/events`
    RepoAppend,
    /// `POST /builds/{slug}/lease/heartbeat`
    Heartbeat,
    /// `POST /builds/{slug}/lease/claim`
    Claim,
    /// `POST /builds/{slug}/deposits`
    Deposit,
}

pub const OPS: [Op; 15] = [
    Op::JournalWhole,
    Op::JournalDelta,
    Op::BuildWhole,
    Op::BuildDelta,
    Op::HeldRead,
    Op::ListBuilds,
    Op::BuildDigests,
    Op::StateEvents,
    Op::Repo,
    Op::Artifact,
    Op::Append,
    Op::RepoAppend,
    Op::Heartbeat,
    Op::Claim,
    Op::Deposit,
];

#[derive(Default)]
pub struct OpStats {
    pub ok: u64,
    pub errors: u64,
    pub bytes: u64,
    pub latencies: Vec<Duration>,
}

#[derive(Default)]
pub struct Totals {
    pub ops: Vec<OpStats>,
    pub frames: Vec<Duration>,
    pub ticks: Vec<Duration>,
    pub first_error: Option<String>,
}

impl Totals {
    pub fn op(&self, op: Op) -> &OpStats {
        &self.ops[op as usize]
    }

    pub fn requests(&self) -> u64 {
        self.ops.iter().map(|o| o.ok + o.errors).sum()
    }

    pub fn errors(&self) -> u64 {
        self.ops.iter().map(|o| o.errors).sum()
    }

    pub fn bytes(&self) -> u64 {
        self.ops.iter().map(|o| o.bytes).sum()
    }

    /// `p50 / p99 (n)` of an op's latencies in ms.
    pub fn latency(&self, op: Op) -> String {
        latency(&self.op(op).latencies)
    }
}

/// `p50 / p99 / p99.9 (n)` in ms, or a dash when there are none: the
/// append tail and the disk's fsyncs beside it (issue 52, item 4), where a
/// p99 of a few hundred samples is nearly the slowest one.
pub fn tail_latency(latencies: &[Duration]) -> String {
    let mut sorted = latencies.to_vec();
    sorted.sort_unstable();
    if sorted.is_empty() {
        return "–".into();
    }
    format!(
        "{} / {} / {} ({})",
        crate::harness::ms(percentile(&sorted, 0.5)),
        crate::harness::ms(percentile(&sorted, 0.99)),
        crate::harness::ms(percentile(&sorted, 0.999)),
        sorted.len()
    )
}

/// `p50 / p99 (n)` in ms, or a dash when there are none.
pub fn latency(latencies: &[Duration]) -> String {
    let mut sorted = latencies.to_vec();
    sorted.sort_unstable();
    if sorted.is_empty() {
        return "–".into();
    }
    format!(
        "{} / {} ({})",
        crate::harness::ms(percentile(&sorted, 0.5)),
        crate::harness::ms(percentile(&sorted, 0.99)),
        sorted.len()
    )
}

/// Shared by every simulated process of one run, each on its own thread
/// (`super::threads`): the lock is held only to push one figure.
#[derive(Clone, Default)]
pub struct Recorder {
    inner: Arc<Mutex<Totals>>,
}

impl Recorder {
    pub fn new() -> Recorder {
        let totals = Totals {
            ops: OPS.iter().map(|_| OpStats::default()).collect(),
            ..Totals::default()
        };
        Recorder {
            inner: Arc::new(Mutex::new(totals)),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut Totals) -> T) -> T {
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut guard)
    }

    pub fn ok(&self, op: Op, latency: Duration, bytes: usize) {
        self.with(|t| {
            let stats = &mut t.ops[op as usize];
            stats.ok += 1;
            stats.bytes += bytes as u64;
            stats.latencies.push(latency);
        });
    }

    pub fn error(&self, op: Op, message: String) {
        self.with(|t| {
            t.ops[op as usize].errors += 1;
            t.first_error.get_or_insert(message);
        });
    }

    pub fn frame(&self, took: Duration) {
        self.with(|t| t.frames.push(took));
    }

    pub fn tick(&self, took: Duration) {
        self.with(|t| t.ticks.push(took));
    }

    /// Everything recorded so far, leaving the recorder empty.
    pub fn take(&self) -> Totals {
        self.with(|t| {
            let mut fresh = Totals {
                ops: OPS.iter().map(|_| OpStats::default()).collect(),
                ..Totals::default()
            };
            std::mem::swap(t, &mut fresh);
            fresh
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Totals::op` indexes by discriminant: `OPS` must list every kind in
    /// declaration order.
    #[test]
    fn ops_are_listed_in_declaration_order() {
        for (i, op) in OPS.iter().enumerate() {
            assert_eq!(*op as usize, i, "{op:?}");
        }
    }
}
