//! The SQL both backends run, written once, and the decoding of its rows.
//!
//! Statements use PostgreSQL's numbered placeholders (`$1`, `$2`, …).
//! SQLite reads `$N` as a parameter *named* `$N` and numbers such parameters
//! by where they first appear, not by `N`, so the SQLite backend binds them
//! by name (`sqlite::primitives`). A statement may skip a number: SQLite
//! binds what appears; PostgreSQL's fused forms use them all (see
//! [`APPEND_EVENT_TAIL`] and [`INSERT_EVENT`]).
//!
//! What stays in each backend is what only its dialect has: PostgreSQL's row
//! locks (`FOR UPDATE`), its statements fused with `WITH … AS (UPDATE …)`
//! and its one-statement fast paths; each side's `tails` query (JSON table
//! functions differ); SQLite's split forms of the fused statements.
//!
//! Rows are read by position, through [`Columns`], which both drivers' rows
//! implement: the column lists below fix the positions.

use bytes::BytesMut;
use serde_json::{Map, Value};

use super::ops::ResourceRow;
use super::rows::write_json;
use super::{
    ArtifactMeta, Lease, Listing, Record, StoreError, StoreResult, StreamArtifact, StreamRecord,
};
use crate::protocol::{ResourceKind, ResourceRef};

// `concat!` takes literals only: texts other statements extend are macros.

/// A resource row's columns, in the order [`resource_row`] reads them.
macro_rules! resource_columns {
    () => {
        "id, attrs, created_at, updated_at, last_seq, lease_holder, lease_expires_at, \
         lease_ttl_ms, heartbeat_at"
    };
}

/// A stream row's columns, in the order [`stream_row`] reads them.
macro_rules! stream_columns {
    () => {
        "id, scope_kind, scope_id, label, status, created_at, last_seq, closed_at, outcome, \
         artifact_kind, artifact_revision, artifact_blob_ref"
    };
}

/// An artifact row's columns, in the order [`artifact_row`] reads them.
macro_rules! artifact_columns {
    () => {
        "artifact_kind, revision, blob_ref, size, metadata, created_at"
    };
}

macro_rules! select_resource_sql {
    () => {
        concat!(
            "SELECT ",
            $crate::store::sql::resource_columns!(),
            " FROM resources WHERE kind = $1 AND id = $2"
        )
    };
}

macro_rules! select_stream_sql {
    () => {
        concat!(
            "SELECT ",
            $crate::store::sql::stream_columns!(),
            " FROM streams WHERE id = $1"
        )
    };
}

macro_rules! append_event_tail {
    () => {
        "UPDATE resources SET last_seq = $3, updated_at = $4 WHERE kind = $1 AND id = $2"
    };
}

macro_rules! insert_event {
    () => {
        "INSERT INTO events (kind, resource_id, seq, envelope) VALUES ($1, $2, $3, $5)"
    };
}

macro_rules! next_revision {
    () => {
        "INSERT INTO artifact_heads (kind, resource_id, artifact_kind, next_revision) \
         VALUES ($1, $2, $3, 1) ON CONFLICT (kind, resource_id, artifact_kind) \
         DO UPDATE SET next_revision = artifact_heads.next_revision + 1 \
         RETURNING next_revision - 1 AS revision"
    };
}

macro_rules! append_chunk_tail {
    () => {
        "UPDATE streams SET last_seq = $2 WHERE id = $1"
    };
}

macro_rules! insert_chunk {
    () => {
        "INSERT INTO stream_chunks (stream_id, seq, chunk) VALUES ($1, $2, $3)"
    };
}

pub(crate) use {
    append_chunk_tail, append_event_tail, insert_chunk, insert_event, next_revision,
    resource_columns, select_resource_sql, select_stream_sql, stream_columns,
};

// ------------------------------------------------------------------ reads

