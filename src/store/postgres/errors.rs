//! What sqlx's errors mean for the store, decided here and nowhere else: a
//! failure of the connection or the server ([`is_outage`]: the database is
//! down, `503` until it is back), a full disk ([`is_disk_full`]: `503
//! database storage full`, `crate::storage_full`), or a statement's own
//! failure; and, for the fast paths, a unique violation.

use crate::store::error::{DatabaseError, DatabaseFailure, StoreError};

/// A sqlx error as the store sees it, classified where it happened: a
/// failure of the connection or the server (`is_outage`), a full disk
/// (`is_disk_full`), or the statement's own failure.
/// `Connections::record_outcome` turns the first two into `Unavailable`
/// and `Full`.
impl From<sqlx::Error> for StoreError {
    fn from(err: sqlx::Error) -> StoreError {
        let failure = if is_outage(&err) {
            DatabaseFailure::Outage
        } else if is_disk_full(&err) {
            DatabaseFailure::StorageFull
        } else {
            DatabaseFailure::Statement
        };
        StoreError::Database(DatabaseError::new(failure, err))
    }
}

/// A failure of the connection or the server rather than of the statement:
/// no connection to be had, the socket gone, or the server shutting down
/// (SQLSTATE class 57P) or dropping the connection (class 08).
pub(super) fn is_outage(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::BeginFailed => true,
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|code| code.starts_with("57P") || code.starts_with("08")),
        _ => false,
    }
}

/// PostgreSQL's SQLSTATE 53100 `disk_full` ("could not extend file …: No
/// space left on device"). A full WAL disk is not this: the server stops
/// (PANIC), which is an outage (`database unavailable`).
pub(super) fn is_disk_full(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.code().as_deref() == Some("53100"))
}

/// A unique violation: a fast path's expectation about revisions was stale.
pub(super) fn is_unique_violation(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.code().as_deref() == Some("23505"))
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    /// Linux's ENOSPC.
    const ENOSPC: i32 = 28;

    #[test]
    fn connection_failures_are_outages_and_statement_failures_are_not() {
        assert!(is_outage(&sqlx::Error::PoolTimedOut));
        assert!(is_outage(&sqlx::Error::Io(io::Error::from(
            io::ErrorKind::ConnectionRefused
        ))));
        assert!(!is_outage(&sqlx::Error::RowNotFound));
        assert!(!is_outage(&sqlx::Error::ColumnNotFound("x".into())));
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
        assert!(is_disk_full(&pg("53100")));
        // insufficient_resources, out_of_memory, too_many_connections,
        // admin_shutdown: not a full disk.
        for code in ["53000", "53200", "53300", "57P01"] {
            assert!(!is_disk_full(&pg(code)), "{code}");
        }
        assert!(!is_disk_full(&sqlx::Error::Io(
            io::Error::from_raw_os_error(ENOSPC)
        )));
    }
}
