//! PostgreSQL connections as the operations use them: a read's
//! ([`PgRead`], over the pool) and a write's ([`PgTx`], one transaction),
//! both running the shared statements ([`Statements`]), and a write's
//! dialect steps ([`WriteTx`]): what only PostgreSQL has, row locks,
//! statements fused with `WITH … AS (UPDATE …)`, and the fast paths. Writers to one resource serialise on its row
//! (`SELECT … FOR UPDATE`, or the counter `UPDATE` of a fast path);
//! different resources proceed in parallel.
//!
//! Appends, deposits and chunk appends have fast paths: one autocommit
//! statement (a deposit: one read and one statement) instead of a
//! transaction of five or six round trips; the append's statement and what
//! its answer means are the events family's (`events/fast_append.rs`),
//! beside the rule it restates. Each declines, having written
//! nothing, whenever it cannot decide exactly as the transaction would;
//! the collection bounds are conditions of their counter `UPDATE`s (or of
//! the deposit's read), so a fast path never writes past one and leaves
//! the refusal to the transaction.

use std::future::Future;
use std::sync::Arc;

use futures_util::TryStreamExt as _;
use serde_json::Value;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnection, PgRow};
use sqlx::{Postgres, Row as _, Transaction};

use super::connections::{Connections, ReadConnection};
use super::counted;
use super::errors::is_unique_violation;
use crate::clock::Clock;
use crate::protocol::{ResourceKind, ResourceRef};
use crate::store::api::{MakeEvent, NewArtifact, NewEvent};
use crate::store::artifacts::sql::{INSERT_ARTIFACT_POSTGRES, insert_artifact};
use crate::store::bounds::Bounds;
use crate::store::engine::{FastAppend, WriteTx};
use crate::store::envelope::{TS_MEMBER, chunk_parts, envelope_json};
use crate::store::error::{StoreError, StoreResult};
use crate::store::events::fast_append::{self, Step};
use crate::store::events::sql::{APPEND_EVENT_POSTGRES, append_event};
use crate::store::records::{ArtifactMeta, LogTail, ResourceRow, StreamRecord};
use crate::store::resources::sql::{
    LOCK_LOG_TAIL_POSTGRES, LOCK_RESOURCE_POSTGRES, log_tail_row, resource_row, select_log_tail,
    select_resource,
};
use crate::store::statement::{Arg, ArgList, Columns, Dialect, EachRow, Statement, Statements};
use crate::store::streams::sql::{
    APPEND_CHUNK_POSTGRES, LOCK_STREAM_POSTGRES, append_chunk, select_stream, stream_row,
};

/// A ticket's lock for the writers that may add a live asset, until the
/// transaction ends: an advisory lock in a class of its own (the two-key
/// form, whose keys never meet sqlx's one-key migration lock), keyed by a
/// hash of the repository and ticket (length-prefixed, so no two pairs
/// spell one text). A collision only serialises two tickets' puts.
const LOCK_TICKET: &str = "SELECT pg_advisory_xact_lock(1952540531, \
     hashtext(length($1::text)::text || ':' || $1::text || $2::text))";
// The fast paths (one autocommit statement each; the append's is its
// family's, `events/fast_append.rs`). Each bumps the counter row first, so
// writers of one resource still serialise on it, and writes nothing unless
// the row was as the transaction path requires: the caller tells a refusal
// from a miss by the tail the statement's snapshot saw.

/// A deposit's read: the resource's tail and the next revision of each kind.
const DEPOSIT_HEADS: &str = "SELECT r.last_seq, r.updated_at, k.artifact_kind, h.next_revision \
     FROM resources r LEFT JOIN unnest($3::text[]) AS k(artifact_kind) ON true \
     LEFT JOIN artifact_heads h ON h.kind = r.kind AND h.resource_id = r.id \
     AND h.artifact_kind = k.artifact_kind COLLATE \"C\" \
     WHERE r.kind = $1 AND r.id = $2";
