//! How every operation runs, whatever the database: the one [`Store`]
//! implementation, [`Engine`], over a [`Backend`], which says only how a
//! read, a write transaction and a streamed read run (SQLite: a blocking
//! reader, the writer thread's group commit; PostgreSQL: a pooled
//! connection, a task of its own per write), and what of a write its dialect
//! does its own way ([`WriteTx`]).
//!
//! The operations are written once for both backends (docs/decisions.md,
//! 16), each in its family's folder (`events/mod.rs`, `artifacts/mod.rs`,
//! …: the family's trait of [`Store`] implemented for the engine). An
//! operation is its rule and its statements: its body runs inside one
//! write transaction ([`Engine::write_op`]) or one read, reads and writes
//! through its family's statements (`<family>/sql.rs`), and asks the
//! backend only for what its dialect does its own way ([`WriteTx`]: row
//! locks, fused statements, fast paths).
//!
//! Every rule lives in its family and nowhere else: the conditional append,
//! the deposit composition, the lease truth table, stream close checks,
//! chunk pruning, artifact retention and the collection bounds
//! (`Bounds`). A bound is checked where the
//! transaction holds the row that counts the collection; a refusal is an
//! error, which rolls the whole write back. An operation answers with its
//! outcome ([`Written`]): whether to keep its changes, which resource's held
//! reads to wake, what it pruned. The write operations run on the SQLite
//! writer thread (synchronously: rusqlite never pends) or in a PostgreSQL
//! task of their own; what they take is owned (`'static`), as they may
//! outlive the request (docs/decisions.md, 14).
//!
//! What is the same for every operation is here, once: what follows a
//! commit ([`AfterCommit`]: the pruning count, the held reads' wake-up);
//! the loop of a streamed read is `listing.rs`'s (`stream_listing`).
//!
//! [`Store`]: super::api::Store

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::api::{MakeEvent, NewArtifact, NewEvent, PoolStats};
use super::bounds::Bounds;
use super::error::StoreResult;
use super::records::{ArtifactMeta, LogTail, ResourceRow, StreamRecord};
use super::retention::Retention;
use super::rows::{Listing, Rows};
use super::statement::Statements;
use crate::notify::Notifier;
use crate::protocol::{ResourceKind, ResourceRef};

/// An operation's future over a borrowed transaction or read connection
/// (the shape sqlx's own `Connection::transaction` takes).
pub(crate) type OpFuture<'a, T> = Pin<Box<dyn Future<Output = StoreResult<T>> + Send + 'a>>;

/// How one database runs the operations.
pub(crate) trait Backend: Send + Sync + 'static {
    /// One write transaction.
    type Tx<'t>: WriteTx;
    /// One read, outside any write transaction.
    type Read<'r>: Statements;

    /// Run `op` as one write, to its end even if the caller goes away
    /// (docs/decisions.md, 14): commit its changes when its outcome is kept
    /// (roll them back otherwise), then, where it committed and before the
    /// caller is answered, hand the outcome to `after_commit`.
    fn write<T, F>(
        &self,
        op: F,
        after_commit: AfterCommit,
    ) -> impl Future<Output = StoreResult<T>> + Send
    where
        T: Send + 'static,
        F: for<'a, 't> FnOnce(&'a mut Self::Tx<'t>) -> OpFuture<'a, Written<T>> + Send + 'static;

    /// Run `op` as one read.
    fn read<T, F>(&self, op: F) -> impl Future<Output = StoreResult<T>> + Send
    where
        T: Send + 'static,
        F: for<'a, 'r> FnOnce(&'a mut Self::Read<'r>) -> OpFuture<'a, T> + Send + 'static;

    /// A streamed read: `listing::stream_listing` on a read connection,
    /// where it may wait for its client.
    fn stream(&self, listing: Listing) -> impl Future<Output = StoreResult<Rows>> + Send;

    fn pool_stats(&self) -> PoolStats;
}

/// What a fast-path append did.
pub(crate) enum FastAppend {
    /// Stored; the envelope text.
    Appended(String),
    /// A stale `expected_seq`: nothing written.
    Stale,
}

