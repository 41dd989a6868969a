//! The connection pool and what this process knows of PostgreSQL's
//! availability (issue 12, item 7).
//!
//! After an acquire or connect failure, or a statement failing because the
//! connection or the server went away, the database is known to be down:
//! acquires then wait only the short `--db-unavailable-acquire-timeout-ms`
//! (acquires already waiting switch to it too), and every failure is
//! [`StoreError::Unavailable`] (`503`, `Retry-After: 1`). The first
//! statement that succeeds again marks it up. The change is logged once each
//! way (ERROR when the outage starts, INFO when it ends) and exported as the
//! `abstore_db_available` gauge.
//!
//! Reads take their connections from a share of the pool
//! (`--db-write-connections` are left to writes): a burst of reads, such as
//! twenty dashboards' frames, queues behind its own share while appends and
//! heartbeats still find a connection (issue 52, item 4).

use std::sync::Arc;
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnection, PgPool, Postgres};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use crate::store::error::{DatabaseFailure, StoreError, StoreResult};

/// The connection pool, and whether PostgreSQL is believed up.
pub(super) struct Connections {
    /// Its acquire timeout is the bound while the database is believed up.
    pool: PgPool,
    /// The acquire bound while it is known down.
    unavailable_timeout: Duration,
    /// `true` while the database is believed up.
    up: watch::Sender<bool>,
    /// The connections reads may hold at once; `None` when they may take
    /// the whole pool (no connection is kept for writes).
    reads: Option<Arc<Semaphore>>,
}

/// A connection a read holds, with its place in the reads' share.
pub(super) struct ReadConnection {
    conn: PoolConnection<Postgres>,
    _share: Option<OwnedSemaphorePermit>,
}

impl ReadConnection {
    pub fn conn(&mut self) -> &mut PgConnection {
        &mut self.conn
    }

    /// Close the connection instead of returning it to the pool.
    pub fn close_on_drop(&mut self) {
        self.conn.close_on_drop();
    }
}

