//! PostgreSQL's append in one autocommit statement ([`POSTGRES`]), beside
//! the rule it restates (`mod.rs`, `Events::append`): the statement bumps
//! the tail only where the rule would append, and the row it answers tells
//! [`decide`] what the rule would have answered, or that only the
//! transaction can say. The rule's checks, as the statement spells them:
//!
//! - a stale `expected_seq` appends nothing (`last_seq = $4`), and is
//!   answered as stale before the bound on events is looked at, as the rule
//!   answers it;
//! - the log takes one more event only below the bound (`last_seq < $9`);
//!   at it the statement writes nothing and the transaction refuses;
//! - times never run backwards along the log: the write time is
//!   `GREATEST(updated_at, now)`, the rule's `write_time`; a clock further
//!   behind the last write than the formatted times cover is left to the
//!   transaction.
//!
//! The PostgreSQL backend only binds and runs it (`postgres/primitives.rs`,
//! `try_append`). The contract case `events::fast_append_agrees_with_the_rule`
//! drives both paths at each check's edge and fails if they ever answer
//! differently.

use std::borrow::Cow;

use crate::protocol::ResourceRef;
use crate::protocol::time::format_iso;
use crate::store::api::NewEvent;
use crate::store::engine::FastAppend;
use crate::store::envelope::{envelope_after_ts, envelope_head, envelope_json};
use crate::store::error::{StoreError, StoreResult};

/// The tail bumped (only if `expected_seq` matches, the log holds fewer
/// than `$9` events, and the last write is less than `$7`'s length of
/// milliseconds ahead of the clock) and the envelope stored. Its `seq`
/// digits and its `ts` text are joined in between the texts the caller
/// made; `$7` holds the formatted times from the clock's `$3` on, of which
/// the statement takes the write time, `GREATEST($3, updated_at)`, as the
/// transaction would. It bumps the counter row first, so writers of one
/// resource still serialise on it; the caller tells a refusal from a miss
/// by the tail the statement's snapshot saw (`before`).
///
/// Parameters: `$1` kind, `$2` id, `$3` the clock, `$4` the expected
/// sequence (or `NULL`), `$5` the envelope's head ([`Texts::head`]), `$6`
/// what follows its `ts` ([`Texts::after`]), `$7` the times ([`times`]),
/// `$8` the `ts` member's opening (`TS_MEMBER`), `$9` the bound on events,
/// `$10` the event's type.
pub(crate) const POSTGRES: &str = "WITH bumped AS (\
     UPDATE resources SET last_seq = last_seq + 1, updated_at = GREATEST(updated_at, $3) \
     WHERE kind = $1 AND id = $2 AND updated_at < $3 + cardinality($7::text[]) \
     AND ($4::bigint IS NULL OR last_seq = $4) AND last_seq < $9::bigint \
     RETURNING last_seq, updated_at), \
     stored AS (INSERT INTO events (kind, resource_id, seq, envelope, type) \
     SELECT $1, $2, last_seq, $5::text || last_seq::text || $8::text \
     || ($7::text[])[(updated_at - $3 + 1)::int] || $6::text, $10::text FROM bumped RETURNING seq) \
     SELECT (SELECT seq FROM stored) AS seq, (SELECT updated_at FROM bumped) AS ts, \
     (SELECT last_seq FROM resources WHERE kind = $1 AND id = $2) AS before";

/// How far behind a resource's last write the clock may be for an append to
/// take the fast path: racing writers take the row in another order than
/// they read the clock, by a few milliseconds.
pub(crate) const SKEW_MS: i64 = 32;

/// How many times an append tries [`POSTGRES`] before the transaction.
pub(crate) const ATTEMPTS: usize = 2;

/// The texts of the envelope around its `seq` and `ts`, and the event's
/// type: the same for every attempt.
pub(crate) struct Texts<'a> {
    pub head: String,
    pub after: String,
    pub event_type: Cow<'a, str>,
}

impl<'a> Texts<'a> {
    pub(crate) fn new(r: &ResourceRef, event: &'a NewEvent) -> Self {
        Texts {
            head: envelope_head(r),
            after: envelope_after_ts(event),
            event_type: event.type_name(),
        }
    }
}

/// The write times the statement may take, formatted: the clock's `now`
/// and the [`SKEW_MS`] milliseconds after it.
pub(crate) fn times(now: i64) -> Vec<String> {
    (0..SKEW_MS)
        .map(|ahead| format_iso(now.saturating_add(ahead)))
        .collect()
}

/// What one run of the statement decided.
pub(crate) enum Step {
    /// The rule's answer (`Some`), or the transaction's to give (`None`).
    Decided(Option<FastAppend>),
    /// The clock was behind the last write: try again with a fresh reading.
    Again,
}

/// What the statement's row means: the `seq` it stored (and its `ts`), or
/// the tail its snapshot saw (`before`; `None`: no such resource).
pub(crate) fn decide(
    r: &ResourceRef,
    event: &NewEvent,
    expected_seq: Option<i64>,
    max_events: i64,
    seq: Option<i64>,
    ts: Option<i64>,
    before: Option<i64>,
) -> StoreResult<Step> {
    Ok(match (seq, before) {
        (Some(seq), _) => {
            let ts = ts.ok_or_else(|| StoreError::Corrupt("an append without a time".into()))?;
            Step::Decided(Some(FastAppend::Appended(envelope_json(r, seq, ts, event))))
        }
        (None, None) => return Err(StoreError::NotFound(r.clone())),
        // The statement saw this tail and refused on it, as the rule does
        // before it looks at the bound.
        (None, Some(before)) if expected_seq.is_some_and(|e| e != before) => {
            Step::Decided(Some(FastAppend::Stale))
        }
        // A full log: the transaction refuses it.
        (None, Some(before)) if before >= max_events => Step::Decided(None),
        (None, Some(_)) => Step::Again,
    })
}
