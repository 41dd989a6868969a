//! Why a store operation did not happen ([`StoreError`]), backend-neutral:
//! each backend converts its own driver's errors into [`DatabaseError`],
//! classified where it met them, and nothing above the store sees a driver
//! type.

use super::bounds::OverBound;
use crate::protocol::ResourceRef;

pub type StoreResult<T> = Result<T, StoreError>;

/// Why a store operation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The addressed resource (or stream) does not exist.
    #[error("{} {:?} not found", .0.kind.noun(), .0.id)]
    NotFound(ResourceRef),
    /// A uniqueness rule refused the write (duplicate build slug).
    #[error("{} {:?} already exists", .0.kind.noun(), .0.id)]
    Conflict(ResourceRef),
    /// The event write failed catalog validation; the message is the 422 text.
    #[error("{0}")]
    Rejected(String),
    /// The answer would exceed the deployment's response ceiling; nothing
    /// was written. The message is the 413 text.
    #[error("{0}")]
    TooLarge(String),
    /// A collection the write would grow is at its bound (([`super::bounds`]));
    /// nothing was written. The message is the 413 text.
    #[error(transparent)]
    OverBound(#[from] OverBound),
    /// Anything else: the database failed. Never shown to clients verbatim.
    #[error(transparent)]
    Database(#[from] DatabaseError),
    /// The group commit holding this write failed: nothing of it was kept.
    #[error("commit failed: {0}")]
    Commit(String),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The stream (its id) is closed: nothing may be appended.
    #[error("stream {0:?} is closed")]
    Closed(String),
    /// The request's store work could not run: a limiter closed (shutdown),
    /// or the shared query it waited on failed (that error, as text).
    #[error("{0}")]
    Aborted(String),
    /// The database cannot be reached (PostgreSQL outage): `503`, retry soon.
    #[error("database unavailable")]
    Unavailable,
    /// A bound on concurrent work is reached (long reads sending at once):
    /// nothing was done; `503`, retry soon. The message names the bound.
    #[error("{0}")]
    Busy(&'static str),
    /// The disk under the database is full (or its quota exhausted): nothing
    /// of the write was kept; `503` until space is freed
    /// ([`crate::storage_full`]). Carries the backend's message, for the log.
    #[error("database storage full: {0}")]
    Full(String),
}

/// A database driver's error, converted where the backend met it and
/// classified there: each backend decides what its driver's errors mean
/// ([`DatabaseFailure`]), and the rest of the store sees only that.
#[derive(Debug)]
pub struct DatabaseError {
    failure: DatabaseFailure,
    source: Box<dyn std::error::Error + Send + Sync>,
}

/// What a database error means for the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DatabaseFailure {
    /// The connection or the server failed rather than the statement: the
    /// database is down ([`StoreError::Unavailable`] once recorded).
    Outage,
    /// The disk under the database is full ([`StoreError::Full`] once
    /// recorded, on the write path).
    StorageFull,
    /// The statement failed.
    Statement,
}

impl DatabaseError {
    pub(crate) fn new(
        failure: DatabaseFailure,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        DatabaseError {
            failure,
            source: Box::new(source),
        }
    }

    pub fn failure(&self) -> DatabaseFailure {
        self.failure
    }
}

/// Shown as the driver's error itself.
impl std::fmt::Display for DatabaseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.source.fmt(f)
    }
}

impl std::error::Error for DatabaseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.source()
    }
}
