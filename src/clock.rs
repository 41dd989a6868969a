//! The one clock every store-assigned time comes from (docs/decisions.md, 3).
//!
//! Production reads the system clock; `--test-clock` freezes a settable
//! clock so harnesses control lease expiry and timestamps exactly.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
    }
}

/// A frozen clock that only moves when set.
pub struct TestClock {
    now: AtomicI64,
}

impl TestClock {
    pub fn new(now_ms: i64) -> Self {
        TestClock {
            now: AtomicI64::new(now_ms),
        }
    }

    pub fn set(&self, now_ms: i64) {
        self.now.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for TestClock {
    fn now_ms(&self) -> i64 {
        self.now.load(Ordering::SeqCst)
    }
}