/// `$1` kind, `$2` id.
const SELECT_RESOURCE: &str = select_resource_sql!();
/// `$1` kind, `$2` id.
const EXISTS_RESOURCE: &str = "SELECT 1 AS one FROM resources WHERE kind = $1 AND id = $2";
/// `$1` kind, `$2` id, `$3` since.
const EVENTS_SINCE: &str =
    "SELECT envelope FROM events WHERE kind = $1 AND resource_id = $2 AND seq > $3 ORDER BY seq";
/// The same, at most `$4` rows (no limit: SQLite takes -1, PostgreSQL `NULL`).
const EVENTS_PAGE: &str = "SELECT envelope FROM events WHERE kind = $1 AND resource_id = $2 \
     AND seq > $3 ORDER BY seq LIMIT $4";
/// `$1` kind, `$2` id, `$3` artifact kind, `$4` revision.
const SELECT_ARTIFACT: &str = concat!(
    "SELECT ",
    artifact_columns!(),
    " FROM artifacts WHERE kind = $1 AND resource_id = $2 AND artifact_kind = $3 AND revision = $4"
);
/// `$1` kind, `$2` id, `$3` artifact kind.
const SELECT_LATEST_ARTIFACT: &str = concat!(
    "SELECT ",
    artifact_columns!(),
    " FROM artifacts WHERE kind = $1 AND resource_id = $2 AND artifact_kind = $3 \
     ORDER BY revision DESC LIMIT 1"
);
/// `$1` stream id.
const SELECT_STREAM: &str = select_stream_sql!();
/// `$1` stream id, `$2` since.
const CHUNKS_SINCE: &str =
    "SELECT chunk FROM stream_chunks WHERE stream_id = $1 AND seq > $2 ORDER BY seq";
/// The same, at most `$3` rows (no limit: as [`EVENTS_PAGE`]).
const CHUNKS_PAGE: &str =
    "SELECT chunk FROM stream_chunks WHERE stream_id = $1 AND seq > $2 ORDER BY seq LIMIT $3";
const PING: &str = "SELECT 1 AS one";

const LIST_BUILDS: &str = concat!(
    "SELECT ",
    resource_columns!(),
    " FROM resources WHERE kind = 'build' ORDER BY created_at, id"
);
const LIST_SESSIONS: &str = concat!(
    "SELECT ",
    resource_columns!(),
    " FROM resources WHERE kind = 'session' AND parent = $1 ORDER BY created_at, created_order"
);
const LIST_ARTIFACTS: &str = concat!(
    "SELECT ",
    artifact_columns!(),
    " FROM artifacts WHERE kind = $1 AND resource_id = $2 ORDER BY artifact_kind, revision"
);
const LIST_ARTIFACTS_OF_KIND: &str = concat!(
    "SELECT ",
    artifact_columns!(),
    " FROM artifacts WHERE kind = $1 AND resource_id = $2 AND artifact_kind = $3 ORDER BY revision"
);
const LIST_STREAMS: &str = concat!(
    "SELECT ",
    stream_columns!(),
    " FROM streams WHERE scope_kind = $1 AND scope_id = $2 ORDER BY created_at, created_order"
);

// ----------------------------------------------------------------- writes

/// `$1` kind, `$2` id, `$3` attrs, `$4` now.
const INSERT_RESOURCE: &str = "INSERT INTO resources (kind, id, attrs, created_at, updated_at, last_seq) \
     VALUES ($1, $2, $3, $4, $4, 0) ON CONFLICT (kind, id) DO NOTHING";
