//! The hosted tickets' SQL (migration 0009), written once for both backends
//! but where a dialect differs: PostgreSQL locks the ticket a write changes
//! (`FOR NO KEY UPDATE`; SQLite's one writer already serialises every
//! write), and each database aggregates a ticket's blockers and expands a
//! JSON array of ids with its own functions. Rows are read by position
//! ([`Columns`]).

use crate::store::error::{StoreError, StoreResult};
use crate::store::statement::{Arg, Columns, Dialect, Fixed, Statement};
use crate::tickets::answer::StoredTicket;

/// A ticket row's columns as [`ticket_row`] reads them (`t` is `tickets`),
/// but for the blockers' aggregate, which follows per dialect.
macro_rules! ticket_columns {
    () => {
        "t.id, t.creation_key, t.title_json, t.body_json, t.state, t.labels_json, \
         t.created_at, t.seq, "
    };
}

/// The ticket's blocker ids as a JSON array (SQLite: `[]` when none;
/// PostgreSQL: `NULL`); ordered by the reader.
macro_rules! blockers_sqlite {
    () => {
        "(SELECT json_group_array(b.blocker_id) FROM ticket_blockers b \
         WHERE b.team_key = t.team_key AND b.ticket_id = t.id)"
    };
}
macro_rules! blockers_postgres {
    () => {
        "(SELECT json_agg(b.blocker_id)::text FROM ticket_blockers b \
         WHERE b.team_key = t.team_key AND b.ticket_id = t.id)"
    };
}

/// One statement text per dialect: `$tail` after the ticket columns.
macro_rules! per_dialect {
    ($dialect:expr, $tail:literal) => {
        match $dialect {
            Dialect::Sqlite => concat!("SELECT ", ticket_columns!(), blockers_sqlite!(), $tail),
            Dialect::Postgres => concat!("SELECT ", ticket_columns!(), blockers_postgres!(), $tail),
        }
    };
}

/// A ticket row: the stored ticket, its `created_at` and its `seq` (the
/// listing's cursor).
pub(super) fn ticket_row(row: &dyn Columns) -> StoreResult<(StoredTicket, i64, i64)> {
    let blocked_by = match row.optional_text(8)? {
        Some(json) => {
            let mut ids: Vec<String> = serde_json::from_str(&json).map_err(|err| {
                StoreError::Corrupt(format!("a ticket's blockers are malformed: {err}"))
            })?;
            ids.sort_unstable();
            ids
        }
        None => Vec::new(),
    };
    Ok((
        StoredTicket {
            id: row.text(0)?,
            creation_key: row.optional_text(1)?,
            title_json: row.text(2)?,
            body_json: row.text(3)?,
            state: row.text(4)?,
            labels_json: row.text(5)?,
            blocked_by,
        },
        row.int(6)?,
        row.int(7)?,
    ))
}

pub(super) fn select_ticket<'a>(dialect: Dialect, team: &'a str, id: &'a str) -> Fixed<'a, 2> {
    Statement {
        text: per_dialect!(
            dialect,
            " FROM tickets t WHERE t.team_key = $1 AND t.id = $2"
        ),
        args: [Arg::Text(team), Arg::Text(id)],
    }
}

pub(super) fn select_by_creation_key<'a>(
    dialect: Dialect,
    team: &'a str,
    key: &'a str,
) -> Fixed<'a, 2> {
    Statement {
        text: per_dialect!(
            dialect,
            " FROM tickets t WHERE t.team_key = $1 AND t.creation_key = $2"
        ),
        args: [Arg::Text(team), Arg::Text(key)],
    }
}

