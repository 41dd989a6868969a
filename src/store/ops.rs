//! The store operations, written once (docs/decisions.md, 16) against two small
//! interfaces of domain primitives: [`Reads`] (queries outside any write
//! transaction) and [`Writes`] (the primitives of one write transaction).
//!
//! Every rule lives here and nowhere else: the conditional append, the
//! deposit composition, the lease truth table, stream close checks, chunk
//! pruning, artifact retention and the collection bounds ([`Bounds`]). A
//! bound is checked where the transaction holds the row that counts the
//! collection; a refusal is an error, which rolls the whole write back.
//!
//! A primitive is, by default, its shared statement ([`sql`]); a backend
//! overrides only what its dialect does otherwise (row locks, statements
//! fused into fewer round trips), and may offer a whole operation as one
//! statement (the `try_*` fast paths of [`Writes`]), which the operation
//! tries first and which declines to the transaction whenever it cannot
//! decide exactly as the transaction would.
//!
//! The methods return futures: PostgreSQL awaits its round trips, while the
//! SQLite implementation never pends (rusqlite is synchronous), so its writer
//! thread and readers run these same functions with [`run_synchronously`].
//! The futures are `Send`, so one generic [`Engine`](super::engine::Engine)
//! runs every operation on either backend.

use std::future::Future;
use std::task::{Context, Poll, Waker};

use serde_json::{Map, Value};

use super::api::{CloseOutcome, MakeEvent, MakeFirstEvent, NewArtifact, NewEvent};
use super::assets::{AnswerCheck, AssetKey, NewTicketAsset, TicketAssetMeta};
use super::bounds::{Bounds, OverBound};
use super::engine::Backend;
use super::envelope::{chunk_json, envelope_json};
use super::error::{StoreError, StoreResult};
use super::records::{ArtifactMeta, BuildDigest, Record, Revocation, StreamArtifact, StreamRecord};
use super::retention::Retention;
use super::sql::{self, Columns, ResourceRow, Statements};
use crate::protocol::{ResourceKind, ResourceRef};

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

/// Revisions pruned by one write, by resource family.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Pruned {
    pub family: Option<ResourceKind>,
    pub revisions: u64,
}

impl Pruned {
    /// Count them in `abstore_artifact_revisions_pruned_total`; call only
    /// after the write committed.
    pub fn record(self) {
        if let Some(family) = self.family
            && self.revisions > 0
        {
            metrics::counter!("abstore_artifact_revisions_pruned_total", "family" => family.tag())
                .increment(self.revisions);
        }
    }
}

impl<T> Written<T> {
    fn kept(value: T) -> Self {
        Written {
            value,
            keep: true,
            wake: None,
            pruned: Pruned::default(),
        }
    }

    fn waking(value: T, resource: ResourceRef) -> Self {
        Written {
            value,
            keep: true,
            wake: Some(resource),
            pruned: Pruned::default(),
        }
    }

    /// Nothing changed (or nothing may be kept): roll back, answer `value`.
    pub(crate) fn unchanged(value: T) -> Self {
        Written {
            value,
            keep: false,
            wake: None,
            pruned: Pruned::default(),
        }
    }

    fn pruning(self, pruned: Pruned) -> Self {
        Written { pruned, ..self }
    }
}

/// Queries outside a write transaction. Each is a shared statement
/// ([`sql`]) run through the backend's [`Statements`], but for `tails`, whose
/// query each dialect writes its own way.
pub(crate) trait Reads: Statements {
    fn resource(
        &mut self,
        r: &ResourceRef,
    ) -> impl Future<Output = StoreResult<Option<ResourceRow>>> + Send {
        sql::resource(self, r)
    }

    fn exists(&mut self, r: &ResourceRef) -> impl Future<Output = StoreResult<bool>> + Send {
        async move {
            let found = self.first(sql::exists_resource(r), |_| Ok(())).await?;
            Ok(found.is_some())
        }
    }

    /// Envelope texts with `seq > since`, in order, at most `limit`.
    fn events_since(
        &mut self,
        r: &ResourceRef,
        since: i64,
        limit: Option<i64>,
    ) -> impl Future<Output = StoreResult<Vec<String>>> + Send {
        async move {
            self.all(sql::events_page(r, since, limit), |row| row.text(0))
                .await
        }
    }

    /// One revision, or the latest when `rev` is `None`.
    fn artifact(
        &mut self,
        r: &ResourceRef,
        kind: &str,
        rev: Option<i64>,
    ) -> impl Future<Output = StoreResult<Option<ArtifactMeta>>> + Send {
        async move {
            let decode = |row: &dyn Columns| sql::artifact_row(r, row);
            match rev {
                Some(rev) => self.first(sql::select_artifact(r, kind, rev), decode).await,
                None => {
                    self.first(sql::select_latest_artifact(r, kind), decode)
                        .await
                }
            }
        }
    }

    /// One revision of a ticket asset, or the latest when `rev` is `None`;
    /// `None` when absent or a tombstone.
    fn ticket_asset(
        &mut self,
        key: &AssetKey,
        rev: Option<i64>,
    ) -> impl Future<Output = StoreResult<Option<TicketAssetMeta>>> + Send {
        sql::ticket_asset(self, key, rev)
    }

