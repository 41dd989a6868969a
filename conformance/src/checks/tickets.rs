//! Autobuild's hosted ticket protocol as abstore serves it (docs/tickets.md):
//! `POST /tickets/{operation}` with a strict `{context, input}` body. The
//! checks restate the cases of Autobuild's `TicketSource` contract (the
//! store contract's `src/store/contract/tickets.rs` holds the same cases
//! below HTTP), the database source's semantics (teams, the lifecycle, the
//! listing's filters and order, opaque text, concurrent claims), and the
//! protocol's edges: the order of checks, the token kinds, the strict
//! schemas and the exact refusals.
//!
//! Every id starts with `abstore.tickets.`: the ticket protocol is not part
//! of `remote-store-protocol.md`, so a server of that protocol alone (such as
//! Autobuild's reference store server, which `conformance/tests/reference.rs`
//! holds to the non-`abstore.*` checks) need not serve it, and the checks
//! assert abstore's own choices besides: its default states, refusals as
//! `4xx` where the hosted service answers `500`, its schema wording.
//!
//! Each check works in a team of its own (a fresh `teamKey`), so the checks
//! run concurrently and repeatedly against one long-lived server. In
//! authenticated mode they send a deployment token, the only kind the
//! ticket routes take. The server is expected to run with the default
//! states (`Triage`, `Ready`, `Doing`, `Done`). The bounds, the response
//! ceiling and the request ceiling are only reached cheaply with small
//! flags, which a black-box runner can neither set nor read, so they stay
//! in `tests/it/tickets.rs`.

use serde_json::{Value, json};

use super::{CheckResult, Failure, Registry};
use crate::client::{Ctx, Resp, same};
use crate::ensure;
use crate::token::{deployment_scope, resource_scope};
use crate::util::{random_hex, unique};

pub fn register(r: &mut Registry) {
    // Autobuild's `TicketSource` contract, case by case.
    add(r, "contract.create_get_round_trip", round_trip);
    add(r, "contract.labels_on_create_and_update", labels);
    add(r, "contract.get_unknown_is_null", get_unknown);
    add(r, "contract.claim_once_then_again_after_ready", claim_once);
    add(
        r,
        "contract.transition_shows_in_get_and_listing",
        transition_shows,
    );
    add(r, "contract.dependency_states_in_order", dependency_states);
    add(r, "contract.partial_updates", partial_updates);
    add(
        r,
        "contract.update_refuses_empty_and_state_patches",
        update_schema_refusals,
    );
    add(
        r,
        "contract.update_failures_name_the_field",
        update_failures,
    );
    add(
        r,
        "contract.blockers_round_trip_and_retries",
        blockers_round_trip,
    );
    add(
        r,
        "contract.add_blocker_refuses_self_and_unknown",
        add_blocker_refusals,
    );
    add(
        r,
        "contract.idempotent_create_adopts_the_original",
        idempotent_create,
    );
    // The database source's own semantics, as abstore serves them.
    add(r, "teams_are_apart", teams_apart);
    add(r, "lifecycle_and_context_states", lifecycle);
    add(r, "create.refusals_write_nothing", create_refusals);
    add(r, "list_ready.filters_and_creation_order", listing);
    add(r, "comment", comment);
    add(r, "unknown_ticket_404_names_it", unknown_ticket_writes);
    add(r, "text_kept_byte_for_byte", opaque_text);
    add(r, "concurrent_claims_one_wins", concurrent_claims);
    // The protocol's edges: the order of checks, the token kinds, schemas.
    add(r, "order.route_404_before_identity", route_first);
    add(
        r,
        "order.identity_409_before_token_and_operation",
        identity_second,
    );
    add(r, "order.token_401_before_operation_and_body", token_third);
    add(r, "order.unknown_operation_404", unknown_operation);
    add(r, "order.body_then_context", body_then_context);
    add(r, "auth.only_deployment_tokens", token_matrix);
    r.rows(
        "abstore.tickets.schema.",
        SECTION,
        SCHEMA_ROWS
            .iter()
            .map(|(name, op, body, message)| (*name, (*op, *body, *message))),
        schema_row,
    );
}

/// The "section" of every ticket check: the protocol is docs/tickets.md's,
/// not a section of remote-store-protocol.md.
const SECTION: &str = "tickets";

/// Registers `abstore.tickets.{name}`.
fn add<F, Fut>(r: &mut Registry, name: &str, f: F)
where
    F: Fn(Ctx) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = CheckResult> + Send + 'static,
{
    r.add(format!("abstore.tickets.{name}"), SECTION, f);
}

// ── helpers ──────────────────────────────────────────────────────────────────

/// The default states' refusal tail (docs/tickets.md, "States").
const ALLOWED: &str = "allowed states: Triage, Ready, Doing, Done";

/// The contract's fixture body: blank lines and a final newline, kept.
const BODY: &str = "# Port contract fixture\n\nCreated by the ticket contract.\n";

/// A ticket's members, in the order abstore answers them.
const TICKET_ORDER: [&str; 7] = [
    "ref",
    "creationKey",
    "title",
    "body",
    "state",
    "labels",
    "blockedBy",
];

/// An id no team holds: the server's ids are `ticket-<uuid>`, so this
/// `ticket-<hex>` can never be one.
fn unknown_id() -> String {
    format!("ticket-none-{}", random_hex())
}

/// The refusal of a write naming a ticket the team lacks.
fn unknown_msg(operation: &str, id: &str) -> String {
    format!("database ticket source: {operation} on unknown ticket \"{id}\"")
}

fn state_msg(state: &str) -> String {
    format!("database ticket state \"{state}\" is not configured; {ALLOWED}")
}

fn id_of(ticket: &Value) -> String {
    ticket["ref"]["id"].as_str().unwrap_or_default().to_owned()
}

/// `ticket-` and a lowercase version-4 UUID, as the server makes ids.
fn is_ticket_id(id: &str) -> bool {
    let Some(uuid) = id.strip_prefix("ticket-") else {
        return false;
    };
    let b = uuid.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_digit() || (b'a'..=b'f').contains(c),
        })
        && b[14] == b'4'
        && matches!(b[19], b'8' | b'9' | b'a' | b'b')
}

