//! Migration 0011's second half on PostgreSQL ([`crate::store::fill_types`]
//! has the SQL and why). Rows are locked a batch at a time, so replicas of
//! an older version keep appending meanwhile (their inserts are filled by
//! the migration's trigger). Replicas migrating at once only repeat each
//! other's work: a batch skips events that have their type.

use anyhow::Context as _;
use sqlx::{PgPool, Row as _};

use crate::store::fill_types::{self as sql, Key};
use crate::store::statement::Dialect;

/// Whether migration 0011 was applied and its filling left unfinished (see
/// the SQLite twin's `unfinished`).
pub(super) async fn unfinished(pool: &PgPool) -> anyhow::Result<bool> {
    let migrated: bool = sqlx::query_scalar("SELECT to_regclass('event_types_filled') IS NOT NULL")
        .fetch_one(pool)
        .await?;
    Ok(migrated && !filled(pool).await?)
}

/// Whether every event has its type (the completion row exists).
pub(super) async fn filled(pool: &PgPool) -> anyhow::Result<bool> {
    let row = sqlx::query(sql::FILLED)
        .fetch_optional(pool)
        .await
        .context("reading event_types_filled (migration 0011)")?;
    Ok(row.is_some())
}

/// Fill the types still missing, then record completion; how many events
/// were filled.
pub(super) async fn fill(pool: &PgPool, batch_rows: u32, now_ms: i64) -> anyhow::Result<u64> {
    if filled(pool).await? {
        return Ok(0);
    }
    let mut after = sql::before_all();
    let mut total = 0u64;
    loop {
        let mut tx = pool.begin().await?;
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
    sql::log_filled(total);
    Ok(total)
}
