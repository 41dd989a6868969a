//! Streams' statements and rows: the stream row (and PostgreSQL's lock of
//! it), a chunk appended (two texts, which PostgreSQL fuses,
//! [`APPEND_CHUNK_POSTGRES`]), a page of chunks, the close, the pruning of
//! a scope's old chunks, and the streamed reads of chunks and of a scope's
//! streams.

use crate::protocol::ResourceRef;
use crate::store::error::StoreResult;
use crate::store::records::{StreamArtifact, StreamRecord};
use crate::store::statement::{Arg, Columns, Fixed, Statements, args, resource_kind, statement};

/// A stream row's columns, in the order [`stream_row`] reads them.
macro_rules! stream_columns {
    () => {
        "id, scope_kind, scope_id, label, status, created_at, last_seq, closed_at, outcome, \
         artifact_kind, artifact_revision, artifact_blob_ref, bytes"
    };
}

macro_rules! select_stream_sql {
    () => {
        concat!(
            "SELECT ",
            $crate::store::streams::sql::stream_columns!(),
            " FROM streams WHERE id = $1"
        )
    };
}

macro_rules! append_chunk_tail_sql {
    () => {
        "UPDATE streams SET last_seq = $2, bytes = bytes + $4 WHERE id = $1"
    };
}

macro_rules! insert_chunk_sql {
    () => {
        "INSERT INTO stream_chunks (stream_id, seq, chunk) VALUES ($1, $2, $3)"
    };
}

pub(crate) use stream_columns;

/// PostgreSQL's lock of the stream row, held until the transaction ends
/// ([`select_stream`]'s arguments).
pub(crate) const LOCK_STREAM_POSTGRES: &str = concat!(select_stream_sql!(), " FOR UPDATE");

/// A stream row, on any connection.
pub(crate) async fn stream(
    db: &mut (impl Statements + ?Sized),
    id: &str,
) -> StoreResult<Option<StreamRecord>> {
    db.first(select_stream(id), |row| stream_row(row)).await
}

pub(crate) fn select_stream(id: &str) -> Fixed<'_, 1> {
    const SQL: &str = select_stream_sql!();
    statement(SQL, args![id])
}

/// Chunks after `since`, at most `limit`.
pub(crate) fn chunks_page(id: &str, since: i64, limit: Option<i64>) -> Fixed<'_, 3> {
    const SQL: &str =
        "SELECT chunk FROM stream_chunks WHERE stream_id = $1 AND seq > $2 ORDER BY seq LIMIT $3";
    let [id, since] = args![id, since];
    statement(SQL, [id, since, Arg::Limit(limit)])
}

pub(crate) fn insert_stream<'a>(
    id: &'a str,
    scope: &'a ResourceRef,
    label: &'a str,
    now: i64,
    order: i64,
) -> Fixed<'a, 6> {
    const SQL: &str = "INSERT INTO streams \
         (id, scope_kind, scope_id, label, status, created_at, created_order) \
         VALUES ($1, $2, $3, $4, 'open', $5, $6)";
    statement(
        SQL,
        args![id, scope.kind.tag(), &scope.id, label, now, order],
    )
}

/// The chunks of every closed stream of `scope` but the most recently
/// closed one.
pub(crate) fn prune_closed_chunks(scope: &ResourceRef) -> Fixed<'_, 2> {
    const SQL: &str = "DELETE FROM stream_chunks WHERE stream_id IN (\
         SELECT id FROM streams WHERE scope_kind = $1 AND scope_id = $2 AND status = 'closed' \
         AND id <> COALESCE((SELECT latest.id FROM streams latest WHERE latest.scope_kind = $1 \
         AND latest.scope_id = $2 AND latest.status = 'closed' \
         ORDER BY latest.closed_at DESC, latest.closed_order DESC LIMIT 1), ''))";
    statement(SQL, args![scope.kind.tag(), &scope.id])
}

/// The chunk stored as sequence `seq`; with the same arguments,
/// [`APPEND_CHUNK_TAIL`] makes it the stream's tail and adds its bytes
/// (`$4`, the UTF-8 length, which each dialect's `length` counts otherwise)
/// to the stream's total.
pub(crate) fn append_chunk<'a>(id: &'a str, seq: i64, chunk: &'a str) -> Fixed<'a, 4> {
    const SQL: &str = insert_chunk_sql!();
    let size = i64::try_from(chunk.len()).unwrap_or(i64::MAX);
    statement(SQL, args![id, seq, chunk, size])
}

/// [`append_chunk`]'s second half.
pub(crate) const APPEND_CHUNK_TAIL: &str = append_chunk_tail_sql!();

/// PostgreSQL's one round trip: the chunk and the stream's counter
/// ([`append_chunk`]'s arguments, [`APPEND_CHUNK_TAIL`]).
pub(crate) const APPEND_CHUNK_POSTGRES: &str = concat!(
    "WITH bumped AS (",
    append_chunk_tail_sql!(),
    ") ",
    insert_chunk_sql!()
);

pub(crate) fn close_stream<'a>(
    id: &'a str,
    now: i64,
    order: i64,
    outcome: &'a str,
    artifact: &'a StreamArtifact,
) -> Fixed<'a, 7> {
    const SQL: &str = "UPDATE streams SET status = 'closed', closed_at = $2, closed_order = $3, \
         outcome = $4, artifact_kind = $5, artifact_revision = $6, artifact_blob_ref = $7 \
         WHERE id = $1";
    let a = artifact;
    statement(
        SQL,
        args![id, now, order, outcome, &a.kind, a.revision, &a.blob_ref],
    )
}

/// Chunks of stream `id` after `since`, in order (a streamed read).
pub(crate) fn chunks_after(id: &str, since: i64) -> Fixed<'_, 2> {
    const SQL: &str =
        "SELECT chunk FROM stream_chunks WHERE stream_id = $1 AND seq > $2 ORDER BY seq";
    statement(SQL, args![id, since])
}

/// A scope's stream records, in creation order (a streamed read).
pub(crate) fn scope_streams(scope: &ResourceRef) -> Fixed<'_, 2> {
    const SQL: &str = concat!(
        "SELECT ",
        stream_columns!(),
        " FROM streams WHERE scope_kind = $1 AND scope_id = $2 ORDER BY created_at, created_order"
    );
    statement(SQL, args![scope.kind.tag(), &scope.id])
}

/// A row of `stream_columns!()`.
pub(crate) fn stream_row(row: &(impl Columns + ?Sized)) -> StoreResult<StreamRecord> {
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
        bytes: row.int(12)?,
    })
}