/// One page of a team's tickets after the cursor `(created_at, seq)`, in
/// creation order; only those in `state` when it is given.
pub(super) fn list_page<'a>(
    dialect: Dialect,
    team: &'a str,
    state: Option<&'a str>,
    after: (i64, i64),
    limit: i64,
) -> Statement<Vec<Arg<'a>>> {
    let (at, seq) = after;
    match state {
        Some(state) => Statement {
            text: per_dialect!(
                dialect,
                " FROM tickets t WHERE t.team_key = $1 AND t.state = $2 \
                 AND (t.created_at, t.seq) > ($3, $4) ORDER BY t.created_at, t.seq LIMIT $5"
            ),
            args: vec![
                Arg::Text(team),
                Arg::Text(state),
                Arg::Int(at),
                Arg::Int(seq),
                Arg::Int(limit),
            ],
        },
        None => Statement {
            text: per_dialect!(
                dialect,
                " FROM tickets t WHERE t.team_key = $1 \
                 AND (t.created_at, t.seq) > ($2, $3) ORDER BY t.created_at, t.seq LIMIT $4"
            ),
            args: vec![
                Arg::Text(team),
                Arg::Int(at),
                Arg::Int(seq),
                Arg::Int(limit),
            ],
        },
    }
}

/// The state and blockers of each of `ids_json`'s tickets (a JSON array of
/// ids, none holding NUL) that the team has: `(id, state, blockers)`.
pub(super) fn dependency_rows<'a>(
    dialect: Dialect,
    team: &'a str,
    ids_json: &'a str,
) -> Fixed<'a, 2> {
    let text = match dialect {
        Dialect::Sqlite => concat!(
            "SELECT t.id, t.state, ",
            blockers_sqlite!(),
            " FROM tickets t WHERE t.team_key = $1 AND t.id IN (SELECT value FROM json_each($2))"
        ),
        Dialect::Postgres => concat!(
            "SELECT t.id, t.state, ",
            blockers_postgres!(),
            " FROM tickets t WHERE t.team_key = $1 AND t.id IN \
             (SELECT e.value COLLATE \"C\" FROM jsonb_array_elements_text($2::jsonb) AS e(value))"
        ),
    };
    Statement {
        text,
        args: [Arg::Text(team), Arg::Text(ids_json)],
    }
}

/// A row of [`dependency_rows`]: id, state and blocker ids in bytewise order.
pub(super) fn dependency_row(row: &dyn Columns) -> StoreResult<(String, String, Vec<String>)> {
    let mut blockers: Vec<String> = match row.optional_text(2)? {
        Some(json) => serde_json::from_str(&json).map_err(|err| {
            StoreError::Corrupt(format!("a ticket's blockers are malformed: {err}"))
        })?,
        None => Vec::new(),
    };
    blockers.sort_unstable();
    Ok((row.text(0)?, row.text(1)?, blockers))
}

/// Whether the team has ticket `id`, holding its row until the transaction
/// ends where the dialect locks rows. `NO KEY UPDATE`, the lock an `UPDATE`
/// of non-key columns takes: it serialises the ticket's writers, yet leaves
/// the `KEY SHARE` locks of foreign-key checks free, so two writers adding
/// each other's ticket as a blocker at once cannot deadlock.
pub(super) fn lock_ticket<'a>(dialect: Dialect, team: &'a str, id: &'a str) -> Fixed<'a, 2> {
    let text = match dialect {
        Dialect::Sqlite => "SELECT 1 FROM tickets WHERE team_key = $1 AND id = $2",
        Dialect::Postgres => {
            "SELECT 1 FROM tickets WHERE team_key = $1 AND id = $2 FOR NO KEY UPDATE"
        }
    };
    Statement {
        text,
        args: [Arg::Text(team), Arg::Text(id)],
    }
}

/// Whether the team has ticket `id` (no lock).
pub(super) fn ticket_exists<'a>(team: &'a str, id: &'a str) -> Fixed<'a, 2> {
    Statement {
        text: "SELECT 1 FROM tickets WHERE team_key = $1 AND id = $2",
        args: [Arg::Text(team), Arg::Text(id)],
    }
}

/// The team's next creation sequence, creating its row at the first
/// ticket; the row is held until the transaction ends, so a team's creates
/// serialise on it (DESIGN decision 2).
pub(super) fn next_ticket_seq(team: &str) -> Fixed<'_, 1> {
    Statement {
        text: "INSERT INTO ticket_teams (team_key, last_seq) VALUES ($1, 1) \
               ON CONFLICT (team_key) DO UPDATE SET last_seq = ticket_teams.last_seq + 1 \
               RETURNING last_seq",
        args: [Arg::Text(team)],
    }
}

