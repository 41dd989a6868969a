//! Builds' own statements: every build record (a streamed read), and
//! protocol 3's build digests of a repository, written per dialect.
//! Creating one is the resource row's insert (`resources::sql`).

use serde_json::Value;

use crate::store::error::StoreResult;
use crate::store::resources::sql::resource_columns;
use crate::store::statement::{Columns, Dialect, Fixed, Statements, args, statement};

// Statements written once per `Dialect`: protocol 3's derived reads select
// events by the `type` column (migration 0011, index `events_by_type`), and
// look into the envelope for a digest's `ts` and into the record JSON for a
// build's repository, which the two databases spell differently
// (`json_extract` / `abstore_json_member`, migration 0005: PostgreSQL's own
// JSON functions refuse a document holding `\u0000`, and it reads the
// member's text as written, still escaped). The repository expression is
// exactly the one migration 0005 indexes, so the planners can use it;
// SQLite, whose planner keeps the primary key without statistics, is told
// to use the type index (`INDEXED BY`: a statement that could not use the
// index fails to prepare rather than scan). The state events' statement
// (`events::sql::state_events`) follows the same rules.

/// The build digests of a repository (protocol 3): one row per event of the
/// four digest types of each of its builds, by slug then sequence, and a
/// row with `NULL`s for a build without any. `$1`: the repository.
///
/// The join selects by the indexed type column; the type and time a row
/// reports are `$row_ty` and `$row_ts`. On PostgreSQL the time is read by
/// position: its regular expression, for each of a week-old repository's
/// ~9,000 digest events, was most of the read's cost
/// (docs/benchmarks/frame-and-tick.md). By position is exact here: the
/// server writes envelopes compact, resource member, `seq`, `ts`, actor,
/// `type`, payload (store/envelope.rs, `envelope_json`), and a string value
/// cannot hold `,"ts":"` (its quotes are escaped), so the first is the
/// member itself. Every `ts` (ISO 8601) holds no escape or quote, and the
/// window (40 characters) exceeds it.
macro_rules! build_digests_sql {
    ($builds:literal, $events:literal, $ty:literal, $row_ty:literal, $row_ts:literal, $repo:literal) => {
        concat!(
            "SELECT b.id, e.seq, ",
            $row_ty,
            ", ",
            $row_ts,
            " FROM ",
            $builds,
            " LEFT JOIN ",
            $events,
            " ON e.kind = 'build' AND e.resource_id = b.id AND ",
            $ty,
            " IN ('build.completed', 'build.aborted', 'pr.merged', 'observation.recorded') \
             WHERE b.kind = 'build' AND ",
            $repo,
            " = $1 ORDER BY b.id, e.seq"
        )
    };
}

/// The digest rows of `repo`'s builds ([`build_digests`], [`digest_row`]),
/// on any connection.
pub(crate) async fn digest_rows<D: Statements>(
    db: &mut D,
    repo: &str,
) -> StoreResult<Vec<(String, Option<DigestEvent>)>> {
    let repo = digests_repo(repo, D::DIALECT);
    db.all(build_digests(&repo, D::DIALECT), |row| digest_row(row))
        .await
}

/// The repository parameter of [`build_digests`]: PostgreSQL compares it
/// as the attributes' JSON text writes it, escapes included (migration
/// 0005, `abstore_json_member`), so it is given serde_json's escaping, the
/// one every stored record's JSON was written with.
fn digests_repo(repo: &str, dialect: Dialect) -> std::borrow::Cow<'_, str> {
    match dialect {
        Dialect::Sqlite => repo.into(),
        Dialect::Postgres => {
            let quoted = Value::String(repo.to_owned()).to_string();
            quoted[1..quoted.len() - 1].to_owned().into()
        }
    }
}

/// The digest rows of `repo`'s builds ([`digest_row`] reads them); `repo`
/// as [`digests_repo`] gives it.
pub(crate) fn build_digests(repo: &str, dialect: Dialect) -> Fixed<'_, 1> {
    // SQLite keeps json_extract: by position (instr and substr, which walk
    // the text by characters) measured slower there, 49-52 against 37-42 ms
    // of server CPU a week-old store's frame.
    const SQLITE: &str = build_digests_sql!(
        "resources b INDEXED BY builds_by_repo",
        "events e INDEXED BY events_by_type",
        "e.type",
        "e.type",
        "json_extract(e.envelope, '$.ts')",
        "json_extract(b.attrs, '$.repo')"
    );
    const POSTGRES: &str = build_digests_sql!(
        "resources b",
        "events e",
        "e.type",
        "e.type",
        "split_part(substr(e.envelope, strpos(e.envelope, ',\"ts\":\"') + 7, 40), '\"', 1)",
        "(abstore_json_member(b.attrs, 'repo') COLLATE \"C\")"
    );
    let text = match dialect {
        Dialect::Sqlite => SQLITE,
        Dialect::Postgres => POSTGRES,
    };
    statement(text, args![repo])
}