/// The member names of an object, in order.
fn keys(v: &Value) -> Vec<&str> {
    v.as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

/// Asserts a `Ticket`'s documented form: its members in order (`ref`
/// `{source, id, title}` first), `ref.source` `"database"`, `ref.title`
/// the title, a server-made id, labels as strings, and `blockedBy` only
/// when nonempty, in bytewise order.
fn ticket_shape(what: &str, t: &Value) -> Result<(), String> {
    let present: Vec<&str> = TICKET_ORDER
        .into_iter()
        .filter(|k| t.get(k).is_some())
        .collect();
    ensure!(
        keys(t) == present
            && ["ref", "title", "body", "state", "labels"]
                .iter()
                .all(|k| present.contains(k)),
        "{what}: expected members in the order {TICKET_ORDER:?} (creationKey and blockedBy optional); got {t}"
    );
    let r = &t["ref"];
    ensure!(
        keys(r) == ["source", "id", "title"]
            && r["source"] == "database"
            && r["title"] == t["title"],
        "{what}: expected ref {{\"source\": \"database\", \"id\", \"title\": <the title>}}; got {t}"
    );
    ensure!(
        is_ticket_id(&id_of(t)),
        "{what}: expected an id ticket-<uuid v4>; got {t}"
    );
    ensure!(
        t["labels"]
            .as_array()
            .is_some_and(|l| l.iter().all(Value::is_string)),
        "{what}: expected labels to be an array of strings; got {t}"
    );
    if let Some(blockers) = t.get("blockedBy") {
        let ids: Vec<&str> = blockers
            .as_array()
            .map(|b| b.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        ensure!(
            !ids.is_empty() && ids.windows(2).all(|w| w[0] < w[1]),
            "{what}: expected blockedBy absent or a nonempty, bytewise sorted id list; got {t}"
        );
    }
    Ok(())
}

/// Asserts `{"ok": true}`, the answer of every write but create and claim.
fn ok_answer(r: &Resp) -> Result<(), String> {
    let v = r.json_status(200)?;
    ensure!(
        v == json!({"ok": true}),
        "{}",
        r.fail(r#"200 {"ok": true}"#)
    );
    Ok(())
}

/// The context the ticket checks send: with the secret, a deployment token
/// (the runner's default admin token is refused there); otherwise the
/// runner's own (none in open mode; a `--token`, which must then be a
/// deployment token).
fn deployment(c: &Ctx) -> Result<Ctx, Failure> {
    if c.secret.is_some() {
        c.scoped(&deployment_scope(c.exp_ms))
    } else {
        Ok(c.clone())
    }
}

/// One team's view of the server, as Autobuild's hosted client is: every
/// call a `POST /tickets/{operation}` with the team's context.
#[derive(Clone)]
struct Team {
    c: Ctx,
    context: Value,
}

impl Team {
    /// A fresh team. With only a `--token` that is no deployment token the
    /// ticket routes refuse everything (`403`): the check skips.
    async fn new(c: &Ctx) -> Result<Team, Failure> {
        let team = Team {
            c: deployment(c)?,
            context: json!({"teamKey": unique("ENG")}),
        };
        if c.authenticated() && c.secret.is_none() {
            let r = team.send("get", json!({"id": unknown_id()})).await?;
            if r.status == 403 {
                return Err(Failure::Skip(
                    "the runner's --token is not a deployment token, the only kind the ticket routes take (give the runner --secret)".into(),
                ));
            }
        }
        Ok(team)
    }

    /// Another fresh team with the same token.
    fn other(&self) -> Team {
        self.with_context(json!({"teamKey": unique("OPS")}))
    }

    /// This team's token with another context.
    fn with_context(&self, context: Value) -> Team {
        Team {
            c: self.c.clone(),
            context,
        }
    }

    /// This team as another token sends it.
    fn clone_with(&self, c: Ctx) -> Team {
        Team {
            c,
            context: self.context.clone(),
        }
    }

    fn team_key(&self) -> &str {
        self.context["teamKey"].as_str().unwrap_or_default()
    }

    async fn send(&self, operation: &str, input: Value) -> Result<Resp, String> {
        let body = json!({"context": self.context, "input": input});
        self.c
            .post(&format!("/tickets/{operation}"), &body)
            .send()
            .await
    }

    /// A write answering `{"ok": true}`.
    async fn done(&self, operation: &str, input: Value) -> Result<(), String> {
        ok_answer(&self.send(operation, input).await?)
    }

    /// A refusal with this status and exact message (kind `not-found` for
    /// a `404`, else `validation`).
    async fn refused(
        &self,
        operation: &str,
        input: Value,
        status: u16,
        message: &str,
    ) -> Result<(), String> {
        let kind = match status {
            404 => "not-found",
            _ => "validation",
        };
        self.send(operation, input)
            .await?
            .error_msg(status, kind, message)
    }

    /// A create answering `201` and a well-formed ticket.
    async fn create(&self, input: Value) -> Result<Value, String> {
        let t = self.send("create", input).await?.json_status(201)?;
        ticket_shape("the created ticket", &t)?;
        Ok(t)
    }

    /// The id of a new ticket in `state`, with the contract's body.
    async fn new_ticket(&self, title: &str, state: &str) -> Result<String, String> {
        self.new_with(json!({"title": title, "body": BODY}), state)
            .await
    }

    /// The id of a new ticket of `draft` in `state`.
    async fn new_with(&self, draft: Value, state: &str) -> Result<String, String> {
        let input = json!({"draft": draft, "options": {"state": state}});
        Ok(id_of(&self.create(input).await?))
    }

    /// `get`: a well-formed ticket, or `null`.
    async fn get(&self, id: &str) -> Result<Value, String> {
        let t = self
            .send("get", json!({"id": id}))
            .await?
            .json_status(200)?;
        if !t.is_null() {
            ticket_shape(&format!("get {id}"), &t)?;
        }
        Ok(t)
    }

    /// `claim`: exactly `{"claimed": <boolean>}`.
    async fn claim(&self, id: &str) -> Result<bool, String> {
        let r = self.send("claim", json!({"id": id})).await?;
        let v = r.json_status(200)?;
        match v.get("claimed").and_then(Value::as_bool) {
            Some(claimed) if keys(&v) == ["claimed"] => Ok(claimed),
            _ => Err(r.fail(r#"200 {"claimed": <boolean>}"#)),
        }
    }

    async fn transition(&self, id: &str, state: &str) -> Result<(), String> {
        self.done("transition", json!({"id": id, "state": state}))
            .await
    }

    /// `list-ready`: `{"tickets", "diagnostics": []}`; the tickets.
    async fn list(&self, input: Value) -> Result<Vec<Value>, String> {
        let r = self.send("list-ready", input).await?;
        let v = r.json_status(200)?;
        ensure!(
            keys(&v) == ["tickets", "diagnostics"] && v["diagnostics"] == json!([]),
            "{}",
            r.fail(r#"200 {"tickets": [...], "diagnostics": []}"#)
        );
        let tickets = v["tickets"].as_array().cloned().unwrap_or_default();
        for t in &tickets {
            ticket_shape("a listed ticket", t)?;
        }
        Ok(tickets)
    }

    /// The ids `list-ready` answers, in order.
    async fn listed(&self, input: Value) -> Result<Vec<String>, String> {
        Ok(self.list(input).await?.iter().map(id_of).collect())
    }

    async fn dependency_states(&self, ids: &[&str]) -> Result<Value, String> {
        let r = self.send("dependency-states", json!({"ids": ids})).await?;
        let v = r.json_status(200)?;
        let ordered = v.as_array().is_some_and(|states| {
            states
                .iter()
                .all(|s| keys(s) == ["id", "exists", "resolved", "blockedBy"])
        });
        ensure!(
            ordered,
            "{}",
            r.fail("200 [{\"id\", \"exists\", \"resolved\", \"blockedBy\"}, …]")
        );
        Ok(v)
    }
}

/// A dependency state as `dependency-states` answers it.
fn dep(id: &str, exists: bool, resolved: bool, blocked_by: &[&str]) -> Value {
    json!({"id": id, "exists": exists, "resolved": resolved, "blockedBy": blocked_by})
}

/// Fails unless `listed` holds `id` exactly `times` times.
fn listed_times(what: &str, listed: &[String], id: &str, times: usize) -> Result<(), String> {
    let n = listed.iter().filter(|l| *l == id).count();
    ensure!(
        n == times,
        "{what}: expected {id} listed {times} time(s); got {listed:?}"
    );
    Ok(())
}

// ── Autobuild's contract ─────────────────────────────────────────────────────

async fn round_trip(c: Ctx) -> CheckResult {
    let t = Team::new(&c).await?;
    let key = unique("key");
    let created = t
        .create(json!({"draft": {"title": "round trip", "body": BODY},
                       "options": {"state": "Ready", "idempotencyKey": key}}))
        .await?;
    let id = id_of(&created);
    same(
        "the created ticket",
        &created,
        &json!({"ref": {"source": "database", "id": id, "title": "round trip"},
                "creationKey": key, "title": "round trip", "body": BODY,
                "state": "Ready", "labels": []}),
    )?;
    same(&format!("get {id}"), &t.get(&id).await?, &created)?;
    Ok(())
}

async fn labels(c: Ctx) -> CheckResult {
    let t = Team::new(&c).await?;
    let labelled = t
        .new_with(
            json!({"title": "fresh create label", "body": BODY, "labels": ["ab-fresh-1"]}),
            "Ready",
        )
        .await?;
    same(
        "labels given at create",
        &t.get(&labelled).await?["labels"],
        &json!(["ab-fresh-1"]),
    )?;
    let plain = t.new_ticket("fresh update label", "Ready").await?;
    t.done(
        "update",
        json!({"id": plain, "patch": {"labels": ["ab-fresh-2"]}}),
    )
    .await?;
    same(
        "labels given by update",
        &t.get(&plain).await?["labels"],
        &json!(["ab-fresh-2"]),
    )?;
    Ok(())
}

async fn get_unknown(c: Ctx) -> CheckResult {
    let t = Team::new(&c).await?;
    // Ids that could never be stored (NUL, over 512 bytes) are unknown too.
    for id in [unknown_id(), "a\u{0}b".to_owned(), "x".repeat(600)] {
        let r = t.send("get", json!({"id": id})).await?;
        ensure!(
            r.status == 200 && r.is_json_ct() && r.text.trim() == "null",
            "{}",
            r.fail("200 null")
        );
    }
    Ok(())
}

async fn claim_once(c: Ctx) -> CheckResult {
    let t = Team::new(&c).await?;
    let id = t.new_ticket("claim", "Ready").await?;
    ensure!(
        t.claim(&id).await?,
        "the first claim of {id} answered false"
    );
    ensure!(
        !t.claim(&id).await?,
        "a repeated claim of {id} answered true"
    );
    same(
        "the claimed state",
        &t.get(&id).await?["state"],
        &json!("Doing"),
    )?;
    t.transition(&id, "Ready").await?;
    ensure!(
        t.claim(&id).await?,
        "a claim after the transition back to Ready answered false"
    );
    Ok(())
}

async fn transition_shows(c: Ctx) -> CheckResult {
    let t = Team::new(&c).await?;
    let id = t.new_ticket("transition", "Ready").await?;
    let ready = json!({"state": "Ready"});
    listed_times("Ready before", &t.listed(ready.clone()).await?, &id, 1)?;
    t.transition(&id, "Done").await?;
    same(
        "the state after",
        &t.get(&id).await?["state"],
        &json!("Done"),
    )?;
    listed_times("Ready after", &t.listed(ready).await?, &id, 0)?;
    listed_times(
        "Done after",
        &t.listed(json!({"state": "Done"})).await?,
        &id,
        1,
    )?;
    Ok(())
}

async fn dependency_states(c: Ctx) -> CheckResult {
    let t = Team::new(&c).await?;
    let open = t.new_ticket("unresolved dependency", "Ready").await?;
    let done = t.new_ticket("completed dependency", "Done").await?;
    let dependent = t
        .new_with(
            json!({"title": "declared blocker", "body": BODY, "blockedBy": [open]}),
            "Ready",
        )
        .await?;
    let missing = unknown_id();
    let asked = [&missing, &dependent, &done, &open, &missing];
    let asked: Vec<&str> = asked.iter().map(|s| s.as_str()).collect();
    same(
        "dependency-states in the order asked (repeats included)",
        &t.dependency_states(&asked).await?,
        &json!([
            dep(&missing, false, false, &[]),
            dep(&dependent, true, false, &[&open]),
            dep(&done, true, true, &[]),
            dep(&open, true, false, &[]),
            dep(&missing, false, false, &[]),
        ]),
    )?;
    same("no ids", &t.dependency_states(&[]).await?, &json!([]))?;
    Ok(())
}

/// The members an update may change, and the two it never does.
fn updatable(t: &Value) -> Value {
    json!({"title": t["title"], "refTitle": t["ref"]["title"], "body": t["body"],
           "labels": t["labels"], "state": t["state"], "blockedBy": t["blockedBy"]})
}

async fn partial_updates(c: Ctx) -> CheckResult {
    let t = Team::new(&c).await?;
    let blocker = t.new_ticket("update blocker", "Ready").await?;
    let id = t
        .new_with(
            json!({"title": "partial update", "body": BODY, "labels": ["autobuild"], "blockedBy": [blocker]}),
            "Ready",
        )
        .await?;
    let body = format!("{BODY}\nUpdated body.\n");
    let want = |title: &str, body: &str, labels: Value| {
        json!({"title": title, "refTitle": title, "body": body, "labels": labels,
               "state": "Ready", "blockedBy": [blocker]})
    };
    let steps = [
        (
            json!({"body": body}),
            want("partial update", &body, json!(["autobuild"])),
        ),
        (
            json!({"title": "renamed"}),
            want("renamed", &body, json!(["autobuild"])),
        ),
        // An explicit empty list replaces; it does not mean "leave alone".
        (json!({"labels": []}), want("renamed", &body, json!([]))),
    ];
    for (patch, expected) in steps {
        t.done("update", json!({"id": id, "patch": patch})).await?;
        same(
            &format!("the ticket after the patch {patch}"),
            &updatable(&t.get(&id).await?),
            &expected,
        )?;
    }
    same(
        "its dependency state",
        &t.dependency_states(&[&id]).await?,
        &json!([dep(&id, true, false, &[&blocker])]),
    )?;
    Ok(())
}

async fn update_schema_refusals(c: Ctx) -> CheckResult {
    let t = Team::new(&c).await?;
    let id = t
        .new_with(
            json!({"title": "strict update", "body": BODY, "labels": ["autobuild"]}),
            "Ready",
        )
        .await?;
    let before = t.get(&id).await?;
    let refusals = [
        (
            json!({}),
            "invalid request body: \"input.patch\": update must name at least one field (title, body or labels)",
        ),
        (
            json!({"state": "Done"}),
            "invalid request body: \"input.patch\" has unknown key \"state\"",
        ),
    ];
    for (patch, message) in refusals {
        t.refused("update", json!({"id": id, "patch": patch}), 400, message)
            .await?;
    }
    same(
        "the ticket after refused updates",
        &t.get(&id).await?,
        &before,
    )?;
    Ok(())
}

async fn update_failures(c: Ctx) -> CheckResult {
    let t = Team::new(&c).await?;
    let id = t.new_ticket("required update fields", "Ready").await?;
    let before = t.get(&id).await?;
    let title = "invalid ticket update — title: title must not be blank";
    let body = "invalid ticket update — body: body must not be blank";
    let missing = unknown_id();
    let refusals = [
        (id.as_str(), json!({"title": "   "}), 400, title.to_owned()),
        (id.as_str(), json!({"body": "\n\t"}), 400, body.to_owned()),
        (
            id.as_str(),
            json!({"title": "", "body": "\u{feff}", "labels": ["x"]}),
            400,
            format!("{title}; body: body must not be blank"),
        ),
        // Blank fields are refused before the id is looked up.
        (
            missing.as_str(),
            json!({"title": " "}),
            400,
            title.to_owned(),
        ),
        (
            missing.as_str(),
            json!({"title": "unknown"}),
            404,
            unknown_msg("update", &missing),
        ),
    ];
    for (target, patch, status, message) in refusals {
        t.refused(
            "update",
            json!({"id": target, "patch": patch}),
            status,
            &message,
        )
        .await?;
        same(
            "the ticket after a refused update",
            &t.get(&id).await?,
            &before,
        )?;
    }
    Ok(())
}

async fn blockers_round_trip(c: Ctx) -> CheckResult {
    let t = Team::new(&c).await?;
    let blocker = t.new_ticket("post-create blocker", "Ready").await?;
    let dependent = t.new_ticket("post-create dependent", "Ready").await?;
    let pair = json!({"id": dependent, "blockerId": blocker});
    for _ in 0..2 {
        t.done("add-blocker", pair.clone()).await?;
    }
    same(
        "blockedBy after adding one blocker twice",
        &t.get(&dependent).await?["blockedBy"],
        &json!([blocker]),
    )?;
    same(
        "its dependency state",
        &t.dependency_states(&[&dependent]).await?,
        &json!([dep(&dependent, true, false, &[&blocker])]),
    )?;
    // Removing twice, an unknown id or one that could never be stored: no-ops.
    for other in [
        blocker.clone(),
        blocker.clone(),
        unknown_id(),
        "a\u{0}b".into(),
    ] {
        t.done(
            "remove-blocker",
            json!({"id": dependent, "blockerId": other}),
        )
        .await?;
    }
    let after = t.get(&dependent).await?;
    ensure!(
        after.get("blockedBy").is_none(),
        "blockedBy must be absent once the last blocker is removed; got {after}"
    );
    same(
        "its dependency state after",
        &t.dependency_states(&[&dependent]).await?,
        &json!([dep(&dependent, true, false, &[])]),
    )?;
    Ok(())
}

async fn add_blocker_refusals(c: Ctx) -> CheckResult {
    let t = Team::new(&c).await?;
    let id = t.new_ticket("invalid blocker", "Ready").await?;
    let before = t.get(&id).await?;
    let missing = unknown_id();
    let refusals = [
        (
            &id,
            &id,
            400,
            format!("database ticket source: ticket \"{id}\" cannot block itself"),
        ),
        (&id, &missing, 404, unknown_msg("addBlocker", &missing)),
        (&missing, &id, 404, unknown_msg("addBlocker", &missing)),
        // An unknown ticket as its own blocker is unknown first.
        (&missing, &missing, 404, unknown_msg("addBlocker", &missing)),
    ];
    for (target, blocker, status, message) in refusals {
        t.refused(
            "add-blocker",
            json!({"id": target, "blockerId": blocker}),
            status,
            &message,
        )
        .await?;
    }
    t.refused(
        "remove-blocker",
        json!({"id": missing, "blockerId": id}),
        404,
        &unknown_msg("removeBlocker", &missing),
    )
    .await?;
    same(
        "the ticket after refused blockers",
        &t.get(&id).await?,
        &before,
    )?;
    Ok(())
}

async fn idempotent_create(c: Ctx) -> CheckResult {
    let t = Team::new(&c).await?;
    let key = unique("key");
    let first = t
        .create(
            json!({"draft": {"title": "idempotent original", "body": BODY, "labels": ["a"]},
                       "options": {"state": "Ready", "idempotencyKey": key}}),
        )
        .await?;
    let retry = t
        .create(json!({"draft": {"title": "idempotent retry must not win",
                                 "body": "replacement content must not win\n", "labels": ["b"]},
                       "options": {"state": "Done", "idempotencyKey": key}}))
        .await?;
    same("the retry's answer (the original)", &retry, &first)?;
    let id = id_of(&first);
    listed_times("Ready", &t.listed(json!({"state": "Ready"})).await?, &id, 1)?;
    listed_times("every state", &t.listed(json!({})).await?, &id, 1)?;
    // The key is the team's: another team's create with it is a new ticket.
    let theirs = t
        .other()
        .create(json!({"draft": {"title": "theirs", "body": BODY},
                       "options": {"idempotencyKey": key}}))
        .await?;
    ensure!(
        id_of(&theirs) != id && theirs["title"] == "theirs",
        "another team's create with the same key adopted this team's ticket: {theirs}"
    );
    Ok(())
}

// ── the database source's semantics ──────────────────────────────────────────

async fn teams_apart(c: Ctx) -> CheckResult {
    let eng = Team::new(&c).await?;
    let ops = eng.other();
    let id = eng.new_ticket("eng only", "Ready").await?;
    let before = eng.get(&id).await?;
    same("another team's get", &ops.get(&id).await?, &Value::Null)?;
    same(
        "another team's listing",
        &json!(ops.listed(json!({})).await?),
        &json!([]),
    )?;
    ensure!(!ops.claim(&id).await?, "another team claimed {id}");
    same(
        "another team's dependency state",
        &ops.dependency_states(&[&id]).await?,
        &json!([dep(&id, false, false, &[])]),
    )?;
    let writes = [
        (
            "transition",
            json!({"id": id, "state": "Done"}),
            "transition",
        ),
        ("comment", json!({"id": id, "body": "x"}), "comment"),
        (
            "update",
            json!({"id": id, "patch": {"title": "x"}}),
            "update",
        ),
        (
            "add-blocker",
            json!({"id": id, "blockerId": id}),
            "addBlocker",
        ),
        (
            "remove-blocker",
            json!({"id": id, "blockerId": id}),
            "removeBlocker",
        ),
    ];
    for (operation, input, named) in writes {
        ops.refused(operation, input, 404, &unknown_msg(named, &id))
            .await?;
    }
    // Another team's ticket can neither block nor be blocked by this team's.
    let mine = ops.new_ticket("ops ticket", "Ready").await?;
    ops.refused(
        "add-blocker",
        json!({"id": mine, "blockerId": id}),
        404,
        &unknown_msg("addBlocker", &id),
    )
    .await?;
    ops.refused(
        "create",
        json!({"draft": {"title": "cross", "body": BODY, "blockedBy": [id]}}),
        404,
        &unknown_msg("create blocker", &id),
    )
    .await?;
    same(
        "the ticket after the other team's writes",
        &eng.get(&id).await?,
        &before,
    )?;
    Ok(())
}

async fn lifecycle(c: Ctx) -> CheckResult {
    let t = Team::new(&c).await?;
    // Without a state (or a context's createState): the triage state.
    let created = t
        .create(json!({"draft": {"title": "default", "body": BODY}}))
        .await?;
    same(
        "a create's default state",
        &created["state"],
        &json!("Triage"),
    )?;
    ensure!(
        created.get("creationKey").is_none(),
        "a create without an idempotency key answered a creationKey: {created}"
    );
    // A claim moves a ticket from any state but the claimed one and done.
    let id = id_of(&created);
    ensure!(t.claim(&id).await?, "a claim from Triage answered false");
    t.transition(&id, "Done").await?;
    ensure!(
        !t.claim(&id).await?,
        "a claim of a Done ticket answered true"
    );
    same(
        "a Done ticket after a claim",
        &t.get(&id).await?["state"],
        &json!("Done"),
    )?;
    ensure!(
        !t.claim(&unknown_id()).await?,
        "a claim of an unknown id answered true"
    );
    context_states(&t).await
}

/// The context's `claimedState` and `createState`, and unconfigured states.
async fn context_states(t: &Team) -> CheckResult {
    let custom = t.with_context(
        json!({"teamKey": t.team_key(), "claimedState": "Ready", "createState": "Done"}),
    );
    let filed = custom
        .create(json!({"draft": {"title": "custom", "body": BODY}}))
        .await?;
    same("createState's ticket", &filed["state"], &json!("Done"))?;
    let fresh = t.new_ticket("fresh", "Triage").await?;
    ensure!(
        custom.claim(&fresh).await?,
        "a claim into claimedState answered false"
    );
    same(
        "claimedState's ticket",
        &t.get(&fresh).await?["state"],
        &json!("Ready"),
    )?;
    ensure!(
        !custom.claim(&fresh).await?,
        "a claim of a ticket already in claimedState answered true"
    );
    let bad = t.with_context(json!({"teamKey": t.team_key(), "claimedState": "Blocked"}));
    bad.refused("get", json!({"id": fresh}), 400, &state_msg("Blocked"))
        .await?;
    // A transition's state is checked before its id: 400, not 404.
    for target in [fresh, unknown_id()] {
        t.refused(
            "transition",
            json!({"id": target, "state": "ready"}),
            400,
            &state_msg("ready"),
        )
        .await?;
    }
    Ok(())
}

async fn create_refusals(c: Ctx) -> CheckResult {
    let t = Team::new(&c).await?;
    let title = "database ticket create: title must be nonblank";
    let body = "database ticket create: body must be nonblank";
    let missing = unknown_id();
    // In the database source's order: title, body, state, blockers.
    let refusals = [
        (
            json!({"title": "\t", "body": ""}),
            "Nope",
            400,
            title.to_owned(),
        ),
        // JavaScript's trim() counts U+FEFF and U+3000 as blank.
        (
            json!({"title": "t", "body": " \u{feff}\u{3000}"}),
            "Nope",
            400,
            body.to_owned(),
        ),
        (
            json!({"title": "t", "body": "b"}),
            "Nope",
            400,
            state_msg("Nope"),
        ),
        (
            json!({"title": "t", "body": "b", "blockedBy": [missing]}),
            "Ready",
            404,
            unknown_msg("create blocker", &missing),
        ),
    ];
    for (draft, state, status, message) in refusals {
        let input = json!({"draft": draft, "options": {"state": state, "idempotencyKey": "k"}});
        t.refused("create", input, status, &message).await?;
    }
    same(
        "the team after refused creates",
        &json!(t.listed(json!({})).await?),
        &json!([]),
    )?;
    // No refusal consumed the key; U+0085 is no blank to trim().
    let created = t
        .create(json!({"draft": {"title": "now", "body": "\u{85}"}, "options": {"idempotencyKey": "k"}}))
        .await?;
    same(
        "the first accepted create with the key",
        &created["title"],
        &json!("now"),
    )?;
    // A blocker named twice is one blocker.
    let a = id_of(&created);
    let twice = t
        .create(json!({"draft": {"title": "twice", "body": "b", "blockedBy": [a, a]}}))
        .await?;
    same(
        "blockedBy of a repeated blocker",
        &twice["blockedBy"],
        &json!([a]),
    )?;
    Ok(())
}

async fn listing(c: Ctx) -> CheckResult {
    let t = Team::new(&c).await?;
    let mut ids = Vec::new();
    for (name, labels, state) in [
        ("a", json!(["autobuild", "api"]), "Ready"),
        ("b", json!(["autobuild"]), "Ready"),
        ("c", json!(["api", "autobuild", "api"]), "Ready"),
        ("d", json!(["autobuild"]), "Triage"),
        ("e", json!([]), "Ready"),
    ] {
        let draft = json!({"title": name, "body": BODY, "labels": labels});
        ids.push(t.new_with(draft, state).await?);
    }
    let pick = |which: &[usize]| -> Vec<String> { which.iter().map(|i| ids[*i].clone()).collect() };
    let cases = [
        (json!({"state": "Ready"}), pick(&[0, 1, 2, 4])),
        (json!({}), pick(&[0, 1, 2, 3, 4])),
        (
            json!({"state": "Ready", "labels": ["autobuild"]}),
            pick(&[0, 1, 2]),
        ),
        (
            json!({"state": "Ready", "labels": ["api", "autobuild"]}),
            pick(&[0, 2]),
        ),
        (
            json!({"labels": ["autobuild", "autobuild"]}),
            pick(&[0, 1, 2, 3]),
        ),
        (json!({"labels": []}), pick(&[0, 1, 2, 3, 4])),
        (
            json!({"state": "Ready", "labels": ["api", "missing"]}),
            vec![],
        ),
        // A state that is not configured, or could never be stored: nothing.
        (json!({"state": "Unconfigured"}), vec![]),
        (json!({"state": ""}), vec![]),
        (json!({"state": "Ready\u{0}"}), vec![]),
        (json!({"labels": ["a\u{0}"]}), vec![]),
    ];
    for (input, expected) in cases {
        same(
            &format!("list-ready {input} (creation order)"),
            &json!(t.listed(input.clone()).await?),
            &json!(expected),
        )?;
    }
    Ok(())
}

async fn comment(c: Ctx) -> CheckResult {
    let t = Team::new(&c).await?;
    let id = t.new_ticket("comments", "Ready").await?;
    let before = t.get(&id).await?;
    // Any text, even empty; the protocol never reads comments back.
    for body in ["done so far", "", "  \n"] {
        t.done("comment", json!({"id": id, "body": body})).await?;
    }
    same("the ticket after comments", &t.get(&id).await?, &before)?;
    Ok(())
}

async fn unknown_ticket_writes(c: Ctx) -> CheckResult {
    let t = Team::new(&c).await?;
    let known = t.new_ticket("known", "Ready").await?;
    let missing = unknown_id();
    let writes = [
        ("comment", json!({"id": missing, "body": "x"}), "comment"),
        (
            "transition",
            json!({"id": missing, "state": "Done"}),
            "transition",
        ),
        (
            "update",
            json!({"id": missing, "patch": {"body": "x"}}),
            "update",
        ),
        (
            "add-blocker",
            json!({"id": missing, "blockerId": known}),
            "addBlocker",
        ),
        (
            "remove-blocker",
            json!({"id": missing, "blockerId": known}),
            "removeBlocker",
        ),
    ];
    for (operation, input, named) in writes {
        t.refused(operation, input, 404, &unknown_msg(named, &missing))
            .await?;
    }
    same(
        "the team after refused writes",
        &json!(t.listed(json!({})).await?),
        &json!([known]),
    )?;
    Ok(())
}

/// Text no layer may trim or normalise: whitespace, line ends, Unicode
/// (a zero-width space, a BOM, NEL, the line separators), NUL, quotes.
const TEXTS: [&str; 6] = [
    "  leading and trailing  \n\n\n",
    "\r\nwindows\r\n\ttabs\t\u{b}\u{c}",
    "unicode é ✓ 𝄞 \u{200b}\u{feff}\u{85}",
    "nul \u{0} inside \u{0}",
    "\"quotes\" \\backslashes\\ </script> \u{7f}\u{1}",
    "\u{2028}\u{2029} separators",
];

async fn opaque_text(c: Ctx) -> CheckResult {
    let t = Team::new(&c).await?;
    for text in TEXTS {
        let title = format!("t {text}");
        let created = t
            .create(json!({"draft": {"title": title, "body": text, "labels": ["é ✓"]}}))
            .await?;
        same(
            "the created text",
            &json!([&created["title"], &created["body"], &created["labels"]]),
            &json!([title, text, ["é ✓"]]),
        )?;
        let id = id_of(&created);
        same(&format!("get {id}"), &t.get(&id).await?, &created)?;
        let twice = format!("{text}{text}");
        t.done("update", json!({"id": id, "patch": {"body": twice}}))
            .await?;
        same(
            "the updated body",
            &t.get(&id).await?["body"],
            &json!(twice),
        )?;
        t.done("comment", json!({"id": id, "body": text})).await?;
    }
    nul_escaped(&t).await?;
    same(
        "the tickets labelled \"é ✓\"",
        &json!(t.listed(json!({"labels": ["é ✓"]})).await?.len()),
        &json!(TEXTS.len()),
    )?;
    Ok(())
}

/// NUL comes back escaped as `\u0000` in the answer's JSON text.
async fn nul_escaped(t: &Team) -> CheckResult {
    let id = t
        .new_with(json!({"title": "nul", "body": "a\u{0}b"}), "Ready")
        .await?;
    let r = t.send("get", json!({"id": id})).await?;
    ensure!(
        r.text.contains(r#""body":"a\u0000b""#),
        "{}",
        r.fail(r#"the body written "a\u0000b" in the answer's JSON text"#)
    );
    Ok(())
}

async fn concurrent_claims(c: Ctx) -> CheckResult {
    let t = Team::new(&c).await?;
    for n in 0..3 {
        let id = t.new_ticket(&format!("race {n}"), "Ready").await?;
        let racers: Vec<_> = (0..8)
            .map(|_| {
                let (t, id) = (t.clone(), id.clone());
                tokio::spawn(async move { t.claim(&id).await })
            })
            .collect();
        let mut won = 0;
        for racer in racers {
            won += usize::from(racer.await.map_err(|e| format!("claim task: {e}"))??);
        }
        ensure!(
            won == 1,
            "8 concurrent claims of {id}: {won} answered true, not 1"
        );
    }
    concurrent_creates(&t).await
}

/// Concurrent creates with one idempotency key: one ticket, answered to all.
async fn concurrent_creates(t: &Team) -> CheckResult {
    let input = json!({"draft": {"title": "once", "body": BODY},
                       "options": {"state": "Done", "idempotencyKey": unique("key")}});
    let racers: Vec<_> = (0..8)
        .map(|_| {
            let (t, input) = (t.clone(), input.clone());
            tokio::spawn(async move { t.create(input).await })
        })
        .collect();
    let mut answers = Vec::new();
    for racer in racers {
        answers.push(racer.await.map_err(|e| format!("create task: {e}"))??);
    }
    ensure!(
        answers.iter().all(|a| *a == answers[0]),
        "8 concurrent creates with one key answered different tickets: {answers:?}"
    );
    same(
        "the Done tickets",
        &json!(t.listed(json!({"state": "Done"})).await?),
        &json!([id_of(&answers[0])]),
    )?;
    Ok(())
}

// ── the order of checks ──────────────────────────────────────────────────────

async fn route_first(c: Ctx) -> CheckResult {
    // Neither identity headers nor a token: the route is checked first.
    for (method, path) in [
        ("GET", "/tickets/get"),
        ("PUT", "/tickets/get"),
        ("DELETE", "/tickets/create"),
        ("POST", "/tickets"),
    ] {
        c.call(method, path)
            .no_identity()
            .no_auth()
            .send()
            .await?
            .error_msg(404, "not-found", &format!("no route: {method} {path}"))?;
    }
    Ok(())
}

async fn identity_second(c: Ctx) -> CheckResult {
    // Identity before the token, the operation and the body.
    for path in ["/tickets/get", "/tickets/nope", "/tickets/", "/tickets/a/b"] {
        let r = c
            .call("POST", path)
            .no_identity()
            .no_auth()
            .raw("{")
            .send()
            .await?;
        r.error(409, "conflict")?;
    }
    let r = c
        .call("POST", "/tickets/get")
        .version(Some("0.0.0-tickets"))
        .protocol(Some("99"))
        .no_auth()
        .raw("{")
        .send()
        .await?;
    let message = r.error(409, "conflict")?;
    for side in [
        "0.0.0-tickets",
        "99",
        c.autobuild_version.as_str(),
        c.protocol_version.as_str(),
    ] {
        ensure!(
            message.contains(side),
            "{}",
            r.fail(format!("a 409 naming both sides' identities ({side:?})"))
        );
    }
    Ok(())
}

async fn token_third(c: Ctx) -> CheckResult {
    c.need_secret()?;
    let expired = deployment_scope(c.exp_ms - crate::runner::TOKEN_MARGIN_MS - 1);
    let bare = c.with_token(None);
    for path in ["/tickets/get", "/tickets/nope"] {
        let call = || bare.call("POST", path).raw("{");
        call()
            .send()
            .await?
            .error_msg(401, "auth", "missing bearer token")?;
        for token in ["not.a.token".to_owned(), c.mint(&expired)?] {
            call().bearer(&token).send().await?.error_msg(
                401,
                "auth",
                "invalid or expired token",
            )?;
        }
        let build = c.mint(&resource_scope("build", "b1", "*", c.exp_ms))?;
        call().bearer(&build).send().await?.error_msg(
            403,
            "auth",
            "token scoped to build \"b1\" may not access ticket operations",
        )?;
    }
    Ok(())
}

async fn unknown_operation(c: Ctx) -> CheckResult {
    let t = Team::new(&c).await?;
    // Compared as sent: a percent-encoded name or another case is none.
    for path in [
        "/tickets/nope",
        "/tickets/",
        "/tickets/get/more",
        "/tickets/l%69st-ready",
        "/tickets/GET",
    ] {
        t.c.call("POST", path).raw("{").send().await?.error_msg(
            404,
            "not-found",
            &format!("no route: POST {path}"),
        )?;
    }
    Ok(())
}

async fn body_then_context(c: Ctx) -> CheckResult {
    let t = Team::new(&c).await?;
    let get = |body: &str| t.c.post_raw("/tickets/get", body.to_owned());
    for body in ["{", "", "nul"] {
        get(body)
            .send()
            .await?
            .error_msg(400, "validation", "request body is not valid JSON")?;
    }
    get(r#"{"input": {"id": "x"}}"#).send().await?.error_msg(
        400,
        "validation",
        "invalid request body: \"context\" is required",
    )?;
    // The context after the schema: a blank team, then its states.
    let blank = t.with_context(json!({"teamKey": " \n"}));
    blank
        .refused(
            "get",
            json!({"id": "x"}),
            400,
            "ticket teamKey must be nonblank",
        )
        .await?;
    let review = t.with_context(json!({"teamKey": t.team_key(), "createState": "Review"}));
    review
        .refused("get", json!({"id": "x"}), 400, &state_msg("Review"))
        .await?;
    Ok(())
}

async fn token_matrix(c: Ctx) -> CheckResult {
    c.need_secret()?;
    let t = Team::new(&c).await?;
    let id = t.new_ticket("tokens", "Ready").await?;
    let refused = [
        (json!({"build": "*", "session": "*"}), "build \"*\""),
        (json!({"build": "b1", "session": "*"}), "build \"b1\""),
        (resource_scope("build", "b1", "*", 0), "build \"b1\""),
        (resource_scope("repo", "acme/w", "*", 0), "repo \"acme/w\""),
        (
            resource_scope("session", "os_1", "*", 0),
            "session \"os_1\"",
        ),
        (json!({"operator": {"user": "alice"}}), "operator \"alice\""),
    ];
    for (mut scope, named) in refused {
        scope["exp"] = json!(c.exp_ms);
        let as_scope = t.clone_with(c.scoped(&scope)?);
        as_scope.send("claim", json!({"id": id})).await?.error_msg(
            403,
            "auth",
            &format!("token scoped to {named} may not access ticket operations"),
        )?;
    }
    same(
        "the ticket after refused claims",
        &t.get(&id).await?["state"],
        &json!("Ready"),
    )?;
    let mut via = deployment_scope(c.exp_ms);
    via["via"] = json!({"kind": "mcp", "client": "conformance"});
    let delegated = t.clone_with(c.scoped(&via)?);
    ensure!(
        delegated.claim(&id).await?,
        "a deployment token with a via could not claim {id}"
    );
    Ok(())
}

// ── strict schemas ───────────────────────────────────────────────────────────

/// A request body, given the team's context.
type Body = fn(Value) -> Value;

/// A schema row: the operation, its body, and the `400` message after
/// `invalid request body: `.
type SchemaRow = (&'static str, Body, &'static str);

/// `{"context": cx, "input": input}`.
fn envelope(cx: Value, input: Value) -> Value {
    json!({"context": cx, "input": input})
}

/// `cx` with `key` set to `value`.
fn cx_with(mut cx: Value, key: &str, value: Value) -> Value {
    cx[key] = value;
    cx
}

/// One request per row, each refused by the schema before anything runs:
/// `(name, operation, body, message)`.
const SCHEMA_ROWS: &[(&str, &str, Body, &str)] = &[
    (
        "body_not_an_object",
        "get",
        |_| json!([]),
        "the request body must be an object",
    ),
    (
        "body_unknown_member",
        "get",
        |cx| json!({"context": cx, "input": {"id": "x"}, "extra": 1}),
        "the request body has unknown key \"extra\"",
    ),
    (
        "context_required",
        "get",
        |_| json!({"input": {"id": "x"}}),
        "\"context\" is required",
    ),
    (
        "context_unknown_member",
        "get",
        |cx| envelope(cx_with(cx, "x", json!(1)), json!({"id": "x"})),
        "\"context\" has unknown key \"x\"",
    ),
    (
        "context_team_key_required",
        "get",
        |_| envelope(json!({}), json!({"id": "x"})),
        "\"context.teamKey\" is required",
    ),
    (
        "context_team_key_string",
        "get",
        |_| envelope(json!({"teamKey": 1}), json!({"id": "x"})),
        "\"context.teamKey\" must be a string",
    ),
    (
        "context_team_key_nonempty",
        "get",
        |_| envelope(json!({"teamKey": ""}), json!({"id": "x"})),
        "\"context.teamKey\" must be a nonempty string",
    ),
    (
        "context_team_key_nul",
        "get",
        |_| envelope(json!({"teamKey": "E\u{0}"}), json!({"id": "x"})),
        "\"context.teamKey\" must not contain NUL",
    ),
    (
        "context_team_key_513_bytes",
        "get",
        |_| envelope(json!({"teamKey": "x".repeat(513)}), json!({"id": "x"})),
        "\"context.teamKey\" is 513 bytes; the limit is 512 bytes",
    ),
    (
        "context_state_nonempty",
        "get",
        |cx| envelope(cx_with(cx, "createState", json!("")), json!({"id": "x"})),
        "\"context.createState\" must be a nonempty string",
    ),
    (
        "context_state_null",
        "get",
        |cx| envelope(cx_with(cx, "claimedState", Value::Null), json!({"id": "x"})),
        "\"context.claimedState\" must be a string",
    ),
    (
        "input_required",
        "get",
        |cx| json!({"context": cx}),
        "\"input\" is required",
    ),
    (
        "input_unknown_member",
        "get",
        |cx| envelope(cx, json!({"id": "x", "more": true})),
        "\"input\" has unknown key \"more\"",
    ),
    (
        "get_id_nonempty",
        "get",
        |cx| envelope(cx, json!({"id": ""})),
        "\"input.id\" must be a nonempty string",
    ),
    (
        "claim_id_string",
        "claim",
        |cx| envelope(cx, json!({"id": null})),
        "\"input.id\" must be a string",
    ),
    (
        "comment_body_required",
        "comment",
        |cx| envelope(cx, json!({"id": "x"})),
        "\"input.body\" is required",
    ),
    (
        "transition_state_nonempty",
        "transition",
        |cx| envelope(cx, json!({"id": "x", "state": ""})),
        "\"input.state\" must be a nonempty string",
    ),
    (
        "list_labels_array",
        "list-ready",
        |cx| envelope(cx, json!({"labels": "a"})),
        "\"input.labels\" must be an array of strings",
    ),
    (
        "list_label_string",
        "list-ready",
        |cx| envelope(cx, json!({"labels": [1]})),
        "\"input.labels[0]\" must be a string",
    ),
    (
        "list_state_null",
        "list-ready",
        |cx| envelope(cx, json!({"state": null})),
        "\"input.state\" must be a string",
    ),
    (
        "create_title_string",
        "create",
        |cx| envelope(cx, json!({"draft": {"title": null, "body": "b"}})),
        "\"input.draft.title\" must be a string",
    ),
    (
        "create_body_required",
        "create",
        |cx| envelope(cx, json!({"draft": {"title": "t"}})),
        "\"input.draft.body\" is required",
    ),
    (
        "create_draft_state",
        "create",
        |cx| {
            envelope(
                cx,
                json!({"draft": {"title": "t", "body": "b", "state": "Ready"}}),
            )
        },
        "\"input.draft\" has unknown key \"state\"",
    ),
    (
        "create_options_unknown_member",
        "create",
        |cx| {
            envelope(
                cx,
                json!({"draft": {"title": "t", "body": "b"}, "options": {"state": "Ready", "x": 1}}),
            )
        },
        "\"input.options\" has unknown key \"x\"",
    ),
    (
        "create_label_513_bytes",
        "create",
        |cx| {
            envelope(
                cx,
                json!({"draft": {"title": "t", "body": "b", "labels": ["x".repeat(513)]}}),
            )
        },
        "\"input.draft.labels[0]\" is 513 bytes; the limit is 512 bytes",
    ),
    (
        "create_label_nul",
        "create",
        |cx| {
            envelope(
                cx,
                json!({"draft": {"title": "t", "body": "b", "labels": ["a\u{0}"]}}),
            )
        },
        "\"input.draft.labels[0]\" must not contain NUL",
    ),
    (
        "create_idempotency_key_nul",
        "create",
        |cx| {
            envelope(
                cx,
                json!({"draft": {"title": "t", "body": "b"}, "options": {"idempotencyKey": "k\u{0}"}}),
            )
        },
        "\"input.options.idempotencyKey\" must not contain NUL",
    ),
    (
        "update_patch_empty",
        "update",
        |cx| envelope(cx, json!({"id": "x", "patch": {}})),
        "\"input.patch\": update must name at least one field (title, body or labels)",
    ),
    (
        "update_patch_state",
        "update",
        |cx| envelope(cx, json!({"id": "x", "patch": {"state": "Done"}})),
        "\"input.patch\" has unknown key \"state\"",
    ),
    (
        "update_labels_null",
        "update",
        |cx| envelope(cx, json!({"id": "x", "patch": {"labels": null}})),
        "\"input.patch.labels\" must be an array of strings",
    ),
    (
        "add_blocker_blocker_required",
        "add-blocker",
        |cx| envelope(cx, json!({"id": "x"})),
        "\"input.blockerId\" is required",
    ),
    (
        "remove_blocker_blocker_nonempty",
        "remove-blocker",
        |cx| envelope(cx, json!({"id": "x", "blockerId": ""})),
        "\"input.blockerId\" must be a nonempty string",
    ),
    (
        "dependency_states_ids_required",
        "dependency-states",
        |cx| envelope(cx, json!({})),
        "\"input.ids\" is required",
    ),
    (
        "dependency_states_id_nonempty",
        "dependency-states",
        |cx| envelope(cx, json!({"ids": ["a", ""]})),
        "\"input.ids[1]\" must be a nonempty string",
    ),
];

async fn schema_row(c: Ctx, row: SchemaRow) -> CheckResult {
    let (operation, body, message) = row;
    let t = Team::new(&c).await?;
    t.c.post(&format!("/tickets/{operation}"), &body(t.context.clone()))
        .send()
        .await?
        .error_msg(
            400,
            "validation",
            &format!("invalid request body: {message}"),
        )?;
    // A refused request wrote nothing, whatever the operation.
    same(
        "the team after the refusal",
        &json!(t.listed(json!({})).await?),
        &json!([]),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticket_ids_are_version_4_uuids() {
        assert!(is_ticket_id("ticket-8c0e1f2a-3b4c-4d5e-9f60-718293a4b5c6"));
        assert!(!is_ticket_id("ticket-8c0e1f2a-3b4c-3d5e-9f60-718293a4b5c6"));
        assert!(!is_ticket_id("ticket-8C0E1F2A-3B4C-4D5E-9F60-718293A4B5C6"));
        assert!(!is_ticket_id("8c0e1f2a-3b4c-4d5e-9f60-718293a4b5c6"));
        assert!(!is_ticket_id(&unknown_id()));
    }

    #[test]
    fn tickets_have_their_members_in_order() {
        let id = "ticket-8c0e1f2a-3b4c-4d5e-9f60-718293a4b5c6";
        let t = json!({"ref": {"source": "database", "id": id, "title": "T"},
                       "title": "T", "body": "b", "state": "Ready", "labels": []});
        assert_eq!(ticket_shape("t", &t), Ok(()));
        let reordered =
            json!({"title": "T", "ref": t["ref"], "body": "b", "state": "Ready", "labels": []});
        assert!(ticket_shape("t", &reordered).is_err());
        let mut empty = t.clone();
        empty["blockedBy"] = json!([]);
        assert!(ticket_shape("t", &empty).is_err());
        let mut unsorted = t;
        unsorted["blockedBy"] = json!(["b", "a"]);
        assert!(ticket_shape("t", &unsorted).is_err());
    }
}