    fn stream(
        &mut self,
        id: &str,
    ) -> impl Future<Output = StoreResult<Option<StreamRecord>>> + Send {
        sql::stream(self, id)
    }

    /// Chunk texts with `seq > since`, in order, at most `limit`.
    fn chunks_since(
        &mut self,
        id: &str,
        since: i64,
        limit: Option<i64>,
    ) -> impl Future<Output = StoreResult<Vec<String>>> + Send {
        async move {
            self.all(sql::chunks_page(id, since, limit), |row| row.text(0))
                .await
        }
    }

    /// `last_seq` of each existing resource; a closed stream reports `i64::MAX`.
    fn tails(
        &mut self,
        resources: &[ResourceRef],
    ) -> impl Future<Output = StoreResult<Vec<(ResourceRef, i64)>>> + Send;

    fn ping(&mut self) -> impl Future<Output = StoreResult<()>> + Send {
        async move {
            self.first(sql::ping(), |_| Ok(())).await?;
            Ok(())
        }
    }

    /// Every revoked token, by digest.
    fn revocations(&mut self) -> impl Future<Output = StoreResult<Vec<Revocation>>> + Send {
        async move {
            self.all(sql::select_revocations(), |row| sql::revocation_row(row))
                .await
        }
    }
}

/// What a fast-path append did.
pub(crate) enum FastAppend {
    /// Stored; the envelope text.
    Appended(String),
    /// A stale `expected_seq`: nothing written.
    Stale,
}

