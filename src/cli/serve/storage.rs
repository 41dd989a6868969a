//! `serve`'s storage flags: the database and its pool (shared with
//! `migrate`), artifact retention and the collection bounds, which become
//! the [`StoreOptions`](crate::store::StoreOptions) the store runs on.

use std::path::PathBuf;

use clap::Args;

use super::bytes_in;
use crate::cli::boolish;
use crate::store::DEFAULT_BUILD_RECORDS_CACHE_BYTES;
use crate::store::MigrationSettings;
use crate::store::bounds::{self, Bounds};
use crate::store::retention::Retention;

/// The database and its connection pool (`serve` and `migrate`).
/// `Debug` by hand: the URL may carry a password (`DatabaseUrl`'s redaction).
#[derive(Args, Clone)]
#[command(next_help_heading = "Database")]
pub struct DatabaseArgs {
    /// Database URL: `sqlite://PATH`, `sqlite::memory:` or `postgres://…`.
    #[arg(
        long,
        env = "ABSTORE_DATABASE",
        default_value = "sqlite://./abstore-data/abstore.db"
    )]
    pub database: String,

    /// Maximum database connections (PostgreSQL pool; SQLite readers).
    #[arg(long, env = "ABSTORE_DB_POOL_SIZE", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub db_pool_size: u32,

    /// PostgreSQL connections opened at start and kept open (at most
    /// `--db-pool-size`): requests up to this many at once never wait for a
    /// new connection. Set it to `--db-pool-size` for a fixed-size pool.
    #[arg(long, env = "ABSTORE_DB_MIN_CONNECTIONS", default_value_t = 4, value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub db_min_connections: u32,

    /// How long a request waits for a pooled PostgreSQL connection before
    /// it fails (`503`), in milliseconds.
    #[arg(long, env = "ABSTORE_DB_ACQUIRE_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub db_acquire_timeout_ms: u64,

    /// The same bound while PostgreSQL is known to be unreachable (after a
    /// failed connect), so requests answer `503` at once during an outage.
    #[arg(long, env = "ABSTORE_DB_UNAVAILABLE_ACQUIRE_TIMEOUT_MS", default_value_t = 250, value_parser = clap::value_parser!(u64).range(1..))]
    pub db_unavailable_acquire_timeout_ms: u64,

    /// Rows a migration converts per transaction (migration 0011 fills the
    /// `type` of events stored before it), so no write lock is held for a
    /// whole table; a crash keeps the batches done.
    #[arg(long, env = "ABSTORE_MIGRATE_BATCH_ROWS", default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub migrate_batch_rows: u32,

    /// PostgreSQL: how long a start (or `migrate`) waits for another
    /// process's migration of the database to finish (and, with
    /// `--no-migrate`, for another process to apply what this version
    /// needs), not ready meanwhile, before it gives up naming what it
    /// waited for. 0: do not wait.
    #[arg(long, env = "ABSTORE_MIGRATION_WAIT_SECONDS", default_value_t = 600, value_parser = clap::value_parser!(u64).range(0..=86_400))]
    pub migration_wait_seconds: u64,

    /// PostgreSQL: how long one migration statement may wait for a table
    /// lock, in milliseconds, before its migration is rolled back and tried
    /// again (until `--migration-wait-seconds`). Writers queue behind a
    /// statement waiting for a lock, so this bounds how long a migration
    /// makes them wait.
    #[arg(long, env = "ABSTORE_MIGRATION_LOCK_TIMEOUT_MS", default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub migration_lock_timeout_ms: u64,
}

impl DatabaseArgs {
    /// The migrations' bounds these flags give.
    pub fn migration(&self) -> MigrationSettings {
        MigrationSettings {
            batch_rows: self.migrate_batch_rows,
            wait: std::time::Duration::from_secs(self.migration_wait_seconds),
            lock_timeout: std::time::Duration::from_millis(self.migration_lock_timeout_ms),
        }
    }
}

impl std::fmt::Debug for DatabaseArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseArgs")
            .field("database", &crate::store::url::redact(&self.database))
            .field("db_pool_size", &self.db_pool_size)
            .field("db_min_connections", &self.db_min_connections)
            .field("db_acquire_timeout_ms", &self.db_acquire_timeout_ms)
            .field(
                "db_unavailable_acquire_timeout_ms",
                &self.db_unavailable_acquire_timeout_ms,
            )
            .field("migrate_batch_rows", &self.migrate_batch_rows)
            .field("migration_wait_seconds", &self.migration_wait_seconds)
            .field("migration_lock_timeout_ms", &self.migration_lock_timeout_ms)
            .finish()
    }
}

