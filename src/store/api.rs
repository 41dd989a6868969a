//! The [`Store`] trait: the BuildStore operations in domain types, what
//! they take and what they answer, by family ([`Builds`], [`Repos`],
//! [`Sessions`], [`Events`], [`Artifacts`], [`Leases`], [`Streams`],
//! [`TicketAssets`], [`Revocations`]): `Store` is every family and the reads
//! any resource shares. Callers hold a `dyn Store` and call any family's
//! operations on it without naming the family. Each family's rules are
//! written once, in the file of `ops/` that bears its name. Every backend
//! keeps the invariants of [`crate::store`].

use async_trait::async_trait;
use serde_json::{Map, Value};

use super::assets::{AnswerCheck, AssetKey, NewTicketAsset, TicketAssetMeta};
use super::builds::{DigestEvent, LogSpan};
use super::error::StoreResult;
use super::records::{
    ArtifactMeta, BuildDigest, Record, ResourceSummary, Revocation, StoredArtifact, StreamRecord,
    TicketComment,
};
use super::rows::{Listing, Rows};
use crate::protocol::{ResourceKind, ResourceRef};

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

/// An event to append: the validated parts, already serialised. The store
/// adds the resource member, `seq` and `ts` to form the envelope.
#[derive(Clone, Debug)]
pub struct NewEvent {
    pub actor_json: String,
    pub type_json: String,
    pub payload_json: String,
}

impl NewEvent {
    /// The event's type as stored in the `type` column (migration 0011):
    /// `type_json` is a validated JSON string, whose text is the type
    /// itself unless it holds an escape (catalog types hold none).
    pub fn type_name(&self) -> std::borrow::Cow<'_, str> {
        let unquoted = self
            .type_json
            .strip_prefix('"')
            .and_then(|rest| rest.strip_suffix('"'));
        match unquoted {
            Some(text) if !text.contains('\\') => text.into(),
            _ => serde_json::from_str::<String>(&self.type_json)
                .unwrap_or_else(|_| self.type_json.clone())
                .into(),
        }
    }
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

/// The whole store: every family, and what any resource shares.
#[async_trait]
pub trait Store:
    Builds
    + Repos
    + Sessions
    + Events
    + Artifacts
    + Leases
    + Streams
    + TicketAssets
    + Tickets
    + Revocations
    + ConsoleReads
    + Send
    + Sync
    + 'static
{
    /// A streamed read (events, chunks, listings): its rows' wire JSON in
    /// pieces, from one statement. `NotFound` when the answer is empty and
    /// the listing's owner does not exist.
    async fn read(&self, listing: Listing) -> StoreResult<Rows>;
    /// A build's, repository's or session's record.
    async fn get_record(&self, resource: &ResourceRef) -> StoreResult<Option<Record>>;
    /// The current `last_seq` of each existing resource among `resources`,
    /// in one query (the held-read sweep).
    async fn tails(&self, resources: &[ResourceRef]) -> StoreResult<Vec<(ResourceRef, i64)>>;
    /// A trivial round trip, for readiness.
    async fn ping(&self) -> StoreResult<()>;
    /// Connection pool usage (the SQLite writer connection is not counted).
    fn pool_stats(&self) -> PoolStats;
}

/// Builds (`ops/builds.rs`).
#[async_trait]
pub trait Builds {
    /// `createBuild`; `attrs` holds `repo` and the optional `repoOrigin`,
    /// `ticket`, `branch` in wire order. `Conflict` when the slug exists.
    async fn create_build(&self, slug: &str, attrs: Map<String, Value>) -> StoreResult<Record>;
    /// The digest of every build whose `repo` is `repo`, by slug (protocol
    /// 3), derived from the build logs in one snapshot. An unknown
    /// repository has none: no `NotFound`.
    async fn build_digests(&self, repo: &str) -> StoreResult<Vec<BuildDigest>>;
    /// Each build of `repo` with its log's tail, in the order
    /// [`Builds::build_digests`] answers: a build's digest is a function of
    /// its log up to that tail, which never changes (logs are append-only
    /// and builds are never deleted), so a digest kept with its tail stays
    /// true until the tail moves.
    async fn build_tails(&self, repo: &str) -> StoreResult<Vec<(String, i64)>>;
    /// The events of the digest types in each span (`after < seq <=
    /// until` of one build's log), by slug then sequence: what a digest
    /// kept at `after` folds to reach `until`.
    async fn digest_events(&self, spans: Vec<LogSpan>) -> StoreResult<Vec<(String, DigestEvent)>>;
}

/// Repositories (`ops/repos.rs`).
#[async_trait]
pub trait Repos {
    /// `ensureRepo`: creates or returns the record without touching it.
    async fn ensure_repo(&self, repo: &str) -> StoreResult<Record>;
}

