//! The SQLite primitives of [`Reads`] and [`Writes`] over one rusqlite
//! connection, running the shared statements ([`sql`]). Every statement is
//! prepared once per connection (`prepare_cached`). The futures never pend:
//! [`run_synchronously`](crate::store::ops::run_synchronously) runs them.
//!
//! No row lock is needed: the one writer connection, inside the batch's
//! `BEGIN IMMEDIATE`, already serialises every write. What PostgreSQL fuses
//! into one statement (`WITH … AS (UPDATE …)`), SQLite runs as two.

use rusqlite::types::{ToSqlOutput, Value as SqlValue, ValueRef};
use rusqlite::{CachedStatement, Connection, Row, ToSql};
use serde_json::Value;

use super::stream::Out;

use crate::clock::Clock;
use crate::protocol::ResourceRef;
use crate::store::ops::{Reads, ResourceRow, Writes};
use crate::store::sql::{self, Arg, ArgList, Columns, Statement};
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
/// The metadata of the revision `$8` ([`sql::insert_artifact`]'s
/// arguments assigned it).
const INSERT_ARTIFACT: &str = "INSERT INTO artifacts \
     (kind, resource_id, artifact_kind, revision, blob_ref, size, metadata, created_at) \
     VALUES ($1, $2, $3, $8, $4, $5, $6, $7)";

/// A page's `LIMIT` for "no limit": SQLite takes a negative one (and
/// refuses `NULL`).
const NO_LIMIT: i64 = -1;

