//! Autobuild's hosted tickets on every backend: each case of Autobuild's
//! `TicketSource` contract (`packages/core/src/ports/tickets/contract.ts`),
//! restated against the store, then the database source's own semantics
//! (teams, the lifecycle, creation order, label filters), concurrency, and
//! each bound at its edge. The cases are Autobuild's in our words; the
//! harness is the store contract's, one fresh store per case.

use std::sync::Arc;

use serde_json::{Value, json};

use super::harness::{Harness, T0};
use crate::store::Store;
use crate::tickets::{
    Actor, Context, Draft, Patch, Refusal, TicketAnswer, TicketBounds, TicketCall, TicketOp,
    TicketOutcome, TicketSettings, wire,
};

/// The contract's fixture body, with its blank lines and final newline.
const BODY: &str = "# Port contract fixture\n\nCreated by the ticket contract.\n";

/// One team's view of a store, as Autobuild's `TicketSource` is.
struct Source {
    store: Arc<dyn Store>,
    settings: Arc<TicketSettings>,
    context: Context,
    actor: Actor,
}

impl Source {
    fn new(h: &Harness, team: &str) -> Source {
        Source::with(h, team, TicketSettings::default())
    }

    fn with(h: &Harness, team: &str, settings: TicketSettings) -> Source {
        Source {
            store: h.store.clone(),
            settings: Arc::new(settings),
            context: Context {
                team_key: team.into(),
                claimed_state: None,
                create_state: None,
            },
            actor: Actor {
                label: "deployment via session:contract".into(),
                token_digest: Some("0f".repeat(32)),
            },
        }
    }

    async fn call(&self, op: TicketOp) -> TicketOutcome {
        let call = TicketCall {
            settings: self.settings.clone(),
            context: self.context.clone(),
            op,
            actor: self.actor.clone(),
        };
        self.store.tickets(call).await.expect("the store answers")
    }

    async fn create_in(&self, draft: Draft, state: &str, key: Option<&str>) -> TicketOutcome {
        self.call(TicketOp::Create {
            draft,
            state: Some(state.into()),
            idempotency_key: key.map(Into::into),
        })
        .await
    }

    /// A ticket created in `state`, with a fresh idempotency key as the
    /// contract makes them.
    async fn create(&self, draft: Draft, state: &str) -> Value {
        let key = crate::protocol::uuid::random_uuid();
        json_of(self.create_in(draft, state, Some(&key)).await)
    }

    async fn get(&self, id: &str) -> Value {
        json_of(self.call(TicketOp::Get { id: id.into() }).await)
    }

    async fn claim(&self, id: &str) -> bool {
        match self.call(TicketOp::Claim { id: id.into() }).await {
            Ok(TicketAnswer::Claimed(claimed)) => claimed,
            other => panic!("claim: {other:?}"),
        }
    }

    async fn done(&self, op: TicketOp) {
        assert_eq!(self.call(op).await, Ok(TicketAnswer::Done));
    }

    async fn transition(&self, id: &str, state: &str) {
        self.done(TicketOp::Transition {
            id: id.into(),
            state: state.into(),
        })
        .await;
    }

    async fn update(&self, id: &str, patch: Patch) -> TicketOutcome {
        self.call(TicketOp::Update {
            id: id.into(),
            patch,
        })
        .await
    }

    async fn add_blocker(&self, id: &str, blocker: &str) -> TicketOutcome {
        self.call(TicketOp::AddBlocker {
            id: id.into(),
            blocker_id: blocker.into(),
        })
        .await
    }

    async fn remove_blocker(&self, id: &str, blocker: &str) -> TicketOutcome {
        self.call(TicketOp::RemoveBlocker {
            id: id.into(),
            blocker_id: blocker.into(),
        })
        .await
    }

    async fn list(&self, state: Option<&str>, labels: &[&str]) -> Value {
        let listing = json_of(
            self.call(TicketOp::ListReady {
                labels: labels.iter().map(|l| (*l).to_owned()).collect(),
                state: state.map(Into::into),
            })
            .await,
        );
        assert_eq!(listing["diagnostics"], json!([]));
        listing
    }

    /// The ids `list` answers, in order.
    async fn listed(&self, state: Option<&str>, labels: &[&str]) -> Vec<String> {
        self.list(state, labels).await["tickets"]
            .as_array()
            .expect("tickets")
            .iter()
            .map(id_of)
            .collect()
    }

    async fn dependency_states(&self, ids: &[&str]) -> Value {
        json_of(
            self.call(TicketOp::DependencyStates {
                ids: ids.iter().map(|id| (*id).to_owned()).collect(),
            })
            .await,
        )
    }
}

/// The JSON an answer carries (`null` for a missing ticket).
fn json_of(outcome: TicketOutcome) -> Value {
    let text = match outcome {
        Ok(TicketAnswer::Listing(json))
        | Ok(TicketAnswer::Created(json))
        | Ok(TicketAnswer::DependencyStates(json))
        | Ok(TicketAnswer::Ticket(Some(json))) => json,
        Ok(TicketAnswer::Ticket(None)) => "null".into(),
        other => panic!("not a JSON answer: {other:?}"),
    };
    serde_json::from_str(&text).expect("an answer is JSON")
}

fn id_of(ticket: &Value) -> String {
    ticket["ref"]["id"].as_str().expect("ref.id").to_owned()
}

fn draft(title: &str) -> Draft {
    Draft {
        title: title.into(),
        body: BODY.into(),
        labels: vec![],
        blocked_by: vec![],
    }
}