/// `$1` kind, `$2` id, `$3` seq, `$4` now (`$5`, the envelope, is [`INSERT_EVENT`]'s).
pub(crate) const APPEND_EVENT_TAIL: &str = append_event_tail!();
/// `$1` kind, `$2` id, `$3` seq, `$5` envelope (`$4` is [`APPEND_EVENT_TAIL`]'s).
const INSERT_EVENT: &str = insert_event!();
/// `$1` kind, `$2` id, `$3` artifact kind; returns the assigned `revision`.
const NEXT_REVISION: &str = next_revision!();
/// `$1` kind, `$2` id, `$3` now.
const TOUCH: &str = "UPDATE resources SET updated_at = $3 WHERE kind = $1 AND id = $2";
/// `$1` kind, `$2` id, `$3` holder, `$4` expiry, `$5` ttl, `$6` now.
const SET_LEASE: &str = "UPDATE resources SET lease_holder = $3, lease_expires_at = $4, lease_ttl_ms = $5, \
     updated_at = $6 WHERE kind = $1 AND id = $2";
/// `$1` kind, `$2` id, `$3` expiry, `$4` heartbeat, `$5` now.
const EXTEND_LEASE: &str = "UPDATE resources SET lease_expires_at = $3, heartbeat_at = $4, updated_at = $5 \
     WHERE kind = $1 AND id = $2";
/// `$1` kind, `$2` id, `$3` now.
const CLEAR_LEASE: &str = "UPDATE resources SET lease_holder = NULL, lease_expires_at = NULL, \
     lease_ttl_ms = NULL, updated_at = $3 WHERE kind = $1 AND id = $2";
/// `$1` kind, `$2` id; returns `stream_counter`.
const NEXT_CHILD_ORDER: &str = "UPDATE resources SET stream_counter = stream_counter + 1 \
     WHERE kind = $1 AND id = $2 RETURNING stream_counter";
/// `$1` id, `$2` attrs, `$3` now, `$4` repo, `$5` order.
const INSERT_SESSION: &str = "INSERT INTO resources (kind, id, attrs, created_at, updated_at, last_seq, parent, created_order) \
     VALUES ('session', $1, $2, $3, $3, 0, $4, $5)";
/// `$1` scope kind, `$2` scope id.
const PRUNE_CLOSED_CHUNKS: &str = "DELETE FROM stream_chunks WHERE stream_id IN (\
     SELECT id FROM streams WHERE scope_kind = $1 AND scope_id = $2 AND status = 'closed' AND id <> COALESCE((\
     SELECT latest.id FROM streams latest WHERE latest.scope_kind = $1 AND latest.scope_id = $2 \
     AND latest.status = 'closed' ORDER BY latest.closed_at DESC, latest.closed_order DESC LIMIT 1), ''))";
/// Retention: the oldest revisions of one kind (`$1` kind, `$2` id, `$3`
/// artifact kind) below its `keep`-th newest (`$4` = keep - 1 rows skipped
/// from the newest), at most `$5`, oldest first. Fewer than `keep`
/// revisions make the bound NULL, deleting nothing. Both subqueries walk the
/// primary key.
const PRUNE_REVISIONS: &str = "DELETE FROM artifacts WHERE kind = $1 AND resource_id = $2 AND artifact_kind = $3 \
     AND revision IN (SELECT candidate.revision FROM artifacts candidate \
     WHERE candidate.kind = $1 AND candidate.resource_id = $2 AND candidate.artifact_kind = $3 AND candidate.revision < (\
     SELECT bound.revision FROM artifacts bound \
     WHERE bound.kind = $1 AND bound.resource_id = $2 AND bound.artifact_kind = $3 \
     ORDER BY bound.revision DESC LIMIT 1 OFFSET $4) \
     ORDER BY candidate.revision LIMIT $5)";
/// `$1` id, `$2` scope kind, `$3` scope id, `$4` label, `$5` now, `$6` order.
const INSERT_STREAM: &str = "INSERT INTO streams (id, scope_kind, scope_id, label, status, created_at, created_order) \
     VALUES ($1, $2, $3, $4, 'open', $5, $6)";
