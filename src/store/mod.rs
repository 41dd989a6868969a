//! Persistence: the `Store` trait (the BuildStore operations in domain
//! types) and its two backends, SQLite and PostgreSQL.
//!
//! Invariants every backend keeps (docs/decisions.md, 1–4):
//! - each operation is one transaction; a failed one consumes no sequence
//!   and no revision;
//! - counters live on rows (`resources.last_seq`, `artifact_heads`), bumped
//!   inside the writing transaction while the resource row is held;
//! - every stored time comes from the injected clock, read inside the
//!   transaction so times never run backwards along a resource's sequence;
//! - event envelopes are stored as the JSON text that is later served;
//! - artifact retention ([`retention`]) prunes inside the put or deposit
//!   transaction that exceeds a bound, never elsewhere;
//! - ticket-asset revisions ([`assets`]) are counted on `ticket_asset_heads`
//!   rows, bumped inside the writing transaction like artifact heads;
//! - every collection a client grows has a bound ([`bounds`]), checked in
//!   the writing transaction: a write over it writes nothing.

pub mod assets;
pub mod bounds;
mod engine;
mod ops;
pub mod postgres;
mod records;
pub mod retention;
pub mod rows;
mod sql;
pub mod sqlite;
pub mod url;

#[cfg(test)]
mod contract;

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};

pub use assets::{
    AnswerCheck, AssetEntry, AssetKey, NewTicketAsset, TicketAssetMeta, TicketAssetSummary,
};
pub use bounds::{Bound, Bounds, OverBound};
pub use records::{
    ArtifactMeta, BuildDigest, DIGEST_TYPES, Lease, Observation, Record, Revocation, STREAM_FORMAT,
    StreamArtifact, StreamRecord, Terminal,
};
pub use rows::{Listing, Rows};
pub use url::DatabaseUrl;

use crate::protocol::ResourceRef;

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
    /// A collection the write would grow is at its bound ([`bounds`]);
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

/// What closing a stream did.
#[derive(Debug)]
pub enum CloseOutcome {
    /// This call closed it.
    Closed(StreamRecord),
    /// It was already closed (a no-op returning the record).
    AlreadyClosed(StreamRecord),
    /// A chunk was appended since the caller read the parts: assemble again.
    Moved,
}

pub type StoreResult<T> = Result<T, StoreError>;

/// An event to append: the validated parts, already serialised. The store
/// adds the resource member, `seq` and `ts` to form the envelope.
#[derive(Clone, Debug)]
pub struct NewEvent {
    pub actor_json: String,
    pub type_json: String,
    pub payload_json: String,
}

/// An artifact whose blob is already written; only metadata remains.
#[derive(Clone, Debug)]
pub struct NewArtifact {
    pub kind: String,
    pub blob_ref: String,
    pub size: i64,
    pub metadata: Map<String, Value>,
}

/// Builds a session's `session.created` event inside the creating
/// transaction; an error leaves no record. Owned (`'static`) because the
/// operation runs on the SQLite writer thread or in its own task, outliving
/// the request if need be (docs/decisions.md, 14).
pub type MakeFirstEvent = Box<dyn Fn() -> StoreResult<NewEvent> + Send + Sync>;

/// Builds a deposit's event from the metadata assigned inside the
/// transaction (placeholder substitution + catalog validation). Returning
/// `Err(StoreError::Rejected)` rolls the whole deposit back.
pub type MakeEvent = Box<dyn Fn(&[ArtifactMeta]) -> StoreResult<NewEvent> + Send + Sync>;

