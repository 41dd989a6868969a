//! The event log of a build, repository or session: appends (conditional
//! or not) and a held read's page. The append rule is [`Events::append`]
//! here; its statements are `sql.rs`'s, and PostgreSQL's one-statement
//! form of the whole rule is `fast_append.rs`, which a change of the rule
//! changes with it (the contract case `events::fast_append_agrees_with_the_rule`
//! fails while the two disagree).

pub(crate) mod fast_append;
pub(crate) mod sql;

use async_trait::async_trait;

use crate::protocol::ResourceRef;
use crate::store::api::{Events, NewEvent};
use crate::store::bounds::{Bounds, OverBound};
use crate::store::engine::{Backend, Engine, FastAppend, WriteTx, Written};
use crate::store::envelope::envelope_json;
use crate::store::error::{StoreError, StoreResult};
use crate::store::records::LogTail;
use crate::store::resources::sql::exists;
use crate::store::resources::{locked_tail, write_time};
use crate::store::statement::Statements;

#[async_trait]
impl<B: Backend> Events for Engine<B> {
    /// The backend's one-statement append first, if it has one; else the
    /// row, locked. A stale comparison answers before the bound on events:
    /// it would write nothing either way.
    async fn append(
        &self,
        r: &ResourceRef,
        event: NewEvent,
        expected_seq: Option<i64>,
    ) -> StoreResult<Option<String>> {
        let (r, bounds) = (r.clone(), self.bounds);
        self.write_op(move |tx| {
            Box::pin(async move {
                let max_events = bounds.max_events_per_log;
                match tx.try_append(&r, &event, expected_seq, max_events).await? {
                    Some(FastAppend::Appended(envelope)) => {
                        return Ok(Written::waking(Some(envelope), r));
                    }
                    Some(FastAppend::Stale) => return Ok(Written::unchanged(None)),
                    None => {}
                }
                let tail = locked_tail(tx, &r).await?;
                if expected_seq.is_some_and(|expected| expected != tail.last_seq) {
                    return Ok(Written::unchanged(None));
                }
                check_events(&r, tail, &bounds)?;
                let now = write_time(tx, tail);
                let envelope = append_after(tx, &r, tail.last_seq, now, &event).await?;
                Ok(Written::waking(Some(envelope), r))
            })
        })
        .await
    }

    /// The first `limit` envelopes after `since` (the whole answer when
    /// fewer come back). No rows means either nothing there or no resource:
    /// only an empty answer pays for the existence check.
    async fn events_page(
        &self,
        r: &ResourceRef,
        since: i64,
        limit: i64,
    ) -> StoreResult<Vec<String>> {
        let r = r.clone();
        self.read_op(move |db| {
            Box::pin(async move {
                let page = sql::events_page(&r, since, Some(limit));
                let rows = db.all(page, |row| row.text(0)).await?;
                if rows.is_empty() && !exists(db, &r).await? {
                    return Err(StoreError::NotFound(r));
                }
                Ok(rows)
            })
        })
        .await
    }
}

/// Append `event` after the tail `last_seq` at `now`; the envelope text.
pub(super) async fn append_after(
    tx: &mut impl WriteTx,
    r: &ResourceRef,
    last_seq: i64,
    now: i64,
    event: &NewEvent,
) -> StoreResult<String> {
    let seq = last_seq + 1;
    let envelope = envelope_json(r, seq, now, event);
    tx.append_event(r, seq, now, &envelope, &event.type_name())
        .await?;
    Ok(envelope)
}

/// The log can take one more event.
pub(super) fn check_events(r: &ResourceRef, tail: LogTail, bounds: &Bounds) -> StoreResult<()> {
    if tail.last_seq >= bounds.max_events_per_log {
        return Err(OverBound::events(r, bounds.max_events_per_log).into());
    }
    Ok(())
}
