//! Held reads (docs/decisions.md, 7): a `GET` of events or stream chunks with
//! `wait=N` waits until rows past `since` exist, `N` seconds pass or the
//! server shuts down. The HTTP handlers use one service, [`HeldReads`];
//! writers see only [`Notifier::notify`].
//!
//! - [`crate::notify`] (outside this folder, so that the store can wake
//!   held reads without knowing them): per awaited resource, a `Notify` and
//!   the `since` of each waiter, and the epoch every wake-up advances.
//! - `hold.rs`: the one loop: query; if nothing is ready, subscribe, query
//!   again, wait for a wake, the deadline or shutdown.
//! - `flights.rs`: readers woken together share one query.
//! - `cap.rs`: `--max-held-reads`; beyond it a read answers at once.
//! - `sweep.rs`: once a second, the tails of the awaited resources, for wakes
//!   that were lost or never sent.
//!
//! Wakes come from three sources, all through the [`Notifier`]: appends in
//! this process (the store, right after commit), the PostgreSQL
//! LISTEN connection (appends by any replica) and the sweep. No held read
//! ever polls the database on its own.

mod cap;
mod flights;
mod hold;
mod sweep;

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::notify::Notifier;
use crate::protocol::{ResourceKind, ResourceRef};
use crate::store::{Store, StoreError, StreamRecord};

/// Rows a held read's probe asks for: an answer shorter than this is the
/// whole answer; a longer one is streamed by the caller.
pub const PROBE_ROWS: i64 = 256;

/// Held reads of this process: the waiters, their cap, the shared queries
/// of woken readers, and the sweep.
pub struct HeldReads {
    store: Arc<dyn Store>,
    notifier: Arc<Notifier>,
    /// Cancelled: held reads answer at once and the sweep stops.
    shutdown: CancellationToken,
    cap: cap::Cap,
    /// Held reads' queries, their first and those after subscribing, run
    /// at most this many at once (half the database pool), so neither a
    /// wake storm nor a crowd of new held reads can starve writes.
    queries: tokio::sync::Semaphore,
    /// Shared re-queries of woken event reads and chunk reads.
    event_flights: flights::Flights<Vec<String>>,
    chunk_flights: flights::Flights<(StreamRecord, Vec<String>)>,
}

impl HeldReads {
    /// Held reads over `store`, woken through `notifier` (the one `store`
    /// signals its writes to); at most `max_held_reads` wait at once, and
    /// their queries take at most half of a pool of `db_pool_size`.
    pub fn new(
        store: Arc<dyn Store>,
        notifier: Arc<Notifier>,
        max_held_reads: usize,
        db_pool_size: usize,
        shutdown: CancellationToken,
    ) -> HeldReads {
        HeldReads {
            store,
            notifier,
            shutdown,
            cap: cap::Cap::new(max_held_reads),
            queries: tokio::sync::Semaphore::new((db_pool_size / 2).max(1)),
            event_flights: flights::Flights::default(),
            chunk_flights: flights::Flights::default(),
        }
    }

    /// The first [`PROBE_ROWS`] events of `resource` past `since`, once
    /// there is one or `wait` has passed.
    pub async fn events(
        &self,
        resource: &ResourceRef,
        since: i64,
        wait: Duration,
    ) -> Result<Vec<String>, StoreError> {
        self.hold(
            &self.event_flights,
            resource,
            since,
            wait,
            || self.store.events_page(resource, since, PROBE_ROWS),
            |events| !events.is_empty(),
        )
        .await
    }

    /// Stream `id` and its first [`PROBE_ROWS`] chunks past `since`, once
    /// there is one, the stream is closed, or `wait` has passed.
    pub async fn chunks(
        &self,
        id: &str,
        since: i64,
        wait: Duration,
    ) -> Result<(StreamRecord, Vec<String>), StoreError> {
        let resource = ResourceRef::new(ResourceKind::Stream, id);
        self.hold(
            &self.chunk_flights,
            &resource,
            since,
            wait,
            || self.store.chunks_page(id, since, Some(PROBE_ROWS)),
            |(stream, chunks)| !chunks.is_empty() || stream.closed,
        )
        .await
    }

    /// Held reads waiting now, for the metrics gauge.
    pub fn in_flight(&self) -> usize {
        self.cap.taken()
    }
}
