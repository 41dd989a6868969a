//! The SQLite primitives of [`Reads`] and [`Writes`] over one rusqlite
//! connection, running the shared statements ([`sql`]). Every statement is
//! prepared once per connection (`prepare_cached`). The futures never pend:
//! [`run_synchronously`](crate::store::ops::run_synchronously) runs them.
//!
//! No row lock is needed: the one writer connection, inside the batch's
//! `BEGIN IMMEDIATE`, already serialises every write. What PostgreSQL fuses
//! into one statement (`WITH … AS (UPDATE …)`), SQLite runs as two.

use rusqlite::types::{ToSqlOutput, Value as SqlValue};
use rusqlite::{CachedStatement, Connection, Row, ToSql};
use serde_json::Value;

use super::stream::Out;

use crate::clock::Clock;
use crate::protocol::ResourceRef;
use crate::store::ops::{Reads, ResourceRow, Writes};
use crate::store::sql::{self, Arg, Columns};
use crate::store::{
    ArtifactMeta, DatabaseError, DatabaseFailure, Listing, NewArtifact, StoreError, StoreResult,
    StreamArtifact, StreamRecord,
};

/// Resource and stream tails of a JSON array of `{kind, id}` in one
/// statement; a closed stream reports the largest tail so its readers wake.
const TAILS: &str = "SELECT r.kind, r.id, r.last_seq FROM resources r JOIN json_each($1) j \
     ON r.kind = json_extract(j.value, '$.kind') AND r.id = json_extract(j.value, '$.id') \
     UNION ALL \
     SELECT 'stream', s.id, CASE WHEN s.status = 'closed' THEN 9223372036854775807 ELSE s.last_seq END \
     FROM streams s JOIN json_each($1) j \
     ON json_extract(j.value, '$.kind') = 'stream' AND s.id = json_extract(j.value, '$.id')";
/// The metadata of a revision [`sql::NEXT_REVISION`] assigned.
const INSERT_ARTIFACT: &str = "INSERT INTO artifacts \
     (kind, resource_id, artifact_kind, revision, blob_ref, size, metadata, created_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

/// A page's `LIMIT` for "no limit": SQLite takes a negative one (and
/// refuses `NULL`).
const NO_LIMIT: i64 = -1;

/// The names of the statements' parameters, by number.
const PARAMETERS: [&str; 12] = [
    "$1", "$2", "$3", "$4", "$5", "$6", "$7", "$8", "$9", "$10", "$11", "$12",
];

/// A statement's arguments, for `$1`, `$2`, … in order.
macro_rules! args {
    ($($value:expr),* $(,)?) => {
        &[$(&$value as &dyn rusqlite::ToSql),*][..]
    };
}

/// A rusqlite error as the store sees it. Called on the thread whose call
/// failed, right after it, so the thread's `errno` is still that call's
/// (`storage_full::sqlite`); the writer answers a full disk as such.
impl From<rusqlite::Error> for StoreError {
    fn from(err: rusqlite::Error) -> StoreError {
        let failure = if crate::storage_full::sqlite(&err, &std::io::Error::last_os_error()) {
            DatabaseFailure::StorageFull
        } else {
            DatabaseFailure::Statement
        };
        StoreError::Database(DatabaseError::new(failure, err))
    }
}

impl Columns for Row<'_> {
    fn text(&self, i: usize) -> StoreResult<String> {
        Ok(self.get(i)?)
    }

    fn optional_text(&self, i: usize) -> StoreResult<Option<String>> {
        Ok(self.get(i)?)
    }

    fn str(&self, i: usize) -> StoreResult<&str> {
        Ok(self.get_ref(i)?.as_str().map_err(rusqlite::Error::from)?)
    }

    fn int(&self, i: usize) -> StoreResult<i64> {
        Ok(self.get(i)?)
    }

    fn optional_int(&self, i: usize) -> StoreResult<Option<i64>> {
        Ok(self.get(i)?)
    }
}

impl ToSql for Arg<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match *self {
            Arg::Text(text) => ToSqlOutput::Borrowed(text.into()),
            Arg::Int(int) => ToSqlOutput::Owned(SqlValue::Integer(int)),
        })
    }
}

/// One connection, plus the clock writes read their time from.
pub(crate) struct Conn<'c> {
    conn: &'c mut Connection,
    clock: &'c dyn Clock,
}