/// One write transaction of a backend: it runs the shared statements
/// ([`Statements`]), reads the injected clock, and does its own way what
/// its dialect does otherwise. Only that is here; every other statement of
/// a write is run as its family's `sql.rs` writes it.
///
/// SQLite needs no row lock (its one writer connection serialises every
/// write) and runs two statements where PostgreSQL fuses them into one
/// (`WITH … AS (UPDATE …)`); PostgreSQL locks the rows it reads.
///
/// The `try_*` methods are fast paths a backend may offer: the whole
/// operation as one autocommit statement, tried before any transaction
/// begins. They decline (`Ok(None)`, having written nothing) whenever they
/// cannot decide exactly as the transaction path would (a clock behind the
/// resource's last write, a concurrent writer, a collection at its bound:
/// they never write past one, and leave its refusal to the transaction);
/// the transaction path then runs. A backend without them declines always.
pub(crate) trait WriteTx: Statements {
    /// The injected clock's current time.
    fn now(&self) -> i64;

    /// An append in one statement, while the log holds fewer than
    /// `max_events` events: PostgreSQL runs `events/fast_append.rs`, which
    /// restates the append rule (`events/mod.rs`) in SQL.
    fn try_append(
        &mut self,
        _r: &ResourceRef,
        _event: &NewEvent,
        _expected_seq: Option<i64>,
        _max_events: i64,
    ) -> impl Future<Output = StoreResult<Option<FastAppend>>> + Send {
        async { Ok(None) }
    }

    /// A deposit as one read and one statement, within `bounds`' events
    /// per log and revisions per kind (no retention rule selects the kinds).
    fn try_deposit(
        &mut self,
        _r: &ResourceRef,
        _artifacts: &[NewArtifact],
        _make_event: &MakeEvent,
        _bounds: &Bounds,
    ) -> impl Future<Output = StoreResult<Option<(String, Vec<ArtifactMeta>)>>> + Send {
        async { Ok(None) }
    }

    /// A chunk append in one statement, within `bounds`' chunks and bytes
    /// per stream.
    fn try_append_chunk(
        &mut self,
        _id: &str,
        _parts_json: &str,
        _bounds: &Bounds,
    ) -> impl Future<Output = StoreResult<Option<String>>> + Send {
        async { Ok(None) }
    }

    /// Read the resource row, holding it until the transaction ends.
    fn lock_resource(
        &mut self,
        r: &ResourceRef,
    ) -> impl Future<Output = StoreResult<Option<ResourceRow>>> + Send;

    /// Read the resource's log tail, holding its row until the
    /// transaction ends (as [`WriteTx::lock_resource`] does).
    fn lock_log_tail(
        &mut self,
        r: &ResourceRef,
    ) -> impl Future<Output = StoreResult<Option<LogTail>>> + Send;

    /// Read the stream row, holding it until the transaction ends.
    fn lock_stream(
        &mut self,
        id: &str,
    ) -> impl Future<Output = StoreResult<Option<StreamRecord>>> + Send;

    /// Serialise, until the transaction ends, the writers that may add a
    /// live asset to a ticket (the bound on live assets counts them).
    fn lock_ticket(
        &mut self,
        repo: &str,
        ticket_id: &str,
    ) -> impl Future<Output = StoreResult<()>> + Send;

    /// Store `envelope` as sequence `seq` and make it the tail (`updated_at
    /// = now`): `events::sql::append_event` and `events::sql::APPEND_EVENT_TAIL`.
    fn append_event(
        &mut self,
        r: &ResourceRef,
        seq: i64,
        now: i64,
        envelope: &str,
        event_type: &str,
    ) -> impl Future<Output = StoreResult<()>> + Send;

    /// Assign the next revision of `artifact`'s kind and store its
    /// metadata (`metadata`, serialised); returns the revision:
    /// `artifacts::sql::insert_artifact` and
    /// `artifacts::sql::store_revision`.
    fn insert_artifact(
        &mut self,
        r: &ResourceRef,
        artifact: &NewArtifact,
        metadata: &str,
        now: i64,
    ) -> impl Future<Output = StoreResult<i64>> + Send;