/// A deposit's write, if the tail is still the one read: heads, metadata
/// (a revision consumed meanwhile is a unique violation, undoing it all)
/// and the event.
const FAST_DEPOSIT: &str = "WITH bumped AS (\
     UPDATE resources SET last_seq = last_seq + 1, updated_at = $3 \
     WHERE kind = $1 AND id = $2 AND last_seq = $4 AND updated_at <= $3 RETURNING last_seq), \
     heads AS (INSERT INTO artifact_heads (kind, resource_id, artifact_kind, next_revision) \
     SELECT $1, $2, h.artifact_kind, h.next_revision \
     FROM unnest($5::text[], $6::bigint[]) AS h(artifact_kind, next_revision), bumped \
     ON CONFLICT (kind, resource_id, artifact_kind) DO UPDATE SET next_revision = EXCLUDED.next_revision), \
     metas AS (INSERT INTO artifacts (kind, resource_id, artifact_kind, revision, blob_ref, size, metadata, created_at) \
     SELECT $1, $2, a.artifact_kind, a.revision, a.blob_ref, a.size, a.metadata, $3 \
     FROM unnest($7::text[], $8::bigint[], $9::text[], $10::bigint[], $11::text[]) \
     AS a(artifact_kind, revision, blob_ref, size, metadata), bumped), \
     stored AS (INSERT INTO events (kind, resource_id, seq, envelope, type) \
     SELECT $1, $2, last_seq, $12, $13 FROM bumped RETURNING seq) \
     SELECT seq FROM stored";
/// A chunk: the stream's tail bumped (only while open, with the clock not
/// before its creation, and within the bounds: fewer than `$6` chunks, and
/// at most `$7` bytes with this one) and the chunk stored. Its bytes are
/// `$5` (the texts around its `seq`) plus the digits of the `seq` assigned.
const FAST_APPEND_CHUNK: &str = "WITH bumped AS (\
     UPDATE streams SET last_seq = last_seq + 1, \
     bytes = bytes + $5::bigint + length((last_seq + 1)::text) \
     WHERE id = $1 AND status = 'open' AND created_at <= $2 AND last_seq < $6::bigint \
     AND bytes + $5::bigint + length((last_seq + 1)::text) <= $7::bigint \
     RETURNING last_seq), \
     stored AS (INSERT INTO stream_chunks (stream_id, seq, chunk) \
     SELECT $1, last_seq, $3::text || last_seq::text || $4::text FROM bumped RETURNING seq) \
     SELECT (SELECT seq FROM stored) AS seq, (SELECT status FROM streams WHERE id = $1) AS status";

impl Columns for PgRow {
    fn text(&self, i: usize) -> StoreResult<String> {
        Ok(self.try_get(i)?)
    }

    fn optional_text(&self, i: usize) -> StoreResult<Option<String>> {
        Ok(self.try_get(i)?)
    }

    fn str(&self, i: usize) -> StoreResult<&str> {
        Ok(self.try_get(i)?)
    }

    fn optional_str(&self, i: usize) -> StoreResult<Option<&str>> {
        Ok(self.try_get(i)?)
    }

    fn int(&self, i: usize) -> StoreResult<i64> {
        Ok(self.try_get(i)?)
    }

    fn optional_int(&self, i: usize) -> StoreResult<Option<i64>> {
        Ok(self.try_get(i)?)
    }
}

/// A shared statement with its arguments bound, counted.
pub(super) fn query(
    statement: &Statement<impl ArgList>,
) -> sqlx::query::Query<'static, Postgres, sqlx::postgres::PgArguments> {
    statement
        .args()
        .iter()
        .fold(counted(statement.text), |query, arg| match *arg {
            Arg::Text(text) => query.bind(text),
            Arg::OptionalText(text) => query.bind(text),
            Arg::Int(int) => query.bind(int),
            Arg::OptionalInt(int) => query.bind(int),
            Arg::Limit(limit) => query.bind(limit),
        })
}

/// One read operation's connection, taken from the pool at its first
/// statement and kept for the rest: an operation of two statements (rows,
/// then the existence check of an empty answer) never waits for the pool
/// twice, and never makes it open a second connection while its first is
/// still being returned (issue 21).
pub(crate) struct PgRead<'p> {
    connections: &'p Connections,
    conn: Option<ReadConnection>,
}

impl<'p> PgRead<'p> {
    pub(super) fn new(connections: &'p Connections) -> Self {
        PgRead {
            connections,
            conn: None,
        }
    }

    /// Close the connection instead of returning it (a statement was left
    /// with rows unread).
    pub fn discard(&mut self) {
        if let Some(conn) = &mut self.conn {
            conn.close_on_drop();
        }
    }

    pub async fn conn(&mut self) -> StoreResult<&mut PgConnection> {
        if self.conn.is_none() {
            self.conn = Some(self.connections.acquire_read().await?);
        }
        match self.conn.as_mut() {
            Some(read) => Ok(read.conn()),
            None => Err(StoreError::Corrupt("read connection vanished".into())),
        }
    }
}

