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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use futures_util::TryStreamExt as _;
use object_store::ObjectStore;
use sqlx::{Connection as _, Executor as _, Row as _};

use super::local::LocalStore;
use super::report::Report;
use super::schema;
use super::source_blobs::SourceBlobs;
use crate::archive::checks;
use crate::archive::format::Val;
use crate::archive::temp::{self, TempDir};
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

/// Opens the store at `url` (blobs at `source_blobs`) as a local store,
/// transcoded into a private directory under `temp_base`.
pub async fn open(url: &str, source_blobs: &str, temp_base: &Path) -> anyhow::Result<LocalStore> {
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
    let copy = TempDir::new_in(temp_base, &format!("{}pg-", super::TEMP_PREFIX))?;
    // Created private (0600) before SQLite opens it (an empty file is an
    // empty database); SQLite gives its journal the same mode.
    let file = copy.path().join("autobuild.sqlite");
    temp::create_private(&file)?;
    let mut sqlite = rusqlite::Connection::open(&file)?;
    let tx = sqlite.transaction()?;
    for (table, cols) in &columns {
        copy_table(&mut conn, &tx, table, cols, &mut seed).await?;
    }
    tx.commit()?;
    conn.execute("ROLLBACK").await?;
    let shape = schema::detect(&sqlite).context("its build-family tables were refused")?;
    let mut store = LocalStore::from_parts(sqlite, shape, blobs, copy);
    store.seed = seed;
    store.extra = tickets;
    Ok(store)
}