/// The primitives of one write transaction. Each is, unless a backend says
/// otherwise, the shared statements ([`sql`]) run through its [`Statements`]:
/// PostgreSQL locks the rows it reads and fuses two-statement primitives
/// into one.
///
/// The `try_*` methods are fast paths a backend may offer: the whole
/// operation as one autocommit statement, tried before any transaction
/// begins. They decline (`Ok(None)`, having written nothing) whenever they
/// cannot decide exactly as the transaction path would (a clock behind the
/// resource's last write, a concurrent writer, a collection at its bound:
/// they never write past one, and leave its refusal to the transaction);
/// the transaction path then runs. The defaults always decline.
pub(crate) trait Writes: Statements {
    /// The injected clock's current time.
    fn now(&self) -> i64;
    /// [`append`] in one statement, while the log holds fewer than
    /// `max_events` events.
    fn try_append(
        &mut self,
        _r: &ResourceRef,
        _event: &NewEvent,
        _expected_seq: Option<i64>,
        _max_events: i64,
    ) -> impl Future<Output = StoreResult<Option<FastAppend>>> + Send {
        async { Ok(None) }
    }
    /// [`deposit`] as one read and one statement, within `bounds`' events
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
    /// [`append_chunk`] in one statement, within `bounds`' chunks and bytes
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
    ) -> impl Future<Output = StoreResult<Option<ResourceRow>>> + Send {
        sql::resource(self, r)
    }

    /// Insert a resource with no events; `false` when it already exists.
    fn insert_resource(
        &mut self,
        r: &ResourceRef,
        attrs: Option<&str>,
        now: i64,
    ) -> impl Future<Output = StoreResult<bool>> + Send {
        async move { Ok(self.execute(sql::insert_resource(r, attrs, now)).await? > 0) }
    }

    /// Store `envelope` as sequence `seq` and make it the tail (`updated_at = now`).
    fn append_event(
        &mut self,
        r: &ResourceRef,
        seq: i64,
        now: i64,
        envelope: &str,
    ) -> impl Future<Output = StoreResult<()>> + Send {
        async move {
            let insert = sql::append_event(r, seq, now, envelope);
            self.execute(insert).await?;
            self.execute(insert.with_text(sql::APPEND_EVENT_TAIL))
                .await?;
            Ok(())
        }
    }

    /// Assign the next revision of `artifact`'s kind and store its
    /// metadata (`metadata`, serialised); returns the revision.
    fn insert_artifact(
        &mut self,
        r: &ResourceRef,
        artifact: &NewArtifact,
        metadata: &str,
        now: i64,
    ) -> impl Future<Output = StoreResult<i64>> + Send {
        async move {
            let next = sql::insert_artifact(r, artifact, metadata, now);
            let revision = self.first(next, |row| row.int(0)).await?;
            let revision =
                revision.ok_or_else(|| StoreError::Corrupt("no revision assigned".into()))?;
            self.run(sql::store_revision(next, revision)).await?;
            Ok(revision)
        }
    }

    fn touch(&mut self, r: &ResourceRef, now: i64) -> impl Future<Output = StoreResult<()>> + Send {
        async move { self.run(sql::touch(r, now)).await }
    }

    fn set_lease(
        &mut self,
        r: &ResourceRef,
        holder: &str,
        expires_at: i64,
        ttl_ms: i64,
        now: i64,
    ) -> impl Future<Output = StoreResult<()>> + Send {
        async move {
            self.run(sql::set_lease(r, holder, expires_at, ttl_ms, now))
                .await
        }
    }

    fn extend_lease(
        &mut self,
        r: &ResourceRef,
        expires_at: i64,
        heartbeat_at: i64,
        now: i64,
    ) -> impl Future<Output = StoreResult<()>> + Send {
        async move {
            self.run(sql::extend_lease(r, expires_at, heartbeat_at, now))
                .await
        }
    }

    fn clear_lease(
        &mut self,
        r: &ResourceRef,
        now: i64,
    ) -> impl Future<Output = StoreResult<()>> + Send {
        async move { self.run(sql::clear_lease(r, now)).await }
    }

    /// The next value of a resource's child counter, which orders the
    /// sessions and streams it creates (and stream closes) within a millisecond.
    fn next_child_order(
        &mut self,
        parent: &ResourceRef,
    ) -> impl Future<Output = StoreResult<i64>> + Send {
        async move {
            self.first(sql::next_child_order(parent), |row| row.int(0))
                .await?
                .ok_or_else(|| StoreError::Corrupt("no child order assigned".into()))
        }
    }

    fn insert_session(
        &mut self,
        id: &str,
        attrs: &str,
        now: i64,
        repo: &str,
        order: i64,
    ) -> impl Future<Output = StoreResult<()>> + Send {
        async move {
            self.run(sql::insert_session(id, attrs, now, repo, order))
                .await
        }
    }

    /// Drop the chunks of every closed stream of `scope` but the most
    /// recently closed one.
    fn prune_closed_chunks(
        &mut self,
        scope: &ResourceRef,
    ) -> impl Future<Output = StoreResult<()>> + Send {
        async move { self.run(sql::prune_closed_chunks(scope)).await }
    }

    /// Delete the oldest revisions of `r`'s artifact `kind` beyond its
    /// `keep` latest ones, at most `limit` of them, oldest first; returns
    /// how many were deleted. The revision counter is untouched, so later
    /// revisions keep counting up.
    fn prune_revisions(
        &mut self,
        r: &ResourceRef,
        kind: &str,
        keep: i64,
        limit: i64,
    ) -> impl Future<Output = StoreResult<u64>> + Send {
        async move {
            self.execute(sql::prune_revisions(r, kind, keep, limit))
                .await
        }
    }

    /// Assign the next revision of a ticket asset, holding its counter row
    /// until the transaction ends; returns the revision and its time.
    fn next_ticket_asset_revision(
        &mut self,
        key: &AssetKey,
        now: i64,
    ) -> impl Future<Output = StoreResult<(i64, i64)>> + Send {
        async move {
            self.first(sql::next_ticket_asset_revision(key, now), |row| {
                Ok((row.int(0)?, row.int(1)?))
            })
            .await?
            .ok_or_else(|| StoreError::Corrupt("no ticket asset revision assigned".into()))
        }
    }

    /// Serialise, until the transaction ends, the writers that may add a
    /// live asset to a ticket (the bound on live assets counts them). A
    /// no-op where one writer already serialises every write (SQLite).
    fn lock_ticket(
        &mut self,
        _repo: &str,
        _ticket_id: &str,
    ) -> impl Future<Output = StoreResult<()>> + Send {
        async { Ok(()) }
    }

    /// How many assets of `key`'s ticket are live (their latest revision
    /// no tombstone), and whether `key` is one of them.
    fn live_ticket_assets(
        &mut self,
        key: &AssetKey,
    ) -> impl Future<Output = StoreResult<(i64, bool)>> + Send {
        async move {
            let found = self
                .first(sql::live_ticket_assets(key), |row| {
                    Ok((row.int(0)?, row.int(1)? > 0))
                })
                .await?;
            Ok(found.unwrap_or((0, false)))
        }
    }

    /// The latest revision of a ticket asset as this transaction sees it
    /// (`None`: absent or removed).
    fn latest_ticket_asset(
        &mut self,
        key: &AssetKey,
    ) -> impl Future<Output = StoreResult<Option<TicketAssetMeta>>> + Send {
        sql::ticket_asset(self, key, None)
    }

    /// Store revision `revision` of `key`: `meta`'s manifest, or (`None`) a
    /// tombstone.
    fn insert_ticket_asset(
        &mut self,
        key: &AssetKey,
        revision: i64,
        now: i64,
        meta: Option<&TicketAssetMeta>,
    ) -> impl Future<Output = StoreResult<()>> + Send {
        async move {
            self.run(sql::insert_ticket_asset(key, revision, now, meta))
                .await
        }
    }

    fn insert_stream(
        &mut self,
        id: &str,
        scope: &ResourceRef,
        label: &str,
        now: i64,
        order: i64,
    ) -> impl Future<Output = StoreResult<()>> + Send {
        async move {
            self.run(sql::insert_stream(id, scope, label, now, order))
                .await
        }
    }

    /// A stream's scope, without locking anything.
    fn stream_scope(
        &mut self,
        id: &str,
    ) -> impl Future<Output = StoreResult<Option<ResourceRef>>> + Send {
        async move { Ok(sql::stream(self, id).await?.map(|stream| stream.scope)) }
    }

    fn lock_stream(
        &mut self,
        id: &str,
    ) -> impl Future<Output = StoreResult<Option<StreamRecord>>> + Send {
        sql::stream(self, id)
    }

    /// Store `chunk` as sequence `seq` and make it the stream's tail, adding
    /// its bytes to the stream's total.
    fn append_chunk(
        &mut self,
        id: &str,
        seq: i64,
        chunk: &str,
    ) -> impl Future<Output = StoreResult<()>> + Send {
        async move {
            let insert = sql::append_chunk(id, seq, chunk);
            self.execute(insert).await?;
            self.execute(insert.with_text(sql::APPEND_CHUNK_TAIL))
                .await?;
            Ok(())
        }
    }

    /// Record a revoked token; `false` when its digest was already there.
    fn insert_revocation(
        &mut self,
        revocation: &Revocation,
    ) -> impl Future<Output = StoreResult<bool>> + Send {
        async move { Ok(self.execute(sql::insert_revocation(revocation)).await? > 0) }
    }

    /// Delete the revocations of tokens expired by `now`; how many.
    fn prune_revocations(&mut self, now: i64) -> impl Future<Output = StoreResult<u64>> + Send {
        async move { self.execute(sql::prune_revocations(now)).await }
    }

    fn mark_closed(
        &mut self,
        id: &str,
        now: i64,
        order: i64,
        outcome: &str,
        artifact: &StreamArtifact,
    ) -> impl Future<Output = StoreResult<()>> + Send {
        async move {
            self.run(sql::close_stream(id, now, order, outcome, artifact))
                .await
        }
    }
}