/// A connection shared statements run on: a read's, or a transaction.
trait Connection: Send {
    fn connection(&mut self) -> impl Future<Output = StoreResult<&mut PgConnection>> + Send;

    /// A statement was left with rows unread ([`Statements::abandon`]).
    fn abandon(&mut self);
}

impl Connection for PgRead<'_> {
    /// The read's connection, taken from the pool at its first statement.
    async fn connection(&mut self) -> StoreResult<&mut PgConnection> {
        self.conn().await
    }

    /// Closed instead of returned to the pool.
    fn abandon(&mut self) {
        self.discard();
    }
}

impl<C: Connection> Statements for C {
    const DIALECT: Dialect = Dialect::Postgres;

    async fn execute<A: ArgList + Send>(&mut self, statement: Statement<A>) -> StoreResult<u64> {
        let done = query(&statement).execute(self.connection().await?).await?;
        Ok(done.rows_affected())
    }

    async fn first<A, T, D>(&mut self, statement: Statement<A>, decode: D) -> StoreResult<Option<T>>
    where
        A: ArgList + Send,
        T: Send,
        D: FnOnce(&dyn Columns) -> StoreResult<T> + Send,
    {
        let row = query(&statement)
            .fetch_optional(self.connection().await?)
            .await?;
        row.map(|row| decode(&row)).transpose()
    }

    async fn all<A, T, D>(&mut self, statement: Statement<A>, mut decode: D) -> StoreResult<Vec<T>>
    where
        A: ArgList + Send,
        T: Send,
        D: FnMut(&dyn Columns) -> StoreResult<T> + Send,
    {
        let rows = query(&statement)
            .fetch_all(self.connection().await?)
            .await?;
        rows.iter().map(|row| decode(row)).collect()
    }

    /// Rows as sqlx hands them over from the socket: a whole history never
    /// sits in memory.
    async fn each<A: ArgList + Send>(
        &mut self,
        statement: Statement<A>,
        rows: &mut impl EachRow,
    ) -> StoreResult<()> {
        let mut stepping = query(&statement).fetch(self.connection().await?);
        while let Some(row) = stepping.try_next().await? {
            if rows.take(&row)? {
                rows.pause().await?;
            }
        }
        Ok(())
    }

    fn abandon(&mut self) {
        Connection::abandon(self);
    }
}

/// One write operation's connection: a fast path runs on it in autocommit;
/// the first transaction primitive begins the transaction.
pub(crate) struct PgTx {
    conn: Conn,
    clock: Arc<dyn Clock>,
    /// The fast paths may run (`PgBackend`'s switch).
    fast_paths: bool,
}

enum Conn {
    /// No transaction begun yet.
    Idle(PoolConnection<Postgres>),
    Open(Transaction<'static, Postgres>),
    /// Lost to a failed `BEGIN`.
    Gone,
}

impl PgTx {
    pub fn new(conn: PoolConnection<Postgres>, clock: Arc<dyn Clock>, fast_paths: bool) -> Self {
        PgTx {
            conn: Conn::Idle(conn),
            clock,
            fast_paths,
        }
    }

    /// The connection outside any transaction, while none has begun: where
    /// a fast path runs (none, with the fast paths switched off).
    fn autocommit(&mut self) -> Option<&mut PgConnection> {
        match &mut self.conn {
            Conn::Idle(conn) if self.fast_paths => Some(&mut **conn),
            _ => None,
        }
    }

    /// The transaction, begun on first use.
    async fn tx(&mut self) -> StoreResult<&mut PgConnection> {
        if matches!(self.conn, Conn::Idle(_)) {
            let Conn::Idle(conn) = std::mem::replace(&mut self.conn, Conn::Gone) else {
                unreachable!("checked above");
            };
            // What `Pool::begin` does, on the connection already held.
            self.conn = Conn::Open(Transaction::begin(conn, None).await?);
        }
        match &mut self.conn {
            Conn::Open(tx) => Ok(&mut **tx),
            _ => Err(StoreError::Corrupt("the write connection was lost".into())),
        }
    }

    /// Commit (`keep`) or roll back the transaction, if one was begun.
    pub async fn finish(self, keep: bool) -> StoreResult<()> {
        if let Conn::Open(tx) = self.conn {
            if keep {
                tx.commit().await?;
            } else {
                tx.rollback().await?;
            }
        }
        Ok(())
    }
}

impl Connection for PgTx {
    /// The transaction, begun at the first statement.
    async fn connection(&mut self) -> StoreResult<&mut PgConnection> {
        self.tx().await
    }

