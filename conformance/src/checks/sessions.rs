//! Section 5, operator sessions: create/list under a repository, get, the
//! session event log (`session.created` as sequence 1, the closed session
//! catalog, no `via`), event reads with lenient `since` and the strict `wait`
//! (the build and repository checks of `builds.rs`, run on a session),
//! artifacts, atomic deposits (placeholders inside arrays, in an approval
//! request's free-form `input`) and the absence of a lease family.
//! Session-scoped streams are in `streams.rs`; the token cells in
//! `auth_sessions.rs`.

use serde_json::{Value, json};

use super::{CheckResult, Failure, NEEDS_OPEN, Registry};
use crate::client::{Ctx, Res, same, shape, time_of};
use crate::ensure;
use crate::fixtures::session_event;
use crate::util::{b64, enc, sha256_hex};

const SESSION_KEYS: [&str; 6] = ["id", "repo", "operator", "title", "createdAt", "updatedAt"];
const ENVELOPE_KEYS: [&str; 6] = ["session", "seq", "ts", "actor", "type", "payload"];
const META_KEYS: [&str; 6] = [
    "session",
    "kind",
    "revision",
    "blobRef",
    "metadata",
    "createdAt",
];

/// The 422 message of a `via` on a session event.
pub fn via_message(ty: &str) -> String {
    format!(
        "invalid actor for \"{ty}\": via is only valid on human actors of build and repository events"
    )
}

// ── helpers (also used by streams.rs and auth_sessions.rs) ───────────────────

/// `/repos/{repo}/sessions`.
pub fn sessions_path(repo: &str) -> String {
    format!("/repos/{}/sessions", enc(repo))
}

/// `/sessions/{id}`.
pub fn session_path(id: &str) -> String {
    format!("/sessions/{}", enc(id))
}

/// The exact 404 message for an unknown session.
pub fn unknown_session_msg(id: &str) -> String {
    format!("unknown session \"{id}\"")
}

/// An `os_` id that names no session.
pub fn unknown_session_id() -> String {
    format!("os_{}", crate::util::random_hex())
}

/// `POST /repos/{repo}/sessions` (expects 201); returns the record.
pub async fn create_session(
    c: &Ctx,
    repo: &str,
    operator: &str,
    title: Option<&str>,
) -> Result<Value, String> {
    let mut body = json!({"repo": repo, "operator": operator});
    if let Some(t) = title {
        body["title"] = json!(t);
    }
    c.post(&sessions_path(repo), &body)
        .send()
        .await?
        .json_status(201)
}

/// A fresh repository with one session; returns `(repo, session id)`.
pub async fn new_session(c: &Ctx) -> Result<(String, String), String> {
    let (repo, _) = c.new_repo().await?;
    let rec = create_session(c, &repo, "alice", None).await?;
    let id = rec["id"]
        .as_str()
        .ok_or_else(|| format!("session record without a string id: {rec}"))?
        .to_string();
    Ok((repo, id))
}

/// `GET /sessions/{id}/events{query}` (expects 200 and an array).
pub async fn session_events(c: &Ctx, id: &str, query: &str) -> Result<Vec<Value>, String> {
    let r = c
        .get(&format!("{}/events{query}", session_path(id)))
        .send()
        .await?;
    let v = r.json_status(200)?;
    v.as_array()
        .cloned()
        .ok_or_else(|| r.fail("a JSON array of session event envelopes"))
}

fn seqs_of(events: &[Value]) -> Vec<i64> {
    events
        .iter()
        .map(|e| e["seq"].as_i64().unwrap_or(-1))
        .collect()
}

async fn session_seqs(c: &Ctx, id: &str) -> Result<Vec<i64>, String> {
    Ok(seqs_of(&session_events(c, id, "").await?))
}

/// `POST /sessions/{id}/events` (expects 201); returns the envelope.
pub async fn append_session(c: &Ctx, id: &str, event: &Value) -> Result<Value, String> {
    c.post(&format!("{}/events", session_path(id)), event)
        .send()
        .await?
        .json_status(201)
}

async fn list_session_artifacts(c: &Ctx, id: &str) -> Result<Vec<Value>, String> {
    let r = c
        .get(&format!("{}/artifact-list", session_path(id)))
        .send()
        .await?;
    let v = r.json_status(200)?;
    v.as_array()
        .cloned()
        .ok_or_else(|| r.fail("a JSON array of artifact metadata"))
}

async fn list_sessions(c: &Ctx, repo: &str) -> Result<Vec<Value>, String> {
    let r = c.get(&sessions_path(repo)).send().await?;
    let v = r.json_status(200)?;
    v.as_array()
        .cloned()
        .ok_or_else(|| r.fail("a JSON array of session records"))
}

