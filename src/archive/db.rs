//! The archive tools' own database access: they read and write the schema in
//! `migrations/` directly (rusqlite for SQLite, sqlx for PostgreSQL), apart
//! from the store, because they need whole-store snapshots and bulk writes
//! that the `Store` trait does not offer.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use rusqlite::OpenFlags;
use rusqlite::types::ValueRef;
use sqlx::Row as _;
use sqlx::postgres::{PgConnectOptions, PgRow};

use super::format::{Table, Ty, Val};
use crate::store::DatabaseUrl;
use crate::store::url::{Location, SqliteLocation};

/// How long a SQLite statement waits for the serving process's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// What the archive tools read and write: a SQLite file or a PostgreSQL
/// server, as the one [`DatabaseUrl`] parser decoded it.
#[derive(Clone)]
pub enum Db {
    Sqlite(PathBuf),
    Postgres(Box<PgConnectOptions>),
}

impl Db {
    /// The store `url` names; an in-memory database has nothing to export
    /// to or import into from another process.
    pub fn of(url: &DatabaseUrl) -> anyhow::Result<Db> {
        match url.location() {
            Location::Sqlite(SqliteLocation::File(path)) => Ok(Db::Sqlite(path.clone())),
            Location::Sqlite(SqliteLocation::Memory) => bail!(
                "an in-memory SQLite database lives only inside one process; name a file (sqlite://PATH)"
            ),
            Location::Postgres(connect) => Ok(Db::Postgres(connect.clone())),
        }
    }
}

/// Opens an existing SQLite store for reading (never creates one).
pub fn open_sqlite_read(path: &Path) -> anyhow::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("opening {}", path.display()))?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    Ok(conn)
}

/// Opens an existing SQLite store for writing, with foreign keys enforced.
pub fn open_sqlite_write(path: &Path) -> anyhow::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("opening {}", path.display()))?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "foreign_keys", true)?;
    Ok(conn)
}

/// A SQLite row as archive values, type-checked against the schema.
pub fn sqlite_row(table: &Table, row: &rusqlite::Row<'_>) -> anyhow::Result<Vec<Val>> {
    table
        .columns
        .iter()
        .enumerate()
        .map(|(i, column)| {
            let value = match (row.get_ref(i)?, column.ty) {
                (ValueRef::Null, _) if column.nullable => Val::Null,
                (ValueRef::Integer(n), Ty::Int) => Val::Int(n),
                (ValueRef::Text(bytes), Ty::Text) => Val::Text(
                    String::from_utf8(bytes.to_vec())
                        .with_context(|| format!("{}.{} is not UTF-8", table.table, column.name))?,
                ),
                (other, _) => bail!(
                    "{}.{} holds an unexpected {:?} value",
                    table.table,
                    column.name,
                    other.data_type()
                ),
            };
            Ok(value)
        })
        .collect()
}

/// A PostgreSQL row as archive values.
pub fn pg_row(table: &Table, row: &PgRow) -> anyhow::Result<Vec<Val>> {
    pg_values(table, row, table.columns.len())
}

/// The key of a row from a statement that returned only the key columns.
pub fn pg_key(table: &Table, row: &PgRow) -> anyhow::Result<Vec<Val>> {
    pg_values(table, row, table.key_len)
}

/// The first `count` columns of `table`, from a row holding them in order.
fn pg_values(table: &Table, row: &PgRow, count: usize) -> anyhow::Result<Vec<Val>> {
    table.columns[..count]
        .iter()
        .enumerate()
        .map(|(i, column)| {
            let value = match column.ty {
                Ty::Int => row.try_get::<Option<i64>, _>(i)?.map(Val::Int),
                Ty::Text => row.try_get::<Option<String>, _>(i)?.map(Val::Text),
            };
            match value {
                Some(value) => Ok(value),
                None if column.nullable => Ok(Val::Null),
                None => bail!("{}.{} is unexpectedly NULL", table.table, column.name),
            }
        })
        .collect()
}

pub fn sqlite_params(row: &[Val]) -> Vec<rusqlite::types::Value> {
    row.iter()
        .map(|v| match v {
            Val::Null => rusqlite::types::Value::Null,
            Val::Int(n) => rusqlite::types::Value::Integer(*n),
            Val::Text(s) => rusqlite::types::Value::Text(s.clone()),
        })
        .collect()
}

/// Binds `values` (typed by `table`'s columns, in order) to a PostgreSQL query.
pub fn pg_bind<'q>(
    mut query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    table: &Table,
    values: &[Val],
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    for (column, value) in table.columns.iter().zip(values) {
        query = match (value, column.ty) {
            (Val::Int(n), _) => query.bind(*n),
            (Val::Text(s), _) => query.bind(s.clone()),
            (Val::Null, Ty::Int) => query.bind(None::<i64>),
            (Val::Null, Ty::Text) => query.bind(None::<String>),
        };
    }
    query
}

pub fn sqlite_placeholder(i: usize) -> String {
    format!("?{i}")
}

pub fn pg_placeholder(i: usize) -> String {
    format!("${i}")
}