/// Run an operation whose futures never pend (the SQLite primitives) to
/// completion on the current thread, polling it once.
pub(crate) fn run_synchronously<T>(
    operation: impl Future<Output = StoreResult<T>>,
) -> StoreResult<T> {
    let mut operation = std::pin::pin!(operation);
    match operation
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(out) => out,
        Poll::Pending => Err(StoreError::Corrupt(
            "a synchronous store operation tried to wait".into(),
        )),
    }
}

// ------------------------------------------------------------------ reads

pub(crate) async fn get_record(
    db: &mut impl Reads,
    r: &ResourceRef,
) -> StoreResult<Option<Record>> {
    Ok(db.resource(r).await?.map(|row| row.record))
}

fn unknown_stream(id: &str) -> StoreError {
    StoreError::NotFound(ResourceRef::new(ResourceKind::Stream, id))
}

/// No rows means either nothing there or no resource: only an empty answer
/// pays for the existence check.
async fn found<T>(db: &mut impl Reads, r: &ResourceRef, rows: Vec<T>) -> StoreResult<Vec<T>> {
    if rows.is_empty() && !db.exists(r).await? {
        return Err(StoreError::NotFound(r.clone()));
    }
    Ok(rows)
}

/// The first `limit` envelopes after `since` (a held read's probe: the
/// whole answer when fewer come back).
pub(crate) async fn events_page(
    db: &mut impl Reads,
    r: &ResourceRef,
    since: i64,
    limit: i64,
) -> StoreResult<Vec<String>> {
    let rows = db.events_since(r, since, Some(limit)).await?;
    found(db, r, rows).await
}

pub(crate) async fn get_artifact(
    db: &mut impl Reads,
    r: &ResourceRef,
    kind: &str,
    rev: Option<i64>,
) -> StoreResult<Option<ArtifactMeta>> {
    match db.artifact(r, kind, rev).await? {
        Some(meta) => Ok(Some(meta)),
        None if db.exists(r).await? => Ok(None),
        None => Err(StoreError::NotFound(r.clone())),
    }
}

/// Chunks first, then the record: a close landing between the two reads is
/// seen as closed with every chunk already read.
pub(crate) async fn chunks_page(
    db: &mut impl Reads,
    id: &str,
    since: i64,
    limit: Option<i64>,
) -> StoreResult<(StreamRecord, Vec<String>)> {
    let chunks = db.chunks_since(id, since, limit).await?;
    let stream = db.stream(id).await?.ok_or_else(|| unknown_stream(id))?;
    Ok((stream, chunks))
}

/// The held-read sweep: resources and streams in at most two queries.
/// The digests of `repo`'s builds, by slug (protocol 3), folded from one
/// statement's rows (one snapshot). Built whole: a digest is a slug, a
/// terminal fact, a merge time and one `{seq, ts}` per observation, so even
/// a repository of thousands of builds answers in a few hundred kilobytes,
/// and `Vec` order is already the answer's (the statement orders by slug).
pub(crate) async fn build_digests<R: Reads>(
    db: &mut R,
    repo: &str,
) -> StoreResult<Vec<BuildDigest>> {
    // PostgreSQL compares the repository as the attributes' JSON text
    // writes it, escapes included (migration 0005, abstore_json_member).
    let repo = match R::DIALECT {
        sql::Dialect::Sqlite => repo.to_owned(),
        sql::Dialect::Postgres => json_string_text(repo),
    };
    let rows = db
        .all(sql::build_digests(&repo, R::DIALECT), |row| {
            sql::digest_row(row)
        })
        .await?;
    let mut digests: Vec<BuildDigest> = Vec::new();
    for (slug, event) in rows {
        if digests.last().is_none_or(|d| d.slug != slug) {
            digests.push(BuildDigest::new(slug));
        }
        if let (Some((seq, event_type, ts)), Some(digest)) = (event, digests.last_mut()) {
            digest.apply(seq, &event_type, &ts);
        }
    }
    Ok(digests)
}

/// `text` as the inside of a JSON string: serde_json's escaping, the one
/// every stored record's JSON was written with.
fn json_string_text(text: &str) -> String {
    let quoted = Value::String(text.to_owned()).to_string();
    quoted[1..quoted.len() - 1].to_owned()
}