#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// `createBuild`; `attrs` holds `repo` and the optional `repoOrigin`,
    /// `ticket`, `branch` in wire order. `Conflict` when the slug exists.
    async fn create_build(&self, slug: &str, attrs: Map<String, Value>) -> StoreResult<Record>;
    /// A streamed read (events, chunks, listings): its rows' wire JSON in
    /// pieces, from one statement. `NotFound` when the answer is empty and
    /// the listing's owner does not exist.
    async fn read(&self, listing: Listing) -> StoreResult<Rows>;
    /// `ensureRepo`: creates or returns the record without touching it.
    async fn ensure_repo(&self, repo: &str) -> StoreResult<Record>;
    async fn get_record(&self, resource: &ResourceRef) -> StoreResult<Option<Record>>;
    /// The digest of every build whose `repo` is `repo`, by slug (protocol
    /// 3), derived from the build logs in one snapshot. An unknown
    /// repository has none: no `NotFound`.
    async fn build_digests(&self, repo: &str) -> StoreResult<Vec<BuildDigest>>;

    /// Append; with `expected_seq`, only when the tail is exactly that
    /// sequence (`Ok(None)` otherwise, writing nothing). Returns the envelope
    /// text. `OverBound` when the log holds `max_events_per_log` events.
    async fn append(
        &self,
        resource: &ResourceRef,
        event: NewEvent,
        expected_seq: Option<i64>,
    ) -> StoreResult<Option<String>>;
    /// At most `limit` envelope texts with `seq > since`, in order (a held
    /// read's probe; `read` streams whole answers). `NotFound` when none
    /// and the resource does not exist.
    async fn events_page(
        &self,
        resource: &ResourceRef,
        since: i64,
        limit: i64,
    ) -> StoreResult<Vec<String>>;

    /// A new revision; in the same transaction, the oldest revisions of its
    /// kind beyond the retention bound are deleted. `OverBound` when a kind
    /// no retention rule selects has `max_artifact_revisions` revisions.
    async fn put_artifact(
        &self,
        resource: &ResourceRef,
        artifact: NewArtifact,
    ) -> StoreResult<ArtifactMeta>;
    /// Atomic deposit: revisions, `make_event`, metadata, event and
    /// retention pruning in one commit; `OverBound`, writing nothing, at the
    /// bound on events or on a kind's revisions, as for an append or a put.
    async fn deposit(
        &self,
        resource: &ResourceRef,
        artifacts: Vec<NewArtifact>,
        make_event: MakeEvent,
    ) -> StoreResult<(String, Vec<ArtifactMeta>)>;
    /// Latest revision when `rev` is `None`; `Ok(None)` for a missing kind or revision.
    async fn get_artifact(
        &self,
        resource: &ResourceRef,
        kind: &str,
        rev: Option<i64>,
    ) -> StoreResult<Option<ArtifactMeta>>;

    async fn claim_lease(
        &self,
        resource: &ResourceRef,
        holder: &str,
        ttl_ms: i64,
    ) -> StoreResult<bool>;
    async fn heartbeat(&self, resource: &ResourceRef, holder: &str) -> StoreResult<bool>;
    async fn release_lease(&self, resource: &ResourceRef, holder: &str) -> StoreResult<()>;

    /// The current `last_seq` of each existing resource among `resources`,
    /// in one query (the held-read sweep).
    async fn tails(&self, resources: &[ResourceRef]) -> StoreResult<Vec<(ResourceRef, i64)>>;

    /// `createSession`: the record (`attrs`: `repo`, `operator`, `title`?)
    /// and its `session.created` event as sequence 1, in one transaction.
    /// `NotFound` when the repository does not exist.
    async fn create_session(
        &self,
        repo: &str,
        id: &str,
        attrs: Map<String, Value>,
        make_event: MakeFirstEvent,
    ) -> StoreResult<Record>;

    /// `createStream`: a new open stream in `scope`, pruning (in the same
    /// transaction) the chunks of every closed stream there but the most
    /// recently closed one. `NotFound` when the scope does not exist.
    async fn create_stream(
        &self,
        scope: &ResourceRef,
        id: &str,
        label: &str,
    ) -> StoreResult<StreamRecord>;
    async fn get_stream(&self, id: &str) -> StoreResult<Option<StreamRecord>>;
    /// Append one batch (`parts_json` is the JSON array); returns the chunk
    /// text. `NotFound`, `Closed`, or `OverBound` (the stream's chunks or
    /// bytes), in that order, writing nothing.
    async fn append_chunk(&self, id: &str, parts_json: &str) -> StoreResult<String>;
    /// The chunk texts with `seq > since` (at most `limit`), then the
    /// record: a close between the two is seen as closed with every chunk
    /// read. For held-read probes and closing; `read` streams chunk reads.
    async fn chunks_page(
        &self,
        id: &str,
        since: i64,
        limit: Option<i64>,
    ) -> StoreResult<(StreamRecord, Vec<String>)>;
    /// Close: insert the finalized artifact (blob already written) and mark
    /// the stream closed in one transaction, if it still has
    /// `expected_last_seq` chunks.
    async fn close_stream(
        &self,
        id: &str,
        outcome: &str,
        expected_last_seq: i64,
        artifact: NewArtifact,
    ) -> StoreResult<CloseOutcome>;

    /// `putTicketAsset` (protocol 3): the next revision of `asset.key` with
    /// its manifest (blobs already written), unless a bound (live assets of
    /// the ticket, then revisions of the asset) or `check` refuses it, which
    /// writes nothing and consumes no revision.
    async fn put_ticket_asset(
        &self,
        asset: NewTicketAsset,
        check: AnswerCheck,
    ) -> StoreResult<TicketAssetMeta>;
    /// `removeTicketAsset`: a tombstone as the next revision, answering the
    /// removed (latest live) revision; `Ok(None)`, writing nothing, when no
    /// live revision exists. A tombstone is a revision (`OverBound` at the
    /// asset's bound); `check` judges the answer as for a put.
    async fn remove_ticket_asset(
        &self,
        key: &AssetKey,
        check: AnswerCheck,
    ) -> StoreResult<Option<TicketAssetMeta>>;
    /// One revision, or the latest when `rev` is `None`; `Ok(None)` when
    /// there is none or it is a tombstone.
    async fn get_ticket_asset(
        &self,
        key: &AssetKey,
        rev: Option<i64>,
    ) -> StoreResult<Option<TicketAssetMeta>>;
    /// Record a revoked token (`abstore token revoke`); `false`, changing
    /// nothing, when its digest is already revoked.
    async fn revoke_token(&self, revocation: Revocation) -> StoreResult<bool>;
    /// Every revoked token, by digest: one statement, which every server
    /// runs every few seconds (`crate::revocation`).
    async fn revocations(&self) -> StoreResult<Vec<Revocation>>;
    /// Forget the revocations of tokens expired by `now` (refused as
    /// expired anyway); how many.
    async fn prune_revocations(&self, now: i64) -> StoreResult<u64>;

    /// A trivial round trip, for readiness.
    async fn ping(&self) -> StoreResult<()>;

    /// Connection pool usage (the SQLite writer connection is not counted).
    fn pool_stats(&self) -> PoolStats;
}

