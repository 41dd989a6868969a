//! The embedded backend: one SQLite file in WAL mode with `synchronous=FULL`.
//!
//! SQLite admits one writer at a time, so writes go through a pool of exactly
//! one connection and start with `BEGIN IMMEDIATE` (taking the write lock up
//! front, never upgrading mid-transaction); reads use their own pool and run
//! concurrently under WAL. `sqlite::memory:` is one connection for both,
//! since every in-memory connection would otherwise be its own database.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use crate::clock::Clock;
use crate::notify::Notifier;
use crate::store::StoreOptions;

/// SQLite needs no row lock: the single writer connection serialises writes.
const LOCK_RESOURCE: &str = "SELECT id, attrs, created_at, updated_at, last_seq, lease_holder, \
     lease_expires_at, lease_ttl_ms, heartbeat_at FROM resources WHERE kind = $1 AND id = $2";

/// The tails of the resources named by a JSON array of `{kind, id}`.
const TAILS: &str = "SELECT r.kind, r.id, r.last_seq FROM resources r JOIN json_each($1) j \
     ON r.kind = json_extract(j.value, '$.kind') AND r.id = json_extract(j.value, '$.id')";

const LOCK_STREAM: &str = "SELECT id, scope_kind, scope_id, label, status, created_at, last_seq, closed_at, \
     outcome, artifact_kind, artifact_revision, artifact_blob_ref FROM streams WHERE id = $1";

/// Stream tails for the sweep; a closed stream reports the largest tail.
const STREAM_TAILS: &str = "SELECT 'stream' AS kind, s.id, \
     CASE WHEN s.status = 'closed' THEN 9223372036854775807 ELSE s.last_seq END AS last_seq \
     FROM streams s JOIN json_each($1) j ON s.id = json_extract(j.value, '$.id')";

/// How long a statement waits for another process's lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

pub struct SqliteStore {
    writer: SqlitePool,
    readers: SqlitePool,
    clock: Arc<dyn Clock>,
    notifier: Arc<Notifier>,
}

impl SqliteStore {
    pub async fn connect(
        url: &str,
        options: &StoreOptions,
        clock: Arc<dyn Clock>,
        notifier: Arc<Notifier>,
    ) -> anyhow::Result<Self> {
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        let connect = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(if in_memory {
                SqliteJournalMode::Memory
            } else {
                SqliteJournalMode::Wal
            })
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(BUSY_TIMEOUT);
        if let Some(parent) = connect
            .get_filename()
            .parent()
            .filter(|p| !in_memory && !p.as_os_str().is_empty())
        {
            std::fs::create_dir_all(parent)?;
        }
        // An in-memory database must never close its only connection.
        let single = || {
            SqlitePoolOptions::new()
                .max_connections(1)
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None)
        };
        let writer = single().connect_with(connect.clone()).await?;
        let readers = if in_memory {
            writer.clone()
        } else {
            SqlitePoolOptions::new()
                .max_connections(options.pool_size.max(1))
                .connect_with(connect.read_only(true))
                .await?
        };
        if options.migrate {
            sqlx::migrate!("migrations/sqlite").run(&writer).await?;
        }
        Ok(SqliteStore {
            writer,
            readers,
            clock,
            notifier,
        })
    }

    /// One process owns a SQLite file: there is nobody else to tell.
    fn publish(&self, _resource: &crate::protocol::ResourceRef) {}

    fn reader(&self) -> &SqlitePool {
        &self.readers
    }

    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>, sqlx::Error> {
        self.writer.begin_with("BEGIN IMMEDIATE").await
    }
}

crate::store::sql::impl_store!(SqliteStore, sqlx::Sqlite);
