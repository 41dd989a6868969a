//! Full storage (issue 22, item 7): what is the same for every storage: a
//! full disk or quota as the operating system reports it ([`io_error`],
//! [`in_chain`], for the blob store), and the counting and logging of the
//! writes it refuses. Each database backend recognises its own driver's
//! "no space left" where it classifies its other errors
//! (`store/sqlite/errors.rs`, `store/postgres/errors.rs`).
//!
//! A full disk (or an exhausted quota) under the database or the blob store
//! is the operator's to fix, not a server failure: the write answers `503`
//! with `Retry-After` and a body naming the storage (`http/error.rs`),
//! nothing of it is kept, reads go on, and the same write succeeds once
//! space is freed, without a restart.

use std::io;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Which storage ran out of space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storage {
    /// The disk under the SQLite file (its WAL and shared memory), or the
    /// PostgreSQL server's.
    Database,
    /// The blob store (a local directory).
    Blobs,
}

impl Storage {
    pub const ALL: [Storage; 2] = [Storage::Database, Storage::Blobs];

    /// The `storage` label of `abstore_storage_full_total`.
    pub fn label(self) -> &'static str {
        match self {
            Storage::Database => "database",
            Storage::Blobs => "blobs",
        }
    }

    /// The error text clients see (next to `database unavailable` and
    /// `blob store unavailable`).
    pub fn message(self) -> &'static str {
        match self {
            Storage::Database => "database storage full",
            Storage::Blobs => "blob storage full",
        }
    }
}

/// ENOSPC or EDQUOT.
pub fn io_error(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    )
}

/// An ENOSPC or EDQUOT anywhere in `err`'s chain of sources: `object_store`
/// wraps the local file system's `io::Error` in its own error types
/// (`Error::Generic { source: local::Error::UnableToCopyDataToFile { source } }`).
pub fn in_chain(err: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(err), |err| err.source())
        .any(|err| err.downcast_ref::<io::Error>().is_some_and(io_error))
}

/// How often a storage's refusals are logged while it stays full: every
/// refused write is counted, but a busy server would otherwise log one
/// line per retry, possibly onto the very disk that is full.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Per storage: when the last line was logged, and refusals since.
struct Logged {
    at: Option<Instant>,
    unlogged: u64,
}

static LOGGED: [Mutex<Logged>; 2] = [
    Mutex::new(Logged {
        at: None,
        unlogged: 0,
    }),
    Mutex::new(Logged {
        at: None,
        unlogged: 0,
    }),
];

/// A write was refused because `storage` is full: count it in
/// `abstore_storage_full_total{storage}` and log it at `ERROR` (the first
/// refusal at once, then at most one line per `LOG_EVERY` with the number
/// refused since). `detail` is the backend's message (it may name paths).
pub fn refused(storage: Storage, detail: &dyn std::fmt::Display) {
    metrics::counter!("abstore_storage_full_total", "storage" => storage.label()).increment(1);
    let refused = {
        let mut logged = LOGGED[storage as usize]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        logged.unlogged += 1;
        if logged.at.is_some_and(|at| at.elapsed() < LOG_EVERY) {
            return;
        }
        logged.at = Some(Instant::now());
        std::mem::take(&mut logged.unlogged)
    };
    tracing::error!(
        storage = storage.label(),
        error = %detail,
        refused,
        "{}: writes answer 503 until space is freed",
        storage.message()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Linux's errno values (the classification goes by `io::ErrorKind`,
    /// which std derives from them).
    const ENOSPC: i32 = 28;
    const EDQUOT: i32 = 122;
    const EIO: i32 = 5;

    #[test]
    fn enospc_and_edquot_are_full_other_io_errors_are_not() {
        assert!(io_error(&io::Error::from_raw_os_error(ENOSPC)));
        assert!(io_error(&io::Error::from_raw_os_error(EDQUOT)));
        assert!(!io_error(&io::Error::from_raw_os_error(EIO)));
        assert!(!io_error(&io::Error::from(io::ErrorKind::PermissionDenied)));
    }

    /// The shape `object_store`'s local store gives a failed write: its
    /// own error around a private one around the `io::Error`.
    #[derive(Debug, thiserror::Error)]
    #[error("unable to copy data to file: {source}")]
    struct Wrapped {
        source: io::Error,
    }

    #[test]
    fn full_is_found_anywhere_in_an_object_store_error() {
        let full = object_store::Error::Generic {
            store: "LocalFileSystem",
            source: Box::new(Wrapped {
                source: io::Error::from_raw_os_error(ENOSPC),
            }),
        };
        assert!(in_chain(&full));
        let quota = object_store::Error::Generic {
            store: "LocalFileSystem",
            source: Box::new(io::Error::from_raw_os_error(EDQUOT)),
        };
        assert!(in_chain(&quota));
        let denied = object_store::Error::Generic {
            store: "LocalFileSystem",
            source: Box::new(Wrapped {
                source: io::Error::from(io::ErrorKind::PermissionDenied),
            }),
        };
        assert!(!in_chain(&denied));
        let missing = object_store::Error::NotFound {
            path: "sha256/ab/ab".into(),
            source: Box::new(io::Error::from(io::ErrorKind::NotFound)),
        };
        assert!(!in_chain(&missing));
    }
}