/// A snapshot of connection pool usage, for metrics.
#[derive(Clone, Copy, Debug)]
pub struct PoolStats {
    pub size: u32,
    pub idle: u32,
    pub max: u32,
}

/// Open the backend a parsed `--database` URL names, applying migrations
/// unless `migrate` is false ([`DatabaseUrl::open`] is the way in).
async fn open(
    location: &url::Location,
    options: &StoreOptions,
    clock: Arc<dyn crate::clock::Clock>,
    notifier: Arc<crate::notify::Notifier>,
) -> anyhow::Result<Arc<dyn Store>> {
    let (retention, bounds) = (options.retention.clone(), options.bounds);
    match location {
        url::Location::Postgres(connect) => Ok(Arc::new(engine::Engine::new(
            postgres::PgBackend::connect(connect, options, clock, notifier).await?,
            retention,
            bounds,
        ))),
        url::Location::Sqlite(location) => Ok(Arc::new(engine::Engine::new(
            sqlite::SqliteBackend::connect(location, options, clock, notifier).await?,
            retention,
            bounds,
        ))),
    }
}

/// Settings shared by both backends.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// Maximum pooled connections (PostgreSQL) or readers (SQLite).
    pub pool_size: u32,
    /// PostgreSQL connections opened at start and kept open.
    pub min_connections: u32,
    /// Run embedded migrations on open.
    pub migrate: bool,
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

    /// The default `max_streamed_reads` of a pool: half of it, rounded up,
    /// so the other half always serves writes and short reads.
    pub fn default_streamed_reads(pool_size: u32) -> u32 {
        pool_size.max(1).div_ceil(2)
    }
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            pool_size: 16,
            min_connections: 4,
            migrate: true,
            retention: retention::Retention::default(),
            bounds: Bounds::default(),
            acquire_timeout: std::time::Duration::from_secs(10),
            unavailable_acquire_timeout: std::time::Duration::from_millis(250),
            answer_times: rows::AnswerTimes::default(),
            max_streamed_reads: 8,
            exclusive: true,
        }
    }
}