fn session_shape(what: &str, rec: &Value) -> Result<(), String> {
    shape(
        what,
        rec,
        &["id", "repo", "operator", "createdAt", "updatedAt"],
        &SESSION_KEYS,
    )?;
    time_of(what, rec, "createdAt")?;
    time_of(what, rec, "updatedAt")?;
    let id = rec["id"].as_str().unwrap_or_default();
    ensure!(
        id.starts_with("os_") && id.len() > 3,
        "{what}: id must be a server-assigned `os_`-prefixed string; got {}",
        rec["id"]
    );
    Ok(())
}

pub fn register(r: &mut Registry) {
    // create
    r.add("s5.create.status_and_shape", "5", create_shape);
    r.add("s5.create.operator_trimmed", "5", create_trimmed);
    r.add("s5.create.title_round_trip", "5", create_title);
    r.add("s5.create.unknown_keys_ignored", "5", create_unknown_keys);
    r.add("s5.create.ids_distinct", "5", create_distinct);
    r.add("s5.create.repo_mismatch_400", "5", create_mismatch);
    r.add("s5.create.unknown_repo_404", "5", create_unknown_repo);
    let bad: [(&str, &str); 11] = [
        ("missing_operator", r#"{"repo":"REPO"}"#),
        ("empty_operator", r#"{"repo":"REPO","operator":""}"#),
        ("blank_operator", r#"{"repo":"REPO","operator":" \t "}"#),
        ("operator_not_string", r#"{"repo":"REPO","operator":7}"#),
        ("missing_repo", r#"{"operator":"alice"}"#),
        ("repo_not_string", r#"{"repo":["REPO"],"operator":"alice"}"#),
        (
            "title_not_string",
            r#"{"repo":"REPO","operator":"alice","title":5}"#,
        ),
        ("body_array", r#"[{"repo":"REPO","operator":"alice"}]"#),
        ("body_null", "null"),
        ("body_string", r#""alice""#),
        ("invalid_json", r#"{"repo":"REPO","operator":"#),
    ];
    for (name, body) in bad {
        r.add(format!("s5.create.rejects_{name}"), "5", move |c| {
            create_rejects(c, body)
        });
    }
    // list / get
    r.add("s5.list.empty_repo", "5", list_empty);
    r.add("s5.list.creation_order", "5", list_order);
    r.add("s5.list.per_repository", "5", list_per_repo);
    r.add("s5.list.unknown_repo_404", "5", list_unknown);
    r.add("s5.get.record_matches_create", "5", get_matches);
    r.add("s5.get.unknown_404", "5", get_unknown);
    // events
    r.add("s5.events.created_is_seq_1", "5", created_event);
    r.add("s5.events.created_carries_title", "5", created_title);
    r.add("s5.events.append_envelope_shape", "5", append_shape);
    r.add("s5.events.actor_kinds_per_type", "5", actor_kinds);
    r.add("s5.events.seq_per_session", "5", seq_per_session);
    r.add("s5.events.since_strictly_greater", "5", since_strict);
    super::builds::register_since_checks(r, Res::Session);
    r.add("s5.events.unknown_session_404", "5", events_unknown);
    r.add("s5.events.catalog_422_appends_nothing", "5", catalog_422);
    r.add("s5.events.build_types_not_in_catalog", "5", foreign_types);
    r.add("s5.events.via_on_non_human_422", "5", via_non_human);
    r.add("s5.events.via_on_human_open_422", "5", via_human_open);
    r.add("s5.events.invalid_json_400", "5", events_bad_json);
    // wait
    super::builds::register_wait_checks(r, Res::Session);
    // artifacts
    r.add("s5.artifacts.put_get_list", "5", artifacts_round_trip);
    r.add(
        "s5.artifacts.absent_null_and_kind_required",
        "5",
        artifacts_absent,
    );
    r.add(
        "s5.artifacts.independent_of_repository",
        "5",
        artifacts_isolated,
    );
    r.add("s5.artifacts.unknown_session_404", "5", artifacts_unknown);
    // deposits
    r.add(
        "s5.deposits.array_placeholders_substituted",
        "5",
        deposit_array,
    );
    r.add(
        "s5.deposits.out_of_range_left_unchanged",
        "5",
        deposit_out_of_range,
    );
    r.add(
        "s5.deposits.invalid_event_422_nothing_written",
        "5",
        deposit_invalid_event,
    );
    r.add("s5.deposits.unknown_session_404", "5", deposit_unknown);
    // no lease family; identity
    r.add("s5.lease.no_routes_404", "5", no_lease);
    r.add("s5.identity.headers_required_409", "5", identity);
}

// ── create ──────────────────────────────────────────────────────────────────

async fn create_shape(c: Ctx) -> CheckResult {
    let (repo, _) = c.new_repo().await?;
    let r = c
        .post(
            &sessions_path(&repo),
            &json!({"repo": repo, "operator": "alice"}),
        )
        .send()
        .await?;
    let rec = r.json_status(201)?;
    session_shape("SessionRecord", &rec)?;
    ensure!(
        rec["repo"] == json!(repo) && rec["operator"] == json!("alice"),
        "{}",
        r.fail("repo and operator echoed")
    );
    ensure!(
        rec.get("title").is_none(),
        "{}",
        r.fail("no \"title\" on a session created without one")
    );
    ensure!(
        rec["createdAt"] == rec["updatedAt"],
        "{}",
        r.fail("createdAt == updatedAt on a new session")
    );
    Ok(())
}

async fn create_trimmed(c: Ctx) -> CheckResult {
    let (repo, _) = c.new_repo().await?;
    let rec = create_session(&c, &repo, " \t alice  ", None).await?;
    ensure!(
        rec["operator"] == json!("alice"),
        "operator \" \\t alice  \" must be stored trimmed: got {}",
        rec["operator"]
    );
    let id = rec["id"].as_str().unwrap_or_default();
    let events = session_events(&c, id, "").await?;
    let first = events.first().cloned().unwrap_or(Value::Null);
    same(
        "session.created actor (the trimmed operator)",
        &first["actor"],
        &json!({"kind": "human", "user": "alice"}),
    )?;
    // The public session catalog's `session.created` carries no operator:
    // the actor names it.
    same("session.created payload", &first["payload"], &json!({}))?;
    Ok(())
}

async fn create_title(c: Ctx) -> CheckResult {
    let (repo, _) = c.new_repo().await?;
    let title = "fix the login flow — ü";
    let rec = create_session(&c, &repo, "alice", Some(title)).await?;
    ensure!(
        rec["title"] == json!(title),
        "title must round-trip: sent {title:?}; got {}",
        rec["title"]
    );
    let id = rec["id"].as_str().unwrap_or_default();
    let got = c.get(&session_path(id)).send().await?.json_status(200)?;
    same("GET /sessions/{id} vs create response", &got, &rec)?;
    let list = list_sessions(&c, &repo).await?;
    same("GET …/sessions", &Value::Array(list), &json!([rec]))?;
    Ok(())
}

async fn create_unknown_keys(c: Ctx) -> CheckResult {
    let (repo, _) = c.new_repo().await?;
    let body = json!({
        "repo": repo, "operator": "alice", "id": "os_chosen_by_client",
        "createdAt": "2000-01-01T00:00:00.000Z", "x-extra": {"a": 1},
    });
    let r = c.post(&sessions_path(&repo), &body).send().await?;
    let rec = r.json_status(201)?;
    session_shape("SessionRecord", &rec)?;
    ensure!(
        rec["id"] != json!("os_chosen_by_client")
            && rec["createdAt"] != json!("2000-01-01T00:00:00.000Z"),
        "{}",
        r.fail("a server-assigned id and createdAt (unknown keys ignored)")
    );
    Ok(())
}

async fn create_distinct(c: Ctx) -> CheckResult {
    let (repo, _) = c.new_repo().await?;
    let a = create_session(&c, &repo, "alice", Some("same")).await?;
    let b = create_session(&c, &repo, "alice", Some("same")).await?;
    ensure!(
        a["id"] != b["id"],
        "two sessions with the same operator and title must get distinct ids: {} and {}",
        a["id"],
        b["id"]
    );
    Ok(())
}

async fn create_mismatch(c: Ctx) -> CheckResult {
    let (repo, _) = c.new_repo().await?;
    let (other, _) = c.new_repo().await?;
    c.post(
        &sessions_path(&repo),
        &json!({"repo": other, "operator": "alice"}),
    )
    .send()
    .await?
    .e400()?;
    ensure!(
        list_sessions(&c, &repo).await?.is_empty() && list_sessions(&c, &other).await?.is_empty(),
        "a 400-rejected create made a session"
    );
    Ok(())
}

async fn create_unknown_repo(c: Ctx) -> CheckResult {
    let repo = Res::Repo.unknown_id();
    c.post(
        &sessions_path(&repo),
        &json!({"repo": repo, "operator": "alice"}),
    )
    .send()
    .await?
    .error_msg(404, "not-found", &Res::Repo.unknown_msg(&repo))?;
    let g = c.get(&Res::Repo.path(&repo)).send().await?;
    ensure!(
        g.status == 404,
        "{}",
        g.fail("404: creating a session must not create its repository")
    );
    Ok(())
}

async fn create_rejects(c: Ctx, body: &'static str) -> CheckResult {
    let (repo, _) = c.new_repo().await?;
    let text = body.replace("REPO", &repo);
    c.post_raw(&sessions_path(&repo), text)
        .send()
        .await?
        .e400()?;
    ensure!(
        list_sessions(&c, &repo).await?.is_empty(),
        "a 400-rejected create made a session"
    );
    Ok(())
}

// ── list / get ──────────────────────────────────────────────────────────────

async fn list_empty(c: Ctx) -> CheckResult {
    let (repo, _) = c.new_repo().await?;
    let got = list_sessions(&c, &repo).await?;
    ensure!(got.is_empty(), "a fresh repository lists sessions: {got:?}");
    Ok(())
}

async fn list_order(c: Ctx) -> CheckResult {
    let (repo, _) = c.new_repo().await?;
    let mut made = Vec::new();
    for (op, title) in [("carol", None), ("alice", Some("b")), ("bob", Some("a"))] {
        made.push(create_session(&c, &repo, op, title).await?);
    }
    let got = list_sessions(&c, &repo).await?;
    same(
        "sessions in creation order (not by operator, title or id)",
        &Value::Array(got),
        &Value::Array(made),
    )?;
    Ok(())
}

async fn list_per_repo(c: Ctx) -> CheckResult {
    let (a, _) = c.new_repo().await?;
    let (b, _) = c.new_repo().await?;
    let sa = create_session(&c, &a, "alice", None).await?;
    let sb = create_session(&c, &b, "alice", None).await?;
    same(
        "sessions of repo a",
        &Value::Array(list_sessions(&c, &a).await?),
        &json!([sa]),
    )?;
    same(
        "sessions of repo b",
        &Value::Array(list_sessions(&c, &b).await?),
        &json!([sb]),
    )?;
    Ok(())
}

async fn list_unknown(c: Ctx) -> CheckResult {
    let repo = Res::Repo.unknown_id();
    c.get(&sessions_path(&repo)).send().await?.error_msg(
        404,
        "not-found",
        &Res::Repo.unknown_msg(&repo),
    )?;
    Ok(())
}

async fn get_matches(c: Ctx) -> CheckResult {
    let (repo, _) = c.new_repo().await?;
    let rec = create_session(&c, &repo, "alice", Some("t")).await?;
    let id = rec["id"].as_str().unwrap_or_default();
    let got = c.get(&session_path(id)).send().await?.json_status(200)?;
    same("GET /sessions/{id}", &got, &rec)?;
    Ok(())
}

async fn get_unknown(c: Ctx) -> CheckResult {
    let id = unknown_session_id();
    c.get(&session_path(&id)).send().await?.error_msg(
        404,
        "not-found",
        &unknown_session_msg(&id),
    )?;
    Ok(())
}

// ── events ──────────────────────────────────────────────────────────────────

async fn created_event(c: Ctx) -> CheckResult {
    let (repo, _) = c.new_repo().await?;
    let rec = create_session(&c, &repo, "alice", None).await?;
    let id = rec["id"].as_str().unwrap_or_default();
    let events = session_events(&c, id, "").await?;
    ensure!(
        events.len() == 1,
        "a new session must have exactly its session.created event; got {events:?}"
    );
    let e = &events[0];
    shape("session event envelope", e, &ENVELOPE_KEYS, &ENVELOPE_KEYS)?;
    time_of("session event envelope", e, "ts")?;
    same(
        "session.created envelope",
        &json!({"session": e["session"], "seq": e["seq"], "actor": e["actor"], "type": e["type"], "payload": e["payload"]}),
        &json!({
            "session": id, "seq": 1, "actor": {"kind": "human", "user": "alice"},
            "type": "session.created", "payload": {},
        }),
    )?;
    Ok(())
}

async fn created_title(c: Ctx) -> CheckResult {
    let (repo, _) = c.new_repo().await?;
    let rec = create_session(&c, &repo, "bob", Some("the title")).await?;
    let id = rec["id"].as_str().unwrap_or_default();
    let events = session_events(&c, id, "").await?;
    let first = events.first().cloned().unwrap_or(Value::Null);
    same(
        "session.created payload",
        &first["payload"],
        &json!({"title": "the title"}),
    )?;
    Ok(())
}

async fn append_shape(c: Ctx) -> CheckResult {
    let (_, id) = new_session(&c).await?;
    let ev = session_event("messageHuman");
    let r = c
        .post(&format!("{}/events", session_path(&id)), &ev)
        .send()
        .await?;
    let env = r.json_status(201)?;
    shape(
        "session event envelope",
        &env,
        &ENVELOPE_KEYS,
        &ENVELOPE_KEYS,
    )?;
    time_of("session event envelope", &env, "ts")?;
    ensure!(
        env["session"] == json!(id) && env["seq"] == json!(2),
        "{}",
        r.fail("201 envelope with \"session\" the id and seq 2 (session.created is 1)")
    );
    for k in ["actor", "type", "payload"] {
        same(&format!("envelope {k}"), &env[k], &ev[k])?;
    }
    let events = session_events(&c, &id, "").await?;
    same("event read back", &events[events.len() - 1], &env)?;
    Ok(())
}

async fn actor_kinds(c: Ctx) -> CheckResult {
    let (_, id) = new_session(&c).await?;
    let names = [
        "messageHuman",
        "turnStarted",
        "wakeSetHuman",
        "turnCompleted",
        "approvalAnswered",
    ];
    for name in names {
        let ev = session_event(name);
        let env = append_session(&c, &id, &ev).await?;
        same(&format!("{name} actor"), &env["actor"], &ev["actor"])?;
    }
    let seqs = session_seqs(&c, &id).await?;
    ensure!(
        seqs == (1..=6).collect::<Vec<i64>>(),
        "expected seqs 1..6; got {seqs:?}"
    );
    Ok(())
}

async fn seq_per_session(c: Ctx) -> CheckResult {
    let (repo, a) = new_session(&c).await?;
    let b = create_session(&c, &repo, "alice", None).await?;
    let b = b["id"].as_str().unwrap_or_default().to_string();
    for _ in 0..3 {
        append_session(&c, &a, &session_event("messageHuman")).await?;
    }
    let env = append_session(&c, &b, &session_event("messageHuman")).await?;
    ensure!(
        env["seq"] == json!(2),
        "first append to a second session of the same repository: expected seq 2; got {}",
        env["seq"]
    );
    // The repository journal has its own numbering too.
    let renv = c
        .append(Res::Repo, &repo, &Res::Repo.simple_event())
        .await?;
    ensure!(
        renv["seq"] == json!(1),
        "the repository journal shares no sequence with its sessions: expected seq 1; got {}",
        renv["seq"]
    );
    let seqs = session_seqs(&c, &a).await?;
    ensure!(
        seqs == vec![1, 2, 3, 4],
        "session a: expected 1..4; got {seqs:?}"
    );
    Ok(())
}

async fn since_strict(c: Ctx) -> CheckResult {
    let (_, id) = new_session(&c).await?;
    for _ in 0..3 {
        append_session(&c, &id, &session_event("turnCompleted")).await?;
    }
    for (since, want) in [
        (0, vec![1, 2, 3, 4]),
        (1, vec![2, 3, 4]),
        (3, vec![4]),
        (4, vec![]),
        (99, vec![]),
    ] {
        let got = seqs_of(&session_events(&c, &id, &format!("?since={since}")).await?);
        ensure!(
            got == want,
            "GET /sessions/{{id}}/events?since={since}: expected {want:?}; got {got:?}"
        );
    }
    Ok(())
}

async fn events_unknown(c: Ctx) -> CheckResult {
    let id = unknown_session_id();
    let msg = unknown_session_msg(&id);
    c.get(&format!("{}/events", session_path(&id)))
        .send()
        .await?
        .error_msg(404, "not-found", &msg)?;
    c.post(
        &format!("{}/events", session_path(&id)),
        &session_event("messageHuman"),
    )
    .send()
    .await?
    .error_msg(404, "not-found", &msg)?;
    // An unknown session with an invalid event is still 404 (lookup before catalog).
    c.post(
        &format!("{}/events", session_path(&id)),
        &json!({"actor": {"kind": "kernel"}, "type": "nope", "payload": {}}),
    )
    .send()
    .await?
    .error_msg(404, "not-found", &msg)?;
    c.get(&session_path(&id)).send().await?.e404()?;
    Ok(())
}

async fn catalog_422(c: Ctx) -> CheckResult {
    let (_, id) = new_session(&c).await?;
    let human = json!({"kind": "human", "user": "alice"});
    let cases = [
        (
            json!({"actor": {"kind": "kernel"}, "type": "message.posted", "payload": {"text": "t"}}),
            "actor kind \"kernel\" may not emit \"message.posted\" (allowed: human)",
        ),
        (
            json!({"actor": human, "type": "message.posted", "payload": {"text": "t", "x": 1}}),
            "invalid payload for \"message.posted\": ",
        ),
        (
            json!({"actor": human, "type": "message.posted", "payload": {}}),
            "invalid payload for \"message.posted\": ",
        ),
        (
            json!({"actor": human, "type": "no.such.type", "payload": {}}),
            "unknown session event type \"no.such.type\"",
        ),
    ];
    for (ev, prefix) in cases {
        let r = c
            .post(&format!("{}/events", session_path(&id)), &ev)
            .send()
            .await?;
        let msg = r.e422()?;
        ensure!(
            msg.starts_with(prefix),
            "{}",
            r.fail(format!("422 whose message starts with {prefix:?}"))
        );
    }
    let seqs = session_seqs(&c, &id).await?;
    ensure!(
        seqs == vec![1],
        "422-rejected writes appended events: {seqs:?}"
    );
    let env = append_session(&c, &id, &session_event("messageHuman")).await?;
    ensure!(
        env["seq"] == json!(2),
        "422s consumed sequence numbers: next append got {}",
        env["seq"]
    );
    Ok(())
}

/// The session catalog is closed and separate: build and repository event
/// types are unknown on a session.
async fn foreign_types(c: Ctx) -> CheckResult {
    let (_, id) = new_session(&c).await?;
    for ev in [Res::Build.simple_event(), Res::Repo.simple_event()] {
        let ty = ev["type"].as_str().unwrap_or_default().to_string();
        let r = c
            .post(&format!("{}/events", session_path(&id)), &ev)
            .send()
            .await?;
        let msg = r.e422()?;
        let want = format!("unknown session event type \"{ty}\"");
        ensure!(
            msg.starts_with(&want),
            "{}",
            r.fail(format!("422 starting with {want:?}"))
        );
    }
    // …and session types are unknown on a build.
    let (b, _) = c.new_build().await?;
    c.post(
        &format!("{}/events", Res::Build.path(&b)),
        &session_event("messageHuman"),
    )
    .send()
    .await?
    .e422()?;
    ensure!(
        session_seqs(&c, &id).await? == vec![1],
        "rejected foreign types appended events"
    );
    Ok(())
}

async fn via_non_human(c: Ctx) -> CheckResult {
    let (_, id) = new_session(&c).await?;
    for via in [
        json!({"kind": "mcp", "client": "c"}),
        json!({"kind": "session", "id": "os_1"}),
    ] {
        for name in ["turnStarted", "turnCompleted"] {
            let mut ev = session_event(name);
            ev["actor"]["via"] = via.clone();
            let ty = ev["type"].as_str().unwrap_or_default().to_string();
            c.post(&format!("{}/events", session_path(&id)), &ev)
                .send()
                .await?
                .error_msg(422, "validation", &via_message(&ty))?;
        }
    }
    ensure!(
        session_seqs(&c, &id).await? == vec![1],
        "a 422 via write appended an event"
    );
    Ok(())
}

async fn via_human_open(c: Ctx) -> CheckResult {
    if c.authenticated() || c.secret.is_some() {
        return Err(Failure::Skip(NEEDS_OPEN.into()));
    }
    let (_, id) = new_session(&c).await?;
    for via in [
        json!({"kind": "mcp", "client": "c"}),
        json!({"kind": "session", "id": "os_1"}),
    ] {
        let mut ev = session_event("messageHuman");
        ev["actor"]["via"] = via;
        c.post(&format!("{}/events", session_path(&id)), &ev)
            .send()
            .await?
            .error_msg(422, "validation", &via_message("message.posted"))?;
        let dep = json!({"artifacts": [], "event": ev});
        c.post(&format!("{}/deposits", session_path(&id)), &dep)
            .send()
            .await?
            .error_msg(422, "validation", &via_message("message.posted"))?;
    }
    ensure!(
        session_seqs(&c, &id).await? == vec![1],
        "a 422 via write appended an event"
    );
    Ok(())
}

async fn events_bad_json(c: Ctx) -> CheckResult {
    let (_, id) = new_session(&c).await?;
    for body in ["{\"actor\":", "[]", "null"] {
        c.post_raw(&format!("{}/events", session_path(&id)), body)
            .send()
            .await?
            .e400()?;
    }
    ensure!(
        session_seqs(&c, &id).await? == vec![1],
        "a 400-rejected write appended an event"
    );
    Ok(())
}

// ── artifacts ───────────────────────────────────────────────────────────────

async fn put(
    c: &Ctx,
    id: &str,
    kind: &str,
    bytes: &[u8],
    meta: Option<Value>,
) -> Result<Value, String> {
    let mut body = json!({"kind": kind, "contentBase64": b64(bytes)});
    if let Some(m) = meta {
        body["metadata"] = m;
    }
    c.post(&format!("{}/artifacts", session_path(id)), &body)
        .send()
        .await?
        .json_status(201)
}

async fn get_art(c: &Ctx, id: &str, query: &str) -> Result<Value, String> {
    c.get(&format!("{}/artifacts{query}", session_path(id)))
        .send()
        .await?
        .json_status(200)
}

async fn artifacts_round_trip(c: Ctx) -> CheckResult {
    let (_, id) = new_session(&c).await?;
    let m0 = put(&c, &id, "transcript", b"one", Some(json!({"turn": "t_1"}))).await?;
    shape(
        "session artifact metadata",
        &m0,
        &["session", "kind", "revision", "blobRef", "createdAt"],
        &META_KEYS,
    )?;
    ensure!(
        m0["session"] == json!(id)
            && m0["kind"] == json!("transcript")
            && m0["revision"] == json!(0)
            && m0["blobRef"] == json!(sha256_hex(b"one"))
            && m0["metadata"] == json!({"turn": "t_1"}),
        "first put: expected session {id}, kind transcript, revision 0, blobRef sha256(\"one\"), metadata echoed; got {m0}"
    );
    let m1 = put(&c, &id, "transcript", b"two", None).await?;
    let n0 = put(&c, &id, "notes", b"n", None).await?;
    ensure!(
        m1["revision"] == json!(1) && n0["revision"] == json!(0),
        "revisions are per kind from 0: got transcript {} and notes {}",
        m1["revision"],
        n0["revision"]
    );
    let latest = get_art(&c, &id, "?kind=transcript").await?;
    same("latest read meta", &latest["meta"], &m1)?;
    same(
        "latest read content",
        &latest["contentBase64"],
        &json!(b64(b"two")),
    )?;
    let pinned = get_art(&c, &id, "?kind=transcript&rev=0").await?;
    same("pinned read meta", &pinned["meta"], &m0)?;
    same(
        "pinned read content",
        &pinned["contentBase64"],
        &json!(b64(b"one")),
    )?;
    let list = list_session_artifacts(&c, &id).await?;
    same(
        "artifact-list (by kind, then revision)",
        &Value::Array(list),
        &json!([n0, m0, m1]),
    )?;
    let r = c
        .get(&format!(
            "{}/artifact-list?kind=transcript",
            session_path(&id)
        ))
        .send()
        .await?
        .json_status(200)?;
    same("artifact-list?kind=transcript", &r, &json!([m0, m1]))?;
    Ok(())
}

async fn artifacts_absent(c: Ctx) -> CheckResult {
    let (_, id) = new_session(&c).await?;
    put(&c, &id, "notes", b"n", None).await?;
    for q in ["?kind=never-put", "?kind=notes&rev=4"] {
        let v = get_art(&c, &id, q).await?;
        ensure!(
            v.is_null(),
            "GET …/artifacts{q}: expected 200 null; got {v}"
        );
    }
    for q in ["", "?kind="] {
        c.get(&format!("{}/artifacts{q}", session_path(&id)))
            .send()
            .await?
            .e400()?;
    }
    Ok(())
}

/// A session's artifact table is its own: the repository's artifacts and
/// another session's are not visible through it.
async fn artifacts_isolated(c: Ctx) -> CheckResult {
    let (repo, a) = new_session(&c).await?;
    let b = create_session(&c, &repo, "alice", None).await?;
    let b = b["id"].as_str().unwrap_or_default().to_string();
    c.put_artifact(Res::Repo, &repo, "notes", b"repo", None)
        .await?;
    put(&c, &b, "notes", b"b", None).await?;
    let m = put(&c, &a, "notes", b"a", None).await?;
    ensure!(
        m["revision"] == json!(0),
        "a session's revisions are its own: first notes put got {m}"
    );
    same(
        "session a artifact-list",
        &Value::Array(list_session_artifacts(&c, &a).await?),
        &json!([m]),
    )?;
    let repo_list = c.list_artifacts(Res::Repo, &repo, "").await?;
    ensure!(
        repo_list.len() == 1 && repo_list[0]["repo"] == json!(repo),
        "the repository lists only its own artifact; got {repo_list:?}"
    );
    Ok(())
}

async fn artifacts_unknown(c: Ctx) -> CheckResult {
    let id = unknown_session_id();
    let msg = unknown_session_msg(&id);
    let p = session_path(&id);
    c.post(
        &format!("{p}/artifacts"),
        &json!({"kind": "notes", "contentBase64": b64(b"x")}),
    )
    .send()
    .await?
    .error_msg(404, "not-found", &msg)?;
    for q in ["/artifacts?kind=notes", "/artifact-list"] {
        c.get(&format!("{p}{q}"))
            .send()
            .await?
            .error_msg(404, "not-found", &msg)?;
    }
    Ok(())
}

// ── deposits ────────────────────────────────────────────────────────────────

/// An approval request whose free-form `input` carries `refs`: the public
/// session catalog has no artifact reference, so `input` is where a
/// session event can hold placeholders.
fn request_with(refs: Value) -> Value {
    let mut ev = session_event("approvalRequested");
    ev["payload"]["input"] = json!({"artifacts": refs});
    ev
}

/// Section 8, step 3: placeholders inside arrays (and object values) are
/// substituted.
async fn deposit_array(c: Ctx) -> CheckResult {
    let (_, id) = new_session(&c).await?;
    put(&c, &id, "plan", b"earlier", None).await?;
    let body = json!({
        "artifacts": [
            {"kind": "notes", "contentBase64": b64(b"n")},
            {"kind": "plan", "contentBase64": b64(b"p"), "metadata": {"round": 2}},
        ],
        "event": request_with(json!([
            {"kind": "notes", "rev": -1},
            {"kind": "wrong-kind", "rev": -2},
            {"kind": "plan", "rev": 0},
        ])),
    });
    let r = c
        .post(&format!("{}/deposits", session_path(&id)), &body)
        .send()
        .await?;
    let v = r.json_status(201)?;
    shape(
        "deposit response",
        &v,
        &["event", "artifacts"],
        &["event", "artifacts"],
    )?;
    same(
        "substituted payload.input.artifacts",
        &v["event"]["payload"]["input"]["artifacts"],
        &json!([
            {"kind": "notes", "rev": 0},
            {"kind": "plan", "rev": 1},
            {"kind": "plan", "rev": 0},
        ]),
    )?;
    ensure!(
        v["event"]["session"] == json!(id) && v["event"]["seq"] == json!(2),
        "deposit event: expected session {id} and seq 2; got {}",
        v["event"]
    );
    let metas = v["artifacts"].as_array().cloned().unwrap_or_default();
    ensure!(
        metas.len() == 2
            && metas.iter().all(|m| m["session"] == json!(id))
            && metas[0]["kind"] == json!("notes")
            && metas[1]["revision"] == json!(1)
            && metas[1]["metadata"] == json!({"round": 2}),
        "deposit artifacts: expected session metadata for notes rev 0 and plan rev 1; got {}",
        v["artifacts"]
    );
    let events = session_events(&c, &id, "?since=1").await?;
    same(
        "deposited event read back",
        &json!(events),
        &json!([v["event"]]),
    )?;
    let read = get_art(&c, &id, "?kind=plan&rev=1").await?;
    same("deposited plan read back", &read["meta"], &metas[1])?;
    Ok(())
}

/// Section 8, step 6: an out-of-range placeholder is left as sent. Only an
/// artifact-reference schema would reject it, and the session catalog has
/// none (an approval request's `input` is any object), so the deposit
/// commits with the value unchanged.
async fn deposit_out_of_range(c: Ctx) -> CheckResult {
    let (_, id) = new_session(&c).await?;
    let body = json!({
        "artifacts": [{"kind": "notes", "contentBase64": b64(b"n")}],
        "event": request_with(json!([{"kind": "notes", "rev": -1}, {"kind": "notes", "rev": -2}])),
    });
    let r = c
        .post(&format!("{}/deposits", session_path(&id)), &body)
        .send()
        .await?;
    let v = r.json_status(201)?;
    same(
        "payload.input.artifacts (the second placeholder names no request artifact)",
        &v["event"]["payload"]["input"]["artifacts"],
        &json!([{"kind": "notes", "rev": 0}, {"kind": "notes", "rev": -2}]),
    )?;
    Ok(())
}

/// All or nothing (section 8): a deposit whose event the catalog rejects
/// writes neither artifacts nor the event, and consumes no revision.
async fn deposit_invalid_event(c: Ctx) -> CheckResult {
    let (_, id) = new_session(&c).await?;
    let mut event = request_with(json!([{"kind": "notes", "rev": -1}]));
    event["payload"]
        .as_object_mut()
        .map(|payload| payload.remove("toolName"));
    let body = json!({
        "artifacts": [{"kind": "notes", "contentBase64": b64(b"n")}],
        "event": event,
    });
    let r = c
        .post(&format!("{}/deposits", session_path(&id)), &body)
        .send()
        .await?;
    let msg = r.e422()?;
    ensure!(
        msg.starts_with("invalid payload for \"approval.requested\": "),
        "{}",
        r.fail("422 `invalid payload for \"approval.requested\": …`")
    );
    ensure!(
        session_seqs(&c, &id).await? == vec![1],
        "a 422 deposit appended an event"
    );
    ensure!(
        list_session_artifacts(&c, &id).await?.is_empty(),
        "a 422 deposit exposed artifacts"
    );
    let m = put(&c, &id, "notes", b"after", None).await?;
    ensure!(
        m["revision"] == json!(0),
        "a failed deposit consumed a revision: next put got {m}"
    );
    Ok(())
}

async fn deposit_unknown(c: Ctx) -> CheckResult {
    let id = unknown_session_id();
    let body = json!({
        "artifacts": [{"kind": "notes", "contentBase64": b64(b"n")}],
        "event": request_with(json!([{"kind": "notes", "rev": -1}])),
    });
    c.post(&format!("{}/deposits", session_path(&id)), &body)
        .send()
        .await?
        .error_msg(404, "not-found", &unknown_session_msg(&id))?;
    Ok(())
}

// ── lease / identity ────────────────────────────────────────────────────────

async fn no_lease(c: Ctx) -> CheckResult {
    let (_, id) = new_session(&c).await?;
    for (op, body) in [
        ("claim", json!({"holder": "h", "ttlMs": 3_600_000})),
        ("heartbeat", json!({"holder": "h"})),
        ("release", json!({"holder": "h"})),
    ] {
        c.post(&format!("{}/lease/{op}", session_path(&id)), &body)
            .send()
            .await?
            .e404()?;
    }
    let rec = c.get(&session_path(&id)).send().await?.json_status(200)?;
    ensure!(
        rec.get("lease").is_none() && rec.get("heartbeatAt").is_none(),
        "a session record has no lease: {rec}"
    );
    Ok(())
}

async fn identity(c: Ctx) -> CheckResult {
    let (repo, id) = new_session(&c).await?;
    let p = session_path(&id);
    let paths = [
        ("GET", sessions_path(&repo)),
        ("GET", p.clone()),
        ("GET", format!("{p}/events")),
        ("GET", format!("{p}/artifact-list")),
        ("POST", format!("{p}/events")),
    ];
    for (method, path) in paths {
        let mut call = c.call(method, &path).no_identity();
        if method == "POST" {
            call = call.raw(session_event("messageHuman").to_string());
        }
        call.send().await?.error(409, "conflict")?;
        let mut call = c.call(method, &path).protocol(Some("1"));
        if method == "POST" {
            call = call.raw(session_event("messageHuman").to_string());
        }
        call.send().await?.error(409, "conflict")?;
    }
    ensure!(
        session_seqs(&c, &id).await? == vec![1],
        "a 409 write appended an event"
    );
    Ok(())
}