/// Every build of a repository and its log's tail (`last_seq`), ordered as
/// [`build_digests`] orders its rows: the version a kept digest is checked
/// against (`crate::history`'s digests cache). `$1`: the repository, as
/// [`digests_repo`] gives it.
///
/// SQLite is told to use `builds_by_repo` (here and in [`build_digests`]):
/// its planner preferred the primary key, already in `id` order, and
/// parsed every build's attributes for `json_extract`, 10 % of a month-old
/// store's digests read (perf, issue 52); the index holds the value.
pub(crate) fn build_tails(repo: &str, dialect: Dialect) -> Fixed<'_, 1> {
    const SQLITE: &str = "SELECT b.id, b.last_seq FROM resources b INDEXED BY builds_by_repo \
         WHERE b.kind = 'build' AND json_extract(b.attrs, '$.repo') = $1 ORDER BY b.id";
    const POSTGRES: &str = "SELECT b.id, b.last_seq FROM resources b \
         WHERE b.kind = 'build' AND (abstore_json_member(b.attrs, 'repo') COLLATE \"C\") = $1 \
         ORDER BY b.id";
    let text = match dialect {
        Dialect::Sqlite => SQLITE,
        Dialect::Postgres => POSTGRES,
    };
    statement(text, args![repo])
}

/// The tails of `repo`'s builds ([`build_tails`]), on any connection.
pub(crate) async fn tail_rows<D: Statements>(
    db: &mut D,
    repo: &str,
) -> StoreResult<Vec<(String, i64)>> {
    let repo = digests_repo(repo, D::DIALECT);
    db.all(build_tails(&repo, D::DIALECT), |row| {
        Ok((row.text(0)?, row.int(1)?))
    })
    .await
}

/// A stretch of one build's log: the sequences after `after`, up to and
/// including `until`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LogSpan {
    pub slug: String,
    pub after: i64,
    pub until: i64,
}

/// The digest events in `spans`, each build's in sequence order, on any
/// connection ([`span_digest_events`]).
pub(crate) async fn span_rows<D: Statements>(
    db: &mut D,
    spans: &[LogSpan],
) -> StoreResult<Vec<(String, DigestEvent)>> {
    let param = serde_json::to_string(spans).unwrap_or_else(|_| "[]".to_owned());
    let mut rows = db
        .all(span_digest_events(&param, D::DIALECT), |row| {
            Ok((row.text(0)?, (row.int(1)?, row.text(2)?, row.text(3)?)))
        })
        .await?;
    // By slug, then sequence: the statement leaves the order to the plan.
    rows.sort_unstable_by(|(a, (x, ..)), (b, (y, ..))| a.cmp(b).then(x.cmp(y)));
    Ok(rows)
}

/// The events of the four digest types in the spans `$1` names (a JSON
/// array of [`LogSpan`]s), read as [`build_digests`] reads them: by the
/// type index, `ts` by `json_extract` on SQLite and by position on
/// PostgreSQL.
pub(crate) fn span_digest_events(param: &str, dialect: Dialect) -> Fixed<'_, 1> {
    // The spans are read out of their JSON once, and `CROSS JOIN` keeps
    // them the outer loop: left to itself, SQLite's planner scanned every
    // build event of the store on the type index and evaluated the spans'
    // `json_extract`s against each (a month-old store's frame spent most of
    // its server CPU there whenever a build had moved; perf, issue 52).
    const SQLITE: &str = "WITH s(slug, after, until) AS MATERIALIZED \
         (SELECT json_extract(value, '$.slug'), json_extract(value, '$.after'), \
         json_extract(value, '$.until') FROM json_each($1)) \
         SELECT e.resource_id, e.seq, e.type, json_extract(e.envelope, '$.ts') \
         FROM s CROSS JOIN events e INDEXED BY events_by_type \
         ON e.kind = 'build' AND e.resource_id = s.slug \
         AND e.type IN ('build.completed', 'build.aborted', 'pr.merged', 'observation.recorded') \
         AND e.seq > s.after AND e.seq <= s.until";
    const POSTGRES: &str = "SELECT e.resource_id, e.seq, e.type, \
         split_part(substr(e.envelope, strpos(e.envelope, ',\"ts\":\"') + 7, 40), '\"', 1) \
         FROM json_to_recordset($1::json) AS a(slug text, after bigint, until bigint) \
         JOIN events e ON e.kind = 'build' AND e.resource_id = a.slug COLLATE \"C\" \
         AND e.type IN ('build.completed', 'build.aborted', 'pr.merged', 'observation.recorded') \
         AND e.seq > a.after AND e.seq <= a.until";
    let text = match dialect {
        Dialect::Sqlite => SQLITE,
        Dialect::Postgres => POSTGRES,
    };
    statement(text, args![param])
}

/// A digest event's seq, type and ts.
pub type DigestEvent = (i64, String, String);

/// A row of [`build_digests`]: slug, and the event's seq, type and ts
/// (`None` for a build without digest events).
pub(crate) fn digest_row(
    row: &(impl Columns + ?Sized),
) -> StoreResult<(String, Option<DigestEvent>)> {
    let slug = row.text(0)?;
    let event = match row.optional_int(1)? {
        Some(seq) => Some((seq, row.text(2)?, row.text(3)?)),
        None => None,
    };
    Ok((slug, event))
}

/// Every build record, in creation order (a streamed read).
pub(crate) fn all_builds() -> Fixed<'static, 0> {
    const SQL: &str = concat!(
        "SELECT ",
        resource_columns!(),
        " FROM resources WHERE kind = 'build' ORDER BY created_at, id"
    );
    statement(SQL, [])
}