/// The columns of a new ticket row.
pub(super) struct NewTicket<'a> {
    pub team: &'a str,
    pub id: &'a str,
    pub seq: i64,
    pub creation_key: Option<&'a str>,
    pub title_json: &'a str,
    pub body_json: &'a str,
    pub state: &'a str,
    pub labels_json: &'a str,
    pub now: i64,
}

pub(super) fn insert_ticket<'a>(t: &NewTicket<'a>) -> Fixed<'a, 9> {
    Statement {
        text: "INSERT INTO tickets (team_key, id, seq, creation_key, title_json, body_json, \
               state, labels_json, created_at, updated_at) \
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9)",
        args: [
            Arg::Text(t.team),
            Arg::Text(t.id),
            Arg::Int(t.seq),
            Arg::OptionalText(t.creation_key),
            Arg::Text(t.title_json),
            Arg::Text(t.body_json),
            Arg::Text(t.state),
            Arg::Text(t.labels_json),
            Arg::Int(t.now),
        ],
    }
}

/// Move the ticket to `claimed` unless it is there already or `done`; one
/// statement, so of two concurrent claims one changes the row.
pub(super) fn claim<'a>(
    team: &'a str,
    id: &'a str,
    claimed: &'a str,
    done: &'a str,
    now: i64,
) -> Fixed<'a, 5> {
    Statement {
        text: "UPDATE tickets SET state = $3, updated_at = $5 \
               WHERE team_key = $1 AND id = $2 AND state <> $3 AND state <> $4",
        args: [
            Arg::Text(team),
            Arg::Text(id),
            Arg::Text(claimed),
            Arg::Text(done),
            Arg::Int(now),
        ],
    }
}

pub(super) fn transition<'a>(team: &'a str, id: &'a str, state: &'a str, now: i64) -> Fixed<'a, 4> {
    Statement {
        text: "UPDATE tickets SET state = $3, updated_at = $4 WHERE team_key = $1 AND id = $2",
        args: [
            Arg::Text(team),
            Arg::Text(id),
            Arg::Text(state),
            Arg::Int(now),
        ],
    }
}

/// Replace the fields given (stored texts), keep the others.
pub(super) fn update<'a>(
    team: &'a str,
    id: &'a str,
    title_json: Option<&'a str>,
    body_json: Option<&'a str>,
    labels_json: Option<&'a str>,
    now: i64,
) -> Fixed<'a, 6> {
    Statement {
        text: "UPDATE tickets SET title_json = COALESCE($3, title_json), \
               body_json = COALESCE($4, body_json), labels_json = COALESCE($5, labels_json), \
               updated_at = $6 WHERE team_key = $1 AND id = $2",
        args: [
            Arg::Text(team),
            Arg::Text(id),
            Arg::OptionalText(title_json),
            Arg::OptionalText(body_json),
            Arg::OptionalText(labels_json),
            Arg::Int(now),
        ],
    }
}

pub(super) fn count_blockers<'a>(team: &'a str, id: &'a str) -> Fixed<'a, 2> {
    Statement {
        text: "SELECT COUNT(*) FROM ticket_blockers WHERE team_key = $1 AND ticket_id = $2",
        args: [Arg::Text(team), Arg::Text(id)],
    }
}

pub(super) fn has_blocker<'a>(team: &'a str, id: &'a str, blocker: &'a str) -> Fixed<'a, 3> {
    Statement {
        text: "SELECT 1 FROM ticket_blockers \
               WHERE team_key = $1 AND ticket_id = $2 AND blocker_id = $3",
        args: [Arg::Text(team), Arg::Text(id), Arg::Text(blocker)],
    }
}

pub(super) fn insert_blocker<'a>(team: &'a str, id: &'a str, blocker: &'a str) -> Fixed<'a, 3> {
    Statement {
        text: "INSERT INTO ticket_blockers (team_key, ticket_id, blocker_id) VALUES ($1, $2, $3) \
               ON CONFLICT DO NOTHING",
        args: [Arg::Text(team), Arg::Text(id), Arg::Text(blocker)],
    }
}

