//! Raw backend baselines measured with the drivers directly (rusqlite for
//! SQLite, as the server uses; sqlx for PostgreSQL), in the same run as the
//! server figures: what the database alone can do for the same work.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context as _, Result};
use rusqlite::{Connection, OpenFlags, params};
use sqlx::Row as _;
use sqlx::postgres::{PgPool, PgPoolOptions};

use crate::harness::{Ctx, Db, LoadResult, measure};

/// An envelope of the size abstore stores for the append scenario's event.
pub fn envelope(slug: &str, seq: i64) -> String {
    format!(
        r#"{{"build":"{slug}","seq":{seq},"ts":"2026-07-15T12:00:00.000Z","actor":{{"kind":"kernel"}},"type":"observation.recorded","payload":{{"id":"o1","kind":"followup","summary":"s"}}}}"#
    )
}

/// The SQLite file a `sqlite://PATH` URL names.
fn sqlite_path(db: &Db) -> Result<&str> {
    db.url
        .strip_prefix("sqlite://")
        .context("the raw SQLite baseline needs a sqlite://PATH database")
}

/// A connection with the server's settings: WAL, `synchronous=FULL`.
fn sqlite_connection(path: &str, read_only: bool) -> Result<Connection> {
    let conn = if read_only {
        Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)?
    } else {
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn
    };
    conn.busy_timeout(Duration::from_secs(10))?;
    Ok(conn)
}

/// "Insert one row + commit (fsync)" on a SQLite file shaped like abstore's
/// `events` table. SQLite admits one writer, so `clients` tasks share one
/// connection (16 connections would only add busy-handler sleeps); each
/// transaction is one hop onto the blocking pool.
pub async fn sqlite_insert(ctx: &Ctx, db: &Db, clients: usize) -> Result<LoadResult> {
    let conn = sqlite_connection(sqlite_path(db)?, false)?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS events (kind TEXT NOT NULL, resource_id TEXT NOT NULL, seq INTEGER NOT NULL, \
         envelope TEXT NOT NULL, PRIMARY KEY (kind, resource_id, seq)) WITHOUT ROWID",
    )?;
    let conn = Arc::new(Mutex::new(conn));
    let seq = Arc::new(AtomicI64::new(0));
    let (result, _) = measure(ctx, None, clients, move |worker, _| {
        let (conn, seq) = (conn.clone(), seq.clone());
        async move {
            tokio::task::spawn_blocking(move || -> Result<()> {
                let seq = seq.fetch_add(1, Ordering::Relaxed) + 1;
                let slug = format!("b-{worker}");
                let mut conn = conn.lock().unwrap_or_else(PoisonError::into_inner);
                let tx =
                    conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                tx.prepare_cached(
                    "INSERT INTO events (kind, resource_id, seq, envelope) VALUES (?1, ?2, ?3, ?4)",
                )?
                .execute(params!["build", slug, seq, envelope(&slug, seq)])?;
                tx.commit()?;
                Ok(())
            })
            .await?
        }
    })
    .await?;
    Ok(result)
}

pub async fn pg_pool(db: &Db, size: u32) -> Result<PgPool> {
    Ok(PgPoolOptions::new()
        .max_connections(size)
        .connect(&db.url)
        .await?)
}