/// What only a server does with its database.
#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Database")]
pub struct ServerDatabaseArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    /// Do not apply migrations at start (run `abstore migrate` separately).
    #[arg(long, env = "ABSTORE_NO_MIGRATE", value_parser = boolish())]
    pub no_migrate: bool,

    /// Streamed answers longer than one 64 KiB piece that may be sending at
    /// once (each holds a database connection while its client reads);
    /// another waits up to `--db-acquire-timeout-ms`, then is answered
    /// `503`. Below `--db-pool-size`, so slow readers never take every
    /// connection. Default: half the pool, rounded up.
    #[arg(long, env = "ABSTORE_MAX_STREAMED_READS", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_streamed_reads: Option<u32>,

    /// PostgreSQL connections only writes may take: reads of every kind
    /// share the rest of `--db-pool-size`, so a burst of dashboard reads
    /// never leaves an append or a heartbeat waiting for a connection. A
    /// read that finds its share taken waits up to
    /// `--db-acquire-timeout-ms`, then is answered `503`. Below
    /// `--db-pool-size`; 0 lets reads take every connection. Default: a
    /// quarter of the pool, rounded down (4 of 16). SQLite's writer has a
    /// connection of its own and ignores it.
    #[arg(long, env = "ABSTORE_DB_WRITE_CONNECTIONS", value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub db_write_connections: Option<u32>,

    /// Bytes of build records kept as `GET /builds` writes them, each with
    /// the columns it was rendered from, so a listing renders only the
    /// builds that changed (a protocol-3 dashboard lists every build on
    /// every frame); the least recently listed go first. 0 turns it off.
    #[arg(long, env = "ABSTORE_BUILD_RECORDS_CACHE_BYTES", default_value_t = DEFAULT_BUILD_RECORDS_CACHE_BYTES, value_parser = bytes_in(0, 1 << 40))]
    pub build_records_cache_bytes: usize,
}

/// Artifact retention.
#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Artifact retention")]
pub struct RetentionArgs {
    /// Artifact retention: a JSON policy file replacing the embedded one
    /// (which keeps the latest 100 revisions of the dispatcher and
    /// build-runner configuration kinds), or `none` to prune nothing.
    #[arg(long, env = "ABSTORE_RETENTION_POLICY", value_name = "FILE|none")]
    pub retention_policy: Option<PathBuf>,

    /// At most this many artifact revisions pruned by one put or deposit
    /// (a larger backlog drains over later writes).
    #[arg(long, env = "ABSTORE_RETENTION_PRUNE_LIMIT", default_value_t = crate::store::retention::DEFAULT_PRUNE_LIMIT, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub retention_prune_limit: u32,
}

impl RetentionArgs {
    /// The policy loaded (a file that does not load stops the start, naming
    /// the file and the rule), and the file it came from.
    pub fn load(self) -> anyhow::Result<(Retention, Option<PathBuf>)> {
        let RetentionArgs {
            retention_policy,
            retention_prune_limit,
        } = self;
        let retention = Retention::load(retention_policy.as_deref(), retention_prune_limit)?;
        Ok((retention, retention_policy))
    }
}

/// The bounds on the collections clients grow (docs/configuration.md,
/// "Collection bounds"). A write over one writes nothing and is answered
/// `413 validation` naming the bound and its flag. Each is at most 2^53 − 1,
/// the largest count a JavaScript client reads exactly.
#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Collection bounds")]
pub struct BoundsArgs {
    /// Chunks one stream may hold; an append beyond them is refused (close
    /// the stream and start another).
    #[arg(long, env = "ABSTORE_MAX_STREAM_CHUNKS", default_value_t = bounds::DEFAULT_MAX_STREAM_CHUNKS, value_parser = bound())]
    pub max_stream_chunks: i64,

    /// Bytes of chunks one stream may hold, as stored (each batch plus
    /// about 100 bytes of envelope): a close assembles them all in memory,
    /// so this bounds a close's memory.
    #[arg(long, env = "ABSTORE_MAX_STREAM_BYTES", default_value_t = bounds::DEFAULT_MAX_STREAM_BYTES, value_parser = bound())]
    pub max_stream_bytes: i64,

    /// Events one build, repository or session log may hold; appends and
    /// deposits beyond them are refused.
    #[arg(long, env = "ABSTORE_MAX_EVENTS_PER_LOG", default_value_t = bounds::DEFAULT_MAX_EVENTS_PER_LOG, value_parser = bound())]
    pub max_events_per_log: i64,

    /// Revisions one artifact kind of one resource may have, for kinds no
    /// retention rule selects (retention bounds the others); puts and
    /// deposits beyond them are refused.
    #[arg(long, env = "ABSTORE_MAX_ARTIFACT_REVISIONS", default_value_t = bounds::DEFAULT_MAX_ARTIFACT_REVISIONS, value_parser = bound())]
    pub max_artifact_revisions: i64,

    /// Revisions one ticket asset may have, removals included; puts and
    /// removals beyond them are refused.
    #[arg(long, env = "ABSTORE_MAX_TICKET_ASSET_REVISIONS", default_value_t = bounds::DEFAULT_MAX_TICKET_ASSET_REVISIONS, value_parser = bound())]
    pub max_ticket_asset_revisions: i64,

    /// Live assets one ticket may have; a put adding another is refused.
    #[arg(long, env = "ABSTORE_MAX_TICKET_ASSETS", default_value_t = bounds::DEFAULT_MAX_TICKET_ASSETS, value_parser = bound())]
    pub max_ticket_assets: i64,
}

/// A collection bound: a whole number from 1 to 2^53 − 1.
fn bound() -> clap::builder::RangedI64ValueParser<i64> {
    clap::value_parser!(i64).range(1..=bounds::MAX_BOUND)
}

impl From<BoundsArgs> for Bounds {
    fn from(args: BoundsArgs) -> Bounds {
        let BoundsArgs {
            max_stream_chunks,
            max_stream_bytes,
            max_events_per_log,
            max_artifact_revisions,
            max_ticket_asset_revisions,
            max_ticket_assets,
        } = args;
        Bounds {
            max_stream_chunks,
            max_stream_bytes,
            max_events_per_log,
            max_artifact_revisions,
            max_ticket_asset_revisions,
            max_ticket_assets,
        }
    }
}
