//! One rusqlite connection as the operations use it: it runs the shared
//! statements ([`Statements`], each prepared once per connection with
//! `prepare_cached`) and SQLite's way of a write's dialect steps
//! ([`WriteTx`]). The futures never pend (rusqlite is synchronous):
//! [`run_synchronously`] runs them, on the writer thread or a reader's.
//!
//! No row lock is needed: the one writer connection, inside the batch's
//! `BEGIN IMMEDIATE`, already serialises every write. What PostgreSQL fuses
//! into one statement (`WITH … AS (UPDATE …)`), SQLite runs as two.

use std::future::Future;
use std::task::{Context, Poll, Waker};

use rusqlite::types::{ToSqlOutput, Value as SqlValue, ValueRef};
use rusqlite::{CachedStatement, Connection, Row, ToSql};

use crate::clock::Clock;
use crate::protocol::ResourceRef;
use crate::store::api::NewArtifact;
use crate::store::artifacts::sql::{insert_artifact, store_revision};
use crate::store::engine::WriteTx;
use crate::store::error::{StoreError, StoreResult};
use crate::store::events::sql::{APPEND_EVENT_TAIL, append_event};
use crate::store::records::{LogTail, ResourceRow, StreamRecord};
use crate::store::resources::sql as resources;
use crate::store::statement::{Arg, ArgList, Columns, Dialect, EachRow, Statement, Statements};
use crate::store::streams::sql::{self as streams, APPEND_CHUNK_TAIL, append_chunk};

/// A page's `LIMIT` for "no limit": SQLite takes a negative one (and
/// refuses `NULL`).
const NO_LIMIT: i64 = -1;

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

    fn optional_str(&self, i: usize) -> StoreResult<Option<&str>> {
        Ok(self
            .get_ref(i)?
            .as_str_or_null()
            .map_err(rusqlite::Error::from)?)
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
            Arg::Int(int) | Arg::OptionalInt(Some(int)) => {
                ToSqlOutput::Owned(SqlValue::Integer(int))
            }
            Arg::OptionalInt(None) => ToSqlOutput::Owned(SqlValue::Null),
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
    /// parameters by first appearance, so each of the statement's
    /// parameters is bound to the argument its name numbers; an argument
    /// the statement does not use is skipped, and a parameter without one
    /// is an error. By each parameter's name, not each argument's: looking
    /// a name up (rusqlite's cache of them) cost an append 3,800
    /// instructions on SQLite's writer thread (callgrind, issue 52).
    fn prepared(&self, statement: &Statement<impl ArgList>) -> StoreResult<CachedStatement<'_>> {
        metrics::counter!("abstore_db_queries_total").increment(1);
        let args = statement.args();
        let mut prepared = self.conn.prepare_cached(statement.text)?;
        let count = prepared.parameter_count();
        for index in 1..=count {
            let arg = prepared
                .parameter_name(index)
                .and_then(|name| name.strip_prefix('$'))
                .and_then(|number| number.parse::<usize>().ok())
                .and_then(|number| args.get(number.checked_sub(1)?));
            match arg {
                Some(arg) => prepared.raw_bind_parameter(index, arg)?,
                None => {
                    return Err(rusqlite::Error::InvalidParameterCount(index - 1, count).into());
                }
            }
        }
        Ok(prepared)
    }
}