pub(super) fn delete_blocker<'a>(team: &'a str, id: &'a str, blocker: &'a str) -> Fixed<'a, 3> {
    Statement {
        text: "DELETE FROM ticket_blockers \
               WHERE team_key = $1 AND ticket_id = $2 AND blocker_id = $3",
        args: [Arg::Text(team), Arg::Text(id), Arg::Text(blocker)],
    }
}

/// The ticket's comment count: comments are numbered 1, 2, 3… and never
/// deleted, so the last number is the count.
pub(super) fn last_comment<'a>(team: &'a str, id: &'a str) -> Fixed<'a, 2> {
    Statement {
        text: "SELECT COALESCE(MAX(seq), 0) FROM ticket_comments \
               WHERE team_key = $1 AND ticket_id = $2",
        args: [Arg::Text(team), Arg::Text(id)],
    }
}

pub(super) fn insert_comment<'a>(
    team: &'a str,
    id: &'a str,
    seq: i64,
    body_json: &'a str,
    now: i64,
) -> Fixed<'a, 5> {
    Statement {
        text: "INSERT INTO ticket_comments (team_key, ticket_id, seq, body_json, created_at) \
               VALUES ($1, $2, $3, $4, $5)",
        args: [
            Arg::Text(team),
            Arg::Text(id),
            Arg::Int(seq),
            Arg::Text(body_json),
            Arg::Int(now),
        ],
    }
}

/// The ticket's state, holding its row until the transaction ends where the
/// dialect locks rows (as [`lock_ticket`]): a claim or a transition reads
/// the state it moves the ticket from.
pub(super) fn lock_state<'a>(dialect: Dialect, team: &'a str, id: &'a str) -> Fixed<'a, 2> {
    let text = match dialect {
        Dialect::Sqlite => "SELECT state FROM tickets WHERE team_key = $1 AND id = $2",
        Dialect::Postgres => {
            "SELECT state FROM tickets WHERE team_key = $1 AND id = $2 FOR NO KEY UPDATE"
        }
    };
    Statement {
        text,
        args: [Arg::Text(team), Arg::Text(id)],
    }
}

/// The columns of a history entry (migration 0010).
pub(super) struct NewEntry<'a> {
    pub team: &'a str,
    pub id: &'a str,
    pub now: i64,
    pub actor: &'a str,
    pub token_digest: Option<&'a str>,
    pub change_json: &'a str,
}

/// The ticket's next history entry, numbered after its last one. Every
/// writer of a ticket's history holds the ticket's row first (its lock, or
/// the `UPDATE` it made), so two entries never take one number.
pub(super) fn insert_history<'a>(e: &NewEntry<'a>) -> Fixed<'a, 6> {
    Statement {
        text: "INSERT INTO ticket_history \
               (team_key, ticket_id, seq, at, actor, token_digest, change_json) \
               SELECT $1, $2, COALESCE(MAX(seq), 0) + 1, $3, $4, $5, $6 FROM ticket_history \
               WHERE team_key = $1 AND ticket_id = $2",
        args: [
            Arg::Text(e.team),
            Arg::Text(e.id),
            Arg::Int(e.now),
            Arg::Text(e.actor),
            Arg::OptionalText(e.token_digest),
            Arg::Text(e.change_json),
        ],
    }
}

/// A page of the ticket's history after entry `after`, oldest first.
pub(super) fn history_page<'a>(team: &'a str, id: &'a str, after: i64, limit: i64) -> Fixed<'a, 4> {
    Statement {
        text: "SELECT seq, at, actor, token_digest, change_json FROM ticket_history \
               WHERE team_key = $1 AND ticket_id = $2 AND seq > $3 ORDER BY seq LIMIT $4",
        args: [
            Arg::Text(team),
            Arg::Text(id),
            Arg::Int(after),
            Arg::Int(limit),
        ],
    }
}

pub(super) fn history_row(row: &dyn Columns) -> StoreResult<crate::tickets::history::Entry> {
    Ok(crate::tickets::history::Entry {
        seq: row.int(0)?,
        at: row.int(1)?,
        actor: row.text(2)?,
        token_digest: row.optional_text(3)?,
        change_json: row.text(4)?,
    })
}
