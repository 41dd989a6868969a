//! Full storage (issue 22, item 7): recognising "no space left" in each
//! backend's errors, and counting and logging the writes it refuses.
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

/// SQLite's write-side I/O errors (extended codes), where the errno says
/// whether the cause was a full disk. SQLite reports ENOSPC on `write` as
/// `SQLITE_FULL` itself, but EDQUOT on `write`, and ENOSPC on `fsync`,
/// `ftruncate` or growing the WAL index (`-shm`), as these.
const SQLITE_WRITE_IOERRS: [std::ffi::c_int; 5] = [
    rusqlite::ffi::SQLITE_IOERR_WRITE,
    rusqlite::ffi::SQLITE_IOERR_FSYNC,
    rusqlite::ffi::SQLITE_IOERR_DIR_FSYNC,
    rusqlite::ffi::SQLITE_IOERR_TRUNCATE,
    rusqlite::ffi::SQLITE_IOERR_SHMSIZE,
];

/// A SQLite error that means the disk is full: `SQLITE_FULL` (a write of the
/// database, its WAL or a checkpoint found no space), or a write-side I/O
/// error whose `errno` is ENOSPC or EDQUOT. `errno` is the thread's, read
/// right after the failing call on the thread that made it: it is what
/// SQLite's own `sqlite3_system_errno` records (its unix VFS reads `errno`
/// too), which rusqlite does not expose safely.
pub fn sqlite(err: &rusqlite::Error, errno: &io::Error) -> bool {
    match err {
        rusqlite::Error::SqliteFailure(failure, _) => match failure.code {
            rusqlite::ErrorCode::DiskFull => true,
            rusqlite::ErrorCode::SystemIoFailure => {
                SQLITE_WRITE_IOERRS.contains(&failure.extended_code) && io_error(errno)
            }
            _ => false,
        },
        _ => false,
    }
}

/// PostgreSQL's SQLSTATE 53100 `disk_full` ("could not extend file …: No
/// space left on device"). A full WAL disk is not this: the server stops
/// (PANIC), which is an outage (`database unavailable`).
pub fn postgres(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.code().as_deref() == Some("53100"))
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
/// refusal at once, then at most one line per [`LOG_EVERY`] with the number
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

    fn sqlite_error(code: std::ffi::c_int) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None)
    }

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

    #[test]
    fn sqlite_full_whatever_the_errno_and_write_io_errors_by_errno() {
        let eio = io::Error::from_raw_os_error(EIO);
        let enospc = io::Error::from_raw_os_error(ENOSPC);
        let edquot = io::Error::from_raw_os_error(EDQUOT);
        assert!(sqlite(&sqlite_error(rusqlite::ffi::SQLITE_FULL), &eio));
        for code in SQLITE_WRITE_IOERRS {
            assert!(sqlite(&sqlite_error(code), &enospc), "{code}");
            assert!(sqlite(&sqlite_error(code), &edquot), "{code}");
            assert!(!sqlite(&sqlite_error(code), &eio), "{code}");
        }
        // A read error is never a full disk, whatever errno was left over.
        assert!(!sqlite(
            &sqlite_error(rusqlite::ffi::SQLITE_IOERR_READ),
            &enospc
        ));
        assert!(!sqlite(&sqlite_error(rusqlite::ffi::SQLITE_BUSY), &enospc));
        assert!(!sqlite(
            &sqlite_error(rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE),
            &enospc
        ));
        assert!(!sqlite(&rusqlite::Error::QueryReturnedNoRows, &enospc));
    }

    /// A real `SQLITE_FULL` from SQLite itself: `max_page_count` makes a
    /// database "full" without filling a disk.
    #[test]
    fn sqlite_reports_a_full_database_as_sqlite_full() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (x BLOB)").unwrap();
        let pages: i64 = conn
            .pragma_query_value(None, "page_count", |row| row.get(0))
            .unwrap();
        conn.pragma_update(None, "max_page_count", pages + 1)
            .unwrap();
        let err = conn
            .execute("INSERT INTO t VALUES (zeroblob(1000000))", [])
            .unwrap_err();
        assert!(
            sqlite(&err, &io::Error::last_os_error()),
            "not classified full: {err:?}"
        );
    }

    /// A database error as sqlx gives it, with a given SQLSTATE.
    #[derive(Debug)]
    struct PgError(&'static str);

    impl std::fmt::Display for PgError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "SQLSTATE {}", self.0)
        }
    }

    impl std::error::Error for PgError {}

    impl sqlx::error::DatabaseError for PgError {
        fn message(&self) -> &str {
            "could not extend file \"base/16384/16390\": No space left on device"
        }
        fn code(&self) -> Option<std::borrow::Cow<'_, str>> {
            Some(self.0.into())
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    #[test]
    fn postgres_disk_full_is_sqlstate_53100_only() {
        let pg = |code| sqlx::Error::Database(Box::new(PgError(code)));
        assert!(postgres(&pg("53100")));
        // insufficient_resources, out_of_memory, too_many_connections,
        // admin_shutdown: not a full disk.
        for code in ["53000", "53200", "53300", "57P01"] {
            assert!(!postgres(&pg(code)), "{code}");
        }
        assert!(!postgres(&sqlx::Error::Io(io::Error::from_raw_os_error(
            ENOSPC
        ))));
    }
}