pub(crate) async fn tails(
    db: &mut impl Reads,
    resources: &[ResourceRef],
) -> StoreResult<Vec<(ResourceRef, i64)>> {
    if resources.is_empty() {
        return Ok(Vec::new());
    }
    db.tails(resources).await
}

// ----------------------------------------------------------------- writes

async fn locked(tx: &mut impl Writes, r: &ResourceRef) -> StoreResult<ResourceRow> {
    tx.lock_resource(r)
        .await?
        .ok_or_else(|| StoreError::NotFound(r.clone()))
}

/// A time for a write that never precedes the resource's last write, so
/// `ts` and `updatedAt` are nondecreasing along a resource's sequence even
/// if the clock steps back. Lease decisions use the clock itself.
fn write_time(tx: &impl Writes, row: &ResourceRow) -> i64 {
    tx.now().max(row.record.updated_at)
}

/// Assign the next revision of each artifact's kind and store the
/// metadata, in order.
async fn insert_artifacts(
    tx: &mut impl Writes,
    r: &ResourceRef,
    artifacts: Vec<NewArtifact>,
    now: i64,
) -> StoreResult<Vec<ArtifactMeta>> {
    let mut metas = Vec::with_capacity(artifacts.len());
    for artifact in artifacts {
        let metadata = Value::Object(artifact.metadata.clone()).to_string();
        let revision = tx.insert_artifact(r, &artifact, &metadata, now).await?;
        metas.push(ArtifactMeta {
            resource: r.clone(),
            kind: artifact.kind,
            revision,
            blob_ref: artifact.blob_ref,
            size: artifact.size,
            metadata: artifact.metadata,
            created_at: now,
        });
    }
    Ok(metas)
}

/// Append `event` after `row`'s tail; returns the envelope text.
async fn append_after(
    tx: &mut impl Writes,
    r: &ResourceRef,
    last_seq: i64,
    now: i64,
    event: &NewEvent,
) -> StoreResult<String> {
    let seq = last_seq + 1;
    let envelope = envelope_json(r, seq, now, event);
    tx.append_event(r, seq, now, &envelope).await?;
    Ok(envelope)
}

pub(crate) async fn create_build(
    tx: &mut impl Writes,
    slug: &str,
    attrs: Map<String, Value>,
) -> StoreResult<Written<Record>> {
    let r = ResourceRef::new(ResourceKind::Build, slug);
    let now = tx.now();
    let text = Value::Object(attrs.clone()).to_string();
    if !tx.insert_resource(&r, Some(&text), now).await? {
        return Err(StoreError::Conflict(r));
    }
    Ok(Written::kept(Record {
        resource: r,
        attrs,
        created_at: now,
        updated_at: now,
        lease: None,
        heartbeat_at: None,
    }))
}

/// `ensureRepo`: a read first, since the repository almost always exists
/// (then nothing is written, and no write transaction or writer-queue slot
/// is taken); only a missing one is created, by [`create_repo`].
pub(crate) async fn ensure_repo(backend: &impl Backend, repo: &str) -> StoreResult<Record> {
    let r = ResourceRef::new(ResourceKind::Repo, repo);
    let read = r.clone();
    let found = backend
        .read(move |db| Box::pin(async move { get_record(db, &read).await }))
        .await?;
    if let Some(record) = found {
        return Ok(record);
    }
    backend
        .write(move |tx| Box::pin(async move { create_repo(tx, &r.id).await }))
        .await
}

/// Creates the repository, or returns it untouched when a concurrent
/// `ensureRepo` created it first.
async fn create_repo(tx: &mut impl Writes, repo: &str) -> StoreResult<Written<Record>> {
    let r = ResourceRef::new(ResourceKind::Repo, repo);
    let now = tx.now();
    let inserted = tx.insert_resource(&r, None, now).await?;
    let row = locked(tx, &r).await?;
    Ok(Written {
        value: row.record,
        keep: inserted,
        wake: None,
        pruned: Pruned::default(),
    })
}

/// Append; with `expected_seq`, only when the tail is exactly that sequence
/// (`None` otherwise, writing nothing). A stale comparison answers before
/// the bound on events: it would write nothing either way.
pub(crate) async fn append(
    tx: &mut impl Writes,
    r: &ResourceRef,
    event: &NewEvent,
    expected_seq: Option<i64>,
    bounds: &Bounds,
) -> StoreResult<Written<Option<String>>> {
    let max_events = bounds.max_events_per_log;
    match tx.try_append(r, event, expected_seq, max_events).await? {
        Some(FastAppend::Appended(envelope)) => {
            return Ok(Written::waking(Some(envelope), r.clone()));
        }
        Some(FastAppend::Stale) => return Ok(Written::unchanged(None)),
        None => {}
    }
    let row = locked(tx, r).await?;
    if expected_seq.is_some_and(|expected| expected != row.last_seq) {
        return Ok(Written::unchanged(None));
    }
    check_events(r, &row, bounds)?;
    let now = write_time(tx, &row);
    let envelope = append_after(tx, r, row.last_seq, now, event).await?;
    Ok(Written::waking(Some(envelope), r.clone()))
}

/// The log can take one more event.
fn check_events(r: &ResourceRef, row: &ResourceRow, bounds: &Bounds) -> StoreResult<()> {
    if row.last_seq >= bounds.max_events_per_log {
        return Err(OverBound::events(r, bounds.max_events_per_log).into());
    }
    Ok(())
}