fn labelled(title: &str, labels: &[&str]) -> Draft {
    Draft {
        labels: labels.iter().map(|l| (*l).to_owned()).collect(),
        ..draft(title)
    }
}

fn blocked(title: &str, blockers: &[&str]) -> Draft {
    Draft {
        blocked_by: blockers.iter().map(|b| (*b).to_owned()).collect(),
        ..draft(title)
    }
}

fn patch_labels(labels: &[&str]) -> Patch {
    Patch {
        labels: Some(labels.iter().map(|l| (*l).to_owned()).collect()),
        ..Patch::default()
    }
}

fn unknown() -> String {
    crate::protocol::uuid::random_uuid()
}

fn message(outcome: TicketOutcome) -> String {
    outcome.expect_err("refused").message().to_owned()
}

// ---------------------------------------------- Autobuild's contract cases

pub(super) async fn ticket_create_get_round_trip(h: &Harness) {
    let s = Source::new(h, "ENG");
    let created = s.create(draft("round trip"), "Ready").await;
    assert_eq!(created["ref"]["source"], "database");
    assert_eq!(created["ref"]["title"], "round trip");
    assert!(created["creationKey"].is_string());
    assert_eq!(created["title"], "round trip");
    assert_eq!(created["body"], BODY);
    assert_eq!(created["state"], "Ready");
    assert_eq!(created["labels"], json!([]));
    assert!(created.get("blockedBy").is_none());
    assert_eq!(s.get(&id_of(&created)).await, created);
}

pub(super) async fn ticket_new_labels_on_create_and_update(h: &Harness) {
    let s = Source::new(h, "ENG");
    let created = s
        .create(labelled("fresh create label", &["ab-fresh-1"]), "Ready")
        .await;
    assert_eq!(created["labels"], json!(["ab-fresh-1"]));
    assert_eq!(
        s.get(&id_of(&created)).await["labels"],
        json!(["ab-fresh-1"])
    );

    let plain = id_of(&s.create(draft("fresh update label"), "Ready").await);
    assert_eq!(
        s.update(&plain, patch_labels(&["ab-fresh-2"])).await,
        Ok(TicketAnswer::Done)
    );
    assert_eq!(s.get(&plain).await["labels"], json!(["ab-fresh-2"]));
}

pub(super) async fn ticket_concurrent_writes_share_a_new_label(h: &Harness) {
    let s = Arc::new(Source::new(h, "ENG"));
    let first = id_of(&s.create(draft("concurrent label first"), "Ready").await);
    let second = id_of(&s.create(draft("concurrent label second"), "Ready").await);
    let (a, b) = tokio::join!(
        s.update(&first, patch_labels(&["ab-shared"])),
        s.update(&second, patch_labels(&["ab-shared"])),
    );
    assert_eq!((a, b), (Ok(TicketAnswer::Done), Ok(TicketAnswer::Done)));
    assert_eq!(s.get(&first).await["labels"], json!(["ab-shared"]));
    assert_eq!(s.get(&second).await["labels"], json!(["ab-shared"]));
}

pub(super) async fn ticket_get_unknown_is_null(h: &Harness) {
    let s = Source::new(h, "ENG");
    assert_eq!(s.get(&unknown()).await, Value::Null);
    // Ids that could never be stored are unknown too, without a query.
    assert_eq!(s.get("a\0b").await, Value::Null);
    assert_eq!(s.get(&"x".repeat(600)).await, Value::Null);
}

pub(super) async fn ticket_claim_once_then_again_after_ready(h: &Harness) {
    let s = Source::new(h, "ENG");
    let id = id_of(&s.create(draft("claim"), "Ready").await);
    assert!(s.claim(&id).await);
    assert!(!s.claim(&id).await);
    assert_eq!(s.get(&id).await["state"], "Doing");
    s.transition(&id, "Ready").await;
    assert!(s.claim(&id).await);
}

pub(super) async fn ticket_transition_shows_in_get_and_listing(h: &Harness) {
    let s = Source::new(h, "ENG");
    let id = id_of(&s.create(draft("transition"), "Ready").await);
    assert!(s.listed(Some("Ready"), &[]).await.contains(&id));
    s.transition(&id, "Done").await;
    assert_eq!(s.get(&id).await["state"], "Done");
    assert!(!s.listed(Some("Ready"), &[]).await.contains(&id));
}

pub(super) async fn ticket_dependency_states_in_order(h: &Harness) {
    let s = Source::new(h, "ENG");
    let unresolved = id_of(&s.create(draft("unresolved dependency"), "Ready").await);
    let completed = id_of(&s.create(draft("completed dependency"), "Done").await);
    let dependent = id_of(
        &s.create(blocked("declared blocker", &[&unresolved]), "Ready")
            .await,
    );
    let missing = unknown();
    assert_eq!(
        s.dependency_states(&[&missing, &dependent, &completed, &unresolved])
            .await,
        json!([
            {"id": missing, "exists": false, "resolved": false, "blockedBy": []},
            {"id": dependent, "exists": true, "resolved": false, "blockedBy": [unresolved]},
            {"id": completed, "exists": true, "resolved": true, "blockedBy": []},
            {"id": unresolved, "exists": true, "resolved": false, "blockedBy": []},
        ])
    );
}

