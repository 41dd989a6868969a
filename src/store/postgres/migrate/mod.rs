//! Migrating a PostgreSQL store that any number of replicas share (issue
//! 53): they may all start at once, on an empty database or on one a
//! version behind, while replicas of the previous version serve it.
//!
//! Each process works on a connection of its own, named after its host and
//! pid (`application_name`, so the lock's holder can be named), outside any
//! transaction but the migrations' own:
//!
//! 1. It reads what the schema has (`schema.rs`, no lock): when everything
//!    this version needs is there, it is done at once.
//! 2. Otherwise it takes the migration lock (`lock.rs`) with
//!    `pg_try_advisory_lock`, every 250 ms, up to `--migration-wait-seconds`,
//!    reporting the holder to `/readyz` meanwhile; `lock.rs` says why it
//!    never waits inside a statement.
//! 3. Holding it, it reads the schema again (the previous holder may have
//!    done everything), applies what is pending (`apply.rs`: each
//!    transactional migration under `--migration-lock-timeout-ms`, retried,
//!    so writers never queue long behind it), filling migration 0011's
//!    column in batches right after 0011, and releases the lock.
//!
//! `--no-migrate` ([`await_schema`]) applies nothing: it waits, within the
//! same bound, for another process to have applied everything.

mod apply;
mod lock;
mod schema;

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use sqlx::Connection as _;
use sqlx::PgConnection;
use sqlx::postgres::PgConnectOptions;

use super::fill_types;
use crate::store::migration::{MigrationReport, MigrationSettings, Phase, Progress};

/// sqlx's table of applied migrations, which abstore keeps using so that
/// stores migrated by earlier versions open as they are.
const TABLE: &str = "_sqlx_migrations";

/// How often a waiting process tries the lock (or, with `--no-migrate`,
/// reads the schema again): each try is one short statement.
const POLL: Duration = Duration::from_millis(250);

/// How often a long wait is logged.
const LOG_EVERY: Duration = Duration::from_secs(30);

/// Bring the schema up to this version's, waiting for another process's
/// migration if one runs (`serve`, `abstore migrate`).
pub(crate) async fn migrate(
    connect: &PgConnectOptions,
    settings: &MigrationSettings,
    now_ms: i64,
    progress: &Progress,
) -> anyhow::Result<MigrationReport> {
    let migrator = sqlx::migrate!("migrations/postgres");
    let mut conn = connect_for_migrations(connect).await?;
    let state = schema::read(&mut conn, &migrator).await?;
    if state.complete() {
        let report = MigrationReport {
            already_applied: state.applied,
            unknown: state.unknown,
            ..MigrationReport::default()
        };
        conn.close().await.ok();
        return Ok(report);
    }
    let deadline = Instant::now() + settings.wait;
    let waited = acquire(&mut conn, deadline, settings, progress).await?;
    // Holding the lock; an error drops the connection, which releases it.
    let mut report = under_lock(&mut conn, &migrator, settings, deadline, now_ms, progress).await?;
    report.waited = waited;
    lock::release(&mut conn).await?;
    conn.close().await.ok();
    Ok(report)
}

/// `--no-migrate`: wait (up to `--migration-wait-seconds`) until another
/// process has applied everything this version needs; never applies
/// anything itself. Answers the migrations a newer version applied.
pub(crate) async fn await_schema(
    connect: &PgConnectOptions,
    settings: &MigrationSettings,
    progress: &Progress,
) -> anyhow::Result<Vec<i64>> {
    let migrator = sqlx::migrate!("migrations/postgres");
    let mut conn = connect_for_migrations(connect).await?;
    let since = Instant::now();
    let deadline = since + settings.wait;
    let mut logged: Option<Instant> = None;
    loop {
        let state = schema::read(&mut conn, &migrator).await?;
        if state.complete() {
            conn.close().await.ok();
            return Ok(state.unknown);
        }
        let holder = lock::holder(&mut conn).await?;
        let missing = state.missing();
        let now = Instant::now();
        if now >= deadline {
            let why = match &holder {
                Some(holder) => format!("another process is still migrating: the migration lock is held by {holder}"),
                None => "no process is migrating this database: run `abstore migrate` with this version, or start one replica without --no-migrate".to_owned(),
            };
            bail!(
                "gave up after {} waiting for {missing} (started with --no-migrate, and this version needs them); {why}; \
                 --migration-wait-seconds (ABSTORE_MIGRATION_WAIT_SECONDS) bounds the wait",
                seconds(since.elapsed())
            );
        }
        if logged.is_none_or(|at| at.elapsed() >= LOG_EVERY) {
            tracing::warn!(%missing, holder = ?holder.as_ref().map(ToString::to_string), "--no-migrate: waiting for another process to apply what this version needs; not ready meanwhile");
            logged = Some(now);
        }
        progress.set(Phase::WaitingForMigrations {
            missing,
            holder,
            since,
        });
        tokio::time::sleep(Duration::from_secs(1).min(deadline - now)).await;
    }
}

