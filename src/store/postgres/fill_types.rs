//! Migration 0011's second half on PostgreSQL (see the SQLite twin,
//! `store/sqlite/fill_types.rs`): every event stored before it gets its
//! `type`, in batches of `batch_rows` events by primary key, each its own
//! transaction, so rows are locked a batch at a time and replicas of an
//! older version keep appending meanwhile (their inserts are filled by the
//! migration's trigger). Replicas migrating at once only repeat each
//! other's work: a batch skips events that have their type.

use anyhow::Context as _;
use sqlx::{PgPool, Row as _};

/// The last key of the next batch after `after`: `batch_rows` events on.
const BATCH_END: &str = "SELECT kind, resource_id, seq FROM events \
     WHERE (kind, resource_id, seq) > ($1, $2, $3) \
     ORDER BY kind, resource_id, seq LIMIT 1 OFFSET $4";
/// Fill the events after `after` up to and including the batch's end. The
/// expression is the one migration 0005 indexed (types hold no escape).
const FILL_UP_TO: &str = "UPDATE events SET type = abstore_json_member(envelope, 'type') \
     WHERE (kind, resource_id, seq) > ($1, $2, $3) \
     AND (kind, resource_id, seq) <= ($4, $5, $6) AND type IS NULL";
/// Fill every event after `after` (the last batch).
const FILL_REST: &str = "UPDATE events SET type = abstore_json_member(envelope, 'type') \
     WHERE (kind, resource_id, seq) > ($1, $2, $3) AND type IS NULL";

type Key = (String, String, i64);

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
    let row = sqlx::query("SELECT 1 FROM event_types_filled LIMIT 1")
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
    let mut after: Key = (String::new(), String::new(), i64::MIN);
    let mut total = 0u64;
    loop {
        let mut tx = pool.begin().await?;
        let end = sqlx::query(BATCH_END)
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
            Some(end) => sqlx::query(FILL_UP_TO)
                .bind(&after.0)
                .bind(&after.1)
                .bind(after.2)
                .bind(&end.0)
                .bind(&end.1)
                .bind(end.2),
            None => sqlx::query(FILL_REST)
                .bind(&after.0)
                .bind(&after.1)
                .bind(after.2),
        }
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if end.is_none() {
            sqlx::query("INSERT INTO event_types_filled (filled_at) VALUES ($1)")
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
    if total > 0 {
        tracing::info!(events = total, "event types filled (migration 0011)");
    }
    Ok(total)
}