pub(super) async fn ticket_partial_updates(h: &Harness) {
    let s = Source::new(h, "ENG");
    let blocker = id_of(&s.create(draft("update blocker"), "Ready").await);
    let created = s
        .create(
            Draft {
                labels: vec!["autobuild".into()],
                blocked_by: vec![blocker.clone()],
                ..draft("partial update")
            },
            "Ready",
        )
        .await;
    let id = id_of(&created);
    let body = format!("{BODY}\nUpdated body.\n");
    let expect = |title: &str, body: &str, labels: Value| {
        json!({"title": title, "body": body, "state": "Ready", "labels": labels,
               "blockedBy": [blocker], "ref": {"title": title}})
    };
    let seen = |t: &Value| {
        json!({"title": t["title"], "body": t["body"], "state": t["state"], "labels": t["labels"],
               "blockedBy": t["blockedBy"], "ref": {"title": t["ref"]["title"]}})
    };
    s.update(
        &id,
        Patch {
            body: Some(body.clone()),
            ..Patch::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        seen(&s.get(&id).await),
        expect("partial update", &body, json!(["autobuild"]))
    );
    s.update(
        &id,
        Patch {
            title: Some("renamed".into()),
            ..Patch::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        seen(&s.get(&id).await),
        expect("renamed", &body, json!(["autobuild"]))
    );
    // An explicit empty list replaces; it does not mean "leave alone".
    s.update(&id, patch_labels(&[])).await.unwrap();
    assert_eq!(seen(&s.get(&id).await), expect("renamed", &body, json!([])));
    assert_eq!(
        s.dependency_states(&[&id]).await,
        json!([{"id": id, "exists": true, "resolved": false, "blockedBy": [blocker]}])
    );
}

pub(super) async fn ticket_update_refuses_empty_and_state_patches(h: &Harness) {
    let s = Source::new(h, "ENG");
    let id = id_of(
        &s.create(labelled("strict update", &["autobuild"]), "Ready")
            .await,
    );
    let before = s.get(&id).await;
    // Both are refused by the wire schema, before the store is asked.
    let body =
        |patch: Value| json!({"context": {"teamKey": "ENG"}, "input": {"id": id, "patch": patch}});
    let refused = |patch: Value| {
        wire::parse(crate::tickets::Operation::Update, &body(patch))
            .expect_err("refused")
            .0
    };
    assert!(refused(json!({})).contains("at least one"));
    assert!(refused(json!({"state": "Done"})).contains("state"));
    assert_eq!(s.get(&id).await, before);
}

pub(super) async fn ticket_update_failures_name_and_change_nothing(h: &Harness) {
    let s = Source::new(h, "ENG");
    let id = id_of(&s.create(draft("required update fields"), "Ready").await);
    let before = s.get(&id).await;
    for (field, patch) in [
        (
            "title",
            Patch {
                title: Some("   ".into()),
                ..Patch::default()
            },
        ),
        (
            "body",
            Patch {
                body: Some("\n\t".into()),
                ..Patch::default()
            },
        ),
    ] {
        let refusal = s.update(&id, patch).await.unwrap_err();
        assert!(matches!(refusal, Refusal::Invalid(_)), "{refusal:?}");
        assert!(refusal.message().contains(field), "{refusal:?}");
        assert_eq!(s.get(&id).await, before);
    }
    let missing = unknown();
    let refusal = s
        .update(
            &missing,
            Patch {
                title: Some("unknown".into()),
                ..Patch::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&refusal, Refusal::Unknown(m) if m.contains(&missing)),
        "{refusal:?}"
    );
    assert_eq!(s.get(&id).await, before);
}

pub(super) async fn ticket_blockers_round_trip_and_retries(h: &Harness) {
    let s = Source::new(h, "ENG");
    let blocker = id_of(&s.create(draft("post-create blocker"), "Ready").await);
    let dependent = id_of(&s.create(draft("post-create dependent"), "Ready").await);
    s.add_blocker(&dependent, &blocker).await.unwrap();
    s.add_blocker(&dependent, &blocker).await.unwrap();
    assert_eq!(s.get(&dependent).await["blockedBy"], json!([blocker]));
    assert_eq!(
        s.dependency_states(&[&dependent]).await,
        json!([{"id": dependent, "exists": true, "resolved": false, "blockedBy": [blocker]}])
    );
    s.remove_blocker(&dependent, &blocker).await.unwrap();
    s.remove_blocker(&dependent, &blocker).await.unwrap();
    s.remove_blocker(&dependent, &unknown()).await.unwrap();
    s.remove_blocker(&dependent, "a\0b").await.unwrap();
    assert!(s.get(&dependent).await.get("blockedBy").is_none());
    assert_eq!(
        s.dependency_states(&[&dependent]).await,
        json!([{"id": dependent, "exists": true, "resolved": false, "blockedBy": []}])
    );
}

pub(super) async fn ticket_add_blocker_refuses_self_and_unknown(h: &Harness) {
    let s = Source::new(h, "ENG");
    let dependent = id_of(&s.create(draft("invalid blocker"), "Ready").await);
    let refusal = s.add_blocker(&dependent, &dependent).await.unwrap_err();
    assert_eq!(
        refusal,
        Refusal::Invalid(format!(
            "database ticket source: ticket \"{dependent}\" cannot block itself"
        ))
    );
    let missing = unknown();
    let refusal = s.add_blocker(&dependent, &missing).await.unwrap_err();
    assert_eq!(
        refusal,
        Refusal::Unknown(format!(
            "database ticket source: addBlocker on unknown ticket \"{missing}\""
        ))
    );
    assert!(s.get(&dependent).await.get("blockedBy").is_none());
}

pub(super) async fn ticket_blocker_writes_name_an_unknown_target(h: &Harness) {
    let s = Source::new(h, "ENG");
    let blocker = id_of(&s.create(draft("known blocker"), "Ready").await);
    let missing = unknown();
    assert_eq!(
        message(s.add_blocker(&missing, &blocker).await),
        format!("database ticket source: addBlocker on unknown ticket \"{missing}\"")
    );
    assert_eq!(
        message(s.remove_blocker(&missing, &blocker).await),
        format!("database ticket source: removeBlocker on unknown ticket \"{missing}\"")
    );
    // An unknown target with itself as blocker is unknown first.
    assert!(matches!(
        s.add_blocker(&missing, &missing).await,
        Err(Refusal::Unknown(_))
    ));
}

pub(super) async fn ticket_idempotent_create_adopts_the_original(h: &Harness) {
    let s = Source::new(h, "ENG");
    let key = unknown();
    let first = json_of(
        s.create_in(draft("idempotent original"), "Ready", Some(&key))
            .await,
    );
    let retry = json_of(
        s.create_in(
            Draft {
                body: "replacement content must not win\n".into(),
                ..draft("idempotent retry must not win")
            },
            "Done",
            Some(&key),
        )
        .await,
    );
    assert_eq!(first["creationKey"], key.as_str());
    assert_eq!(retry, first);
    let listing = s.list(Some("Ready"), &[]).await;
    let matching: Vec<&Value> = listing["tickets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["ref"]["id"] == first["ref"]["id"])
        .collect();
    assert_eq!(matching.len(), 1);
    assert_eq!(matching[0]["creationKey"], key.as_str());
    // The same key in another team is another ticket.
    let other = Source::new(h, "OPS");
    let theirs = json_of(other.create_in(draft("theirs"), "Ready", Some(&key)).await);
    assert_ne!(theirs["ref"]["id"], first["ref"]["id"]);
}

// ------------------------------------- the database source's own semantics

pub(super) async fn ticket_teams_are_apart(h: &Harness) {
    let eng = Source::new(h, "ENG");
    let ops = Source::new(h, "OPS");
    let id = id_of(&eng.create(draft("eng only"), "Ready").await);
    assert_eq!(ops.get(&id).await, Value::Null);
    assert!(ops.listed(None, &[]).await.is_empty());
    assert!(!ops.claim(&id).await);
    assert!(matches!(
        ops.call(TicketOp::Transition {
            id: id.clone(),
            state: "Done".into()
        })
        .await,
        Err(Refusal::Unknown(_))
    ));
    assert!(matches!(
        ops.add_blocker(&id, &id).await,
        Err(Refusal::Unknown(_))
    ));
    assert_eq!(
        ops.dependency_states(&[&id]).await,
        json!([{"id": id, "exists": false, "resolved": false, "blockedBy": []}])
    );
    // Another team's ticket cannot block this team's.
    let mine = id_of(&ops.create(draft("ops ticket"), "Ready").await);
    assert!(matches!(
        ops.add_blocker(&mine, &id).await,
        Err(Refusal::Unknown(_))
    ));
    assert!(matches!(
        ops.create_in(blocked("cross", &[&id]), "Ready", None).await,
        Err(Refusal::Unknown(m)) if m == format!("database ticket source: create blocker on unknown ticket \"{id}\"")
    ));
}

pub(super) async fn ticket_lifecycle_and_context_states(h: &Harness) {
    let s = Source::new(h, "ENG");
    // A create without a state files into the triage state.
    let created = json_of(
        s.call(TicketOp::Create {
            draft: draft("default state"),
            state: None,
            idempotency_key: None,
        })
        .await,
    );
    assert_eq!(created["state"], "Triage");
    assert!(created.get("creationKey").is_none());
    let id = id_of(&created);
    // A claim succeeds from any state but the claimed one and done.
    assert!(s.claim(&id).await);
    assert_eq!(s.get(&id).await["state"], "Doing");
    s.transition(&id, "Done").await;
    assert!(!s.claim(&id).await);
    assert_eq!(s.get(&id).await["state"], "Done");
    // The context's states: where claims and creates go.
    let mut custom = Source::new(h, "ENG");
    custom.context.claimed_state = Some("Ready".into());
    custom.context.create_state = Some("Done".into());
    let filed = json_of(
        custom
            .call(TicketOp::Create {
                draft: draft("custom"),
                state: None,
                idempotency_key: None,
            })
            .await,
    );
    assert_eq!(filed["state"], "Done");
    let fresh = id_of(&s.create(draft("fresh"), "Triage").await);
    assert!(custom.claim(&fresh).await);
    assert_eq!(s.get(&fresh).await["state"], "Ready");
    assert!(!custom.claim(&fresh).await);
    // Every state must be configured, named with the allowed ones.
    let allowed = "allowed states: Triage, Ready, Doing, Done";
    let mut bad = Source::new(h, "ENG");
    bad.context.claimed_state = Some("Blocked".into());
    let refusal = bad
        .call(TicketOp::Get { id: fresh.clone() })
        .await
        .unwrap_err();
    assert_eq!(
        refusal,
        Refusal::Invalid(format!(
            "database ticket state \"Blocked\" is not configured; {allowed}"
        ))
    );
    let refusal = s
        .call(TicketOp::Transition {
            id: fresh.clone(),
            state: "ready".into(),
        })
        .await
        .unwrap_err();
    assert!(refusal.message().contains(allowed), "{refusal:?}");
    assert!(s.create_in(draft("x"), "Nope", None).await.is_err());
    // A configured lifecycle of other names.
    let settings = TicketSettings {
        lifecycle: crate::tickets::Lifecycle::new("Inbox", "Todo", "Active", "Shipped").unwrap(),
        ..TicketSettings::default()
    };
    let other = Source::with(h, "ALT", settings);
    let t = json_of(
        other
            .call(TicketOp::Create {
                draft: draft("alt"),
                state: None,
                idempotency_key: None,
            })
            .await,
    );
    assert_eq!(t["state"], "Inbox");
    assert!(other.claim(&id_of(&t)).await);
    assert_eq!(other.get(&id_of(&t)).await["state"], "Active");
    other.transition(&id_of(&t), "Shipped").await;
    assert_eq!(
        other.dependency_states(&[&id_of(&t)]).await[0]["resolved"],
        json!(true)
    );
    // The team key must not be blank.
    let mut blank = Source::new(h, " ");
    blank.context.team_key = " \n".into();
    assert_eq!(
        blank.call(TicketOp::Get { id: fresh }).await,
        Err(Refusal::Invalid("ticket teamKey must be nonblank".into()))
    );
}

pub(super) async fn ticket_create_refusals_write_nothing(h: &Harness) {
    let s = Source::new(h, "ENG");
    for (title, body, expected) in [
        (" ", BODY, "database ticket create: title must be nonblank"),
        (
            "t",
            "\u{feff}\u{3000}",
            "database ticket create: body must be nonblank",
        ),
    ] {
        let refusal = s
            .create_in(
                Draft {
                    title: title.into(),
                    body: body.into(),
                    ..draft("")
                },
                "Ready",
                None,
            )
            .await
            .unwrap_err();
        assert_eq!(refusal, Refusal::Invalid(expected.into()));
    }
    let missing = unknown();
    assert_eq!(
        s.create_in(
            blocked("blocked by nothing", &[&missing]),
            "Ready",
            Some("k")
        )
        .await,
        Err(Refusal::unknown_ticket("create blocker", &missing))
    );
    assert!(s.listed(None, &[]).await.is_empty(), "nothing was created");
    // The refused create consumed no idempotency key.
    let created = json_of(s.create_in(draft("now"), "Ready", Some("k")).await);
    assert_eq!(created["title"], "now");
    // Repeated blockers are one blocker.
    let a = id_of(&created);
    let b = json_of(
        s.create_in(blocked("twice", &[&a, &a]), "Ready", None)
            .await,
    );
    assert_eq!(b["blockedBy"], json!([a]));
}

pub(super) async fn ticket_listing_filters_and_order(h: &Harness) {
    let s = Source::new(h, "ENG");
    h.clock.set(T0 + 100);
    let a = id_of(
        &s.create(labelled("a", &["autobuild", "api"]), "Ready")
            .await,
    );
    let b = id_of(&s.create(labelled("b", &["autobuild"]), "Ready").await);
    // Created later by the clock's steps back: listed by creation time,
    // then creation order (the clock is the injected one).
    h.clock.set(T0);
    let c = id_of(
        &s.create(labelled("c", &["api", "autobuild", "api"]), "Ready")
            .await,
    );
    let d = id_of(&s.create(labelled("d", &["autobuild"]), "Triage").await);
    h.clock.set(T0 + 100);
    let e = id_of(&s.create(labelled("e", &[]), "Ready").await);
    assert_eq!(
        s.listed(Some("Ready"), &[]).await,
        [c.clone(), a.clone(), b.clone(), e.clone()]
    );
    assert_eq!(
        s.listed(None, &[]).await,
        [c.clone(), d.clone(), a.clone(), b.clone(), e.clone()]
    );
    assert_eq!(
        s.listed(Some("Ready"), &["autobuild"]).await,
        [c.clone(), a.clone(), b.clone()]
    );
    assert_eq!(
        s.listed(Some("Ready"), &["api", "autobuild"]).await,
        [c.clone(), a.clone()]
    );
    assert_eq!(
        s.listed(None, &["autobuild", "autobuild"]).await,
        [c.clone(), d.clone(), a.clone(), b.clone()]
    );
    assert!(
        s.listed(Some("Ready"), &["api", "missing"])
            .await
            .is_empty()
    );
    assert!(s.listed(Some("Unconfigured"), &[]).await.is_empty());
    assert!(s.listed(Some(""), &[]).await.is_empty());
    assert!(s.listed(Some("Ready\0"), &[]).await.is_empty());
    assert!(s.listed(None, &["a\0"]).await.is_empty());
    // More tickets than one page: every one, once, in order.
    let mut all = vec![c.clone(), d, a, b, e];
    for n in 0..300 {
        all.push(id_of(
            &s.create(draft(&format!("bulk {n}")), "Triage").await,
        ));
    }
    assert_eq!(s.listed(None, &[]).await, all);
}

pub(super) async fn ticket_text_is_kept_byte_for_byte(h: &Harness) {
    let s = Source::new(h, "ENG");
    for text in [
        "  leading and trailing  \n\n\n",
        "\r\nwindows\r\n\ttabs\t",
        "unicode é ✓ 𝄞 \u{200b}\u{feff}",
        "nul \0 inside \0",
        "\"quotes\" and \\backslashes\\ and </script>",
    ] {
        let created = json_of(
            s.create_in(
                Draft {
                    title: format!("t {text}"),
                    body: text.into(),
                    ..draft("")
                },
                "Ready",
                None,
            )
            .await,
        );
        assert_eq!(created["body"], text);
        assert_eq!(created["title"], format!("t {text}"));
        let id = id_of(&created);
        assert_eq!(s.get(&id).await["body"], text);
        s.update(
            &id,
            Patch {
                body: Some(format!("{text}!")),
                ..Patch::default()
            },
        )
        .await
        .unwrap();
        assert_eq!(s.get(&id).await["body"], format!("{text}!"));
        s.done(TicketOp::Comment {
            id: id.clone(),
            body: text.into(),
        })
        .await;
    }
    // A comment may be blank; one on an unknown ticket names it.
    let id = id_of(&s.create(draft("comments"), "Ready").await);
    s.done(TicketOp::Comment {
        id,
        body: String::new(),
    })
    .await;
    let missing = unknown();
    assert_eq!(
        s.call(TicketOp::Comment {
            id: missing.clone(),
            body: "x".into()
        })
        .await,
        Err(Refusal::unknown_ticket("comment", &missing))
    );
}

pub(super) async fn ticket_concurrent_claims_one_wins(h: &Harness) {
    let s = Arc::new(Source::new(h, "ENG"));
    let ids: Vec<String> = {
        let mut ids = Vec::new();
        for n in 0..5 {
            ids.push(id_of(&s.create(draft(&format!("race {n}")), "Ready").await));
        }
        ids
    };
    for id in ids {
        let claims = (0..8).map(|_| {
            let (s, id) = (s.clone(), id.clone());
            tokio::spawn(async move { s.claim(&id).await })
        });
        let won = futures_util::future::join_all(claims)
            .await
            .into_iter()
            .filter(|r| *r.as_ref().expect("claim task"))
            .count();
        assert_eq!(won, 1, "exactly one claim of {id} wins");
    }
    // Two tickets made each other's blocker at once, many times over (a
    // cycle is allowed, as in the database source): no writer waits on
    // the other's foreign-key check.
    for round in 0..10 {
        let a = id_of(
            &s.create(draft(&format!("mutual a {round}")), "Triage")
                .await,
        );
        let b = id_of(
            &s.create(draft(&format!("mutual b {round}")), "Triage")
                .await,
        );
        let (one, two) = tokio::join!(s.add_blocker(&a, &b), s.add_blocker(&b, &a));
        assert_eq!((one, two), (Ok(TicketAnswer::Done), Ok(TicketAnswer::Done)));
        let (one, two) = tokio::join!(
            s.done(TicketOp::Comment {
                id: a.clone(),
                body: "c".into()
            }),
            s.add_blocker(&b, &a)
        );
        assert_eq!((one, two), ((), Ok(TicketAnswer::Done)));
    }
    // Concurrent creates of one team: every one stored, one sequence each.
    let creates = (0..16).map(|n| {
        let s = s.clone();
        tokio::spawn(
            async move { id_of(&s.create(draft(&format!("parallel {n}")), "Triage").await) },
        )
    });
    let created = futures_util::future::join_all(creates).await;
    assert_eq!(created.len(), 16);
    assert_eq!(s.listed(Some("Triage"), &[]).await.len(), 16 + 20);
    // Concurrent creates with one idempotency key: one ticket.
    let key = unknown();
    let same = (0..8).map(|_| {
        let (s, key) = (s.clone(), key.clone());
        tokio::spawn(async move { json_of(s.create_in(draft("once"), "Done", Some(&key)).await) })
    });
    let answers: Vec<Value> = futures_util::future::join_all(same)
        .await
        .into_iter()
        .map(|r| r.expect("create task"))
        .collect();
    assert!(answers.iter().all(|a| a == &answers[0]));
    assert_eq!(s.listed(Some("Done"), &[]).await.len(), 1);
}

// ----------------------------------------------------------------- bounds

/// Small bounds, each at its edge below.
fn small() -> TicketSettings {
    TicketSettings {
        bounds: TicketBounds {
            max_team_tickets: 4,
            max_ticket_labels: 2,
            max_ticket_blockers: 2,
            max_ticket_comments: 2,
            max_ticket_text_bytes: 8,
        },
        ..TicketSettings::default()
    }
}

fn bound_of(outcome: TicketOutcome) -> String {
    match outcome {
        Err(Refusal::TooLarge(message)) => message,
        other => panic!("not a bound's refusal: {other:?}"),
    }
}

fn short(title: &str) -> Draft {
    Draft {
        title: title.into(),
        body: "b".into(),
        labels: vec![],
        blocked_by: vec![],
    }
}

fn blocked_short(blockers: &[&str]) -> Draft {
    Draft {
        blocked_by: blockers.iter().map(|b| (*b).to_owned()).collect(),
        ..short("blocked")
    }
}

pub(super) async fn ticket_bounds_at_their_edges(h: &Harness) {
    let s = Source::with(h, "ENG", small());
    let new = |draft: Draft| {
        let s = &s;
        async move { id_of(&json_of(s.create_in(draft, "Ready", None).await)) }
    };
    // Text: 8 bytes pass (é is two), 9 do not, in every field.
    let a = new(short("12345678")).await;
    assert!(
        bound_of(s.create_in(short("123456789"), "Ready", None).await).contains(
            "\"input.draft.title\" is 9 bytes, over the 8-byte --max-ticket-text-bytes bound"
        )
    );
    let long_body = Draft {
        body: "éééé5".into(),
        ..short("t")
    };
    assert!(bound_of(s.create_in(long_body, "Ready", None).await).contains("input.draft.body"));
    let patch = Patch {
        body: Some("x".repeat(9)),
        ..Patch::default()
    };
    assert!(bound_of(s.update(&a, patch).await).contains("input.patch.body"));
    let comment = TicketOp::Comment {
        id: a.clone(),
        body: "x".repeat(9),
    };
    assert!(bound_of(s.call(comment).await).contains("input.body"));
    let patch = Patch {
        body: Some("éééé".into()),
        ..Patch::default()
    };
    assert_eq!(s.update(&a, patch).await, Ok(TicketAnswer::Done));
    // Labels: two, not three.
    s.update(&a, patch_labels(&["x", "y"])).await.unwrap();
    assert!(
        bound_of(s.update(&a, patch_labels(&["x", "y", "z"])).await)
            .contains("--max-ticket-labels")
    );
    let three = Draft {
        labels: vec!["1".into(), "2".into(), "3".into()],
        ..short("t")
    };
    assert!(bound_of(s.create_in(three, "Ready", None).await).contains("--max-ticket-labels"));
    // Comments: two, not three.
    for _ in 0..2 {
        s.done(TicketOp::Comment {
            id: a.clone(),
            body: "c".into(),
        })
        .await;
    }
    let third = TicketOp::Comment {
        id: a.clone(),
        body: "c".into(),
    };
    assert!(
        bound_of(s.call(third).await).contains("has 2 comments, the --max-ticket-comments bound")
    );
    // Blockers: two, not three; a repeated one is no new blocker.
    let b = new(short("b")).await;
    let c = new(blocked_short(&[&a, &b, &a])).await;
    assert_eq!(s.get(&c).await["blockedBy"].as_array().unwrap().len(), 2);
    let d = new(short("d")).await;
    assert!(
        bound_of(
            s.create_in(blocked_short(&[&a, &b, &c]), "Ready", None)
                .await
        )
        .contains("--max-ticket-blockers")
    );
    assert_eq!(
        s.add_blocker(&c, &a).await,
        Ok(TicketAnswer::Done),
        "one it has: no-op"
    );
    assert!(bound_of(s.add_blocker(&c, &d).await).contains(&format!(
        "ticket \"{c}\" has 2 blockers, the --max-ticket-blockers bound"
    )));
    s.remove_blocker(&c, &a).await.unwrap();
    s.add_blocker(&c, &d).await.unwrap();
    assert_eq!(s.get(&c).await["blockedBy"].as_array().unwrap().len(), 2);
    // The team holds four tickets now: the bound; refused creates took none.
    assert!(
        bound_of(s.create_in(short("e"), "Ready", None).await)
            .contains("team \"ENG\" holds 4 tickets, the --max-team-tickets bound")
    );
    assert_eq!(
        s.listed(None, &[]).await,
        [a.clone(), b.clone(), c.clone(), d.clone()]
    );
    // An idempotent retry of a stored ticket is no new ticket.
    let other = Source::with(h, "OPS", small());
    for n in 0..4 {
        other
            .create_in(short("ops"), "Ready", Some(&format!("k{n}")))
            .await
            .unwrap();
    }
    assert!(
        other
            .create_in(short("ops"), "Ready", Some("k0"))
            .await
            .is_ok()
    );
    assert!(bound_of(other.create_in(short("ops"), "Ready", Some("k4")).await).contains("OPS"));
}

pub(super) async fn ticket_answers_within_the_response_ceiling(h: &Harness) {
    let s = Source::new(h, "ENG");
    let id = id_of(&json_of(s.create_in(draft("ceiling"), "Ready", None).await));
    let size = serde_json::to_string(&s.get(&id).await).unwrap().len();
    let listing = serde_json::to_string(&s.list(None, &[]).await)
        .unwrap()
        .len();
    let at = |max: usize| {
        Source::with(
            h,
            "ENG",
            TicketSettings {
                max_answer_bytes: max,
                ..TicketSettings::default()
            },
        )
    };
    assert_eq!(at(size).get(&id).await["ref"]["id"], id.as_str());
    assert!(
        bound_of(at(size - 1).call(TicketOp::Get { id: id.clone() }).await)
            .contains(&format!("{}-byte response ceiling", size - 1))
    );
    assert_eq!(
        at(listing).listed(None, &[]).await,
        std::slice::from_ref(&id)
    );
    assert!(
        bound_of(
            at(listing - 1)
                .call(TicketOp::ListReady {
                    labels: vec![],
                    state: None
                })
                .await
        )
        .contains("the ticket listing of team \"ENG\" exceeds")
    );
    let states = serde_json::to_string(&s.dependency_states(&[&id, "x"]).await)
        .unwrap()
        .len();
    let ids = vec![id.clone(), "x".to_owned()];
    assert!(
        at(states)
            .call(TicketOp::DependencyStates { ids: ids.clone() })
            .await
            .is_ok()
    );
    assert!(
        bound_of(
            at(states - 1)
                .call(TicketOp::DependencyStates { ids })
                .await
        )
        .contains("dependency states")
    );
    // A create whose answer would not fit writes nothing.
    let before = s.listed(None, &[]).await;
    assert!(
        bound_of(
            at(size - 1)
                .create_in(draft("ceiling"), "Ready", None)
                .await
        )
        .contains("response ceiling")
    );
    assert_eq!(s.listed(None, &[]).await, before);
    // Many ids, across batches, in order and repeated.
    let many: Vec<String> = (0..1200)
        .map(|n| {
            if n % 3 == 0 {
                id.clone()
            } else {
                format!("x{n}")
            }
        })
        .collect();
    let answer = json_of(
        s.call(TicketOp::DependencyStates { ids: many.clone() })
            .await,
    );
    let answer = answer.as_array().unwrap();
    assert_eq!(answer.len(), many.len());
    for (asked, state) in many.iter().zip(answer) {
        assert_eq!(&state["id"], asked);
        assert_eq!(state["exists"], json!(asked == &id));
    }
}

/// The ticket's whole history, as `(actor, at, change)`.
async fn history_of(s: &Source, id: &str) -> Vec<(String, i64, Value)> {
    let team = &s.context.team_key;
    let entries = s.store.ticket_history(team, id, 0, 1000).await;
    let entries = entries.expect("the store answers").expect("the ticket");
    for (at, entry) in entries.iter().enumerate() {
        assert_eq!(entry.seq, at as i64 + 1, "entries are numbered 1, 2, 3…");
        assert_eq!(
            entry.token_digest.as_deref(),
            s.actor.token_digest.as_deref()
        );
    }
    entries
        .into_iter()
        .map(|e| {
            let change = serde_json::from_str(&e.change_json).expect("a change is JSON");
            (e.actor, e.at, change)
        })
        .collect()
}

pub(super) async fn ticket_history_names_who_when_and_what(h: &Harness) {
    let s = Source::new(h, "ENG");
    let blocker = id_of(&s.create(draft("blocker"), "Ready").await);
    let mut first = draft("tracked \u{0} title");
    first.labels = vec!["b".into(), "a".into()];
    first.blocked_by = vec![blocker.clone(), blocker.clone()];
    let id = id_of(&s.create(first, "Ready").await);
    h.clock.set(T0 + 1_000);
    assert!(s.claim(&id).await);
    // Refusals and no-ops change nothing, so they add no entry.
    assert!(!s.claim(&id).await);
    assert!(s.add_blocker(&id, &id).await.is_err());
    assert_eq!(s.add_blocker(&id, &blocker).await, Ok(TicketAnswer::Done));
    let blank = Patch {
        title: Some(" ".into()),
        ..Patch::default()
    };
    assert!(s.update(&id, blank).await.is_err());
    h.clock.set(T0 + 2_000);
    s.transition(&id, "Done").await;
    let patch = Patch {
        title: Some("renamed".into()),
        body: Some("new body".into()),
        labels: None,
    };
    assert_eq!(s.update(&id, patch).await, Ok(TicketAnswer::Done));
    s.done(TicketOp::Comment {
        id: id.clone(),
        body: "a comment".into(),
    })
    .await;
    let other = id_of(&s.create(draft("other"), "Triage").await);
    assert_eq!(s.add_blocker(&id, &other).await, Ok(TicketAnswer::Done));
    for _ in 0..2 {
        s.done(TicketOp::RemoveBlocker {
            id: id.clone(),
            blocker_id: blocker.clone(),
        })
        .await;
    }
    let history = history_of(&s, &id).await;
    let actor = "deployment via session:contract";
    assert!(history.iter().all(|(who, _, _)| who == actor));
    let at: Vec<i64> = history.iter().map(|(_, at, _)| *at).collect();
    let later = T0 + 2_000;
    assert_eq!(at, [T0, T0 + 1_000, later, later, later, later, later]);
    let changes: Vec<Value> = history.into_iter().map(|(_, _, c)| c).collect();
    assert_eq!(
        changes,
        [
            json!({"op": "create", "state": "Ready", "title": "tracked \u{0} title",
                   "labels": ["b", "a"], "blockedBy": [blocker]}),
            json!({"op": "claim", "from": "Ready", "to": "Doing"}),
            json!({"op": "transition", "from": "Doing", "to": "Done"}),
            json!({"op": "update", "title": "renamed", "fields": ["title", "body"]}),
            json!({"op": "comment", "comment": 1}),
            json!({"op": "add-blocker", "blockerId": other}),
            json!({"op": "remove-blocker", "blockerId": blocker}),
        ]
    );
    // Concurrent claims: one entry, the winner's.
    let raced = id_of(&s.create(draft("raced"), "Ready").await);
    let s = Arc::new(s);
    let claims = (0..6).map(|_| {
        let (s, raced) = (s.clone(), raced.clone());
        tokio::spawn(async move { s.claim(&raced).await })
    });
    futures_util::future::join_all(claims).await;
    let ops: Vec<Value> = history_of(&s, &raced)
        .await
        .into_iter()
        .map(|(_, _, c)| c["op"].clone())
        .collect();
    assert_eq!(ops, [json!("create"), json!("claim")]);
    // Another team's ticket, or none: no history to read.
    let store = &s.store;
    assert_eq!(store.ticket_history("OPS", &id, 0, 10).await.unwrap(), None);
    assert_eq!(
        store
            .ticket_history("ENG", "ticket-none", 0, 10)
            .await
            .unwrap(),
        None
    );
    // Paged: after an entry, at most `limit`.
    let page = store
        .ticket_history("ENG", &id, 2, 2)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(page.iter().map(|e| e.seq).collect::<Vec<_>>(), [3, 4]);
}