/// Synchronous: the futures are ready when first polled.
impl Statements for Conn<'_> {
    const DIALECT: Dialect = Dialect::Sqlite;

    async fn execute<A: ArgList + Send>(&mut self, statement: Statement<A>) -> StoreResult<u64> {
        let changed = self.prepared(&statement)?.raw_execute()?;
        Ok(u64::try_from(changed).unwrap_or(u64::MAX))
    }

    async fn first<A, T, D>(&mut self, statement: Statement<A>, decode: D) -> StoreResult<Option<T>>
    where
        A: ArgList + Send,
        T: Send,
        D: FnOnce(&dyn Columns) -> StoreResult<T> + Send,
    {
        let mut prepared = self.prepared(&statement)?;
        let mut rows = prepared.raw_query();
        rows.next()?.map(|row| decode(row)).transpose()
    }

    async fn all<A, T, D>(&mut self, statement: Statement<A>, mut decode: D) -> StoreResult<Vec<T>>
    where
        A: ArgList + Send,
        T: Send,
        D: FnMut(&dyn Columns) -> StoreResult<T> + Send,
    {
        let mut prepared = self.prepared(&statement)?;
        let mut rows = prepared.raw_query();
        let mut all = Vec::new();
        while let Some(row) = rows.next()? {
            all.push(decode(row)?);
        }
        Ok(all)
    }

    /// Steps the statement while `rows` waits: run on a thread of its own
    /// (a reader's blocking task, under `Handle::block_on`), or where
    /// `rows` never waits (the in-memory database's whole answer).
    async fn each<A: ArgList + Send>(
        &mut self,
        statement: Statement<A>,
        rows: &mut impl EachRow,
    ) -> StoreResult<()> {
        let mut prepared = self.prepared(&statement)?;
        let mut stepping = prepared.raw_query();
        while let Some(row) = stepping.next()? {
            if rows.take(row)? {
                rows.pause().await?;
            }
        }
        Ok(())
    }
}

/// No row lock is needed (the one writer connection already serialises
/// every write), and what PostgreSQL fuses SQLite runs as two statements.
impl WriteTx for Conn<'_> {
    fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    async fn lock_resource(&mut self, r: &ResourceRef) -> StoreResult<Option<ResourceRow>> {
        resources::resource(self, r).await
    }

    async fn lock_log_tail(&mut self, r: &ResourceRef) -> StoreResult<Option<LogTail>> {
        self.first(resources::select_log_tail(r), |row| {
            resources::log_tail_row(row)
        })
        .await
    }

    async fn lock_stream(&mut self, id: &str) -> StoreResult<Option<StreamRecord>> {
        streams::stream(self, id).await
    }

    async fn lock_ticket(&mut self, _repo: &str, _ticket_id: &str) -> StoreResult<()> {
        Ok(())
    }

    async fn append_event(
        &mut self,
        r: &ResourceRef,
        seq: i64,
        now: i64,
        envelope: &str,
        event_type: &str,
    ) -> StoreResult<()> {
        let insert = append_event(r, seq, now, envelope, event_type);
        self.execute(insert).await?;
        self.execute(insert.with_text(APPEND_EVENT_TAIL)).await?;
        Ok(())
    }

    async fn insert_artifact(
        &mut self,
        r: &ResourceRef,
        artifact: &NewArtifact,
        metadata: &str,
        now: i64,
    ) -> StoreResult<i64> {
        let next = insert_artifact(r, artifact, metadata, now);
        let revision = self.first(next, |row| row.int(0)).await?;
        let revision =
            revision.ok_or_else(|| StoreError::Corrupt("no revision assigned".into()))?;
        self.run(store_revision(next, revision)).await?;
        Ok(revision)
    }

    async fn append_chunk(&mut self, id: &str, seq: i64, chunk: &str) -> StoreResult<()> {
        let insert = append_chunk(id, seq, chunk);
        self.execute(insert).await?;
        self.execute(insert.with_text(APPEND_CHUNK_TAIL)).await?;
        Ok(())
    }
}