/// The JSON array parameter of the `TAILS` statements: `[{"kind","id"},…]`.
pub(crate) fn tails_param(resources: &[ResourceRef]) -> String {
    let items: Vec<Value> = resources
        .iter()
        .map(|r| serde_json::json!({ "kind": r.kind.tag(), "id": r.id }))
        .collect();
    Value::Array(items).to_string()
}

/// The NOTIFY payload naming a resource (`kind:id`; never content), or
/// `None` when it would exceed PostgreSQL's 8000-byte limit, in which case
/// the sweep wakes the readers instead.
pub(crate) fn notify_payload(resource: &ResourceRef) -> Option<String> {
    let payload = format!("{}:{}", resource.kind.tag(), resource.id);
    (payload.len() < 7900).then_some(payload)
}

/// Parse a NOTIFY payload back into the resource it names.
pub(crate) fn parse_notify_payload(payload: &str) -> Option<ResourceRef> {
    let (tag, id) = payload.split_once(':')?;
    let kind = crate::protocol::ResourceKind::from_tag(tag)?;
    Some(ResourceRef::new(kind, id))
}

/// Serialise a stream chunk: `{"stream", "seq", "ts", "parts"}`.
pub(crate) fn chunk_json(stream: &str, seq: i64, ts_ms: i64, parts_json: &str) -> String {
    let (head, tail) = chunk_parts(stream, ts_ms, parts_json);
    format!("{head}{seq}{tail}")
}

/// A chunk's text before and after its `seq` digits, so that a statement
/// assigning the sequence can store the exact text.
pub(crate) fn chunk_parts(stream: &str, ts_ms: i64, parts_json: &str) -> (String, String) {
    (
        format!(
            "{{\"stream\":{id},\"seq\":",
            id = Value::String(stream.to_owned())
        ),
        format!(
            ",\"ts\":\"{ts}\",\"parts\":{parts_json}}}",
            ts = crate::protocol::time::format_iso(ts_ms),
        ),
    )
}

/// Serialise an event envelope: the resource member, server-assigned `seq`
/// and `ts`, then the validated actor, type and payload texts.
pub(crate) fn envelope_json(
    resource: &ResourceRef,
    seq: i64,
    ts_ms: i64,
    event: &NewEvent,
) -> String {
    let (head, tail) = envelope_parts(resource, ts_ms, event);
    format!("{head}{seq}{tail}")
}

/// An envelope's text before and after its `seq` digits, so that a
/// statement assigning the sequence can store the exact text.
pub(crate) fn envelope_parts(
    resource: &ResourceRef,
    ts_ms: i64,
    event: &NewEvent,
) -> (String, String) {
    (
        envelope_head(resource),
        format!(
            "{TS_MEMBER}{ts}{after}",
            ts = crate::protocol::time::format_iso(ts_ms),
            after = envelope_after_ts(event),
        ),
    )
}

/// What joins an envelope's `seq` digits to its `ts` text.
pub(crate) const TS_MEMBER: &str = ",\"ts\":\"";

/// An envelope's text before its `seq` digits.
pub(crate) fn envelope_head(resource: &ResourceRef) -> String {
    format!(
        "{{\"{key}\":{id},\"seq\":",
        key = resource.kind.wire_key(),
        id = Value::String(resource.id.clone()),
    )
}

/// An envelope's text after its `ts` text.
pub(crate) fn envelope_after_ts(event: &NewEvent) -> String {
    format!(
        "\",\"actor\":{actor},\"type\":{ty},\"payload\":{payload}}}",
        actor = event.actor_json,
        ty = event.type_json,
        payload = event.payload_json,
    )
}
