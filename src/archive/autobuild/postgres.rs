//! Autobuild's PostgreSQL store (`packages/postgres-store`,
//! docs/autobuild-stores.md §3): its build family is read in one
//! `REPEATABLE READ` snapshot and transcoded, table by table, into a
//! temporary SQLite file of the local store's shape (times as
//! `toISOString` text, jsonb as the JSON Autobuild's server printed,
//! booleans as 0/1), which the local reader then imports like any local
//! store. Its blobs are flat `<sha256>` objects under the deployment's
//! prefix (§3.4).
//!
//! jsonb keeps no text, so envelopes are re-serialised ([`super::js`]), not
//! spliced: the report says so. The ticket and auth families are not read.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use futures_util::TryStreamExt as _;
use object_store::ObjectStore;
use sqlx::{Connection as _, Executor as _, Row as _};

use super::local::{LocalStore, SourceBlobs, TempDir};
use super::report::Report;
use super::schema;

/// The build family's versions abstore knows (§3.2).
const KNOWN_VERSIONS: std::ops::RangeInclusive<i32> = 1..=8;

/// The build family's tables, in copy order.
const TABLES: [&str; 12] = [
    "builds",
    "events",
    "artifacts",
    "repo_streams",
    "repo_events",
    "repo_artifacts",
    "sessions",
    "session_events",
    "session_artifacts",
    "streams",
    "stream_chunks",
    "ticket_assets",
];

/// How a column is carried into the SQLite copy.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Carry {
    Text,
    Int,
    Time,
    Json,
}

/// Opens the store at `url` (blobs at `source_blobs`) as a local store.
pub async fn open(url: &str, source_blobs: &str) -> anyhow::Result<LocalStore> {
    let blobs = open_blobs(source_blobs)?;
    let mut conn = sqlx::PgConnection::connect(url)
        .await
        .context("connecting to Autobuild's PostgreSQL store")?;
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .await?;
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = current_schema() ORDER BY 1",
    )
    .fetch_all(&mut conn)
    .await?;
    if !tables.iter().any(|t| t == "ab_schema_migrations") {
        bail!(
            "not an Autobuild PostgreSQL store: no ab_schema_migrations table in the current \
             schema (found {})",
            if tables.is_empty() {
                "no tables".to_owned()
            } else {
                tables.join(", ")
            }
        );
    }
    let version: i32 = sqlx::query_scalar("SELECT version FROM ab_schema_migrations")
        .fetch_one(&mut conn)
        .await
        .context("reading ab_schema_migrations")?;
    if !KNOWN_VERSIONS.contains(&version) {
        bail!(
            "an Autobuild PostgreSQL store of build-family schema version {version}, which \
             abstore does not know (it reads versions {} to {}); nothing was read",
            KNOWN_VERSIONS.start(),
            KNOWN_VERSIONS.end()
        );
    }
    let mut columns: BTreeMap<String, Vec<(String, Carry)>> = BTreeMap::new();
    let rows = sqlx::query(
        "SELECT table_name::text, column_name::text, data_type::text \
         FROM information_schema.columns \
         WHERE table_schema = current_schema() AND table_name = ANY($1) \
         ORDER BY table_name, ordinal_position",
    )
    .bind(TABLES.to_vec())
    .fetch_all(&mut conn)
    .await?;
    for row in rows {
        let (table, column, ty): (String, String, String) =
            (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
        let carry = match ty.as_str() {
            "timestamp with time zone" | "timestamp without time zone" => Carry::Time,
            "jsonb" | "json" => Carry::Json,
            "bigint" | "integer" | "smallint" | "boolean" => Carry::Int,
            _ => Carry::Text,
        };
        columns.entry(table).or_default().push((column, carry));
    }
    let mut seed = Report::default();
    seed.version = format!("PostgreSQL store, build-family schema version {version}");
    seed.note(
        "JSON values re-serialised as Autobuild's server printed them (jsonb keeps no text: normalized, not byte-exact)",
        || "every event, chunk, metadata and manifest".to_owned(),
    );
    for family in ["ab_tickets", "ab_ticket_comments", "ab_ticket_blockers"] {
        if tables.iter().any(|t| t == family) {
            let sql = format!("SELECT count(*) FROM {}", quote(family));
            let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                .fetch_one(&mut conn)
                .await?;
            seed.problems(
                "hosted-ticket rows (the ticket family is not imported yet)",
                n as u64,
                || family.to_owned(),
            );
        }
    }
    let copy = TempDir::new("abstore-autobuild-pg")?;
    let mut sqlite = rusqlite::Connection::open(copy.path.join("autobuild.sqlite"))?;
    let tx = sqlite.transaction()?;
    for (table, cols) in &columns {
        copy_table(&mut conn, &tx, table, cols, &mut seed).await?;
    }
    tx.commit()?;
    conn.execute("ROLLBACK").await?;
    let shape = schema::detect(&sqlite).context("its build-family tables were refused")?;
    let runtime = tokio::runtime::Handle::current();
    let mut store = LocalStore::from_parts(
        sqlite,
        shape,
        SourceBlobs::Flat {
            store: blobs,
            runtime,
        },
        copy,
    );
    store.seed = seed;
    Ok(store)
}