/// Every revision just assigned is within the bound on revisions, unless a
/// retention rule selects its kind (retention bounds what such a kind
/// keeps). Revisions count from 0, so revision `n` is the `n + 1`-th.
fn check_revisions(
    r: &ResourceRef,
    written: &[ArtifactMeta],
    retention: &Retention,
    bounds: &Bounds,
) -> StoreResult<()> {
    let max = bounds.max_artifact_revisions;
    match written
        .iter()
        .find(|m| m.revision >= max && retention.policy.keep_for(&m.kind).is_none())
    {
        Some(over) => Err(OverBound::artifact_revisions(r, &over.kind, max).into()),
        None => Ok(()),
    }
}

/// A new revision, then retention (spec section 3) in the same transaction.
/// Over the bound on revisions the revision assigned is rolled back with
/// the rest.
pub(crate) async fn put_artifact(
    tx: &mut impl Writes,
    r: &ResourceRef,
    artifact: NewArtifact,
    retention: &Retention,
    bounds: &Bounds,
) -> StoreResult<Written<ArtifactMeta>> {
    let row = locked(tx, r).await?;
    let now = write_time(tx, &row);
    let meta = insert_artifacts(tx, r, vec![artifact], now)
        .await?
        .pop()
        .ok_or_else(|| StoreError::Corrupt("no artifact inserted".into()))?;
    check_revisions(r, std::slice::from_ref(&meta), retention, bounds)?;
    let pruned = apply_retention(tx, r, std::slice::from_ref(&meta), retention).await?;
    tx.touch(r, now).await?;
    Ok(Written::kept(meta).pruning(pruned))
}

/// Revisions, `make_event` over the assigned metadata, the event and
/// retention, in one transaction: a rejection leaves nothing, consumes
/// nothing and prunes nothing. The bounds are checked after the catalog
/// (a `422` before a `413`, as for an append, whose event is validated
/// before the store is asked): events per log, then revisions per kind.
pub(crate) async fn deposit(
    tx: &mut impl Writes,
    r: &ResourceRef,
    artifacts: Vec<NewArtifact>,
    make_event: &MakeEvent,
    retention: &Retention,
    bounds: &Bounds,
) -> StoreResult<Written<(String, Vec<ArtifactMeta>)>> {
    // The one-statement deposit prunes nothing: a deposit of a kind the
    // retention policy selects (rare: configuration snapshots) takes the
    // transaction, which prunes in the same commit.
    let retained = artifacts
        .iter()
        .any(|a| retention.policy.keep_for(&a.kind).is_some());
    if !retained && let Some(done) = tx.try_deposit(r, &artifacts, make_event, bounds).await? {
        return Ok(Written::waking(done, r.clone()));
    }
    let row = locked(tx, r).await?;
    let now = write_time(tx, &row);
    let metas = insert_artifacts(tx, r, artifacts, now).await?;
    let event = make_event(&metas)?;
    check_events(r, &row, bounds)?;
    check_revisions(r, &metas, retention, bounds)?;
    let envelope = append_after(tx, r, row.last_seq, now, &event).await?;
    let pruned = apply_retention(tx, r, &metas, retention).await?;
    Ok(Written::waking((envelope, metas), r.clone()).pruning(pruned))
}

/// Artifact retention, inside the writing transaction (which holds the
/// resource row, so writers of one resource prune one at a time and readers
/// see the revisions before or after, never between): for each kind just
/// written that a rule selects, delete the oldest revisions beyond the
/// rule's `keep`, at most `prune_limit` in all for this write. A kind whose
/// newest revision number is below `keep` cannot have more than `keep`
/// revisions, so it costs no statement. `stream:` kinds are never selected.
async fn apply_retention(
    tx: &mut impl Writes,
    r: &ResourceRef,
    written: &[ArtifactMeta],
    retention: &Retention,
) -> StoreResult<Pruned> {
    let mut pruned = Pruned {
        family: Some(r.kind),
        revisions: 0,
    };
    if retention.policy.is_empty() {
        return Ok(pruned);
    }
    let mut budget = retention.prune_limit;
    let mut done: Vec<&str> = Vec::new();
    for meta in written {
        let kind = meta.kind.as_str();
        if budget <= 0 {
            break;
        }
        if done.contains(&kind) {
            continue;
        }
        done.push(kind);
        let Some(keep) = retention.policy.keep_for(kind) else {
            continue;
        };
        let newest = written
            .iter()
            .filter(|m| m.kind == kind)
            .map(|m| m.revision)
            .max()
            .unwrap_or(meta.revision);
        if newest < keep {
            continue;
        }
        let deleted = tx.prune_revisions(r, kind, keep, budget).await?;
        pruned.revisions += deleted;
        budget = budget.saturating_sub(i64::try_from(deleted).unwrap_or(i64::MAX));
    }
    Ok(pruned)
}

fn lease_expiry(now: i64, ttl_ms: i64) -> i64 {
    now.saturating_add(ttl_ms)
        .min(crate::protocol::time::MAX_JS_TIME_MS)
}

