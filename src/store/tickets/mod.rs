//! The hosted ticket operations ([`crate::tickets`]) on either backend: each
//! is one read or one write transaction, written once against the shared
//! [`Statements`] (docs/decisions.md, 16), with every time from the
//! injected clock.
//!
//! Before any transaction, the request's team and states are resolved and
//! the operation's own rules run ([`crate::tickets::rules`]); a refusal then
//! (or inside the transaction) writes nothing: the write is rolled back.
//!
//! Concurrency: a team's creates serialise on its `ticket_teams` row (its
//! creation counter, bumped first); writes that count a ticket's blockers
//! or comments hold the ticket's row (PostgreSQL `FOR NO KEY UPDATE`;
//! SQLite's one writer serialises every write anyway); a claim is one
//! conditional `UPDATE`, so of two concurrent claims exactly one changes
//! the row.
//!
//! Reads answer in bounded memory: a listing reads the team's tickets a page
//! at a time and stops at the response ceiling; dependency states are read
//! a batch of ids at a time.

mod sql;

use std::collections::HashMap;

use async_trait::async_trait;

use super::api::Tickets;
use super::engine::{Backend, Engine, Pruned, WriteTx, Written};
use super::error::{StoreError, StoreResult};
use super::statement::Statements;
use crate::protocol::ident::{self, shown};
use crate::protocol::uuid::random_uuid;
use crate::tickets::answer::{
    Bounded, LISTING_HEAD, LISTING_TAIL, StoredTicket, write_dependency_state,
};
use crate::tickets::bounds::answer_too_large;
use crate::tickets::history::Entry;
use crate::tickets::text::{json_string, json_strings};
use crate::tickets::{
    Actor, Change, Draft, Patch, Refusal, Team, TicketAnswer, TicketCall, TicketOp, TicketOutcome,
    TicketSettings, rules,
};

/// Tickets read per statement while listing.
const PAGE: i64 = 256;
/// Ids looked up per statement while answering dependency states.
const BATCH: usize = 500;

type Outcome = StoreResult<TicketOutcome>;
type WrittenOutcome = StoreResult<Written<TicketOutcome>>;

#[async_trait]
impl<B: Backend> Tickets for Engine<B> {
    /// One ticket operation, as one read or one write transaction.
    async fn tickets(&self, call: TicketCall) -> Outcome {
        let engine = self;
        let TicketCall {
            settings,
            context,
            op,
            actor,
        } = call;
        let team = match Team::resolve(&settings.lifecycle, &context) {
            Ok(team) => team,
            Err(refusal) => return Ok(Err(refusal)),
        };
        // Each operation's own rules, before any transaction.
        let checked = match &op {
            TicketOp::Create { draft, state, .. } => {
                rules::create(&settings, &team, draft, state.as_deref()).map(Some)
            }
            TicketOp::Update { patch, .. } => rules::update(&settings, patch).map(|()| None),
            TicketOp::Comment { body, .. } => rules::comment(&settings, body).map(|()| None),
            TicketOp::Transition { state, .. } => settings.lifecycle.require(state).map(|()| None),
            _ => Ok(None),
        };
        let create_state = match checked {
            Ok(state) => state.unwrap_or_default(),
            Err(refusal) => return Ok(Err(refusal)),
        };
        macro_rules! read {
            ($db:ident => $body:expr) => {
                engine
                    .read_op(move |$db| Box::pin(async move { $body.await }))
                    .await
            };
        }
        macro_rules! write {
            ($tx:ident => $body:expr) => {
                engine
                    .write_op(move |$tx| Box::pin(async move { $body.await }))
                    .await
            };
        }
        match op {
            TicketOp::ListReady { labels, state } => {
                read!(db => list_ready(db, &settings, &team, &labels, state.as_deref()))
            }
            TicketOp::Get { id } => read!(db => get(db, &settings, &team, &id)),
            TicketOp::DependencyStates { ids } => {
                read!(db => dependency_states(db, &settings, &team, &ids))
            }
            TicketOp::Claim { id } => write!(tx => claim(tx, &settings, &team, &actor, &id)),
            TicketOp::Comment { id, body } => {
                write!(tx => comment(tx, &settings, &team, &actor, &id, &body))
            }
            TicketOp::Transition { id, state } => {
                write!(tx => transition(tx, &team, &actor, &id, &state))
            }
            TicketOp::Create {
                draft,
                idempotency_key,
                ..
            } => write!(tx => create(
                tx,
                &settings,
                &team,
                &actor,
                &draft,
                &create_state,
                idempotency_key.as_deref()
            )),
            TicketOp::Update { id, patch } => write!(tx => update(tx, &team, &actor, &id, &patch)),
            TicketOp::AddBlocker { id, blocker_id } => {
                write!(tx => add_blocker(tx, &settings, &team, &actor, &id, &blocker_id))
            }
            TicketOp::RemoveBlocker { id, blocker_id } => {
                write!(tx => remove_blocker(tx, &team, &actor, &id, &blocker_id))
            }
        }
    }