/// Run an operation whose futures never pend (this connection's) to
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

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    use super::{Conn, run_synchronously};
    use crate::clock::TestClock;
    use crate::store::statement::{Arg, Dialect, Statement, Statements as _};

    /// SQLite numbers `$N` parameters by first appearance: bound by
    /// position, `$3` here would take the first argument.
    #[test]
    fn numbered_parameters_bind_by_number_in_any_order() {
        let mut conn = Connection::open_in_memory().unwrap();
        let clock = TestClock::new(0);
        let mut conn = Conn::new(&mut conn, &clock);
        let statement = Statement {
            text: "SELECT $3, $1, $3 + $1",
            args: [Arg::Int(10), Arg::Int(99), Arg::Int(7)],
        };
        let row = run_synchronously(
            conn.first(statement, |row| Ok((row.int(0)?, row.int(1)?, row.int(2)?))),
        )
        .unwrap();
        assert_eq!(row, Some((7, 10, 17)));
    }

    #[test]
    fn a_parameter_left_unbound_is_an_error() {
        let mut conn = Connection::open_in_memory().unwrap();
        let clock = TestClock::new(0);
        let mut conn = Conn::new(&mut conn, &clock);
        let statement = Statement {
            text: "SELECT $1, $2",
            args: [Arg::Int(1)],
        };
        assert!(run_synchronously(conn.first(statement, |_| Ok(()))).is_err());
    }

    /// The plan SQLite's planner takes for `text`, one line per step.
    fn plan(conn: &Connection, text: &str) -> String {
        let mut statement = conn.prepare(&format!("EXPLAIN QUERY PLAN {text}")).unwrap();
        let unbound = vec![Option::<String>::None; statement.parameter_count()];
        let rows = statement
            .query_map(rusqlite::params_from_iter(unbound), |row| {
                row.get::<_, String>(3)
            })
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        rows.join("\n")
    }

    /// Protocol 3's derived reads cost little: the builds of a repository
    /// and their tails come from `builds_by_repo`, their digest events (all
    /// of them, or those in spans of their logs) and a journal's durable
    /// events and anchor from `events_by_type` (migrations 0005, 0011); no
    /// table or journal is scanned whole.
    #[test]
    fn protocol_3_reads_use_their_indexes() {
        use crate::store::builds::sql::{build_digests, build_tails, span_digest_events};
        use crate::store::listing::statement_of;
        use crate::store::rows::Listing;
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::migrate::run(&mut conn).unwrap();
        let digests = plan(&conn, build_digests("r", Dialect::Sqlite).text);
        assert!(digests.contains("INDEX builds_by_repo"), "{digests}");
        assert!(digests.contains("INDEX events_by_type"), "{digests}");
        let tails = plan(&conn, build_tails("r", Dialect::Sqlite).text);
        assert!(tails.contains("INDEX builds_by_repo"), "{tails}");
        // Each span a range of one build's events (SQLite once chose to
        // scan every build event and match each against the spans).
        let spans = plan(&conn, span_digest_events("[]", Dialect::Sqlite).text);
        assert!(
            spans.contains(
                "INDEX events_by_type (kind=? AND resource_id=? AND type=? AND seq>? AND seq<?)"
            ),
            "{spans}"
        );
        let listing = Listing::StateEvents {
            repo: "r".into(),
            until: Some(7),
        };
        let state = plan(&conn, statement_of(&listing, Dialect::Sqlite).text);
        assert_eq!(state.matches("INDEX events_by_type").count(), 4, "{state}");
        assert!(!state.contains("SCAN"), "{state}");
    }

    /// A ticket's asset list (both views) and an asset's latest revision are
    /// ranges of `ticket_assets`' primary key, read in the answer's order:
    /// no scan, no sort (migration 0006).
    #[test]
    fn ticket_asset_reads_walk_the_primary_key_in_order() {
        use crate::store::assets::AssetKey;
        use crate::store::ticket_assets::sql;
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::migrate::run(&mut conn).unwrap();
        let key = AssetKey {
            repo: "r".into(),
            ticket_id: "t".into(),
            kind: "k".into(),
            name: "n".into(),
        };
        let texts = [
            sql::list_ticket_assets("r", "t", false).text,
            sql::list_ticket_assets("r", "t", true).text,
            sql::select_latest_ticket_asset(&key).text,
        ];
        for text in texts {
            let mut statement = conn.prepare(&format!("EXPLAIN QUERY PLAN {text}")).unwrap();
            let nulls = vec![Option::<String>::None; statement.parameter_count()];
            let plan = statement
                .query_map(rusqlite::params_from_iter(nulls), |row| {
                    row.get::<_, String>(3)
                })
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap()
                .join("\n");
            assert!(plan.contains("USING PRIMARY KEY"), "{text}: {plan}");
            assert!(
                !plan.contains("SCAN") && !plan.contains("TEMP B-TREE"),
                "{text}: {plan}"
            );
        }
    }
}
