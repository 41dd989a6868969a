//! The archive's table list ([`TABLES`]) is the migrated schema, on both
//! backends: the same tables, the same columns in the same order with the
//! same types and nullability, primary keys first, but for the derived
//! columns an import recomputes ([`DERIVED`]). A migration that adds,
//! drops or changes a column fails here until the archive format follows.

use sqlx::Connection as _;

use super::format::{DERIVED, TABLES, Ty};
use crate::store::DatabaseUrl;

/// One table as the comparison sees it: name, columns (name, type,
/// nullable) in order, primary key columns in key order.
type Shape = (String, Vec<(String, Ty, bool)>, Vec<String>);

/// What [`TABLES`] describes, sorted by table name.
fn archived() -> Vec<Shape> {
    let mut tables: Vec<Shape> = TABLES
        .iter()
        .map(|t| {
            let columns = t
                .columns
                .iter()
                .map(|c| (c.name.to_owned(), c.ty, c.nullable))
                .collect();
            let key = t.columns[..t.key_len]
                .iter()
                .map(|c| c.name.to_owned())
                .collect();
            (t.table.to_owned(), columns, key)
        })
        .collect();
    tables.sort_by(|a, b| a.0.cmp(&b.0));
    tables
}

/// `migrated` (the schema read back from `backend`) is what [`TABLES`]
/// describes; a difference is named by table.
fn assert_archived(mut migrated: Vec<Shape>, backend: &str) {
    migrated.sort_by(|a, b| a.0.cmp(&b.0));
    for (table, column) in DERIVED {
        let shape = migrated
            .iter_mut()
            .find(|t| t.0 == table)
            .unwrap_or_else(|| panic!("{backend} has no table {table} (derived {column})"));
        let at = shape.1.iter().position(|c| c.0 == column);
        let at = at.unwrap_or_else(|| panic!("{backend} has no derived column {table}.{column}"));
        shape.1.remove(at);
    }
    let archived = archived();
    let names = |tables: &[Shape]| tables.iter().map(|t| t.0.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(&archived),
        names(&migrated),
        "the archive's tables (left) are not {backend}'s (right)"
    );
    for (archived, migrated) in archived.iter().zip(&migrated) {
        assert_eq!(
            archived.1, migrated.1,
            "{}: the archive's columns (name, type, nullable; left) are not {backend}'s (right)",
            archived.0
        );
        assert_eq!(
            archived.2, migrated.2,
            "{}: the archive's key (left) is not {backend}'s primary key (right)",
            archived.0
        );
    }
}

/// The migrations' bookkeeping table, not store data.
const MIGRATIONS_TABLE: &str = "_sqlx_migrations";
/// Migration 0011's completion mark, not store data: an import's own
/// migration writes it.
const FILLED_TABLE: &str = "event_types_filled";

fn sqlite_type(table: &str, column: &str, declared: &str) -> Ty {
    match declared {
        "TEXT" => Ty::Text,
        "INTEGER" => Ty::Int,
        other => panic!("{table}.{column}: SQLite type {other} has no archive type"),
    }
}

fn pg_type(table: &str, column: &str, declared: &str) -> Ty {
    match declared {
        "text" => Ty::Text,
        "bigint" => Ty::Int,
        other => panic!("{table}.{column}: PostgreSQL type {other} has no archive type"),
    }
}

#[tokio::test]
async fn tables_match_the_migrated_sqlite_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("schema.db");
    DatabaseUrl::parse(&format!("sqlite://{}", path.display()))
        .unwrap()
        .migrate()
        .await
        .unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let names: Vec<String> = conn
        .prepare(
            "SELECT name FROM sqlite_schema WHERE type = 'table' \
             AND name NOT LIKE 'sqlite_%' AND name <> ?1 AND name <> ?2 ORDER BY name",
        )
        .unwrap()
        .query_map([MIGRATIONS_TABLE, FILLED_TABLE], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut migrated = Vec::new();
    for table in names {
        // (name, declared type, notnull, position in the primary key or 0)
        let columns: Vec<(String, String, bool, i64)> = conn
            .prepare("SELECT name, type, \"notnull\", pk FROM pragma_table_info(?1) ORDER BY cid")
            .unwrap()
            .query_map([&table], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let mut key: Vec<(i64, String)> = columns
            .iter()
            .filter(|c| c.3 > 0)
            .map(|c| (c.3, c.0.clone()))
            .collect();
        key.sort();
        let columns = columns
            .into_iter()
            .map(|(name, ty, notnull, _)| {
                let ty = sqlite_type(&table, &name, &ty);
                (name, ty, !notnull)
            })
            .collect();
        migrated.push((table, columns, key.into_iter().map(|k| k.1).collect()));
    }
    assert_archived(migrated, "SQLite");
}

#[tokio::test]
async fn tables_match_the_migrated_postgres_schema() {
    let Some(db) = abstore_testkit::scratch_pg::for_test(
        "archive tables vs PostgreSQL schema",
        "abstore_schema",
    )
    .await
    else {
        return;
    };
    let url = DatabaseUrl::parse(&db.url).unwrap();
    url.migrate().await.unwrap();
    let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' \
         AND table_name <> $1 AND table_name <> $2 ORDER BY table_name",
    )
    .bind(MIGRATIONS_TABLE)
    .bind(FILLED_TABLE)
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let mut migrated = Vec::new();
    for table in names {
        let columns: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT column_name::text, data_type::text, is_nullable::text \
             FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = $1 \
             ORDER BY ordinal_position",
        )
        .bind(&table)
        .fetch_all(&mut conn)
        .await
        .unwrap();
        let key: Vec<String> = sqlx::query_scalar(
            "SELECT k.column_name::text \
             FROM information_schema.table_constraints c \
             JOIN information_schema.key_column_usage k \
               ON k.constraint_schema = c.constraint_schema \
              AND k.constraint_name = c.constraint_name \
             WHERE c.constraint_type = 'PRIMARY KEY' \
               AND c.table_schema = current_schema() AND c.table_name = $1 \
             ORDER BY k.ordinal_position",
        )
        .bind(&table)
        .fetch_all(&mut conn)
        .await
        .unwrap();
        let columns = columns
            .into_iter()
            .map(|(name, ty, nullable)| {
                let ty = pg_type(&table, &name, &ty);
                (name, ty, nullable == "YES")
            })
            .collect();
        migrated.push((table, columns, key));
    }
    conn.close().await.ok();
    let _ = db.drop_db().await;
    assert_archived(migrated, "PostgreSQL");
}
