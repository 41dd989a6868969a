//! What rusqlite's errors mean for the store, decided here and nowhere
//! else: a full disk ([`is_storage_full`]: answered `503 database storage
//! full` until space is freed, `crate::storage_full`) or a statement's own
//! failure. SQLite has no outage: the file is local.

use std::io;

use crate::storage_full;
use crate::store::error::{DatabaseError, DatabaseFailure, StoreError};

/// A rusqlite error as the store sees it. Called on the thread whose call
/// failed, right after it, so the thread's `errno` is still that call's
/// (`is_storage_full`); the writer answers a full disk as such.
impl From<rusqlite::Error> for StoreError {
    fn from(err: rusqlite::Error) -> StoreError {
        let failure = if is_storage_full(&err, &io::Error::last_os_error()) {
            DatabaseFailure::StorageFull
        } else {
            DatabaseFailure::Statement
        };
        StoreError::Database(DatabaseError::new(failure, err))
    }
}

/// A job's error as the store answers it: a database error that means the
/// disk is full (classified on the writer thread right after the failing
/// call, while the thread's `errno` was still the call's) becomes
/// [`StoreError::Full`].
pub(super) fn classify(err: StoreError) -> StoreError {
    match err {
        StoreError::Database(err) if err.failure() == DatabaseFailure::StorageFull => {
            StoreError::Full(err.to_string())
        }
        other => other,
    }
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
pub(super) fn is_storage_full(err: &rusqlite::Error, errno: &io::Error) -> bool {
    match err {
        rusqlite::Error::SqliteFailure(failure, _) => match failure.code {
            rusqlite::ErrorCode::DiskFull => true,
            rusqlite::ErrorCode::SystemIoFailure => {
                SQLITE_WRITE_IOERRS.contains(&failure.extended_code)
                    && storage_full::io_error(errno)
            }
            _ => false,
        },
        _ => false,
    }
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
    fn sqlite_full_whatever_the_errno_and_write_io_errors_by_errno() {
        let eio = io::Error::from_raw_os_error(EIO);
        let enospc = io::Error::from_raw_os_error(ENOSPC);
        let edquot = io::Error::from_raw_os_error(EDQUOT);
        assert!(is_storage_full(
            &sqlite_error(rusqlite::ffi::SQLITE_FULL),
            &eio
        ));
        for code in SQLITE_WRITE_IOERRS {
            assert!(is_storage_full(&sqlite_error(code), &enospc), "{code}");
            assert!(is_storage_full(&sqlite_error(code), &edquot), "{code}");
            assert!(!is_storage_full(&sqlite_error(code), &eio), "{code}");
        }
        // A read error is never a full disk, whatever errno was left over.
        assert!(!is_storage_full(
            &sqlite_error(rusqlite::ffi::SQLITE_IOERR_READ),
            &enospc
        ));
        assert!(!is_storage_full(
            &sqlite_error(rusqlite::ffi::SQLITE_BUSY),
            &enospc
        ));
        assert!(!is_storage_full(
            &sqlite_error(rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE),
            &enospc
        ));
        assert!(!is_storage_full(
            &rusqlite::Error::QueryReturnedNoRows,
            &enospc
        ));
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
            is_storage_full(&err, &io::Error::last_os_error()),
            "not classified full: {err:?}"
        );
    }
}