    /// A page of the history of the team's ticket `id`; `None` when the team
    /// has no such ticket.
    async fn ticket_history(
        &self,
        team: &str,
        id: &str,
        after: i64,
        limit: i64,
    ) -> StoreResult<Option<Vec<Entry>>> {
        let (team, id) = (team.to_owned(), id.to_owned());
        self.read_op(move |db| {
            Box::pin(async move {
                if !exists(db, &team, &id).await? {
                    return Ok(None);
                }
                let page = sql::history_page(&team, &id, after, limit);
                Ok(Some(db.all(page, |row| sql::history_row(row)).await?))
            })
        })
        .await
    }
}

// ------------------------------------------------------------------ reads

/// The team's ticket `id`; an id that could never be stored names none.
async fn find<S: Statements>(
    db: &mut S,
    team: &str,
    id: &str,
) -> StoreResult<Option<StoredTicket>> {
    if !ident::fits(id) {
        return Ok(None);
    }
    let row = db
        .first(sql::select_ticket(S::DIALECT, team, id), |row| {
            sql::ticket_row(row)
        })
        .await?;
    Ok(row.map(|(ticket, _, _)| ticket))
}

/// Whether the team has ticket `id`.
async fn exists<S: Statements>(db: &mut S, team: &str, id: &str) -> StoreResult<bool> {
    if !ident::fits(id) {
        return Ok(false);
    }
    let found = db.first(sql::ticket_exists(team, id), |_| Ok(())).await?;
    Ok(found.is_some())
}

/// Whether `ticket` carries every one of `labels`.
fn has_labels(ticket: &StoredTicket, labels: &[String]) -> StoreResult<bool> {
    if labels.is_empty() {
        return Ok(true);
    }
    let held = ticket
        .labels()
        .map_err(|err| StoreError::Corrupt(format!("a ticket's labels are malformed: {err}")))?;
    Ok(labels.iter().all(|label| held.contains(label)))
}

/// `list-ready`: the team's tickets in `state` (every state when `None`)
/// carrying all of `labels`, in creation order (`created_at`, then the
/// creation sequence). A criterion that could never be stored matches none.
async fn list_ready<S: Statements>(
    db: &mut S,
    settings: &TicketSettings,
    team: &Team,
    labels: &[String],
    state: Option<&str>,
) -> Outcome {
    let mut answer = Bounded::new(
        LISTING_HEAD,
        settings.max_answer_bytes,
        format!("the ticket listing of team \"{}\"", shown(&team.key)),
    );
    let storable = state.is_none_or(ident::fits) && labels.iter().all(|l| ident::fits(l));
    let mut after = (i64::MIN, i64::MIN);
    let mut first = true;
    if storable {
        loop {
            let page = sql::list_page(S::DIALECT, &team.key, state, after, PAGE);
            let rows = db.all(page, |row| sql::ticket_row(row)).await?;
            let full = rows.len() == PAGE as usize;
            for (ticket, created_at, seq) in rows {
                after = (created_at, seq);
                if !has_labels(&ticket, labels)? {
                    continue;
                }
                let comma = !std::mem::replace(&mut first, false);
                let pushed = answer.push(|out| {
                    if comma {
                        out.push(',');
                    }
                    ticket.write_json(out);
                });
                if let Err(refusal) = pushed {
                    return Ok(Err(refusal));
                }
            }
            if !full {
                break;
            }
        }
    }
    Ok(answer.finish(LISTING_TAIL).map(TicketAnswer::Listing))
}

/// `get`: the ticket, or `null` when the team has none of that id.
async fn get<S: Statements>(
    db: &mut S,
    settings: &TicketSettings,
    team: &Team,
    id: &str,
) -> Outcome {
    let Some(ticket) = find(db, &team.key, id).await? else {
        return Ok(Ok(TicketAnswer::Ticket(None)));
    };
    Ok(within_ceiling(settings, &ticket).map(|json| TicketAnswer::Ticket(Some(json))))
}

