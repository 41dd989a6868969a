//! Migration 0011's second half on SQLite ([`crate::store::fill_types`]
//! has the SQL and why), on the writer's connection before it starts.

use anyhow::Context as _;
use rusqlite::{Connection, OptionalExtension as _, params};

use crate::store::fill_types::{self as sql, Key};
use crate::store::statement::Dialect;

/// Whether migration 0011 was applied and its filling left unfinished: a
/// store in that state must not be served (its protocol-3 reads would miss
/// the events without a type). A schema older than 0011 is not this
/// check's to refuse: its statements fail on their own.
pub(super) fn unfinished(conn: &Connection) -> anyhow::Result<bool> {
    let migrated = conn
        .query_row(
            "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'event_types_filled'",
            [],
            |_| Ok(()),
        )
        .optional()?
        .is_some();
    Ok(migrated && !filled(conn)?)
}

/// Whether every event has its type (the completion row exists).
pub(super) fn filled(conn: &Connection) -> anyhow::Result<bool> {
    Ok(conn
        .query_row(sql::FILLED, [], |_| Ok(()))
        .optional()
        .context("reading event_types_filled (migration 0011)")?
        .is_some())
}

/// Fill the types still missing, then record completion; how many events
/// were filled.
pub(super) fn fill(conn: &mut Connection, batch_rows: u32, now_ms: i64) -> anyhow::Result<u64> {
    if filled(conn)? {
        return Ok(0);
    }
    let mut after = sql::before_all();
    let mut total = 0u64;
    loop {
        let tx = conn.transaction()?;
        let end: Option<Key> = tx
            .query_row(
                sql::BATCH_END,
                params![after.0, after.1, after.2, i64::from(batch_rows) - 1],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )
            .optional()?;
        let changed = match &end {
            Some(end) => tx.execute(
                sql::fill_up_to(Dialect::Sqlite),
                params![after.0, after.1, after.2, end.0, end.1, end.2],
            )?,
            None => tx.execute(
                sql::fill_rest(Dialect::Sqlite),
                params![after.0, after.1, after.2],
            )?,
        };
        if end.is_none() {
            tx.execute(sql::MARK_FILLED, params![now_ms])?;
        }
        tx.commit()?;
        total += changed as u64;
        match end {
            Some(end) => after = end,
            None => break,
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store as migration 0010 left it, with events, then migrated: every
    /// event gets its type, in batches of any size, and a second run does
    /// nothing.
    #[test]
    fn fills_every_event_in_batches_of_any_size() {
        for batch in [1, 2, 3, 7, 1000] {
            let mut conn = Connection::open_in_memory().unwrap();
            super::super::migrate::run(&mut conn).unwrap();
            conn.execute_batch(
                "INSERT INTO resources (kind, id, attrs, created_at, updated_at, last_seq) \
                 VALUES ('build', 'b', '{}', 0, 0, 5), ('repo', 'r', '{}', 0, 0, 2);",
            )
            .unwrap();
            // Events as an older version stored them: no type.
            conn.execute_batch("DELETE FROM event_types_filled;")
                .unwrap();
            for (kind, id, seq, ty) in [
                ("build", "b", 1, "build.started"),
                ("build", "b", 2, "observation.recorded"),
                ("build", "b", 3, "odd \\\"quoted\\\""),
                ("build", "b", 4, "build.completed"),
                ("build", "b", 5, "pr.merged"),
                ("repo", "r", 1, "harvest.done"),
                ("repo", "r", 2, "dispatcher.run-started"),
            ] {
                let envelope = format!("{{\"seq\":{seq},\"type\":\"{ty}\",\"payload\":{{}}}}");
                conn.execute(
                    "INSERT INTO events (kind, resource_id, seq, envelope) VALUES (?1, ?2, ?3, ?4)",
                    params![kind, id, seq, envelope],
                )
                .unwrap();
            }
            assert!(!filled(&conn).unwrap());
            assert!(unfinished(&conn).unwrap());
            assert_eq!(fill(&mut conn, batch, 42).unwrap(), 7, "batch {batch}");
            assert!(filled(&conn).unwrap());
            assert!(!unfinished(&conn).unwrap());
            let types: Vec<String> = conn
                .prepare("SELECT type FROM events ORDER BY kind, resource_id, seq")
                .unwrap()
                .query_map([], |row| row.get(0))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            assert_eq!(
                types,
                [
                    "build.started",
                    "observation.recorded",
                    "odd \"quoted\"",
                    "build.completed",
                    "pr.merged",
                    "harvest.done",
                    "dispatcher.run-started"
                ]
            );
            assert_eq!(fill(&mut conn, batch, 43).unwrap(), 0);
        }
    }

    /// A schema older than 0011 is not refused here (its statements fail
    /// on their own, as before).
    #[test]
    fn only_an_unfinished_fill_is_refused() {
        let conn = Connection::open_in_memory().unwrap();
        assert!(!unfinished(&conn).unwrap());
    }
}