impl Connections {
    /// `write_connections` of the pool's connections are kept from reads
    /// (at most all but one).
    pub fn new(pool: PgPool, unavailable_timeout: Duration, write_connections: u32) -> Self {
        metrics::gauge!("abstore_db_available").set(1.0);
        let size = pool.options().get_max_connections();
        let reads = size.saturating_sub(write_connections).max(1);
        Connections {
            pool,
            unavailable_timeout,
            up: watch::Sender::new(true),
            reads: (reads < size).then(|| Arc::new(Semaphore::new(reads as usize))),
        }
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// A pooled connection for a write, or `Unavailable` (marking the
    /// database down).
    pub async fn acquire(&self) -> StoreResult<PoolConnection<Postgres>> {
        self.bounded(self.pool_acquire()).await
    }

    /// The pool's acquire, boxed: sqlx's future is 14 KiB (it inlines
    /// opening a connection), and every wrapper around it (the bound, the
    /// outage watch, the reads' share) would otherwise lay out a copy of it
    /// inside every read's and write's future. Unboxed, a read's future grew
    /// to 44 KiB, and the freed remains of 2,000 held reads' first probes
    /// left each of them 1.3 KiB more resident (tests/it/held_reads.rs).
    fn pool_acquire(
        &self,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<PoolConnection<Postgres>, sqlx::Error>> + Send>>
    {
        Box::pin(self.pool.acquire())
    }

    /// A pooled connection for a read, within the reads' share: waiting
    /// for a place in it and then for a connection together take at most
    /// the pool's acquire bound. A share still full at the bound is
    /// `Unavailable` (a `503` the client retries) without marking the
    /// database down: the reads are many, not the database gone, and the
    /// writes meanwhile keep their connections and their full bound.
    pub async fn acquire_read(&self) -> StoreResult<ReadConnection> {
        let Some(reads) = &self.reads else {
            let conn = self.acquire().await?;
            return Ok(ReadConnection { conn, _share: None });
        };
        let deadline = tokio::time::Instant::now() + self.pool.options().get_acquire_timeout();
        // The semaphore is never closed: only the deadline fails the wait
        // for a place (a share still full: counted), or the short bound once
        // the database is known down (`None`: an outage, not counted). The
        // reads holding the share may be stuck on a database that stopped
        // answering.
        let wait = tokio::time::timeout_at(deadline, reads.clone().acquire_owned());
        let share = match self.cut_short_when_down(wait).await {
            Some(Ok(Ok(share))) => share,
            Some(Ok(Err(_)) | Err(_)) => {
                metrics::counter!("abstore_db_read_share_timeouts_total").increment(1);
                return Err(StoreError::Unavailable);
            }
            None => return Err(StoreError::Unavailable),
        };
        let acquire = async {
            tokio::time::timeout_at(deadline, self.pool_acquire())
                .await
                .unwrap_or(Err(sqlx::Error::PoolTimedOut))
        };
        let conn = self.bounded(acquire).await?;
        Ok(ReadConnection {
            conn,
            _share: Some(share),
        })
    }

    /// `acquire` within the bounds: the pool's own while the database is
    /// believed up, cut down to the short bound once it is known down.
    async fn bounded<T>(
        &self,
        acquire: impl std::future::Future<Output = Result<T, sqlx::Error>>,
    ) -> StoreResult<T> {
        let result = self
            .cut_short_when_down(acquire)
            .await
            .unwrap_or(Err(sqlx::Error::PoolTimedOut));
        result.map_err(|err| {
            self.mark_down(&err);
            StoreError::Unavailable
        })
    }

    /// `wait` to its end while the database is believed up; once it is
    /// known down (noticed by another request or the LISTEN task, before or
    /// during the wait), at most the short bound more. `None`: the short
    /// bound ran out.
    async fn cut_short_when_down<F: std::future::Future>(&self, wait: F) -> Option<F::Output> {
        let mut watcher = self.up.subscribe();
        tokio::pin!(wait);
        if *watcher.borrow_and_update() {
            tokio::select! {
                done = &mut wait => return Some(done),
                _ = watcher.wait_for(|up| !*up) => {}
            }
        }
        tokio::time::timeout(self.unavailable_timeout, wait)
            .await
            .ok()
    }

    /// Record what a store operation's outcome says about the database, and
    /// answer it: a success marks it up, a connection-level failure marks it
    /// down and becomes `Unavailable`, a full disk (SQLSTATE 53100) becomes
    /// `Full`; other errors pass unchanged.
    pub fn record_outcome<T>(&self, result: StoreResult<T>) -> StoreResult<T> {
        match result {
            Ok(value) => {
                self.mark_up();
                Ok(value)
            }
            Err(StoreError::Database(err)) => match err.failure() {
                DatabaseFailure::Outage => {
                    self.mark_down(&err);
                    Err(StoreError::Unavailable)
                }
                // The server answered (it is up), but its disk is full.
                DatabaseFailure::StorageFull => {
                    self.mark_up();
                    Err(StoreError::Full(err.to_string()))
                }
                DatabaseFailure::Statement => Err(StoreError::Database(err)),
            },
            Err(err) => Err(err),
        }
    }

    pub fn mark_down(&self, cause: &dyn std::fmt::Display) {
        let changed = self.up.send_if_modified(|up| std::mem::replace(up, false));
        if changed {
            metrics::gauge!("abstore_db_available").set(0.0);
            tracing::error!(
                error = %cause,
                acquire_timeout_ms = self.unavailable_timeout.as_millis(),
                "database unavailable: answering 503 until it is back"
            );
        }
    }

    pub fn mark_up(&self) {
        // The common case reads without taking the sender's write lock.
        if *self.up.borrow() {
            return;
        }
        if self.up.send_if_modified(|up| !std::mem::replace(up, true)) {
            metrics::gauge!("abstore_db_available").set(1.0);
            tracing::info!("database available again");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sqlx::postgres::PgPoolOptions;

    use super::Connections;

    /// Every read's and write's future holds the wait for a connection; the
    /// pool's own 14 KiB future stays boxed so that wait is a few hundred
    /// bytes, not three copies of it (44 KiB, which cost each held read
    /// 1.3 KiB resident). Sizes, not RSS: exact on any machine.
    #[tokio::test]
    async fn waiting_for_a_connection_stays_small() {
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .connect_lazy("postgres://nobody@127.0.0.1:1/none")
            .expect("a lazy pool");
        let connections = Connections::new(pool, Duration::from_millis(100), 4);
        let read = std::mem::size_of_val(&connections.acquire_read());
        let write = std::mem::size_of_val(&connections.acquire());
        assert!(
            read <= 2048,
            "a read's wait for a connection is {read} bytes"
        );
        assert!(
            write <= 2048,
            "a write's wait for a connection is {write} bytes"
        );
    }
}