/// `$1` stream id, `$2` seq (`$3`, the chunk, is [`INSERT_CHUNK`]'s).
pub(crate) const APPEND_CHUNK_TAIL: &str = append_chunk_tail!();
/// `$1` stream id, `$2` seq, `$3` chunk.
const INSERT_CHUNK: &str = insert_chunk!();
/// `$1` id, `$2` now, `$3` order, `$4` outcome, `$5`…`$7` the artifact.
const CLOSE_STREAM: &str = "UPDATE streams SET status = 'closed', closed_at = $2, closed_order = $3, outcome = $4, \
     artifact_kind = $5, artifact_revision = $6, artifact_blob_ref = $7 WHERE id = $1";

// ------------------------------------------------------------- statements

/// A statement argument, as both drivers bind it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Arg<'a> {
    Text(&'a str),
    OptionalText(Option<&'a str>),
    Int(i64),
    /// A page's `LIMIT`; `None`: every row (SQLite takes -1, PostgreSQL
    /// `NULL`).
    Limit(Option<i64>),
}

/// A statement's text and its arguments, for `$1`, `$2`, … in order.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Statement<A> {
    pub text: &'static str,
    pub args: A,
}

impl<A: ArgList> Statement<A> {
    /// The same arguments for another text: a backend's fused or split
    /// form of a shared statement.
    pub fn with_text(self, text: &'static str) -> Self {
        Statement { text, ..self }
    }

    pub fn args(&self) -> &[Arg<'_>] {
        self.args.as_args()
    }
}

/// A statement's arguments: a fixed number, or (a listing's) any.
pub(crate) trait ArgList {
    fn as_args(&self) -> &[Arg<'_>];
}

impl<const N: usize> ArgList for [Arg<'_>; N] {
    fn as_args(&self) -> &[Arg<'_>] {
        self
    }
}

impl ArgList for Vec<Arg<'_>> {
    fn as_args(&self) -> &[Arg<'_>] {
        self
    }
}

fn statement<A>(text: &'static str, args: A) -> Statement<A> {
    Statement { text, args }
}

type Args<'a, const N: usize> = Statement<[Arg<'a>; N]>;

fn kind(r: &ResourceRef) -> Arg<'static> {
    Arg::Text(r.kind.tag())
}

pub(crate) fn select_resource(r: &ResourceRef) -> Args<'_, 2> {
    statement(SELECT_RESOURCE, [kind(r), Arg::Text(&r.id)])
}

pub(crate) fn exists_resource(r: &ResourceRef) -> Args<'_, 2> {
    statement(EXISTS_RESOURCE, [kind(r), Arg::Text(&r.id)])
}

pub(crate) fn events_page(r: &ResourceRef, since: i64, limit: Option<i64>) -> Args<'_, 4> {
    statement(
        EVENTS_PAGE,
        [
            kind(r),
            Arg::Text(&r.id),
            Arg::Int(since),
            Arg::Limit(limit),
        ],
    )
}

pub(crate) fn select_artifact<'a>(
    r: &'a ResourceRef,
    artifact_kind: &'a str,
    rev: i64,
) -> Args<'a, 4> {
    statement(
        SELECT_ARTIFACT,
        [
            kind(r),
            Arg::Text(&r.id),
            Arg::Text(artifact_kind),
            Arg::Int(rev),
        ],
    )
}

pub(crate) fn select_latest_artifact<'a>(
    r: &'a ResourceRef,
    artifact_kind: &'a str,
) -> Args<'a, 3> {
    statement(
        SELECT_LATEST_ARTIFACT,
        [kind(r), Arg::Text(&r.id), Arg::Text(artifact_kind)],
    )
}

pub(crate) fn select_stream(id: &str) -> Args<'_, 1> {
    statement(SELECT_STREAM, [Arg::Text(id)])
}

pub(crate) fn chunks_page(id: &str, since: i64, limit: Option<i64>) -> Args<'_, 3> {
    statement(
        CHUNKS_PAGE,
        [Arg::Text(id), Arg::Int(since), Arg::Limit(limit)],
    )
}

