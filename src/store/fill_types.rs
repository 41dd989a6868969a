//! Migration 0011's second half, the SQL both backends run (each in its
//! own driver: it runs at open, before the store's engine exists): every
//! event stored before the migration gets its `type` column, read from its
//! envelope, in batches of `--migrate-batch-rows` events by primary key,
//! each its own transaction, so the write lock is never held for a whole
//! table and a crash keeps the batches done (the next start resumes).
//! `event_types_filled` records completion; a store whose fill is
//! unfinished is not served.

use super::statement::Dialect;

/// The last key of the next batch after `$1..$3`: `$4` events on.
pub(super) const BATCH_END: &str = "SELECT kind, resource_id, seq FROM events \
     WHERE (kind, resource_id, seq) > ($1, $2, $3) \
     ORDER BY kind, resource_id, seq LIMIT 1 OFFSET $4";

/// Fill the events after `$1..$3` up to and including `$4..$6`.
pub(super) fn fill_up_to(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite => {
            "UPDATE events SET type = json_extract(envelope, '$.type') \
             WHERE (kind, resource_id, seq) > ($1, $2, $3) \
             AND (kind, resource_id, seq) <= ($4, $5, $6) AND type IS NULL"
        }
        // The expression migration 0005 indexed (types hold no escape).
        Dialect::Postgres => {
            "UPDATE events SET type = abstore_json_member(envelope, 'type') \
             WHERE (kind, resource_id, seq) > ($1, $2, $3) \
             AND (kind, resource_id, seq) <= ($4, $5, $6) AND type IS NULL"
        }
    }
}

/// Fill every event after `$1..$3` (the last batch).
pub(super) fn fill_rest(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite => {
            "UPDATE events SET type = json_extract(envelope, '$.type') \
             WHERE (kind, resource_id, seq) > ($1, $2, $3) AND type IS NULL"
        }
        Dialect::Postgres => {
            "UPDATE events SET type = abstore_json_member(envelope, 'type') \
             WHERE (kind, resource_id, seq) > ($1, $2, $3) AND type IS NULL"
        }
    }
}

pub(super) const FILLED: &str = "SELECT 1 FROM event_types_filled LIMIT 1";
pub(super) const MARK_FILLED: &str = "INSERT INTO event_types_filled (filled_at) VALUES ($1)";

/// A primary key of `events`.
pub(super) type Key = (String, String, i64);

/// Before every key: kinds are non-empty text.
pub(super) fn before_all() -> Key {
    (String::new(), String::new(), i64::MIN)
}