/// A ticket's JSON, if it fits the response ceiling.
fn within_ceiling(settings: &TicketSettings, ticket: &StoredTicket) -> Result<String, Refusal> {
    let json = ticket.to_json();
    if json.len() > settings.max_answer_bytes {
        return Err(answer_too_large(
            &format!("ticket \"{}\"", shown(&ticket.id)),
            settings.max_answer_bytes,
        ));
    }
    Ok(json)
}

/// `dependency-states`: one state per id asked, in order (repeats too). An
/// unknown id is `{exists: false, resolved: false, blockedBy: []}`; a
/// ticket is resolved in the done state.
async fn dependency_states<S: Statements>(
    db: &mut S,
    settings: &TicketSettings,
    team: &Team,
    ids: &[String],
) -> Outcome {
    let mut answer = Bounded::new("[", settings.max_answer_bytes, "the dependency states");
    for (at, batch) in ids.chunks(BATCH).enumerate() {
        let lookup: Vec<&str> = rules::distinct(batch)
            .into_iter()
            .filter(|id| ident::fits(id))
            .collect();
        let mut found: HashMap<String, (bool, Vec<String>)> = HashMap::new();
        if !lookup.is_empty() {
            let ids_json = serde_json::Value::from(lookup).to_string();
            let rows = db
                .all(
                    sql::dependency_rows(S::DIALECT, &team.key, &ids_json),
                    |row| sql::dependency_row(row),
                )
                .await?;
            for (id, state, blockers) in rows {
                found.insert(id, (state == settings.lifecycle.done, blockers));
            }
        }
        for (i, id) in batch.iter().enumerate() {
            let state = found.get(id).map(|(resolved, b)| (*resolved, b.as_slice()));
            let pushed = answer.push(|out| {
                if at > 0 || i > 0 {
                    out.push(',');
                }
                write_dependency_state(out, id, state);
            });
            if let Err(refusal) = pushed {
                return Ok(Err(refusal));
            }
        }
    }
    Ok(answer.finish("]").map(TicketAnswer::DependencyStates))
}

// ----------------------------------------------------------------- writes

fn kept(answer: TicketAnswer) -> WrittenOutcome {
    Ok(Written {
        value: Ok(answer),
        keep: true,
        wake: None,
        pruned: Pruned::default(),
    })
}

/// Nothing to keep (a no-op, or an answer read back): rolled back.
fn unchanged(answer: TicketAnswer) -> WrittenOutcome {
    Ok(Written::unchanged(Ok(answer)))
}

/// Refused: whatever the transaction did is rolled back.
fn refused(refusal: Refusal) -> WrittenOutcome {
    Ok(Written::unchanged(Err(refusal)))
}

/// Whether the team has ticket `id`, holding its row until the transaction
/// ends (PostgreSQL).
async fn lock<W: WriteTx>(tx: &mut W, team: &str, id: &str) -> StoreResult<bool> {
    if !ident::fits(id) {
        return Ok(false);
    }
    let found = tx
        .first(sql::lock_ticket(W::DIALECT, team, id), |_| Ok(()))
        .await?;
    Ok(found.is_some())
}

/// `claim`: into the team's claimed state, from any state but that one and
/// done; `false` otherwise, and for an id the team lacks. The state is read
/// holding the row, so of two concurrent claims the second reads the
/// first's (PostgreSQL's read-committed lock re-reads the row it waited
/// for), and the update is conditional besides.
async fn claim<W: WriteTx>(
    tx: &mut W,
    settings: &TicketSettings,
    team: &Team,
    actor: &Actor,
    id: &str,
) -> WrittenOutcome {
    let Some(from) = lock_state(tx, &team.key, id).await? else {
        return unchanged(TicketAnswer::Claimed(false));
    };
    let done = &settings.lifecycle.done;
    if from == team.claimed || from == *done {
        return unchanged(TicketAnswer::Claimed(false));
    }
    let now = tx.now();
    let statement = sql::claim(&team.key, id, &team.claimed, done, now);
    if tx.execute(statement).await? != 1 {
        return unchanged(TicketAnswer::Claimed(false));
    }
    let to = &team.claimed;
    record(tx, &team.key, id, actor, &Change::Claim { from: &from, to }).await?;
    kept(TicketAnswer::Claimed(true))
}

