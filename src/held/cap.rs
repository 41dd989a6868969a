//! The cap on held reads in this process (`--max-held-reads`): beyond it a
//! read answers at once, as the spec allows a server to answer early.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

/// Counts held reads waiting now against the cap.
pub(super) struct Cap {
    max: usize,
    taken: AtomicUsize,
}

/// One held read's place under the cap; released on drop.
pub(super) struct Slot<'a>(&'a Cap);

impl Cap {
    pub(super) fn new(max: usize) -> Cap {
        Cap {
            max,
            taken: AtomicUsize::new(0),
        }
    }

    /// Take a place if fewer than the cap are taken.
    pub(super) fn acquire(&self) -> Option<Slot<'_>> {
        self.taken
            .fetch_update(SeqCst, SeqCst, |n| (n < self.max).then_some(n + 1))
            .ok()
            .map(|_| Slot(self))
    }

    pub(super) fn taken(&self) -> usize {
        self.taken.load(SeqCst)
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.taken.fetch_sub(1, SeqCst);
    }
}