pub(crate) fn ping() -> Args<'static, 0> {
    statement(PING, [])
}

pub(crate) fn insert_resource<'a>(
    r: &'a ResourceRef,
    attrs: Option<&'a str>,
    now: i64,
) -> Args<'a, 4> {
    statement(
        INSERT_RESOURCE,
        [
            kind(r),
            Arg::Text(&r.id),
            Arg::OptionalText(attrs),
            Arg::Int(now),
        ],
    )
}

/// [`INSERT_EVENT`]; with the same arguments, [`APPEND_EVENT_TAIL`] makes
/// it the tail.
pub(crate) fn append_event<'a>(
    r: &'a ResourceRef,
    seq: i64,
    now: i64,
    envelope: &'a str,
) -> Args<'a, 5> {
    statement(
        INSERT_EVENT,
        [
            kind(r),
            Arg::Text(&r.id),
            Arg::Int(seq),
            Arg::Int(now),
            Arg::Text(envelope),
        ],
    )
}

/// [`NEXT_REVISION`], returning the revision assigned; the arguments also
/// carry the metadata (`$4` blob ref, `$5` size, `$6` metadata, `$7` now)
/// for the statement that stores it.
pub(crate) fn insert_artifact<'a>(
    r: &'a ResourceRef,
    artifact_kind: &'a str,
    blob_ref: &'a str,
    size: i64,
    metadata: &'a str,
    now: i64,
) -> Args<'a, 7> {
    statement(
        NEXT_REVISION,
        [
            kind(r),
            Arg::Text(&r.id),
            Arg::Text(artifact_kind),
            Arg::Text(blob_ref),
            Arg::Int(size),
            Arg::Text(metadata),
            Arg::Int(now),
        ],
    )
}

pub(crate) fn touch(r: &ResourceRef, now: i64) -> Args<'_, 3> {
    statement(TOUCH, [kind(r), Arg::Text(&r.id), Arg::Int(now)])
}

pub(crate) fn set_lease<'a>(
    r: &'a ResourceRef,
    holder: &'a str,
    expires_at: i64,
    ttl_ms: i64,
    now: i64,
) -> Args<'a, 6> {
    statement(
        SET_LEASE,
        [
            kind(r),
            Arg::Text(&r.id),
            Arg::Text(holder),
            Arg::Int(expires_at),
            Arg::Int(ttl_ms),
            Arg::Int(now),
        ],
    )
}

pub(crate) fn extend_lease(
    r: &ResourceRef,
    expires_at: i64,
    heartbeat_at: i64,
    now: i64,
) -> Args<'_, 5> {
    statement(
        EXTEND_LEASE,
        [
            kind(r),
            Arg::Text(&r.id),
            Arg::Int(expires_at),
            Arg::Int(heartbeat_at),
            Arg::Int(now),
        ],
    )
}

pub(crate) fn clear_lease(r: &ResourceRef, now: i64) -> Args<'_, 3> {
    statement(CLEAR_LEASE, [kind(r), Arg::Text(&r.id), Arg::Int(now)])
}

pub(crate) fn next_child_order(parent: &ResourceRef) -> Args<'_, 2> {
    statement(NEXT_CHILD_ORDER, [kind(parent), Arg::Text(&parent.id)])
}

pub(crate) fn insert_session<'a>(
    id: &'a str,
    attrs: &'a str,
    now: i64,
    repo: &'a str,
    order: i64,
) -> Args<'a, 5> {
    statement(
        INSERT_SESSION,
        [
            Arg::Text(id),
            Arg::Text(attrs),
            Arg::Int(now),
            Arg::Text(repo),
            Arg::Int(order),
        ],
    )
}

pub(crate) fn prune_closed_chunks(scope: &ResourceRef) -> Args<'_, 2> {
    statement(PRUNE_CLOSED_CHUNKS, [kind(scope), Arg::Text(&scope.id)])
}

