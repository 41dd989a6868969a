//! The settings both backends open with ([`StoreOptions`]).

use super::bounds::Bounds;
use super::migration::MigrationSettings;
use super::record_cache::BuildRecordCache;
use super::{retention, rows};

/// `--build-records-cache-bytes`' default: 16 MiB, about 50,000 builds'
/// records at 300 bytes each.
pub const DEFAULT_BUILD_RECORDS_CACHE_BYTES: usize = 16 * 1024 * 1024;

/// Settings shared by both backends.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// Maximum pooled connections (PostgreSQL) or readers (SQLite).
    pub pool_size: u32,
    /// PostgreSQL connections opened at start and kept open.
    pub min_connections: u32,
    /// Run embedded migrations on open (else, on PostgreSQL, wait for
    /// another process to have run them).
    pub migrate: bool,
    /// Their bounds: backfill batches, waiting for another process's
    /// migration, table lock timeouts.
    pub migration: MigrationSettings,
    /// The artifact retention applied by puts and deposits.
    pub retention: retention::Retention,
    /// The bounds of the collections clients grow.
    pub bounds: Bounds,
    /// How long a request waits for a pooled PostgreSQL connection.
    pub acquire_timeout: std::time::Duration,
    /// The same while PostgreSQL is known to be unreachable.
    pub unavailable_acquire_timeout: std::time::Duration,
    /// How long a streamed answer may take its client (each piece, whole).
    pub answer_times: rows::AnswerTimes,
    /// Streamed answers that may wait on their clients at once (each holds
    /// a connection meanwhile); below `pool_size`.
    pub max_streamed_reads: u32,
    /// PostgreSQL connections reads may not take, kept for writes; below
    /// `pool_size`.
    pub write_connections: u32,
    /// Memory for builds' records as `GET /builds` writes them, kept with
    /// the columns they were rendered from ([`BuildRecordCache`]); `0`: none.
    pub build_records_cache_bytes: usize,
    /// SQLite file: hold the one-process lock (`PATH.lock`) while open, as a
    /// server must. A short-lived command adding a row under SQLite's own
    /// locking (`token revoke`, beside a running server) opens without it.
    pub exclusive: bool,
}

impl StoreOptions {
    /// The bounds of this store's streamed reads: an answer that finds
    /// every sending permit taken waits as long as for a connection.
    pub(crate) fn streamed_reads(&self) -> rows::StreamedReads {
        rows::StreamedReads::new(
            self.answer_times,
            self.max_streamed_reads,
            self.acquire_timeout,
        )
    }

    /// The build records' cache these options ask for, if any.
    pub(crate) fn build_records(&self) -> Option<std::sync::Arc<BuildRecordCache>> {
        (self.build_records_cache_bytes > 0)
            .then(|| std::sync::Arc::new(BuildRecordCache::new(self.build_records_cache_bytes)))
    }

    /// The default `max_streamed_reads` of a pool: half of it, rounded up,
    /// so the other half always serves writes and short reads.
    pub fn default_streamed_reads(pool_size: u32) -> u32 {
        pool_size.max(1).div_ceil(2)
    }

    /// The default `write_connections` of a pool: a quarter of it, rounded
    /// down (none in a pool of fewer than four, where reads would be left
    /// too few).
    pub fn default_write_connections(pool_size: u32) -> u32 {
        pool_size / 4
    }
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            pool_size: 16,
            min_connections: 4,
            migrate: true,
            migration: MigrationSettings::default(),
            retention: retention::Retention::default(),
            bounds: Bounds::default(),
            acquire_timeout: std::time::Duration::from_secs(10),
            unavailable_acquire_timeout: std::time::Duration::from_millis(250),
            answer_times: rows::AnswerTimes::default(),
            max_streamed_reads: 8,
            write_connections: 4,
            build_records_cache_bytes: DEFAULT_BUILD_RECORDS_CACHE_BYTES,
            exclusive: true,
        }
    }
}