/// Spec section 10: a claim succeeds when the lease is free, expired by the
/// server's clock, or already held by `holder`; it sets `now + ttl`.
pub(crate) async fn claim_lease(
    tx: &mut impl Writes,
    r: &ResourceRef,
    holder: &str,
    ttl_ms: i64,
) -> StoreResult<Written<bool>> {
    let row = locked(tx, r).await?;
    let now = tx.now();
    if let Some(lease) = &row.record.lease
        && lease.holder != holder
        && lease.expires_at > now
    {
        return Ok(Written::unchanged(false));
    }
    let updated = write_time(tx, &row);
    tx.set_lease(r, holder, lease_expiry(now, ttl_ms), ttl_ms, updated)
        .await?;
    Ok(Written::kept(true))
}

/// A heartbeat extends an unexpired lease held by `holder` by its ttl.
pub(crate) async fn heartbeat(
    tx: &mut impl Writes,
    r: &ResourceRef,
    holder: &str,
) -> StoreResult<Written<bool>> {
    let row = locked(tx, r).await?;
    let now = tx.now();
    let held = row
        .record
        .lease
        .as_ref()
        .is_some_and(|l| l.holder == holder && l.expires_at > now);
    if !held {
        return Ok(Written::unchanged(false));
    }
    let ttl = row.lease_ttl_ms.unwrap_or(0);
    let updated = write_time(tx, &row);
    tx.extend_lease(r, lease_expiry(now, ttl), now, updated)
        .await?;
    Ok(Written::kept(true))
}

/// Releasing a lease one does not hold changes nothing.
pub(crate) async fn release_lease(
    tx: &mut impl Writes,
    r: &ResourceRef,
    holder: &str,
) -> StoreResult<Written<()>> {
    let row = locked(tx, r).await?;
    if row.record.lease.as_ref().is_none_or(|l| l.holder != holder) {
        return Ok(Written::unchanged(()));
    }
    let now = write_time(tx, &row);
    tx.clear_lease(r, now).await?;
    Ok(Written::kept(()))
}

/// The record and its `session.created` event as sequence 1, together or not at all.
pub(crate) async fn create_session(
    tx: &mut impl Writes,
    repo: &str,
    id: &str,
    attrs: Map<String, Value>,
    make_event: &MakeFirstEvent,
) -> StoreResult<Written<Record>> {
    let repo_ref = ResourceRef::new(ResourceKind::Repo, repo);
    let session = ResourceRef::new(ResourceKind::Session, id);
    locked(tx, &repo_ref).await?;
    let now = tx.now();
    let order = tx.next_child_order(&repo_ref).await?;
    tx.insert_session(
        id,
        &Value::Object(attrs.clone()).to_string(),
        now,
        repo,
        order,
    )
    .await?;
    let event = make_event()?;
    append_after(tx, &session, 0, now, &event).await?;
    Ok(Written::kept(Record {
        resource: session,
        attrs,
        created_at: now,
        updated_at: now,
        lease: None,
        heartbeat_at: None,
    }))
}

/// A new open stream; the scope's old closed streams lose their chunks
/// (spec section 6 retention) in the same transaction.
pub(crate) async fn create_stream(
    tx: &mut impl Writes,
    scope: &ResourceRef,
    id: &str,
    label: &str,
) -> StoreResult<Written<StreamRecord>> {
    locked(tx, scope).await?;
    let now = tx.now();
    let order = tx.next_child_order(scope).await?;
    tx.prune_closed_chunks(scope).await?;
    tx.insert_stream(id, scope, label, now, order).await?;
    Ok(Written::kept(StreamRecord {
        id: id.to_owned(),
        scope: scope.clone(),
        label: label.to_owned(),
        closed: false,
        created_at: now,
        closed_at: None,
        outcome: None,
        artifact: None,
        last_seq: 0,
        bytes: 0,
    }))
}

/// A batch as the stream's next chunk. After the closed check (spec
/// section 6's order ends there), the stream's bounds: its chunk count,
/// then its bytes with this chunk as stored.
pub(crate) async fn append_chunk(
    tx: &mut impl Writes,
    id: &str,
    parts_json: &str,
    bounds: &Bounds,
) -> StoreResult<Written<String>> {
    let wake = ResourceRef::new(ResourceKind::Stream, id);
    if let Some(chunk) = tx.try_append_chunk(id, parts_json, bounds).await? {
        return Ok(Written::waking(chunk, wake));
    }
    let stream = tx
        .lock_stream(id)
        .await?
        .ok_or_else(|| unknown_stream(id))?;
    if stream.closed {
        return Err(StoreError::Closed(id.to_owned()));
    }
    if stream.last_seq >= bounds.max_stream_chunks {
        return Err(OverBound::stream_chunks(id, bounds.max_stream_chunks).into());
    }
    let seq = stream.last_seq + 1;
    let ts = tx.now().max(stream.created_at);
    let chunk = chunk_json(id, seq, ts, parts_json);
    let size = i64::try_from(chunk.len()).unwrap_or(i64::MAX);
    if size > bounds.max_stream_bytes.saturating_sub(stream.bytes) {
        let max = bounds.max_stream_bytes;
        return Err(OverBound::stream_bytes(id, stream.bytes, size, max).into());
    }
    tx.append_chunk(id, seq, &chunk).await?;
    Ok(Written::waking(chunk, wake))
}