/// "Lock counter row, insert, update counter" transactions on PostgreSQL, on
/// one counter per client or one shared counter.
pub async fn pg_counter(ctx: &Ctx, db: &Db, clients: usize, shared: bool) -> Result<LoadResult> {
    let pool = pg_pool(db, clients as u32).await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS counters (kind TEXT COLLATE \"C\" NOT NULL, id TEXT COLLATE \"C\" NOT NULL, \
         last_seq BIGINT NOT NULL, updated_at BIGINT NOT NULL, PRIMARY KEY (kind, id))",
    )
    .execute(&pool)
    .await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS events (kind TEXT COLLATE \"C\" NOT NULL, resource_id TEXT COLLATE \"C\" NOT NULL, \
         seq BIGINT NOT NULL, envelope TEXT NOT NULL, PRIMARY KEY (kind, resource_id, seq), \
         FOREIGN KEY (kind, resource_id) REFERENCES counters (kind, id))",
    )
    .execute(&pool)
    .await?;
    let prefix = if shared {
        "shared".to_owned()
    } else {
        format!("c{clients}-")
    };
    for worker in 0..clients {
        let id = if shared {
            prefix.clone()
        } else {
            format!("{prefix}{worker}")
        };
        sqlx::query("INSERT INTO counters (kind, id, last_seq, updated_at) VALUES ('build', $1, 0, 0) ON CONFLICT DO NOTHING")
            .bind(id)
            .execute(&pool)
            .await?;
    }
    let (result, _) = measure(ctx, None, clients, move |worker, _| {
        let pool = pool.clone();
        let id = if shared {
            prefix.clone()
        } else {
            format!("{prefix}{worker}")
        };
        async move {
            let mut tx = pool.begin().await?;
            let last: i64 =
                sqlx::query("SELECT last_seq FROM counters WHERE kind = $1 AND id = $2 FOR UPDATE")
                    .bind("build")
                    .bind(&id)
                    .fetch_one(&mut *tx)
                    .await?
                    .try_get("last_seq")?;
            let seq = last + 1;
            sqlx::query(
                "INSERT INTO events (kind, resource_id, seq, envelope) VALUES ($1, $2, $3, $4)",
            )
            .bind("build")
            .bind(&id)
            .bind(seq)
            .bind(envelope(&id, seq))
            .execute(&mut *tx)
            .await?;
            sqlx::query(
                "UPDATE counters SET last_seq = $3, updated_at = $4 WHERE kind = $1 AND id = $2",
            )
            .bind("build")
            .bind(&id)
            .bind(seq)
            .bind(seq)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(())
        }
    })
    .await?;
    Ok(result)
}

const SELECT_EVENTS: &str =
    "SELECT envelope FROM events WHERE kind = $1 AND resource_id = $2 AND seq > $3 ORDER BY seq";

/// abstore's read query against the database a server wrote, on a pool like
/// the server's readers (SQLite: read-only WAL connections).
pub async fn select_events(
    ctx: &Ctx,
    db: &Db,
    clients: usize,
    slug: &str,
    expect: usize,
) -> Result<LoadResult> {
    let slug = slug.to_owned();
    match db.backend {
        crate::harness::Backend::Postgres => {
            let pool = pg_pool(db, clients as u32).await?;
            let (result, _) = measure(ctx, None, clients, move |_, _| {
                let (pool, slug) = (pool.clone(), slug.clone());
                async move {
                    let rows = sqlx::query(SELECT_EVENTS)
                        .bind("build")
                        .bind(&slug)
                        .bind(0i64)
                        .fetch_all(&pool)
                        .await?;
                    let envelopes = rows
                        .iter()
                        .map(|r| r.try_get::<String, _>("envelope"))
                        .collect::<Result<Vec<_>, _>>()?;
                    anyhow::ensure!(envelopes.len() == expect, "{} rows", envelopes.len());
                    Ok(())
                }
            })
            .await?;
            Ok(result)
        }
        _ => {
            // Read-only connections like the server's readers, one per client.
            let idle: Arc<Mutex<Vec<Connection>>> = Arc::new(Mutex::new(Vec::new()));
            let path = sqlite_path(db)?.to_owned();
            let (result, _) = measure(ctx, None, clients, move |_, _| {
                let (idle, slug, path) = (idle.clone(), slug.clone(), path.clone());
                async move {
                    tokio::task::spawn_blocking(move || -> Result<()> {
                        let pooled = idle.lock().unwrap_or_else(PoisonError::into_inner).pop();
                        let conn = match pooled {
                            Some(conn) => conn,
                            None => sqlite_connection(&path, true)?,
                        };
                        let envelopes = conn
                            .prepare_cached(SELECT_EVENTS)?
                            .query_map(params!["build", slug, 0i64], |row| row.get::<_, String>(0))?
                            .collect::<Result<Vec<_>, _>>()?;
                        idle.lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push(conn);
                        anyhow::ensure!(envelopes.len() == expect, "{} rows", envelopes.len());
                        Ok(())
                    })
                    .await?
                }
            })
            .await?;
            Ok(result)
        }
    }
}
