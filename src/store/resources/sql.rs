//! What every resource row shares (builds, repositories, sessions): its
//! columns and their decoding ([`ResourceRow`]), its lookup and creation,
//! the write-time touch, the child counter, the held-read sweep's tails
//! (written per dialect: the JSON table functions differ), and the health
//! check's ping.

use serde_json::{Map, Value};

use crate::protocol::{ResourceKind, ResourceRef};
use crate::store::error::StoreResult;
use crate::store::records::{Lease, LogTail, Record, ResourceRow};
use crate::store::statement::{
    Columns, Dialect, Fixed, Statements, args, json_object, resource_kind, statement,
};

// `concat!` takes literals only: texts other statements extend are macros.

/// A resource row's columns, in the order [`resource_row`] reads them.
macro_rules! resource_columns {
    () => {
        "id, attrs, created_at, updated_at, last_seq, lease_holder, lease_expires_at, \
         lease_ttl_ms, heartbeat_at"
    };
}

macro_rules! select_resource_sql {
    () => {
        concat!(
            "SELECT ",
            $crate::store::resources::sql::resource_columns!(),
            " FROM resources WHERE kind = $1 AND id = $2"
        )
    };
}

pub(crate) use resource_columns;

macro_rules! select_log_tail_sql {
    () => {
        "SELECT last_seq, updated_at FROM resources WHERE kind = $1 AND id = $2"
    };
}

/// PostgreSQL's lock of the resource row for [`select_log_tail`]'s
/// columns ([`select_log_tail`]'s arguments).
pub(crate) const LOCK_LOG_TAIL_POSTGRES: &str = concat!(select_log_tail_sql!(), " FOR UPDATE");

/// PostgreSQL's lock of the resource row, held until the transaction ends
/// ([`select_resource`]'s arguments).
pub(crate) const LOCK_RESOURCE_POSTGRES: &str = concat!(select_resource_sql!(), " FOR UPDATE");

/// A resource row, on any connection.
pub(crate) async fn resource(
    db: &mut (impl Statements + ?Sized),
    r: &ResourceRef,
) -> StoreResult<Option<ResourceRow>> {
    db.first(select_resource(r), |row| resource_row(r.kind, row))
        .await
}

/// Whether a resource exists, on any connection.
pub(crate) async fn exists(
    db: &mut (impl Statements + ?Sized),
    r: &ResourceRef,
) -> StoreResult<bool> {
    Ok(db.first(exists_resource(r), |_| Ok(())).await?.is_some())
}

pub(crate) fn select_resource(r: &ResourceRef) -> Fixed<'_, 2> {
    const SQL: &str = select_resource_sql!();
    statement(SQL, args![r.kind.tag(), &r.id])
}

/// A resource's log tail and last write ([`log_tail_row`] reads them).
pub(crate) fn select_log_tail(r: &ResourceRef) -> Fixed<'_, 2> {
    const SQL: &str = select_log_tail_sql!();
    statement(SQL, args![r.kind.tag(), &r.id])
}

/// A row of [`select_log_tail`].
pub(crate) fn log_tail_row(row: &(impl Columns + ?Sized)) -> StoreResult<LogTail> {
    Ok(LogTail {
        last_seq: row.int(0)?,
        updated_at: row.int(1)?,
    })
}

pub(crate) fn exists_resource(r: &ResourceRef) -> Fixed<'_, 2> {
    const SQL: &str = "SELECT 1 AS one FROM resources WHERE kind = $1 AND id = $2";
    statement(SQL, args![r.kind.tag(), &r.id])
}

pub(crate) fn ping() -> Fixed<'static, 0> {
    statement("SELECT 1 AS one", [])
}

/// The tails of `resources`, on any connection ([`select_tails`]).
pub(crate) async fn tails<D: Statements>(
    db: &mut D,
    resources: &[ResourceRef],
) -> StoreResult<Vec<(ResourceRef, i64)>> {
    let param = tails_param(resources);
    db.all(select_tails(&param, D::DIALECT), |row| tail_row(row))
        .await
}