/// Take the migration lock, trying every [`POLL`] until `deadline`; how long
/// it waited.
async fn acquire(
    conn: &mut PgConnection,
    deadline: Instant,
    settings: &MigrationSettings,
    progress: &Progress,
) -> anyhow::Result<Duration> {
    let since = Instant::now();
    let mut logged: Option<Instant> = None;
    loop {
        if lock::try_acquire(conn).await? {
            // Taken at the first try: nothing was waited for.
            if logged.is_none() {
                return Ok(Duration::ZERO);
            }
            tracing::info!(
                waited_ms = since.elapsed().as_millis(),
                "took the migration lock"
            );
            return Ok(since.elapsed());
        }
        let holder = lock::holder(conn).await?;
        let now = Instant::now();
        if now >= deadline {
            let holder = holder.map_or_else(
                || "its holder has just released it".to_owned(),
                |h| format!("it is held by {h}"),
            );
            bail!(
                "gave up after {} waiting for another process's migration of this database to finish (the migration lock; {holder}); \
                 raise --migration-wait-seconds (ABSTORE_MIGRATION_WAIT_SECONDS, now {}) if its migrations take longer",
                seconds(since.elapsed()),
                settings.wait.as_secs()
            );
        }
        if logged.is_none_or(|at| at.elapsed() >= LOG_EVERY) {
            tracing::info!(holder = ?holder.as_ref().map(ToString::to_string), "another process is migrating this database; waiting for it (not ready meanwhile)");
            logged = Some(now);
        }
        progress.set(Phase::WaitingForLock { holder, since });
        tokio::time::sleep(POLL.min(deadline - now)).await;
    }
}

/// Holding the lock: apply what is still pending and finish the backfill.
async fn under_lock(
    conn: &mut PgConnection,
    migrator: &sqlx::migrate::Migrator,
    settings: &MigrationSettings,
    deadline: Instant,
    now_ms: i64,
    progress: &Progress,
) -> anyhow::Result<MigrationReport> {
    let state = schema::read(conn, migrator).await?;
    // Migration 0011's backfill runs right after 0011, before the later
    // migrations: 0012 then indexes the filled column in one pass, instead
    // of every filled row updating the new index too.
    let split = state
        .pending
        .partition_point(|m| m.version <= fill_types::COMPLETES);
    let (before, after) = state.pending.split_at(split);
    let mut applied = apply::pending(conn, before, settings, deadline, progress).await?;
    // The backfill's batches lock only the rows they fill, which appends
    // never touch: no lock timeout, so a batch is never rolled back for
    // waiting.
    sqlx::raw_sql("SET lock_timeout = 0")
        .execute(&mut *conn)
        .await?;
    let started = Instant::now();
    let filled = fill_types::fill(conn, settings.batch_rows, now_ms, progress)
        .await
        .context("filling the type of older events (migration 0011)")?;
    let filled = (!state.filled).then(|| (filled, started.elapsed()));
    applied.extend(apply::pending(conn, after, settings, deadline, progress).await?);
    Ok(MigrationReport {
        applied,
        already_applied: state.applied,
        unknown: state.unknown,
        filled,
        filled_after: Some(fill_types::COMPLETES),
        waited: Duration::ZERO,
    })
}

/// A connection of its own for the migrations, named after this process.
/// `statement_timeout` is off on it (a server or role default would
/// otherwise apply): a concurrent index build cut short leaves an invalid
/// index behind, and a backfill cut short is work thrown away. What
/// writers wait on is bounded by `lock_timeout` instead (`apply.rs`).
async fn connect_for_migrations(connect: &PgConnectOptions) -> anyhow::Result<PgConnection> {
    let options = connect.clone().application_name(&application_name());
    let mut conn = PgConnection::connect_with(&options)
        .await
        .context("connecting for the migrations")?;
    sqlx::raw_sql("SET statement_timeout = 0")
        .execute(&mut conn)
        .await?;
    Ok(conn)
}

/// `abstore migrations (host H, pid P)`: how the lock's holder is named to
/// the processes waiting for it. Within PostgreSQL's 63 bytes.
fn application_name() -> String {
    // std has no hostname call; Linux keeps it here (a container's is its
    // pod or container name), and shells export it.
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".to_owned());
    let mut name = format!(
        "abstore migrations (host {host}, pid {})",
        std::process::id()
    );
    if name.len() > 63 {
        let mut cut = 63;
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        name.truncate(cut);
    }
    name
}

/// `12 s`, `0.3 s`.
fn seconds(duration: Duration) -> String {
    if duration >= Duration::from_secs(10) {
        format!("{} s", duration.as_secs())
    } else {
        format!("{:.1} s", duration.as_secs_f64())
    }
}