/// The ticket's state, holding its row (PostgreSQL); `None` when the team
/// has no such ticket.
async fn lock_state<W: WriteTx>(tx: &mut W, team: &str, id: &str) -> StoreResult<Option<String>> {
    if !ident::fits(id) {
        return Ok(None);
    }
    tx.first(sql::lock_state(W::DIALECT, team, id), |row| row.text(0))
        .await
}

/// Add `change` to the history of ticket `id`, whose row the transaction
/// holds (docs/tickets.md, "History").
async fn record<W: WriteTx>(
    tx: &mut W,
    team: &str,
    id: &str,
    actor: &Actor,
    change: &Change<'_>,
) -> StoreResult<()> {
    let now = tx.now();
    let change_json = change.to_json();
    tx.run(sql::insert_history(&sql::NewEntry {
        team,
        id,
        now,
        actor: &actor.label,
        token_digest: actor.token_digest.as_deref(),
        change_json: &change_json,
    }))
    .await
}

/// `comment`: the next comment of the ticket, within the comment bound.
async fn comment<W: WriteTx>(
    tx: &mut W,
    settings: &TicketSettings,
    team: &Team,
    actor: &Actor,
    id: &str,
    body: &str,
) -> WrittenOutcome {
    if !lock(tx, &team.key, id).await? {
        return refused(Refusal::unknown_ticket("comment", id));
    }
    let held = tx
        .first(sql::last_comment(&team.key, id), |row| row.int(0))
        .await?
        .unwrap_or(0);
    if let Err(refusal) = settings.bounds.another_comment(id, held) {
        return refused(refusal);
    }
    let now = tx.now();
    let body_json = json_string(body);
    tx.run(sql::insert_comment(
        &team.key,
        id,
        held + 1,
        &body_json,
        now,
    ))
    .await?;
    let change = Change::Comment { seq: held + 1 };
    record(tx, &team.key, id, actor, &change).await?;
    kept(TicketAnswer::Done)
}

/// `transition`: into `state` (configured: checked before).
async fn transition<W: WriteTx>(
    tx: &mut W,
    team: &Team,
    actor: &Actor,
    id: &str,
    state: &str,
) -> WrittenOutcome {
    let Some(from) = lock_state(tx, &team.key, id).await? else {
        return refused(Refusal::unknown_ticket("transition", id));
    };
    let now = tx.now();
    tx.run(sql::transition(&team.key, id, state, now)).await?;
    let change = Change::Transition {
        from: &from,
        to: state,
    };
    record(tx, &team.key, id, actor, &change).await?;
    kept(TicketAnswer::Done)
}

/// `create`: a new ticket in `state`, unless the idempotency key names one
/// already, which is answered instead (its title, body and state win); its
/// blockers must exist.
async fn create<W: WriteTx>(
    tx: &mut W,
    settings: &TicketSettings,
    team: &Team,
    actor: &Actor,
    draft: &Draft,
    state: &str,
    idempotency_key: Option<&str>,
) -> WrittenOutcome {
    // The team's row first: creates of one team serialise here, so a
    // repeated key finds the ticket its first create committed.
    let seq = tx
        .first(sql::next_ticket_seq(&team.key), |row| row.int(0))
        .await?
        .ok_or_else(|| StoreError::Corrupt("no ticket sequence assigned".into()))?;
    if let Some(key) = idempotency_key {
        let adopted = tx
            .first(
                sql::select_by_creation_key(W::DIALECT, &team.key, key),
                |row| sql::ticket_row(row),
            )
            .await?;
        if let Some((ticket, _, _)) = adopted {
            return match within_ceiling(settings, &ticket) {
                Ok(json) => unchanged(TicketAnswer::Created(json)),
                Err(refusal) => refused(refusal),
            };
        }
    }
    if let Err(refusal) = settings.bounds.another_ticket(&team.key, seq) {
        return refused(refusal);
    }
    for blocker in &draft.blocked_by {
        if !exists(tx, &team.key, blocker).await? {
            return refused(Refusal::unknown_ticket("create blocker", blocker));
        }
    }
    let ticket = StoredTicket {
        id: format!("ticket-{}", random_uuid()),
        creation_key: idempotency_key.map(str::to_owned),
        title_json: json_string(&draft.title),
        body_json: json_string(&draft.body),
        state: state.to_owned(),
        labels_json: json_strings(&draft.labels),
        blocked_by: {
            let mut ids: Vec<String> = rules::distinct(&draft.blocked_by)
                .into_iter()
                .map(str::to_owned)
                .collect();
            ids.sort_unstable();
            ids
        },
    };
    let json = match within_ceiling(settings, &ticket) {
        Ok(json) => json,
        Err(refusal) => return refused(refusal),
    };
    let now = tx.now();
    tx.run(sql::insert_ticket(&sql::NewTicket {
        team: &team.key,
        id: &ticket.id,
        seq,
        creation_key: idempotency_key,
        title_json: &ticket.title_json,
        body_json: &ticket.body_json,
        state,
        labels_json: &ticket.labels_json,
        now,
    }))
    .await?;
    for blocker in &ticket.blocked_by {
        tx.run(sql::insert_blocker(&team.key, &ticket.id, blocker))
            .await?;
    }
    let change = Change::Create {
        state,
        title: &draft.title,
        labels: &draft.labels,
        blocked_by: &ticket.blocked_by,
    };
    record(tx, &team.key, &ticket.id, actor, &change).await?;
    kept(TicketAnswer::Created(json))
}

