//! PostgreSQL's migration lock: one session-level advisory lock per
//! database, taken with `pg_try_advisory_lock` only, never with the
//! blocking `pg_advisory_lock`.
//!
//! Why never block (issue 53, docs/decisions.md "Replicas migrate one at a
//! time and never deadlock"): a blocked `SELECT pg_advisory_lock(…)` is a
//! statement in progress, with a snapshot, for as long as it waits. `CREATE
//! INDEX CONCURRENTLY` (migration 0012, run by the lock's holder) waits for
//! every transaction whose snapshot is older than its own to end, that
//! blocked statement included, while that statement waits for the holder's
//! lock: a cycle PostgreSQL breaks by aborting one of them ("deadlock
//! detected"). A `pg_try_advisory_lock` returns at once, so a waiting
//! process holds no snapshot and no lock between its attempts: nothing the
//! holder can wait for is waiting for the holder, and no cycle can form.
//!
//! The key is abstore's own, not sqlx's (sqlx's migrator takes its key with
//! the blocking call): a replica of an older version restarting during this
//! version's migration then never blocks on it, and so never deadlocks
//! with its concurrent index build. (Such a replica fails its own start on
//! the newer schema: its sqlx migrator refuses applied migrations it does
//! not know.)

use sqlx::PgConnection;

use crate::store::migration::LockHolder;

/// The lock's key: "abstorem" in ASCII. Advisory locks are per database,
/// so one key serves every store on a server.
pub(super) const KEY: i64 = 0x6162_7374_6f72_656d;

/// Take the lock if it is free; never waits.
pub(super) async fn try_acquire(conn: &mut PgConnection) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(KEY)
        .fetch_one(conn)
        .await
}

/// Release it (closing the connection would too).
pub(super) async fn release(conn: &mut PgConnection) -> sqlx::Result<()> {
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(KEY)
        .execute(conn)
        .await
        .map(drop)
}

/// Who holds the lock now, if anyone: a bigint advisory key shows in
/// `pg_locks` as its high half in `classid`, its low half in `objid`, and
/// `objsubid` 1.
pub(super) async fn holder(conn: &mut PgConnection) -> sqlx::Result<Option<LockHolder>> {
    let row: Option<(i32, Option<String>, Option<f64>)> = sqlx::query_as(
        "SELECT a.pid, a.application_name, \
                extract(epoch FROM now() - a.backend_start)::float8 \
         FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
         WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
           AND l.classid = ($1::bigint >> 32)::oid \
           AND l.objid = ($1::bigint & 4294967295)::oid \
           AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
         LIMIT 1",
    )
    .bind(KEY)
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|(pid, application, age)| LockHolder {
        pid,
        application: application.unwrap_or_default(),
        connected_for: age
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(std::time::Duration::from_secs_f64),
    }))
}
