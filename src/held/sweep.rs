//! The per-process held-read sweep: once a second it reads the tails of the
//! awaited resources, one query per 1,000 of them, and wakes those with
//! news. It covers appends whose notification was lost (LISTEN down) and
//! writers that send none.

use std::sync::Arc;
use std::time::Duration;

use super::HeldReads;
use crate::store::StoreError;

/// How often the sweep checks awaited resources: the spec's bound on
/// database polling for held reads (section 10) is once a second.
const EVERY: Duration = Duration::from_secs(1);

/// Resources per query, bounding statement size with many held reads.
const BATCH: usize = 1000;

impl HeldReads {
    /// Run the sweep until shutdown.
    pub async fn sweep(self: Arc<Self>) {
        let mut ticker = tokio::time::interval(EVERY);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = self.shutdown.cancelled() => return,
            }
            let awaited: Vec<_> = self
                .notifier
                .awaited()
                .into_iter()
                .map(|(r, _)| r)
                .collect();
            for batch in awaited.chunks(BATCH) {
                match self.store.tails(batch).await {
                    Ok(tails) => {
                        self.notifier.wake_past(&tails);
                    }
                    // The store logs an outage once, when it starts.
                    Err(StoreError::Unavailable) => {}
                    Err(err) => tracing::warn!(error = %err, "held-read sweep failed"),
                }
            }
        }
    }
}