/// The names of the statements' parameters, by number.
const PARAMETERS: [&str; 12] = [
    "$1", "$2", "$3", "$4", "$5", "$6", "$7", "$8", "$9", "$10", "$11", "$12",
];

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
            Arg::Text(text) | Arg::OptionalText(Some(text)) => {
                ToSqlOutput::Borrowed(ValueRef::Text(text.as_bytes()))
            }
            Arg::OptionalText(None) => ToSqlOutput::Owned(SqlValue::Null),
            Arg::Int(int) => ToSqlOutput::Owned(SqlValue::Integer(int)),
            Arg::Limit(limit) => ToSqlOutput::Owned(SqlValue::Integer(limit.unwrap_or(NO_LIMIT))),
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

    /// The cached statement, its arguments bound to its `$1`, `$2`, …,
    /// counted in `abstore_db_queries_total`. SQLite numbers `$N`
    /// parameters by first appearance, so each is bound by its name; a
    /// number the statement does not use is skipped, and a parameter left
    /// unbound is an error.
    fn prepared(&self, statement: &Statement<impl ArgList>) -> StoreResult<CachedStatement<'_>> {
        metrics::counter!("abstore_db_queries_total").increment(1);
        let args = statement.args();
        let mut prepared = self.conn.prepare_cached(statement.text)?;
        let mut bound = 0;
        for (name, arg) in PARAMETERS.iter().zip(args) {
            if let Some(index) = prepared.parameter_index(name)? {
                prepared.raw_bind_parameter(index, arg)?;
                bound += 1;
            }
        }
        if bound != prepared.parameter_count() || args.len() > PARAMETERS.len() {
            return Err(
                rusqlite::Error::InvalidParameterCount(bound, prepared.parameter_count()).into(),
            );
        }
        Ok(prepared)
    }

    fn execute(&self, statement: Statement<impl ArgList>) -> StoreResult<usize> {
        Ok(self.prepared(&statement)?.raw_execute()?)
    }

    /// The first row, decoded.
    fn first<T>(
        &self,
        statement: Statement<impl ArgList>,
        decode: impl FnOnce(&Row<'_>) -> StoreResult<T>,
    ) -> StoreResult<Option<T>> {
        let mut prepared = self.prepared(&statement)?;
        let mut rows = prepared.raw_query();
        rows.next()?.map(decode).transpose()
    }

    /// The first row, which must exist.
    fn one<T>(
        &self,
        statement: Statement<impl ArgList>,
        decode: impl FnOnce(&Row<'_>) -> StoreResult<T>,
    ) -> StoreResult<T> {
        self.first(statement, decode)?
            .ok_or_else(|| rusqlite::Error::QueryReturnedNoRows.into())
    }

    fn all<T>(
        &self,
        statement: Statement<impl ArgList>,
        mut decode: impl FnMut(&Row<'_>) -> StoreResult<T>,
    ) -> StoreResult<Vec<T>> {
        let mut prepared = self.prepared(&statement)?;
        let mut rows = prepared.raw_query();
        let mut all = Vec::new();
        while let Some(row) = rows.next()? {
            all.push(decode(row)?);
        }
        Ok(all)
    }

    fn resource_row(&self, r: &ResourceRef) -> StoreResult<Option<ResourceRow>> {
        self.first(sql::select_resource(r), |row| {
            sql::resource_row(r.kind, row)
        })
    }

    fn stream_row(&self, id: &str) -> StoreResult<Option<StreamRecord>> {
        self.first(sql::select_stream(id), |row| sql::stream_row(row))
    }

    fn exists_row(&self, r: &ResourceRef) -> StoreResult<bool> {
        Ok(self.first(sql::exists_resource(r), |_| Ok(()))?.is_some())
    }

    /// Run `listing`'s statement, writing each row's wire JSON to `out` as
    /// the statement steps (one statement: one snapshot), sending each piece
    /// as it fills; an empty answer of an unknown owner is `NotFound`.
    pub(super) fn stream(&self, listing: &Listing, out: &mut Out) -> StoreResult<()> {
        {
            let mut prepared = self.prepared(&sql::listing(listing))?;
            let mut rows = prepared.raw_query();
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
        self.all(sql::events_page(r, since, limit), |row| row.text(0))
    }

    async fn artifact(
        &mut self,
        r: &ResourceRef,
        kind: &str,
        rev: Option<i64>,
    ) -> StoreResult<Option<ArtifactMeta>> {
        let decode = |row: &Row<'_>| sql::artifact_row(r, row);
        match rev {
            Some(rev) => self.first(sql::select_artifact(r, kind, rev), decode),
            None => self.first(sql::select_latest_artifact(r, kind), decode),
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
        self.all(sql::chunks_page(id, since, limit), |row| row.text(0))
    }

    async fn tails(&mut self, resources: &[ResourceRef]) -> StoreResult<Vec<(ResourceRef, i64)>> {
        let param = crate::store::tails_param(resources);
        let statement = Statement {
            text: TAILS,
            args: [Arg::Text(&param)],
        };
        self.all(statement, |row| sql::tail_row(row))
    }

    async fn ping(&mut self) -> StoreResult<()> {
        self.one(sql::ping(), |_| Ok(()))
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
        Ok(self.execute(sql::insert_resource(r, attrs, now))? > 0)
    }

    async fn append_event(
        &mut self,
        r: &ResourceRef,
        seq: i64,
        now: i64,
        envelope: &str,
    ) -> StoreResult<()> {
        let insert = sql::append_event(r, seq, now, envelope);
        self.execute(insert)?;
        self.execute(insert.with_text(sql::APPEND_EVENT_TAIL))?;
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
            let metadata = Value::Object(artifact.metadata.clone()).to_string();
            let next = sql::insert_artifact(r, &artifact, &metadata, now);
            let revision = self.one(next, |row| row.int(0))?;
            let [a1, a2, a3, a4, a5, a6, a7] = next.args;
            self.execute(Statement {
                text: INSERT_ARTIFACT,
                args: [a1, a2, a3, a4, a5, a6, a7, Arg::Int(revision)],
            })?;
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
        self.execute(sql::touch(r, now))?;
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
        self.execute(sql::set_lease(r, holder, expires_at, ttl_ms, now))?;
        Ok(())
    }

    async fn extend_lease(
        &mut self,
        r: &ResourceRef,
        expires_at: i64,
        heartbeat_at: i64,
        now: i64,
    ) -> StoreResult<()> {
        self.execute(sql::extend_lease(r, expires_at, heartbeat_at, now))?;
        Ok(())
    }

    async fn clear_lease(&mut self, r: &ResourceRef, now: i64) -> StoreResult<()> {
        self.execute(sql::clear_lease(r, now))?;
        Ok(())
    }

    async fn next_child_order(&mut self, parent: &ResourceRef) -> StoreResult<i64> {
        self.one(sql::next_child_order(parent), |row| row.int(0))
    }

    async fn insert_session(
        &mut self,
        id: &str,
        attrs: &str,
        now: i64,
        repo: &str,
        order: i64,
    ) -> StoreResult<()> {
        self.execute(sql::insert_session(id, attrs, now, repo, order))?;
        Ok(())
    }

    async fn prune_closed_chunks(&mut self, scope: &ResourceRef) -> StoreResult<()> {
        self.execute(sql::prune_closed_chunks(scope))?;
        Ok(())
    }

    async fn prune_revisions(
        &mut self,
        r: &ResourceRef,
        kind: &str,
        keep: i64,
        limit: i64,
    ) -> StoreResult<u64> {
        let deleted = self.execute(sql::prune_revisions(r, kind, keep, limit))?;
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
        self.execute(sql::insert_stream(id, scope, label, now, order))?;
        Ok(())
    }

    async fn stream_scope(&mut self, id: &str) -> StoreResult<Option<ResourceRef>> {
        Ok(self.stream_row(id)?.map(|stream| stream.scope))
    }

    async fn lock_stream(&mut self, id: &str) -> StoreResult<Option<StreamRecord>> {
        self.stream_row(id)
    }

    async fn append_chunk(&mut self, id: &str, seq: i64, chunk: &str) -> StoreResult<()> {
        let insert = sql::append_chunk(id, seq, chunk);
        self.execute(insert)?;
        self.execute(insert.with_text(sql::APPEND_CHUNK_TAIL))?;
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
        self.execute(sql::close_stream(id, now, order, outcome, artifact))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    use super::Conn;
    use crate::clock::TestClock;
    use crate::store::sql::{Arg, Columns as _, Statement};

    /// SQLite numbers `$N` parameters by first appearance: bound by
    /// position, `$3` here would take the first argument.
    #[test]
    fn numbered_parameters_bind_by_number_in_any_order() {
        let mut conn = Connection::open_in_memory().unwrap();
        let clock = TestClock::new(0);
        let conn = Conn::new(&mut conn, &clock);
        let statement = Statement {
            text: "SELECT $3, $1, $3 + $1",
            args: [Arg::Int(10), Arg::Int(99), Arg::Int(7)],
        };
        let row = conn
            .one(statement, |row| Ok((row.int(0)?, row.int(1)?, row.int(2)?)))
            .unwrap();
        assert_eq!(row, (7, 10, 17));
    }

    #[test]
    fn a_parameter_left_unbound_is_an_error() {
        let mut conn = Connection::open_in_memory().unwrap();
        let clock = TestClock::new(0);
        let conn = Conn::new(&mut conn, &clock);
        let statement = Statement {
            text: "SELECT $1, $2",
            args: [Arg::Int(1)],
        };
        assert!(conn.one(statement, |_| Ok(())).is_err());
    }
}