/// The JSON array parameter of [`select_tails`]: `[{"kind","id"},…]`.
fn tails_param(resources: &[ResourceRef]) -> String {
    let items: Vec<Value> = resources
        .iter()
        .map(|r| serde_json::json!({ "kind": r.kind.tag(), "id": r.id }))
        .collect();
    Value::Array(items).to_string()
}

/// The tails of the resources `param` ([`tails_param`]) names, in one
/// statement: each existing resource's `last_seq`, and each stream's, a
/// closed stream reporting the largest tail so its readers wake
/// ([`tail_row`] reads them). The JSON table functions differ by dialect.
fn select_tails(param: &str, dialect: Dialect) -> Fixed<'_, 1> {
    const SQLITE: &str = "SELECT r.kind, r.id, r.last_seq FROM resources r JOIN json_each($1) j \
         ON r.kind = json_extract(j.value, '$.kind') AND r.id = json_extract(j.value, '$.id') \
         UNION ALL \
         SELECT 'stream', s.id, CASE WHEN s.status = 'closed' THEN 9223372036854775807 ELSE s.last_seq END \
         FROM streams s JOIN json_each($1) j \
         ON json_extract(j.value, '$.kind') = 'stream' AND s.id = json_extract(j.value, '$.id')";
    const POSTGRES: &str = "SELECT r.kind, r.id, r.last_seq FROM resources r \
         JOIN json_to_recordset($1::json) AS a(kind text, id text) \
         ON r.kind = a.kind COLLATE \"C\" AND r.id = a.id COLLATE \"C\" \
         UNION ALL \
         SELECT 'stream', s.id, CASE WHEN s.status = 'closed' THEN 9223372036854775807 ELSE s.last_seq END \
         FROM streams s JOIN json_to_recordset($1::json) AS a(kind text, id text) \
         ON a.kind = 'stream' AND s.id = a.id COLLATE \"C\"";
    let text = match dialect {
        Dialect::Sqlite => SQLITE,
        Dialect::Postgres => POSTGRES,
    };
    statement(text, args![param])
}

/// A resource with no events; nothing when it exists.
pub(crate) fn insert_resource<'a>(
    r: &'a ResourceRef,
    attrs: Option<&'a str>,
    now: i64,
) -> Fixed<'a, 4> {
    const SQL: &str = "INSERT INTO resources (kind, id, attrs, created_at, updated_at, last_seq) \
         VALUES ($1, $2, $3, $4, $4, 0) ON CONFLICT (kind, id) DO NOTHING";
    statement(SQL, args![r.kind.tag(), &r.id, attrs, now])
}

pub(crate) fn touch(r: &ResourceRef, now: i64) -> Fixed<'_, 3> {
    const SQL: &str = "UPDATE resources SET updated_at = $3 WHERE kind = $1 AND id = $2";
    statement(SQL, args![r.kind.tag(), &r.id, now])
}

/// Bumps and returns the parent's child counter.
pub(crate) fn next_child_order(parent: &ResourceRef) -> Fixed<'_, 2> {
    const SQL: &str = "UPDATE resources SET stream_counter = stream_counter + 1 \
         WHERE kind = $1 AND id = $2 RETURNING stream_counter";
    statement(SQL, args![parent.kind.tag(), &parent.id])
}

/// A row of `resource_columns!()`.
pub(crate) fn resource_row(
    kind: ResourceKind,
    row: &(impl Columns + ?Sized),
) -> StoreResult<ResourceRow> {
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

/// A row of a `tails` statement: kind, id, tail.
pub(crate) fn tail_row(row: &(impl Columns + ?Sized)) -> StoreResult<(ResourceRef, i64)> {
    let kind = resource_kind(row.str(0)?, "resource kind")?;
    Ok((ResourceRef::new(kind, row.text(1)?), row.int(2)?))
}