    /// A write steps no statement row by row.
    fn abandon(&mut self) {}
}

impl WriteTx for PgTx {
    fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    async fn try_append(
        &mut self,
        r: &ResourceRef,
        event: &NewEvent,
        expected_seq: Option<i64>,
        max_events: i64,
    ) -> StoreResult<Option<FastAppend>> {
        // Writers racing for one row may take it in another order than they
        // read the clock: one refused for a time behind the last write tries
        // again with a fresh reading, which has passed that write.
        let texts = fast_append::Texts::new(r, event);
        for _ in 0..fast_append::ATTEMPTS {
            let now = self.now();
            let Some(conn) = self.autocommit() else {
                return Ok(None);
            };
            let row = counted(fast_append::POSTGRES)
                .bind(r.kind.tag())
                .bind(&r.id)
                .bind(now)
                .bind(expected_seq)
                .bind(&texts.head)
                .bind(&texts.after)
                .bind(fast_append::times(now))
                .bind(TS_MEMBER)
                .bind(max_events)
                .bind(&*texts.event_type)
                .fetch_one(conn)
                .await?;
            let (seq, ts, before) = (
                row.try_get("seq")?,
                row.try_get("ts")?,
                row.try_get("before")?,
            );
            match fast_append::decide(r, event, expected_seq, max_events, seq, ts, before)? {
                Step::Decided(answer) => return Ok(answer),
                Step::Again => {}
            }
        }
        Ok(None)
    }

    async fn try_deposit(
        &mut self,
        r: &ResourceRef,
        artifacts: &[NewArtifact],
        make_event: &MakeEvent,
        bounds: &Bounds,
    ) -> StoreResult<Option<(String, Vec<ArtifactMeta>)>> {
        let now = self.now();
        let Some(conn) = self.autocommit() else {
            return Ok(None);
        };
        let mut kinds: Vec<&str> = artifacts.iter().map(|a| a.kind.as_str()).collect();
        kinds.sort_unstable();
        kinds.dedup();
        let rows = counted(DEPOSIT_HEADS)
            .bind(r.kind.tag())
            .bind(&r.id)
            .bind(&kinds)
            .fetch_all(&mut *conn)
            .await?;
        let Some(first) = rows.first() else {
            return Err(StoreError::NotFound(r.clone()));
        };
        let last_seq: i64 = first.try_get("last_seq")?;
        // A full log: the transaction refuses it (after the catalog's say).
        if last_seq >= bounds.max_events_per_log {
            return Ok(None);
        }
        let updated_at: i64 = first.try_get("updated_at")?;
        let ts = now.max(updated_at);
        // The next revision of each kind, as the transaction would assign them.
        let mut next: Vec<(String, i64)> = Vec::with_capacity(rows.len());
        for row in &rows {
            if let Some(kind) = row.try_get::<Option<String>, _>("artifact_kind")? {
                let head: Option<i64> = row.try_get("next_revision")?;
                next.push((kind, head.unwrap_or(0)));
            }
        }
        let mut metas = Vec::with_capacity(artifacts.len());
        for artifact in artifacts {
            let Some((_, revision)) = next.iter_mut().find(|(kind, _)| *kind == artifact.kind)
            else {
                return Err(StoreError::Corrupt("no revision head read".into()));
            };
            metas.push(ArtifactMeta {
                resource: r.clone(),
                kind: artifact.kind.clone(),
                revision: *revision,
                blob_ref: artifact.blob_ref.clone(),
                size: artifact.size,
                metadata: artifact.metadata.clone(),
                created_at: ts,
            });
            *revision += 1;
        }
        // A kind at its bound: the transaction refuses it. The revisions
        // read are exact while the statement below succeeds (one consumed
        // meanwhile is a unique violation, which declines).
        if metas
            .iter()
            .any(|m| m.revision >= bounds.max_artifact_revisions)
        {
            return Ok(None);
        }
        let event = make_event(&metas)?;
        let seq = last_seq + 1;
        let envelope = envelope_json(r, seq, ts, &event);
        let (head_kinds, head_next): (Vec<String>, Vec<i64>) = next.into_iter().unzip();
        let stored = counted(FAST_DEPOSIT)
            .bind(r.kind.tag())
            .bind(&r.id)
            .bind(ts)
            .bind(last_seq)
            .bind(&head_kinds)
            .bind(&head_next)
            .bind(metas.iter().map(|m| m.kind.clone()).collect::<Vec<_>>())
            .bind(metas.iter().map(|m| m.revision).collect::<Vec<_>>())
            .bind(metas.iter().map(|m| m.blob_ref.clone()).collect::<Vec<_>>())
            .bind(metas.iter().map(|m| m.size).collect::<Vec<_>>())
            .bind(
                metas
                    .iter()
                    .map(|m| Value::Object(m.metadata.clone()).to_string())
                    .collect::<Vec<_>>(),
            )
            .bind(&envelope)
            .bind(&*event.type_name())
            .fetch_optional(conn)
            .await;
        match stored {
            Ok(Some(_)) => Ok(Some((envelope, metas))),
            // The resource moved since the read (or its clock is behind).
            Ok(None) => Ok(None),
            // A revision read was consumed meanwhile; nothing was kept.
            Err(err) if is_unique_violation(&err) => Ok(None),
            Err(err) => Err(err.into()),
        }
    }

