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
//! spliced: the report says so. The hosted tickets (`ab_tickets` and its
//! comments and blockers, ticket-family version 1) become abstore's ticket
//! records directly, held in memory (a team's tickets, not its history);
//! the auth family is not read.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use futures_util::TryStreamExt as _;
use object_store::ObjectStore;
use sqlx::{Connection as _, Executor as _, Row as _};

use super::local::{LocalStore, SourceBlobs, TempDir};
use super::report::Report;
use super::schema;
use crate::archive::format::Val;
use crate::tickets::text::{json_string, json_strings};

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
    /// 0 or 1, as the local store keeps `removed`.
    Bool,
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
            "bigint" | "integer" | "smallint" => Carry::Int,
            "boolean" => Carry::Bool,
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
    let tickets = if tables.iter().any(|t| t == "ab_tickets") {
        read_tickets(&mut conn, &tables, &mut seed).await?
    } else {
        Vec::new()
    };
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
    store.extra = tickets;
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
                Carry::Bool => format!("({c})::int::int8"),
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
                Carry::Int | Carry::Bool => row.try_get::<Option<i64>, _>(i)?.map_or(
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

/// Archive table indices (`format::TABLES`) of the ticket records.
const TICKET_TEAM: usize = 9;
const TICKET: usize = 10;
const TICKET_BLOCKER: usize = 11;
const TICKET_COMMENT: usize = 12;

/// The ticket family's rows as abstore's records, in archive order
/// (docs/autobuild-stores.md §4.1): `seq` numbered per team in Autobuild's
/// listing order (`created_at, id`), texts as JSON string literals, no
/// history (Autobuild keeps none).
async fn read_tickets(
    conn: &mut sqlx::PgConnection,
    tables: &[String],
    report: &mut Report,
) -> anyhow::Result<Vec<(usize, Vec<Val>)>> {
    if tables.iter().any(|t| t == "ab_ticket_schema_migrations") {
        let version: i32 = sqlx::query_scalar("SELECT version FROM ab_ticket_schema_migrations")
            .fetch_one(&mut *conn)
            .await?;
        if version != 1 {
            bail!(
                "an Autobuild PostgreSQL store whose ticket family is at schema version \
                 {version}; abstore reads version 1; nothing was read"
            );
        }
    }
    let ms = |c: &str| format!("floor(extract(epoch FROM {c}) * 1000)::int8");
    let sql = format!(
        "SELECT team, id, row_number() OVER (PARTITION BY team ORDER BY created_at, id COLLATE \"C\"), \
         creation_key, title, body, state, labels, {}, {} FROM ab_tickets \
         ORDER BY team COLLATE \"C\", id COLLATE \"C\"",
        ms("created_at"),
        ms("updated_at")
    );
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
        .fetch_all(&mut *conn)
        .await?;
    let mut out = Vec::new();
    let mut teams: Vec<(String, i64)> = Vec::new();
    let mut tickets = Vec::new();
    for row in rows {
        let team: String = row.try_get(0)?;
        let body: Option<String> = row.try_get(5)?;
        if body.is_none() {
            report.note(
                "tickets without a body (imported with an empty one)",
                || row.try_get::<String, _>(1).unwrap_or_default(),
            );
        }
        let labels: Vec<String> = row
            .try_get::<Option<Vec<String>>, _>(7)?
            .unwrap_or_default();
        match teams.last_mut() {
            Some((t, n)) if *t == team => *n += 1,
            _ => teams.push((team.clone(), 1)),
        }
        report.read("ab_tickets", 1);
        report.imported("ab_tickets");
        tickets.push(vec![
            Val::Text(team),
            Val::Text(row.try_get(1)?),
            Val::Int(row.try_get(2)?),
            row.try_get::<Option<String>, _>(3)?
                .map_or(Val::Null, Val::Text),
            Val::Text(json_string(&row.try_get::<String, _>(4)?)),
            Val::Text(json_string(body.as_deref().unwrap_or(""))),
            Val::Text(row.try_get(6)?),
            Val::Text(json_strings(&labels)),
            Val::Int(row.try_get(8)?),
            Val::Int(row.try_get(9)?),
        ]);
    }
    for (team, n) in teams {
        out.push((TICKET_TEAM, vec![Val::Text(team), Val::Int(n)]));
    }
    out.extend(tickets.into_iter().map(|row| (TICKET, row)));
    if tables.iter().any(|t| t == "ab_ticket_blockers") {
        let rows = sqlx::query(
            "SELECT team, ticket_id, blocker_id FROM ab_ticket_blockers \
             ORDER BY team COLLATE \"C\", ticket_id COLLATE \"C\", blocker_id COLLATE \"C\"",
        )
        .fetch_all(&mut *conn)
        .await?;
        for row in rows {
            report.read("ab_ticket_blockers", 1);
            report.imported("ab_ticket_blockers");
            out.push((
                TICKET_BLOCKER,
                vec![
                    Val::Text(row.try_get(0)?),
                    Val::Text(row.try_get(1)?),
                    Val::Text(row.try_get(2)?),
                ],
            ));
        }
    }
    if tables.iter().any(|t| t == "ab_ticket_comments") {
        let sql = format!(
            "SELECT team, ticket_id, seq::int8, body, {} FROM ab_ticket_comments \
             ORDER BY team COLLATE \"C\", ticket_id COLLATE \"C\", seq",
            ms("created_at")
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .fetch_all(&mut *conn)
            .await?;
        for row in rows {
            report.read("ab_ticket_comments", 1);
            report.imported("ab_ticket_comments");
            out.push((
                TICKET_COMMENT,
                vec![
                    Val::Text(row.try_get(0)?),
                    Val::Text(row.try_get(1)?),
                    Val::Int(row.try_get(2)?),
                    Val::Text(json_string(&row.try_get::<String, _>(3)?)),
                    Val::Int(row.try_get(4)?),
                ],
            ));
        }
    }
    Ok(out)
}