impl<'c> Conn<'c> {
    pub(super) fn new(conn: &'c mut Connection, clock: &'c dyn Clock) -> Self {
        Conn { conn, clock }
    }

    /// The cached statement `sql` with `args` bound to its `$1`, `$2`, …,
    /// counted in `abstore_db_queries_total`. SQLite numbers `$N`
    /// parameters by first appearance, so each is bound by its name; a
    /// number the statement does not use is skipped, and a parameter left
    /// unbound is an error.
    fn prepared(&self, sql: &str, args: &[&dyn ToSql]) -> StoreResult<CachedStatement<'_>> {
        metrics::counter!("abstore_db_queries_total").increment(1);
        let mut statement = self.conn.prepare_cached(sql)?;
        let mut bound = 0;
        for (name, arg) in PARAMETERS.iter().zip(args) {
            if let Some(index) = statement.parameter_index(name)? {
                statement.raw_bind_parameter(index, arg)?;
                bound += 1;
            }
        }
        if bound != statement.parameter_count() || args.len() > PARAMETERS.len() {
            return Err(
                rusqlite::Error::InvalidParameterCount(bound, statement.parameter_count()).into(),
            );
        }
        Ok(statement)
    }

    fn execute(&self, sql: &str, args: &[&dyn ToSql]) -> StoreResult<usize> {
        Ok(self.prepared(sql, args)?.raw_execute()?)
    }

    /// The first row, decoded.
    fn first<T>(
        &self,
        sql: &str,
        args: &[&dyn ToSql],
        decode: impl FnOnce(&Row<'_>) -> StoreResult<T>,
    ) -> StoreResult<Option<T>> {
        let mut statement = self.prepared(sql, args)?;
        let mut rows = statement.raw_query();
        rows.next()?.map(decode).transpose()
    }

    /// The first row, which must exist.
    fn one<T>(
        &self,
        sql: &str,
        args: &[&dyn ToSql],
        decode: impl FnOnce(&Row<'_>) -> StoreResult<T>,
    ) -> StoreResult<T> {
        self.first(sql, args, decode)?
            .ok_or_else(|| rusqlite::Error::QueryReturnedNoRows.into())
    }

    fn all<T>(
        &self,
        sql: &str,
        args: &[&dyn ToSql],
        mut decode: impl FnMut(&Row<'_>) -> StoreResult<T>,
    ) -> StoreResult<Vec<T>> {
        let mut statement = self.prepared(sql, args)?;
        let mut rows = statement.raw_query();
        let mut all = Vec::new();
        while let Some(row) = rows.next()? {
            all.push(decode(row)?);
        }
        Ok(all)
    }

    fn resource_row(&self, r: &ResourceRef) -> StoreResult<Option<ResourceRow>> {
        self.first(sql::SELECT_RESOURCE, args![r.kind.tag(), r.id], |row| {
            sql::resource_row(r.kind, row)
        })
    }

    fn stream_row(&self, id: &str) -> StoreResult<Option<StreamRecord>> {
        self.first(sql::SELECT_STREAM, args![id], |row| sql::stream_row(row))
    }

    fn exists_row(&self, r: &ResourceRef) -> StoreResult<bool> {
        Ok(self
            .first(sql::EXISTS_RESOURCE, args![r.kind.tag(), r.id], |_| Ok(()))?
            .is_some())
    }

    /// Run `listing`'s statement, writing each row's wire JSON to `out` as
    /// the statement steps (one statement: one snapshot), sending each piece
    /// as it fills; an empty answer of an unknown owner is `NotFound`.
    pub(super) fn stream(&self, listing: &Listing, out: &mut Out) -> StoreResult<()> {
        let (text, listing_args) = sql::listing(listing);
        let listing_args: Vec<&dyn ToSql> = listing_args.iter().map(|a| a as &dyn ToSql).collect();
        {
            let mut statement = self.prepared(text, &listing_args)?;
            let mut rows = statement.raw_query();
            while let Some(row) = rows.next()? {
                sql::render(listing, row, out.row())?;
                out.flush_if_full()?;
            }
        }
        if !out.has_rows()
            && let Some(owner) = listing.owner()
            && !self.exists_row(&owner)?
        {
            return Err(StoreError::NotFound(owner));
        }
        Ok(())
    }

    fn texts(&self, sql: &str, args: &[&dyn ToSql]) -> StoreResult<Vec<String>> {
        self.all(sql, args, |row| row.text(0))
    }
}

impl Reads for Conn<'_> {
    async fn resource(&mut self, r: &ResourceRef) -> StoreResult<Option<ResourceRow>> {
        self.resource_row(r)
    }

    async fn exists(&mut self, r: &ResourceRef) -> StoreResult<bool> {
        self.exists_row(r)
    }

    async fn events_since(
        &mut self,
        r: &ResourceRef,
        since: i64,
        limit: Option<i64>,
    ) -> StoreResult<Vec<String>> {
        self.texts(
            sql::EVENTS_PAGE,
            args![r.kind.tag(), r.id, since, limit.unwrap_or(NO_LIMIT)],
        )
    }

    async fn artifact(
        &mut self,
        r: &ResourceRef,
        kind: &str,
        rev: Option<i64>,
    ) -> StoreResult<Option<ArtifactMeta>> {
        let decode = |row: &Row<'_>| sql::artifact_row(r, row);
        match rev {
            Some(rev) => self.first(
                sql::SELECT_ARTIFACT,
                args![r.kind.tag(), r.id, kind, rev],
                decode,
            ),
            None => self.first(
                sql::SELECT_LATEST_ARTIFACT,
                args![r.kind.tag(), r.id, kind],
                decode,
            ),
        }
    }

    async fn stream(&mut self, id: &str) -> StoreResult<Option<StreamRecord>> {
        self.stream_row(id)
    }

    async fn chunks_since(
        &mut self,
        id: &str,
        since: i64,
        limit: Option<i64>,
    ) -> StoreResult<Vec<String>> {
        self.texts(
            sql::CHUNKS_PAGE,
            args![id, since, limit.unwrap_or(NO_LIMIT)],
        )
    }

    async fn tails(&mut self, resources: &[ResourceRef]) -> StoreResult<Vec<(ResourceRef, i64)>> {
        let param = crate::store::tails_param(resources);
        self.all(TAILS, args![param], |row| sql::tail_row(row))
    }

    async fn ping(&mut self) -> StoreResult<()> {
        self.one(sql::PING, args![], |_| Ok(()))
    }
}

impl Writes for Conn<'_> {
    fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    async fn lock_resource(&mut self, r: &ResourceRef) -> StoreResult<Option<ResourceRow>> {
        self.resource_row(r)
    }

    async fn insert_resource(
        &mut self,
        r: &ResourceRef,
        attrs: Option<&str>,
        now: i64,
    ) -> StoreResult<bool> {
        let inserted = self.execute(sql::INSERT_RESOURCE, args![r.kind.tag(), r.id, attrs, now])?;
        Ok(inserted > 0)
    }

    async fn append_event(
        &mut self,
        r: &ResourceRef,
        seq: i64,
        now: i64,
        envelope: &str,
    ) -> StoreResult<()> {
        let kind = r.kind.tag();
        let args = args![kind, r.id, seq, now, envelope];
        self.execute(sql::INSERT_EVENT, args)?;
        self.execute(sql::APPEND_EVENT_TAIL, args)?;
        Ok(())
    }

    async fn insert_artifacts(
        &mut self,
        r: &ResourceRef,
        artifacts: Vec<NewArtifact>,
        now: i64,
    ) -> StoreResult<Vec<ArtifactMeta>> {
        let mut metas = Vec::with_capacity(artifacts.len());
        for artifact in artifacts {
            let revision = self.one(
                sql::NEXT_REVISION,
                args![r.kind.tag(), r.id, artifact.kind],
                |row| row.int(0),
            )?;
            self.execute(
                INSERT_ARTIFACT,
                args![
                    r.kind.tag(),
                    r.id,
                    artifact.kind,
                    revision,
                    artifact.blob_ref,
                    artifact.size,
                    Value::Object(artifact.metadata.clone()).to_string(),
                    now
                ],
            )?;
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

    async fn touch(&mut self, r: &ResourceRef, now: i64) -> StoreResult<()> {
        self.execute(sql::TOUCH, args![r.kind.tag(), r.id, now])?;
        Ok(())
    }

    async fn set_lease(
        &mut self,
        r: &ResourceRef,
        holder: &str,
        expires_at: i64,
        ttl_ms: i64,
        now: i64,
    ) -> StoreResult<()> {
        self.execute(
            sql::SET_LEASE,
            args![r.kind.tag(), r.id, holder, expires_at, ttl_ms, now],
        )?;
        Ok(())
    }

    async fn extend_lease(
        &mut self,
        r: &ResourceRef,
        expires_at: i64,
        heartbeat_at: i64,
        now: i64,
    ) -> StoreResult<()> {
        self.execute(
            sql::EXTEND_LEASE,
            args![r.kind.tag(), r.id, expires_at, heartbeat_at, now],
        )?;
        Ok(())
    }

    async fn clear_lease(&mut self, r: &ResourceRef, now: i64) -> StoreResult<()> {
        self.execute(sql::CLEAR_LEASE, args![r.kind.tag(), r.id, now])?;
        Ok(())
    }

    async fn next_child_order(&mut self, parent: &ResourceRef) -> StoreResult<i64> {
        self.one(
            sql::NEXT_CHILD_ORDER,
            args![parent.kind.tag(), parent.id],
            |row| row.int(0),
        )
    }

    async fn insert_session(
        &mut self,
        id: &str,
        attrs: &str,
        now: i64,
        repo: &str,
        order: i64,
    ) -> StoreResult<()> {
        self.execute(sql::INSERT_SESSION, args![id, attrs, now, repo, order])?;
        Ok(())
    }

    async fn prune_closed_chunks(&mut self, scope: &ResourceRef) -> StoreResult<()> {
        self.execute(sql::PRUNE_CLOSED_CHUNKS, args![scope.kind.tag(), scope.id])?;
        Ok(())
    }

    async fn prune_revisions(
        &mut self,
        r: &ResourceRef,
        kind: &str,
        keep: i64,
        limit: i64,
    ) -> StoreResult<u64> {
        let deleted = self.execute(
            sql::PRUNE_REVISIONS,
            args![r.kind.tag(), r.id, kind, keep - 1, limit],
        )?;
        Ok(u64::try_from(deleted).unwrap_or(u64::MAX))
    }

    async fn insert_stream(
        &mut self,
        id: &str,
        scope: &ResourceRef,
        label: &str,
        now: i64,
        order: i64,
    ) -> StoreResult<()> {
        self.execute(
            sql::INSERT_STREAM,
            args![id, scope.kind.tag(), scope.id, label, now, order],
        )?;
        Ok(())
    }

    async fn stream_scope(&mut self, id: &str) -> StoreResult<Option<ResourceRef>> {
        Ok(self.stream_row(id)?.map(|stream| stream.scope))
    }

    async fn lock_stream(&mut self, id: &str) -> StoreResult<Option<StreamRecord>> {
        self.stream_row(id)
    }

    async fn append_chunk(&mut self, id: &str, seq: i64, chunk: &str) -> StoreResult<()> {
        let args = args![id, seq, chunk];
        self.execute(sql::INSERT_CHUNK, args)?;
        self.execute(sql::APPEND_CHUNK_TAIL, args)?;
        Ok(())
    }

    async fn mark_closed(
        &mut self,
        id: &str,
        now: i64,
        order: i64,
        outcome: &str,
        artifact: &StreamArtifact,
    ) -> StoreResult<()> {
        self.execute(
            sql::CLOSE_STREAM,
            args![
                id,
                now,
                order,
                outcome,
                artifact.kind,
                artifact.revision,
                artifact.blob_ref
            ],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    use super::Conn;
    use crate::clock::TestClock;
    use crate::store::sql::Columns as _;

    /// SQLite numbers `$N` parameters by first appearance: bound by
    /// position, `$2` here would take the first argument.
    #[test]
    fn numbered_parameters_bind_by_number_in_any_order() {
        let mut conn = Connection::open_in_memory().unwrap();
        let clock = TestClock::new(0);
        let conn = Conn::new(&mut conn, &clock);
        let row = conn
            .one(
                "SELECT $3, $1, $3 + $1",
                args![10_i64, 99_i64, 7_i64],
                |row| Ok((row.int(0)?, row.int(1)?, row.int(2)?)),
            )
            .unwrap();
        assert_eq!(row, (7, 10, 17));
    }

    #[test]
    fn a_parameter_left_unbound_is_an_error() {
        let mut conn = Connection::open_in_memory().unwrap();
        let clock = TestClock::new(0);
        let conn = Conn::new(&mut conn, &clock);
        assert!(conn.one("SELECT $1, $2", args![1_i64], |_| Ok(())).is_err());
    }
}