/// At most `limit` revisions beyond the `keep` latest.
pub(crate) fn prune_revisions<'a>(
    r: &'a ResourceRef,
    artifact_kind: &'a str,
    keep: i64,
    limit: i64,
) -> Args<'a, 5> {
    statement(
        PRUNE_REVISIONS,
        [
            kind(r),
            Arg::Text(&r.id),
            Arg::Text(artifact_kind),
            Arg::Int(keep - 1),
            Arg::Int(limit),
        ],
    )
}

pub(crate) fn insert_stream<'a>(
    id: &'a str,
    scope: &'a ResourceRef,
    label: &'a str,
    now: i64,
    order: i64,
) -> Args<'a, 6> {
    statement(
        INSERT_STREAM,
        [
            Arg::Text(id),
            kind(scope),
            Arg::Text(&scope.id),
            Arg::Text(label),
            Arg::Int(now),
            Arg::Int(order),
        ],
    )
}

/// [`INSERT_CHUNK`]; with the same arguments, [`APPEND_CHUNK_TAIL`] makes
/// it the tail.
pub(crate) fn append_chunk<'a>(id: &'a str, seq: i64, chunk: &'a str) -> Args<'a, 3> {
    statement(
        INSERT_CHUNK,
        [Arg::Text(id), Arg::Int(seq), Arg::Text(chunk)],
    )
}

pub(crate) fn close_stream<'a>(
    id: &'a str,
    now: i64,
    order: i64,
    outcome: &'a str,
    artifact: &'a StreamArtifact,
) -> Args<'a, 7> {
    statement(
        CLOSE_STREAM,
        [
            Arg::Text(id),
            Arg::Int(now),
            Arg::Int(order),
            Arg::Text(outcome),
            Arg::Text(&artifact.kind),
            Arg::Int(artifact.revision),
            Arg::Text(&artifact.blob_ref),
        ],
    )
}

/// The one statement a streamed read runs.
pub(crate) fn listing(listing: &Listing) -> Statement<Vec<Arg<'_>>> {
    match listing {
        Listing::Events { resource, since } => statement(
            EVENTS_SINCE,
            vec![kind(resource), Arg::Text(&resource.id), Arg::Int(*since)],
        ),
        Listing::Chunks { id, since } => {
            statement(CHUNKS_SINCE, vec![Arg::Text(id), Arg::Int(*since)])
        }
        Listing::Builds => statement(LIST_BUILDS, Vec::new()),
        Listing::Sessions { repo } => statement(LIST_SESSIONS, vec![Arg::Text(repo)]),
        Listing::Artifacts {
            resource,
            kind: Some(artifact_kind),
        } => statement(
            LIST_ARTIFACTS_OF_KIND,
            vec![
                kind(resource),
                Arg::Text(&resource.id),
                Arg::Text(artifact_kind),
            ],
        ),
        Listing::Artifacts {
            resource,
            kind: None,
        } => statement(
            LIST_ARTIFACTS,
            vec![kind(resource), Arg::Text(&resource.id)],
        ),
        Listing::Streams { scope } => {
            statement(LIST_STREAMS, vec![kind(scope), Arg::Text(&scope.id)])
        }
    }
}

/// One row of [`listing`]'s statement as its wire JSON.
pub(crate) fn render(
    listing: &Listing,
    row: &impl Columns,
    piece: &mut BytesMut,
) -> StoreResult<()> {
    match listing {
        Listing::Events { .. } | Listing::Chunks { .. } => {
            // Stored as the served JSON text: copied as is.
            piece.extend_from_slice(row.str(0)?.as_bytes());
            Ok(())
        }
        Listing::Builds => write_json(
            piece,
            &resource_row(ResourceKind::Build, row)?.record.to_json(),
        ),
        Listing::Sessions { .. } => write_json(
            piece,
            &resource_row(ResourceKind::Session, row)?.record.to_json(),
        ),
        Listing::Artifacts { resource, .. } => {
            write_json(piece, &artifact_row(resource, row)?.to_json())
        }
        Listing::Streams { .. } => write_json(piece, &stream_row(row)?.to_json()),
    }
}

