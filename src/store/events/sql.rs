//! The event log's statements: the append (two texts, which PostgreSQL
//! fuses into one, [`APPEND_EVENT_POSTGRES`]), a held read's page, and the
//! streamed reads of a log and of a repository's state events (written per
//! dialect). PostgreSQL's one-statement append is `fast_append.rs`, beside
//! the rule it restates.

use crate::protocol::ResourceRef;
use crate::store::statement::{Arg, Dialect, Fixed, args, statement};

macro_rules! append_event_tail_sql {
    () => {
        "UPDATE resources SET last_seq = $3, updated_at = $4 WHERE kind = $1 AND id = $2"
    };
}

macro_rules! insert_event_sql {
    () => {
        "INSERT INTO events (kind, resource_id, seq, envelope, type) VALUES ($1, $2, $3, $5, $6)"
    };
}

/// A repository's state events (protocol 3): every event of a durable type
/// (`harvest.*`, `orchestrator.sandbox.*`, and three `dispatcher.*` settings)
/// and every event from the latest `dispatcher.run-started` on, when there is
/// one; in sequence order, one statement (one snapshot). Each part is a range
/// of the type index (or of the primary key, from the anchor), so neither the
/// journal nor its envelopes are scanned whole. `$1`: the repository; `$2`: the
/// journal's last sequence taken (the answer as the journal stood then).
macro_rules! state_events_sql {
    ($by_type:literal, $ty:literal) => {
        concat!(
            "SELECT envelope FROM events WHERE kind = 'repo' AND resource_id = $1 AND seq <= $2 \
             AND seq IN (",
            "SELECT seq FROM ",
            $by_type,
            " WHERE kind = 'repo' AND resource_id = $1 AND ",
            $ty,
            " >= 'harvest.' AND ",
            $ty,
            " < 'harvest/' UNION ALL ",
            "SELECT seq FROM ",
            $by_type,
            " WHERE kind = 'repo' AND resource_id = $1 AND ",
            $ty,
            " >= 'orchestrator.sandbox.' AND ",
            $ty,
            " < 'orchestrator.sandbox/' UNION ALL ",
            "SELECT seq FROM ",
            $by_type,
            " WHERE kind = 'repo' AND resource_id = $1 AND ",
            $ty,
            " IN ('dispatcher.intake-set', 'dispatcher.pause-set', \
             'dispatcher.auto-merge-default-set') UNION ALL ",
            "SELECT seq FROM events WHERE kind = 'repo' AND resource_id = $1 AND seq >= (",
            "SELECT seq FROM ",
            $by_type,
            " WHERE kind = 'repo' AND resource_id = $1 AND ",
            $ty,
            " = 'dispatcher.run-started' AND seq <= $2 ORDER BY seq DESC LIMIT 1)",
            ") ORDER BY seq"
        )
    };
}

/// Envelopes after `since`, at most `limit`.
pub(crate) fn events_page(r: &ResourceRef, since: i64, limit: Option<i64>) -> Fixed<'_, 4> {
    const SQL: &str = "SELECT envelope FROM events WHERE kind = $1 AND resource_id = $2 \
         AND seq > $3 ORDER BY seq LIMIT $4";
    let [kind, id, since] = args![r.kind.tag(), &r.id, since];
    statement(SQL, [kind, id, since, Arg::Limit(limit)])
}

/// The event stored as sequence `seq`; with the same arguments,
/// [`APPEND_EVENT_TAIL`] makes it the resource's tail.
pub(crate) fn append_event<'a>(
    r: &'a ResourceRef,
    seq: i64,
    now: i64,
    envelope: &'a str,
    event_type: &'a str,
) -> Fixed<'a, 6> {
    const SQL: &str = insert_event_sql!();
    statement(
        SQL,
        args![r.kind.tag(), &r.id, seq, now, envelope, event_type],
    )
}

/// [`append_event`]'s second half.
pub(crate) const APPEND_EVENT_TAIL: &str = append_event_tail_sql!();

/// PostgreSQL's one round trip: the event and the counter
/// ([`append_event`]'s arguments, [`APPEND_EVENT_TAIL`]).
pub(crate) const APPEND_EVENT_POSTGRES: &str = concat!(
    "WITH bumped AS (",
    append_event_tail_sql!(),
    ") ",
    insert_event_sql!()
);

/// Envelopes of `r` with `since < seq <= until`, in order (a streamed read).
pub(crate) fn events_between(r: &ResourceRef, since: i64, until: i64) -> Fixed<'_, 4> {
    const SQL: &str = "SELECT envelope FROM events \
         WHERE kind = $1 AND resource_id = $2 AND seq > $3 AND seq <= $4 ORDER BY seq";
    statement(SQL, args![r.kind.tag(), &r.id, since, until])
}

/// A repository's state events as its journal stood at `until` (a
/// streamed read; [`state_events_sql`] says which).
pub(crate) fn state_events(repo: &str, until: i64, dialect: Dialect) -> Fixed<'_, 2> {
    const SQLITE: &str = state_events_sql!("events INDEXED BY events_by_type", "type");
    const POSTGRES: &str = state_events_sql!("events", "type");
    let text = match dialect {
        Dialect::Sqlite => SQLITE,
        Dialect::Postgres => POSTGRES,
    };
    statement(text, args![repo, until])
}
