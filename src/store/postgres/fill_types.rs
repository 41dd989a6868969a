//! Migration 0011's second half on PostgreSQL ([`crate::store::fill_types`]
//! has the SQL and why), run by the migration's holder on its own
//! connection while it holds the migration lock (`migrate/`), so one
//! process fills and the others wait. Rows are locked a batch at a time,
//! so replicas of an older version keep appending meanwhile (their inserts
//! are filled by the migration's trigger).

use std::time::Instant;

use anyhow::Context as _;
use sqlx::{PgConnection, Row as _};

use crate::store::fill_types::{self as sql, Key};
use crate::store::migration::{Phase, Progress};
use crate::store::statement::Dialect;

/// The migration whose second half this is: it runs right after it.
pub(super) const COMPLETES: i64 = 11;

/// Whether every event has its type: migration 0011 was applied and its
/// completion row exists.
pub(super) async fn filled(conn: &mut PgConnection) -> anyhow::Result<bool> {
    let migrated: bool = sqlx::query_scalar("SELECT to_regclass('event_types_filled') IS NOT NULL")
        .fetch_one(&mut *conn)
        .await?;
    if !migrated {
        return Ok(false);
    }
    let row = sqlx::query(sql::FILLED)
        .fetch_optional(conn)
        .await
        .context("reading event_types_filled (migration 0011)")?;
    Ok(row.is_some())
}

/// Fill the types still missing, then record completion; how many events
/// were filled. Each batch is its own transaction; `progress` says how
/// far it got.
pub(super) async fn fill(
    conn: &mut PgConnection,
    batch_rows: u32,
    now_ms: i64,
    progress: &Progress,
) -> anyhow::Result<u64> {
    use sqlx::Connection as _;
    if filled(conn).await? {
        return Ok(0);
    }
    let since = Instant::now();
    let mut after = sql::before_all();
    let mut total = 0u64;
    loop {
        progress.set(Phase::Filling {
            events: total,
            since,
        });
        let mut tx = conn.begin().await?;
        let end = sqlx::query(sql::BATCH_END)
            .bind(&after.0)
            .bind(&after.1)
            .bind(after.2)
            .bind(i64::from(batch_rows) - 1)
            .fetch_optional(&mut *tx)
            .await?
            .map(|row| -> sqlx::Result<Key> {
                Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?))
            })
            .transpose()?;
        let changed = match &end {
            Some(end) => sqlx::query(sql::fill_up_to(Dialect::Postgres))
                .bind(&after.0)
                .bind(&after.1)
                .bind(after.2)
                .bind(&end.0)
                .bind(&end.1)
                .bind(end.2),
            None => sqlx::query(sql::fill_rest(Dialect::Postgres))
                .bind(&after.0)
                .bind(&after.1)
                .bind(after.2),
        }
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if end.is_none() {
            sqlx::query(sql::MARK_FILLED)
                .bind(now_ms)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        total += changed;
        match end {
            Some(end) => after = end,
            None => break,
        }
    }
    Ok(total)
}