/// Close: the finalized artifact and the closed mark together, only if the
/// stream still has `expected_last_seq` chunks.
pub(crate) async fn close_stream(
    tx: &mut impl Writes,
    id: &str,
    outcome: &str,
    expected_last_seq: i64,
    artifact: NewArtifact,
) -> StoreResult<Written<CloseOutcome>> {
    let scope = tx
        .stream_scope(id)
        .await?
        .ok_or_else(|| unknown_stream(id))?;
    // Resource row before stream row: the order every writer locks in.
    let row = locked(tx, &scope).await?;
    let stream = tx
        .lock_stream(id)
        .await?
        .ok_or_else(|| unknown_stream(id))?;
    if stream.closed {
        return Ok(Written::unchanged(CloseOutcome::AlreadyClosed(stream)));
    }
    if stream.last_seq != expected_last_seq {
        return Ok(Written::unchanged(CloseOutcome::Moved));
    }
    let now = write_time(tx, &row);
    let meta = insert_artifacts(tx, &scope, vec![artifact], now)
        .await?
        .pop()
        .ok_or_else(|| StoreError::Corrupt("no artifact inserted".into()))?;
    let stream_artifact = StreamArtifact {
        kind: meta.kind,
        revision: meta.revision,
        blob_ref: meta.blob_ref,
    };
    let order = tx.next_child_order(&scope).await?;
    tx.mark_closed(id, now, order, outcome, &stream_artifact)
        .await?;
    tx.touch(&scope, now).await?;
    Ok(Written::waking(
        CloseOutcome::Closed(StreamRecord {
            closed: true,
            closed_at: Some(now),
            outcome: Some(outcome.to_owned()),
            artifact: Some(stream_artifact),
            ..stream
        }),
        ResourceRef::new(ResourceKind::Stream, id),
    ))
}

/// Record a revoked token; a digest already revoked changes nothing.
pub(crate) async fn revoke_token(
    tx: &mut impl Writes,
    revocation: &Revocation,
) -> StoreResult<Written<bool>> {
    Ok(if tx.insert_revocation(revocation).await? {
        Written::kept(true)
    } else {
        Written::unchanged(false)
    })
}

/// Forget the revocations of tokens expired by `now`.
pub(crate) async fn prune_revocations(tx: &mut impl Writes, now: i64) -> StoreResult<Written<u64>> {
    let pruned = tx.prune_revocations(now).await?;
    Ok(Written::kept(pruned))
}

/// `putTicketAsset`: the next revision with its manifest, unless a bound
/// or `check` refuses it (nothing written, no revision consumed). A put
/// that would make one more asset live is refused when the ticket has
/// `max_ticket_assets` live ones; the ticket is locked first, so such puts
/// count one at a time. Then the counter row is taken, so concurrent puts
/// of one asset serialise on it, and its revision is held to the bound on
/// revisions.
pub(crate) async fn put_ticket_asset(
    tx: &mut impl Writes,
    asset: NewTicketAsset,
    check: &AnswerCheck,
    bounds: &Bounds,
) -> StoreResult<Written<TicketAssetMeta>> {
    let key = &asset.key;
    tx.lock_ticket(&key.repo, &key.ticket_id).await?;
    let (live, this_live) = tx.live_ticket_assets(key).await?;
    if !this_live && live >= bounds.max_ticket_assets {
        let max = bounds.max_ticket_assets;
        return Err(OverBound::ticket_assets(&key.ticket_id, live, max).into());
    }
    let (revision, now) = tx.next_ticket_asset_revision(key, tx.now()).await?;
    check_asset_revision(key, revision, bounds)?;
    let meta = asset.meta(revision, now)?;
    check(&meta)?;
    tx.insert_ticket_asset(&asset.key, revision, now, Some(&meta))
        .await?;
    Ok(Written::kept(meta))
}

/// `removeTicketAsset`: a tombstone as the next revision when the latest
/// revision is live, answering that revision; otherwise nothing is written
/// (the counter's bump rolls back). The counter row is taken before the
/// latest revision is read, so a concurrent put or removal is either wholly
/// before or wholly after this one. A tombstone is a revision: the bound on
/// revisions holds it too.
pub(crate) async fn remove_ticket_asset(
    tx: &mut impl Writes,
    key: &AssetKey,
    check: &AnswerCheck,
    bounds: &Bounds,
) -> StoreResult<Written<Option<TicketAssetMeta>>> {
    let (revision, now) = tx.next_ticket_asset_revision(key, tx.now()).await?;
    let Some(live) = tx.latest_ticket_asset(key).await? else {
        return Ok(Written::unchanged(None));
    };
    check_asset_revision(key, revision, bounds)?;
    check(&live)?;
    tx.insert_ticket_asset(key, revision, now, None).await?;
    Ok(Written::kept(Some(live)))
}

/// Revision `revision` (counted from 0) of `key`, a put or a tombstone, is
/// within the bound on revisions: an asset at the bound can be neither
/// replaced nor removed until the bound is raised.
fn check_asset_revision(key: &AssetKey, revision: i64, bounds: &Bounds) -> StoreResult<()> {
    let max = bounds.max_ticket_asset_revisions;
    if revision >= max {
        return Err(OverBound::ticket_asset_revisions(&key.kind, &key.name, max).into());
    }
    Ok(())
}