/// `--source-blobs`: an object-store URL (with the deployment's
/// `AB_BLOB_PREFIX` as its path) or a directory holding `<sha256>` files
/// (read as the hostile files they may be: `source_files`).
fn open_blobs(location: &str) -> anyhow::Result<SourceBlobs> {
    if location.contains("://") && !location.starts_with("file:") {
        let url = url::Url::parse(location).context("--source-blobs")?;
        let (store, prefix) = object_store::parse_url_opts(&url, std::env::vars())?;
        let store: Arc<dyn ObjectStore> =
            Arc::new(object_store::prefix::PrefixStore::new(store, prefix));
        return Ok(SourceBlobs::Bucket {
            store,
            runtime: tokio::runtime::Handle::current(),
        });
    }
    let dir = match url::Url::parse(location) {
        Ok(url) if url.scheme() == "file" => url
            .to_file_path()
            .map_err(|()| anyhow::anyhow!("--source-blobs {location} names no directory"))?,
        _ => std::path::PathBuf::from(location),
    };
    if !dir.is_dir() {
        bail!("--source-blobs {} is not a directory", dir.display());
    }
    Ok(SourceBlobs::FlatDir(dir))
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
                    // JSON serde cannot read (nested deeper than 128) stays
                    // as PostgreSQL printed it: the local reader then
                    // reports the row it is in, with its build, and leaves
                    // that out rather than the whole import.
                    Some(text) => match serde_json::from_str::<serde_json::Value>(&text) {
                        Ok(value) => rusqlite::types::Value::Text(super::js::stringify(&value)),
                        Err(_) => {
                            report.note(
                                "JSON values abstore cannot read (their rows are reported below)",
                                || format!("{table}.{column}"),
                            );
                            rusqlite::types::Value::Text(text)
                        }
                    },
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
/// history (Autobuild keeps none). Each record passes the ticket routes'
/// checks (`archive::checks`); a ticket that does not is left out with its
/// comments and every blocker naming it, reported.
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
    // Each team's latest kept creation sequence, in team order.
    let mut teams: Vec<(String, i64)> = Vec::new();
    let mut tickets = Vec::new();
    let mut kept: HashSet<(String, String)> = HashSet::new();
    for row in rows {
        report.read("ab_tickets", 1);
        let team: String = row.try_get(0)?;
        let id: String = row.try_get(1)?;
        let body: Option<String> = row.try_get(5)?;
        if body.is_none() {
            report.note(
                "tickets without a body (imported with an empty one)",
                || id.clone(),
            );
        }
        let labels: Vec<Option<String>> = row
            .try_get::<Option<Vec<Option<String>>>, _>(7)?
            .unwrap_or_default();
        let Some(labels) = labels.into_iter().collect::<Option<Vec<String>>>() else {
            report.problem(
                "tickets that cannot be carried (with their comments and blockers)",
                || format!("{team} {id} (a NULL label)"),
            );
            continue;
        };
        let seq: i64 = row.try_get(2)?;
        let record = vec![
            Val::Text(team.clone()),
            Val::Text(id.clone()),
            Val::Int(seq),
            row.try_get::<Option<String>, _>(3)?
                .map_or(Val::Null, Val::Text),
            Val::Text(json_string(&row.try_get::<String, _>(4)?)),
            Val::Text(json_string(body.as_deref().unwrap_or(""))),
            Val::Text(row.try_get(6)?),
            Val::Text(json_strings(&labels)),
            Val::Int(row.try_get(8)?),
            Val::Int(row.try_get(9)?),
        ];
        if let Err(why) = checks::row(TICKET, &record) {
            report.problem(
                "tickets that cannot be carried (with their comments and blockers)",
                || format!("{} {} ({why})", short(&team), short(&id)),
            );
            continue;
        }
        match teams.last_mut() {
            Some((t, n)) if *t == team => *n = (*n).max(seq),
            _ => teams.push((team.clone(), seq)),
        }
        report.imported("ab_tickets");
        kept.insert((team, id));
        tickets.push(record);
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
            let (team, ticket, blocker): (String, String, String) =
                (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
            if !kept.contains(&(team.clone(), ticket.clone()))
                || !kept.contains(&(team.clone(), blocker.clone()))
            {
                report.problem(
                    "ticket blockers naming a ticket that is not carried",
                    || {
                        format!(
                            "{} {} blocked by {}",
                            short(&team),
                            short(&ticket),
                            short(&blocker)
                        )
                    },
                );
                continue;
            }
            let record = vec![Val::Text(team), Val::Text(ticket), Val::Text(blocker)];
            if let Err(why) = checks::row(TICKET_BLOCKER, &record) {
                report.problem("ticket blockers that cannot be carried", || why);
                continue;
            }
            report.imported("ab_ticket_blockers");
            out.push((TICKET_BLOCKER, record));
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
        // abstore numbers a ticket's comments 1, 2, 3…; Autobuild's own
        // numbering is kept where it is that, renumbered (noted) where not.
        let mut numbered: HashMap<(String, String), i64> = HashMap::new();
        for row in rows {
            report.read("ab_ticket_comments", 1);
            let (team, ticket): (String, String) = (row.try_get(0)?, row.try_get(1)?);
            if !kept.contains(&(team.clone(), ticket.clone())) {
                continue;
            }
            let stored: i64 = row.try_get(2)?;
            let seq = numbered.entry((team.clone(), ticket.clone())).or_insert(0);
            *seq += 1;
            if stored != *seq {
                report.note(
                    "ticket comments renumbered 1, 2, 3… (Autobuild's numbers had gaps)",
                    || {
                        format!(
                            "{} {} comment {stored} as {seq}",
                            short(&team),
                            short(&ticket)
                        )
                    },
                );
            }
            let record = vec![
                Val::Text(team),
                Val::Text(ticket),
                Val::Int(*seq),
                Val::Text(json_string(&row.try_get::<String, _>(3)?)),
                Val::Int(row.try_get(4)?),
            ];
            if let Err(why) = checks::row(TICKET_COMMENT, &record) {
                // Its ticket passed with the same ids: only the time can fail.
                *seq -= 1;
                report.problem("ticket comments that cannot be carried", || why);
                continue;
            }
            report.imported("ab_ticket_comments");
            out.push((TICKET_COMMENT, record));
        }
    }
    Ok(out)
}

fn short(id: &str) -> String {
    crate::protocol::ident::shown(id)
}