    /// Store `chunk` as sequence `seq` and make it the stream's tail, adding
    /// its bytes to the stream's total: `streams::sql::append_chunk` and
    /// `streams::sql::APPEND_CHUNK_TAIL`.
    fn append_chunk(
        &mut self,
        id: &str,
        seq: i64,
        chunk: &str,
    ) -> impl Future<Output = StoreResult<()>> + Send;
}

/// What a write operation produced: its answer, whether its changes are
/// kept (a no-op outcome such as a stale conditional append rolls back),
/// the resource whose held readers must wake after the commit, and the
/// artifact revisions retention pruned (counted once the commit succeeds).
pub(crate) struct Written<T> {
    pub value: T,
    pub keep: bool,
    pub wake: Option<ResourceRef>,
    pub pruned: Pruned,
}

impl<T> Written<T> {
    /// Kept, waking nobody.
    pub(crate) fn kept(value: T) -> Self {
        Written {
            value,
            keep: true,
            wake: None,
            pruned: Pruned::default(),
        }
    }

    /// Kept, waking the held reads of `resource`.
    pub(crate) fn waking(value: T, resource: ResourceRef) -> Self {
        Written {
            wake: Some(resource),
            ..Written::kept(value)
        }
    }

    /// Nothing changed (or nothing may be kept): roll back, answer `value`.
    pub(crate) fn unchanged(value: T) -> Self {
        Written {
            keep: false,
            ..Written::kept(value)
        }
    }

    pub(crate) fn pruning(self, pruned: Pruned) -> Self {
        Written { pruned, ..self }
    }
}

/// Revisions pruned by one write, by resource family.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Pruned {
    pub family: Option<ResourceKind>,
    pub revisions: u64,
}

/// What follows every write, on either backend, where its transaction
/// ended (the SQLite writer thread, the PostgreSQL write's own task) and
/// before its caller is answered, so that it happens even if the caller has
/// gone: a kept write's pruned revisions are counted, and the held reads
/// of the resource it names wake.
#[derive(Clone)]
pub(crate) struct AfterCommit {
    notifier: Arc<Notifier>,
}

impl AfterCommit {
    /// Call once the write's outcome is committed (or rolled back, when not
    /// kept); its answer.
    pub(crate) fn answer<T>(&self, written: Written<T>) -> T {
        if written.keep {
            let Pruned { family, revisions } = written.pruned;
            if let Some(family) = family
                && revisions > 0
            {
                metrics::counter!("abstore_artifact_revisions_pruned_total", "family" => family.tag())
                    .increment(revisions);
            }
        }
        if let Some(resource) = &written.wake {
            self.notifier.notify(resource);
        }
        written.value
    }
}

/// The store: `backend` running the operations (each family's), with the
/// retention puts and deposits apply and the bounds every write that grows
/// a collection keeps.
pub(crate) struct Engine<B> {
    pub(crate) backend: B,
    pub(crate) retention: Retention,
    pub(crate) bounds: Bounds,
    after_commit: AfterCommit,
}

impl<B: Backend> Engine<B> {
    /// `backend`'s store, whose writes wake held reads through `notifier`.
    pub(crate) fn new(
        backend: B,
        retention: Retention,
        bounds: Bounds,
        notifier: Arc<Notifier>,
    ) -> Self {
        Engine {
            backend,
            retention,
            bounds,
            after_commit: AfterCommit { notifier },
        }
    }

    /// Run `op` as one write transaction; what follows its commit is
    /// [`AfterCommit`]'s.
    pub(crate) async fn write_op<T, F>(&self, op: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: for<'a, 't> FnOnce(&'a mut B::Tx<'t>) -> OpFuture<'a, Written<T>> + Send + 'static,
    {
        self.backend.write(op, self.after_commit.clone()).await
    }

    /// Run `op` as one read.
    pub(crate) async fn read_op<T, F>(&self, op: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: for<'a, 'r> FnOnce(&'a mut B::Read<'r>) -> OpFuture<'a, T> + Send + 'static,
    {
        self.backend.read(op).await
    }
}