/// Sessions (`ops/sessions.rs`).
#[async_trait]
pub trait Sessions {
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
}

/// The event log of a build, repository or session (`ops/events.rs`).
#[async_trait]
pub trait Events {
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
}

/// Artifact revisions and deposits (`ops/artifacts.rs`).
#[async_trait]
pub trait Artifacts {
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
}

/// Leases (`ops/leases.rs`).
#[async_trait]
pub trait Leases {
    async fn claim_lease(
        &self,
        resource: &ResourceRef,
        holder: &str,
        ttl_ms: i64,
    ) -> StoreResult<bool>;
    async fn heartbeat(&self, resource: &ResourceRef, holder: &str) -> StoreResult<bool>;
    async fn release_lease(&self, resource: &ResourceRef, holder: &str) -> StoreResult<()>;
}

/// Streams and their chunks (`ops/streams.rs`).
#[async_trait]
pub trait Streams {
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
}

/// A ticket's assets (protocol 3, `ops/ticket_assets.rs`).
#[async_trait]
pub trait TicketAssets {
    /// `putTicketAsset`: the next revision of `asset.key` with its manifest
    /// (blobs already written), unless a bound (live assets of the ticket,
    /// then revisions of the asset) or `check` refuses it, which writes
    /// nothing and consumes no revision.
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
}

/// Autobuild's hosted tickets (`store/tickets/`; their rules are `crate::tickets`').
#[async_trait]
pub trait Tickets {
    /// One of Autobuild's hosted ticket operations ([`crate::tickets`]): one
    /// read or one write transaction. A protocol refusal is the inner
    /// `Err`, having written nothing; the outer one is the store's failure.
    async fn tickets(
        &self,
        call: crate::tickets::TicketCall,
    ) -> StoreResult<crate::tickets::TicketOutcome>;
    /// Up to `limit` entries of the history of team `team`'s ticket `id`
    /// after entry `after`, oldest first (`abstore tickets history`); `None`
    /// when the team has no such ticket.
    async fn ticket_history(
        &self,
        team: &str,
        id: &str,
        after: i64,
        limit: i64,
    ) -> StoreResult<Option<Vec<crate::tickets::history::Entry>>>;
}

/// Revoked tokens (`ops/revocations.rs`).
#[async_trait]
pub trait Revocations {
    /// Record a revoked token (`abstore token revoke`); `false`, changing
    /// nothing, when its digest is already revoked.
    async fn revoke_token(&self, revocation: Revocation) -> StoreResult<bool>;
    /// Every revoked token, by digest: one statement, which every server
    /// runs every few seconds (`crate::revocation`).
    async fn revocations(&self) -> StoreResult<Vec<Revocation>>;
    /// Forget the revocations of tokens expired by `now` (refused as
    /// expired anyway); how many.
    async fn prune_revocations(&self, now: i64) -> StoreResult<u64>;
}

/// The web console's bounded reads (`console/`): one page each, so a
/// person's page stays cheap however large the store grows.
#[async_trait]
pub trait ConsoleReads {
    /// Up to `limit` repositories with ids after `after`, in id order, each
    /// with its build count (`children`) and last change.
    async fn repo_page(&self, after: &str, limit: i64) -> StoreResult<Vec<ResourceSummary>>;
    /// Up to `limit` of repository `repo`'s builds or sessions (`kind`),
    /// newest first, created before the `(created_at, id)` cursor `before`,
    /// whose id contains `id_contains`; each with its last event's type and
    /// time.
    async fn child_page(
        &self,
        kind: ResourceKind,
        repo: &str,
        before: Option<(i64, String)>,
        id_contains: &str,
        limit: i64,
    ) -> StoreResult<Vec<ResourceSummary>>;
    /// Up to `limit` of a resource's artifact revisions, newest first.
    async fn artifact_page(
        &self,
        resource: &ResourceRef,
        limit: i64,
    ) -> StoreResult<Vec<StoredArtifact>>;
    /// Up to `limit` of a scope's streams, newest first.
    async fn stream_page(&self, scope: &ResourceRef, limit: i64) -> StoreResult<Vec<StreamRecord>>;
    /// Up to `limit` of team `team`'s ticket `ticket`'s comments, in order
    /// (the hosted protocol writes them but has no read).
    async fn comment_page(
        &self,
        team: &str,
        ticket: &str,
        limit: i64,
    ) -> StoreResult<Vec<TicketComment>>;
}

/// A snapshot of connection pool usage, for metrics.
#[derive(Clone, Copy, Debug)]
pub struct PoolStats {
    pub size: u32,
    pub idle: u32,
    pub max: u32,
}