    async fn try_append_chunk(
        &mut self,
        id: &str,
        parts_json: &str,
        bounds: &Bounds,
    ) -> StoreResult<Option<String>> {
        let now = self.now();
        let Some(conn) = self.autocommit() else {
            return Ok(None);
        };
        let (head, tail) = chunk_parts(id, now, parts_json);
        let around = i64::try_from(head.len() + tail.len()).unwrap_or(i64::MAX);
        let row = counted(FAST_APPEND_CHUNK)
            .bind(id)
            .bind(now)
            .bind(&head)
            .bind(&tail)
            .bind(around)
            .bind(bounds.max_stream_chunks)
            .bind(bounds.max_stream_bytes)
            .fetch_one(conn)
            .await?;
        let seq: Option<i64> = row.try_get("seq")?;
        let status: Option<String> = row.try_get("status")?;
        match (seq, status.as_deref()) {
            (Some(seq), _) => Ok(Some(format!("{head}{seq}{tail}"))),
            (None, None) => Err(StoreError::NotFound(ResourceRef::new(
                ResourceKind::Stream,
                id,
            ))),
            (None, Some("closed")) => Err(StoreError::Closed(id.to_owned())),
            // The clock behind its creation, or a bound reached: the
            // transaction decides.
            (None, Some(_)) => Ok(None),
        }
    }

    async fn lock_resource(&mut self, r: &ResourceRef) -> StoreResult<Option<ResourceRow>> {
        let statement = select_resource(r).with_text(LOCK_RESOURCE_POSTGRES);
        self.first(statement, |row| resource_row(r.kind, row)).await
    }

    async fn lock_log_tail(&mut self, r: &ResourceRef) -> StoreResult<Option<LogTail>> {
        let statement = select_log_tail(r).with_text(LOCK_LOG_TAIL_POSTGRES);
        self.first(statement, |row| log_tail_row(row)).await
    }

    async fn append_event(
        &mut self,
        r: &ResourceRef,
        seq: i64,
        now: i64,
        envelope: &str,
        event_type: &str,
    ) -> StoreResult<()> {
        let statement =
            append_event(r, seq, now, envelope, event_type).with_text(APPEND_EVENT_POSTGRES);
        self.run(statement).await
    }

    async fn insert_artifact(
        &mut self,
        r: &ResourceRef,
        artifact: &NewArtifact,
        metadata: &str,
        now: i64,
    ) -> StoreResult<i64> {
        let statement =
            insert_artifact(r, artifact, metadata, now).with_text(INSERT_ARTIFACT_POSTGRES);
        self.first(statement, |row| row.int(0))
            .await?
            .ok_or_else(|| StoreError::Corrupt("no revision assigned".into()))
    }

    async fn lock_ticket(&mut self, repo: &str, ticket_id: &str) -> StoreResult<()> {
        let statement = Statement {
            text: LOCK_TICKET,
            args: [Arg::Text(repo), Arg::Text(ticket_id)],
        };
        self.run(statement).await
    }

    async fn lock_stream(&mut self, id: &str) -> StoreResult<Option<StreamRecord>> {
        let statement = select_stream(id).with_text(LOCK_STREAM_POSTGRES);
        self.first(statement, |row| stream_row(row)).await
    }

    async fn append_chunk(&mut self, id: &str, seq: i64, chunk: &str) -> StoreResult<()> {
        let statement = append_chunk(id, seq, chunk).with_text(APPEND_CHUNK_POSTGRES);
        self.run(statement).await
    }
}
