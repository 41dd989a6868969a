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

use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgPool, Postgres};
use tokio::sync::watch;

use crate::store::error::{DatabaseFailure, StoreError, StoreResult};

/// The connection pool, and whether PostgreSQL is believed up.
pub(super) struct Connections {
    /// Its acquire timeout is the bound while the database is believed up.
    pool: PgPool,
    /// The acquire bound while it is known down.
    unavailable_timeout: Duration,
    /// `true` while the database is believed up.
    up: watch::Sender<bool>,
}

impl Connections {
    pub fn new(pool: PgPool, unavailable_timeout: Duration) -> Self {
        metrics::gauge!("abstore_db_available").set(1.0);
        Connections {
            pool,
            unavailable_timeout,
            up: watch::Sender::new(true),
        }
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// A pooled connection, or `Unavailable` (marking the database down).
    pub async fn acquire(&self) -> StoreResult<PoolConnection<Postgres>> {
        let mut watcher = self.up.subscribe();
        let acquire = self.pool.acquire();
        tokio::pin!(acquire);
        let result = if *watcher.borrow_and_update() {
            // The pool bounds this by `acquire_timeout`; an outage noticed
            // meanwhile (by another request or the LISTEN task) cuts the
            // wait down to the short bound.
            tokio::select! {
                result = &mut acquire => Some(result),
                _ = watcher.wait_for(|up| !*up) => None,
            }
        } else {
            None
        };
        let result = match result {
            Some(result) => result,
            None => tokio::time::timeout(self.unavailable_timeout, acquire)
                .await
                .unwrap_or(Err(sqlx::Error::PoolTimedOut)),
        };
        result.map_err(|err| {
            self.mark_down(&err);
            StoreError::Unavailable
        })
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