// --------------------------------------------------------------- decoding

/// A result row's columns by position, as each driver reads them; a
/// driver's error converts into [`StoreError`] in its backend.
pub(crate) trait Columns {
    fn text(&self, i: usize) -> StoreResult<String>;
    fn optional_text(&self, i: usize) -> StoreResult<Option<String>>;
    /// A text column borrowed from the row.
    fn str(&self, i: usize) -> StoreResult<&str>;
    fn int(&self, i: usize) -> StoreResult<i64>;
    fn optional_int(&self, i: usize) -> StoreResult<Option<i64>>;
}

fn json_object(text: &str, what: &str) -> StoreResult<Map<String, Value>> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(StoreError::Corrupt(format!("{what} is not a JSON object"))),
    }
}

fn resource_kind(tag: &str, what: &str) -> StoreResult<ResourceKind> {
    ResourceKind::from_tag(tag)
        .ok_or_else(|| StoreError::Corrupt(format!("unknown {what} {tag:?}")))
}

/// A row of `resource_columns!()`.
pub(crate) fn resource_row(kind: ResourceKind, row: &impl Columns) -> StoreResult<ResourceRow> {
    let attrs = match row.optional_text(1)? {
        Some(text) => json_object(&text, "resource attrs")?,
        None => Map::new(),
    };
    let lease = row
        .optional_text(5)?
        .zip(row.optional_int(6)?)
        .map(|(holder, expires_at)| Lease { holder, expires_at });
    Ok(ResourceRow {
        record: Record {
            resource: ResourceRef::new(kind, row.text(0)?),
            attrs,
            created_at: row.int(2)?,
            updated_at: row.int(3)?,
            lease,
            heartbeat_at: row.optional_int(8)?,
        },
        last_seq: row.int(4)?,
        lease_ttl_ms: row.optional_int(7)?,
    })
}

/// A row of `stream_columns!()`.
pub(crate) fn stream_row(row: &impl Columns) -> StoreResult<StreamRecord> {
    let kind = resource_kind(row.str(1)?, "stream scope")?;
    let artifact = match (
        row.optional_text(9)?,
        row.optional_int(10)?,
        row.optional_text(11)?,
    ) {
        (Some(kind), Some(revision), Some(blob_ref)) => Some(StreamArtifact {
            kind,
            revision,
            blob_ref,
        }),
        _ => None,
    };
    Ok(StreamRecord {
        id: row.text(0)?,
        scope: ResourceRef::new(kind, row.text(2)?),
        label: row.text(3)?,
        closed: row.str(4)? == "closed",
        created_at: row.int(5)?,
        last_seq: row.int(6)?,
        closed_at: row.optional_int(7)?,
        outcome: row.optional_text(8)?,
        artifact,
    })
}

/// A row of `artifact_columns!()`, an artifact of `resource`.
pub(crate) fn artifact_row(
    resource: &ResourceRef,
    row: &impl Columns,
) -> StoreResult<ArtifactMeta> {
    Ok(ArtifactMeta {
        resource: resource.clone(),
        kind: row.text(0)?,
        revision: row.int(1)?,
        blob_ref: row.text(2)?,
        size: row.int(3)?,
        metadata: json_object(row.str(4)?, "artifact metadata")?,
        created_at: row.int(5)?,
    })
}

/// A row of a `tails` statement: kind, id, tail.
pub(crate) fn tail_row(row: &impl Columns) -> StoreResult<(ResourceRef, i64)> {
    let kind = resource_kind(row.str(0)?, "resource kind")?;
    Ok((ResourceRef::new(kind, row.text(1)?), row.int(2)?))
}
