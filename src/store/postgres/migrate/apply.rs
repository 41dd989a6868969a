//! Applying pending migrations, by the lock's holder, with sqlx's own
//! `Migrate::apply` (which runs a migration's SQL and records it in
//! `_sqlx_migrations`, in one transaction unless the file says
//! `-- no-transaction`), one migration at a time so each can be timed
//! and bounded.
//!
//! Writers must not queue behind a migration for more than a moment
//! (docs/decisions.md, "Migrations expand, then contract"). A statement
//! waiting for a table lock makes every later writer of that table queue
//! behind it, so a transactional migration runs under `lock_timeout`
//! (`--migration-lock-timeout-ms`): a lock not granted within it rolls the
//! migration back whole, and it is tried again after a pause, until
//! `--migration-wait-seconds`. A `-- no-transaction` migration runs
//! without it: it must be one that takes no lock writers wait on
//! (`CREATE INDEX CONCURRENTLY`, checked by squawk in the test command),
//! and cutting such a build short would leave an invalid index behind that
//! `IF NOT EXISTS` would then keep.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use sqlx::PgConnection;
use sqlx::migrate::{Migrate as _, MigrateError, Migration};

use super::TABLE;
use crate::store::migration::{Applied, MigrationSettings, Phase, Progress};

/// The pause before a migration rolled back for a lock is tried again:
/// doubling from the first to the last.
const RETRY_PAUSE: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(2));

/// Apply `pending` in order; what was applied and how long each took.
pub(super) async fn pending(
    conn: &mut PgConnection,
    pending: &[&Migration],
    settings: &MigrationSettings,
    deadline: Instant,
    progress: &Progress,
) -> anyhow::Result<Vec<Applied>> {
    if pending.is_empty() {
        return Ok(Vec::new());
    }
    conn.ensure_migrations_table(TABLE).await?;
    let mut applied = Vec::with_capacity(pending.len());
    for migration in pending {
        applied.push(one(conn, migration, settings, deadline, progress).await?);
    }
    Ok(applied)
}

async fn one(
    conn: &mut PgConnection,
    migration: &Migration,
    settings: &MigrationSettings,
    deadline: Instant,
    progress: &Progress,
) -> anyhow::Result<Applied> {
    let (version, description) = (migration.version, migration.description.to_string());
    let what = || format!("applying migration {version:04} {description}");
    let since = Instant::now();
    progress.set(Phase::Applying {
        version,
        description: description.clone(),
        since,
    });
    let lock_timeout = if migration.no_tx {
        Duration::ZERO
    } else {
        settings.lock_timeout.max(Duration::from_millis(1))
    };
    // Whole milliseconds, from a flag: nothing else reaches this text.
    let set = format!("SET lock_timeout = {}", lock_timeout.as_millis());
    sqlx::raw_sql(sqlx::AssertSqlSafe(set))
        .execute(&mut *conn)
        .await
        .with_context(what)?;
    if migration.no_tx {
        drop_invalid_indexes(conn, migration)
            .await
            .with_context(what)?;
    }
    let mut retries = 0u32;
    let mut pause = RETRY_PAUSE.0;
    loop {
        match conn.apply(TABLE, migration).await {
            Ok(took) => {
                return Ok(Applied {
                    version,
                    description,
                    took,
                    retries,
                });
            }
            Err(MigrateError::ExecuteMigration(err, _))
                if !migration.no_tx && lock_not_granted(&err) =>
            {
                retries += 1;
                let now = Instant::now();
                if now >= deadline {
                    bail!(
                        "gave up {} after {retries} attempts in {} s: each waited longer than --migration-lock-timeout-ms ({} ms) for a table lock \
                         that other transactions held (long reads or transactions on its tables), and was rolled back; \
                         apply it at a quieter moment, or raise --migration-wait-seconds",
                        what(),
                        since.elapsed().as_secs(),
                        lock_timeout.as_millis()
                    );
                }
                tracing::info!(version, retries, error = %err, "a migration's table lock was not granted in time; rolled back, trying again");
                progress.set(Phase::RetryingForTableLock {
                    version,
                    retries,
                    since,
                });
                tokio::time::sleep(pause.min(deadline - now)).await;
                pause = (pause * 2).min(RETRY_PAUSE.1);
            }
            Err(err) => return Err(err).with_context(what),
        }
    }
}

/// An interrupted `CREATE INDEX CONCURRENTLY` (a cancelled statement, a
/// server restart mid-build) leaves its index behind, marked invalid, and
/// its migration unrecorded; run again, `IF NOT EXISTS` would keep that
/// invalid index for good (the planner never uses it). So before a
/// `-- no-transaction` migration runs, the invalid indexes it creates by
/// name are dropped, concurrently. Only those: an index is touched only if
/// the migration's own text names it.
async fn drop_invalid_indexes(
    conn: &mut PgConnection,
    migration: &Migration,
) -> anyhow::Result<()> {
    let invalid: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_index i \
         JOIN pg_class c ON c.oid = i.indexrelid \
         JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE NOT i.indisvalid AND n.nspname = current_schema()",
    )
    .fetch_all(&mut *conn)
    .await?;
    let sql = migration.sql.as_str();
    for name in invalid {
        if !sql.contains(&format!("CONCURRENTLY IF NOT EXISTS {name} ")) {
            continue;
        }
        tracing::warn!(index = %name, version = migration.version, "an earlier build of this index was interrupted and left it invalid; dropping it to build it again");
        // The name is one of our migration's own identifiers.
        let drop = format!("DROP INDEX CONCURRENTLY IF EXISTS \"{name}\"");
        sqlx::raw_sql(sqlx::AssertSqlSafe(drop))
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// `lock_not_available` (the lock timeout) or `deadlock_detected`: the
/// migration's transaction was rolled back whole and may simply run again.
fn lock_not_granted(err: &sqlx::Error) -> bool {
    err.as_database_error()
        .and_then(|db| db.code())
        .is_some_and(|code| code == "55P03" || code == "40P01")
}