/// `update`: replace the fields the patch names (checked before), never
/// the state or the blockers.
async fn update<W: WriteTx>(
    tx: &mut W,
    team: &Team,
    actor: &Actor,
    id: &str,
    patch: &Patch,
) -> WrittenOutcome {
    if !lock(tx, &team.key, id).await? {
        return refused(Refusal::unknown_ticket("update", id));
    }
    let title_json = patch.title.as_deref().map(json_string);
    let body_json = patch.body.as_deref().map(json_string);
    let labels_json = patch.labels.as_deref().map(json_strings);
    let now = tx.now();
    tx.run(sql::update(
        &team.key,
        id,
        title_json.as_deref(),
        body_json.as_deref(),
        labels_json.as_deref(),
        now,
    ))
    .await?;
    let change = Change::Update {
        title: patch.title.as_deref(),
        body: patch.body.is_some(),
        labels: patch.labels.as_deref(),
    };
    record(tx, &team.key, id, actor, &change).await?;
    kept(TicketAnswer::Done)
}

/// `add-blocker`: the ticket must exist, must not be its own blocker, and
/// the blocker must exist; adding one it has is a no-op.
async fn add_blocker<W: WriteTx>(
    tx: &mut W,
    settings: &TicketSettings,
    team: &Team,
    actor: &Actor,
    id: &str,
    blocker: &str,
) -> WrittenOutcome {
    if !lock(tx, &team.key, id).await? {
        return refused(Refusal::unknown_ticket("addBlocker", id));
    }
    if id == blocker {
        return refused(Refusal::Invalid(format!(
            "database ticket source: ticket \"{}\" cannot block itself",
            shown(id)
        )));
    }
    if !exists(tx, &team.key, blocker).await? {
        return refused(Refusal::unknown_ticket("addBlocker", blocker));
    }
    let present = tx
        .first(sql::has_blocker(&team.key, id, blocker), |_| Ok(()))
        .await?;
    if present.is_some() {
        return unchanged(TicketAnswer::Done);
    }
    let held = tx
        .first(sql::count_blockers(&team.key, id), |row| row.int(0))
        .await?
        .unwrap_or(0);
    if let Err(refusal) = settings.bounds.another_blocker(id, held) {
        return refused(refusal);
    }
    tx.run(sql::insert_blocker(&team.key, id, blocker)).await?;
    record(tx, &team.key, id, actor, &Change::AddBlocker { blocker }).await?;
    kept(TicketAnswer::Done)
}

/// `remove-blocker`: the ticket must exist; removing a blocker it does not
/// have is a no-op.
async fn remove_blocker<W: WriteTx>(
    tx: &mut W,
    team: &Team,
    actor: &Actor,
    id: &str,
    blocker: &str,
) -> WrittenOutcome {
    // Held, as every writer of the ticket's history holds it.
    if !lock(tx, &team.key, id).await? {
        return refused(Refusal::unknown_ticket("removeBlocker", id));
    }
    if !ident::fits(blocker) {
        return unchanged(TicketAnswer::Done);
    }
    if tx
        .execute(sql::delete_blocker(&team.key, id, blocker))
        .await?
        == 0
    {
        return unchanged(TicketAnswer::Done);
    }
    record(tx, &team.key, id, actor, &Change::RemoveBlocker { blocker }).await?;
    kept(TicketAnswer::Done)
}