/// `--source-blobs`: an object-store URL (with the deployment's
/// `AB_BLOB_PREFIX` as its path) or a directory holding `<sha256>` files.
fn open_blobs(location: &str) -> anyhow::Result<Arc<dyn ObjectStore>> {
    let store: Arc<dyn ObjectStore> = if location.contains("://") && !location.starts_with("file:")
    {
        let url = url::Url::parse(location).context("--source-blobs")?;
        let (store, prefix) = object_store::parse_url_opts(&url, std::env::vars())?;
        Arc::new(object_store::prefix::PrefixStore::new(store, prefix))
    } else {
        let dir = match url::Url::parse(location) {
            Ok(url) if url.scheme() == "file" => url
                .to_file_path()
                .map_err(|()| anyhow::anyhow!("--source-blobs {location} names no directory"))?,
            _ => std::path::PathBuf::from(location),
        };
        if !dir.is_dir() {
            bail!("--source-blobs {} is not a directory", dir.display());
        }
        Arc::new(object_store::local::LocalFileSystem::new_with_prefix(dir)?)
    };
    Ok(store)
}

fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

async fn copy_table(
    conn: &mut sqlx::PgConnection,
    sqlite: &rusqlite::Transaction<'_>,
    table: &str,
    cols: &[(String, Carry)],
    report: &mut Report,
) -> anyhow::Result<()> {
    let names: Vec<String> = cols.iter().map(|(c, _)| quote(c)).collect();
    sqlite.execute_batch(&format!(
        "CREATE TABLE {} ({})",
        quote(table),
        names.join(", ")
    ))?;
    for (column, carry) in cols {
        if *carry == Carry::Time {
            let sql = format!(
                "SELECT count(*) FROM {t} WHERE {c} <> date_trunc('milliseconds', {c})",
                t = quote(table),
                c = quote(column)
            );
            let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                .fetch_one(&mut *conn)
                .await?;
            report.notes(
                "times with a sub-millisecond part (truncated to the millisecond)",
                n as u64,
                || format!("{table}.{column}"),
            );
        }
    }
    let select: Vec<String> = cols
        .iter()
        .map(|(c, carry)| {
            let c = quote(c);
            match carry {
                Carry::Time => {
                    format!("to_char({c} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')")
                }
                Carry::Json => format!("{c}::text"),
                Carry::Int => format!("({c})::int8"),
                Carry::Text => format!("{c}::text"),
            }
        })
        .collect();
    let sql = format!("SELECT {} FROM {}", select.join(", "), quote(table));
    let placeholders: Vec<String> = (1..=cols.len()).map(|i| format!("?{i}")).collect();
    let mut insert = sqlite.prepare(&format!(
        "INSERT INTO {} VALUES ({})",
        quote(table),
        placeholders.join(", ")
    ))?;
    let mut rows = sqlx::query(sqlx::AssertSqlSafe(sql)).fetch(&mut *conn);
    while let Some(row) = rows.try_next().await? {
        let mut values = Vec::with_capacity(cols.len());
        for (i, (column, carry)) in cols.iter().enumerate() {
            let value = match carry {
                Carry::Int => row.try_get::<Option<i64>, _>(i)?.map_or(
                    rusqlite::types::Value::Null,
                    rusqlite::types::Value::Integer,
                ),
                Carry::Json => match row.try_get::<Option<String>, _>(i)? {
                    None => rusqlite::types::Value::Null,
                    Some(text) => {
                        let value: serde_json::Value =
                            serde_json::from_str(&text).with_context(|| {
                                format!("{table}.{column} holds JSON serde cannot read")
                            })?;
                        rusqlite::types::Value::Text(super::js::stringify(&value))
                    }
                },
                Carry::Text | Carry::Time => row
                    .try_get::<Option<String>, _>(i)?
                    .map_or(rusqlite::types::Value::Null, rusqlite::types::Value::Text),
            };
            values.push(value);
        }
        insert.execute(rusqlite::params_from_iter(values))?;
    }
    Ok(())
}
