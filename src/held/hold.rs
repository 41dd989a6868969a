//! The one held-read loop, shared by event reads and stream chunk reads:
//! fetch; if nothing is ready, subscribe, fetch again (so a write between
//! the two fetches is never missed), then wait for a wake, the deadline or
//! shutdown. A held read never polls the database on its own; wakes come
//! from local writes, LISTEN and the per-process sweep.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::HeldReads;
use super::flights::Flights;
use crate::protocol::ResourceRef;
use crate::store::StoreError;

/// How long past its `wait` a held read may take to answer: its last query
/// is cut off there, so a database that stops answering (an outage) cannot
/// hold it longer.
const OVERRUN: Duration = Duration::from_millis(250);

impl HeldReads {
    /// Answer with `fetch()` as soon as `ready` holds for it, or when `wait`
    /// passes, or at shutdown. `since` is what the waiter has seen (the sweep
    /// wakes it once the resource's tail passes it).
    pub(super) async fn hold<T, F, Fut>(
        &self,
        flights: &Flights<T>,
        resource: &ResourceRef,
        since: i64,
        wait: Duration,
        fetch: F,
        ready: impl Fn(&T) -> bool,
    ) -> Result<T, StoreError>
    where
        T: Clone,
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        if wait.is_zero() {
            return fetch().await;
        }
        let deadline = Instant::now() + wait;
        // Whatever the database does, the answer leaves by here.
        let cutoff = deadline + OVERRUN;
        // The first query takes a turn like the re-queries: 10,000 held
        // reads arriving together then wait on the semaphore, a few bytes
        // each, instead of each holding a started query (on PostgreSQL
        // several KiB, queued on the pool) whose freed memory fragmented
        // the heap the held reads then keep (docs/benchmarks.md, issue 36,
        // fourth pass).
        let first = tokio::time::timeout_at(cutoff, self.in_turn(&fetch))
            .await
            .map_err(|_| StoreError::Unavailable)??;
        if ready(&first) || self.shutdown.is_cancelled() {
            return Ok(first);
        }
        // Beyond the cap the server answers early, as the spec allows.
        let Some(_slot) = self.cap.acquire() else {
            return Ok(first);
        };
        let mut last = first;
        loop {
            let subscription = self.notifier.subscribe(resource, since);
            let notified = subscription.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            // Read after subscribing (flights.rs says why that order matters).
            let subscribed = self.notifier.epoch();
            // One append can wake thousands of held reads at once: readers of the
            // same resource and `since` share one query at least as fresh as their
            // subscription, and those queries share half the pool so the writes
            // behind them still find connections.
            let refetch = flights.share(resource, since, subscribed, || self.in_turn(&fetch));
            let current = match tokio::time::timeout_at(cutoff, refetch).await {
                Ok(Ok(current)) => current,
                // The database went away mid-hold (or stopped answering): it
                // can have taken no write since the last answer, which stands.
                // Once the database is back, the sweep wakes this read if
                // anything was missed.
                Ok(Err(StoreError::Unavailable)) | Err(_) => last.clone(),
                Ok(Err(err)) => return Err(err),
            };
            if ready(&current) || Instant::now() >= deadline || self.shutdown.is_cancelled() {
                return Ok(current);
            }
            last = current;
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep_until(deadline) => {}
                _ = self.shutdown.cancelled() => {}
            }
        }
    }

    /// `fetch()` once a turn among held reads' queries is free
    /// ([`HeldReads::queries`]).
    async fn in_turn<T, F, Fut>(&self, fetch: &F) -> Result<T, StoreError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let _turn = self
            .queries
            .acquire()
            .await
            .map_err(|_| StoreError::Aborted("held-read limiter closed".into()))?;
        fetch().await
    }
}
