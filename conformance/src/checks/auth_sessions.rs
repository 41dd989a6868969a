//! Section 7 cells for operator sessions (section 5) and streams (section 6):
//! the session and repo rows of the resource matrix on real sessions, stream
//! routes gated by the resource scope (top-level routes resolve the stream and
//! authorize against its own scope), no session attribution on streams, the
//! session gate and `via` on session events, refused writes that change
//! nothing and held reads refused at once. Every check mints tokens, so all
//! skip without the server's secret.

use std::time::Duration;

use serde_json::{Value, json};

use super::auth::Op;
use super::sessions::{new_session, session_events, session_path, sessions_path};
use super::streams::{
    Scope, append, close, create_stream, fresh_stream, read, stream_path, streams_path, top_path,
    unknown_stream_msg,
};
use super::{CheckResult, Registry};
use crate::client::{Ctx, Res};
use crate::ensure;
use crate::fixtures::session_event;
use crate::token::{admin_scope, deployment_scope, resource_scope};
use crate::util::b64;

pub fn register(r: &mut Registry) {
    r.add(
        "s7.session.token_reaches_its_session",
        "7",
        session_token_own,
    );
    r.add(
        "s7.session.token_refused_elsewhere",
        "7",
        session_token_elsewhere,
    );
    r.add(
        "s7.session.repo_token_owns_collection_only",
        "7",
        repo_token,
    );
    r.add("s7.session.build_token_refused", "7", build_token);
    r.add(
        "s7.session.admin_and_deployment_reach_all",
        "7",
        admin_deployment,
    );
    r.add("s7.session.attribution_gate", "7", attribution_gate);
    r.add("s7.session.unclaimed_via_refused", "7", via_unclaimed);
    r.add(
        "s7.stream.toplevel_authorizes_against_scope",
        "7",
        toplevel_scope,
    );
    r.add("s7.stream.toplevel_401_before_404", "7", toplevel_401);
    r.add("s7.stream.family_routes_gated", "7", family_gated);
    r.add("s7.stream.no_session_attribution", "7", no_attribution);
    r.add("s7.nomutation.session_and_stream_writes", "7", no_mutation);
    r.add(
        "s7.held.session_and_stream_reads_refused_at_once",
        "7",
        held_refused,
    );
}

fn denied(holder_kind: &str, holder: &str, kind: &str, id: &str) -> String {
    format!("token scoped to {holder_kind} \"{holder}\" may not access {kind} \"{id}\"")
}

fn session_token(c: &Ctx, os: &str, session: &str) -> Result<String, super::Failure> {
    c.mint(&resource_scope("session", os, session, c.exp_ms))
}

async fn all_ok(c: &Ctx, token: &str, ops: &[Op]) -> Result<(), String> {
    for op in ops {
        op.allowed(c, token).await?;
    }
    Ok(())
}

async fn all_403(c: &Ctx, token: &str, ops: &[Op], message: &str) -> Result<(), String> {
    for op in ops {
        op.refused(c, token, message).await?;
    }
    Ok(())
}

/// Every operation on one existing session, each succeeding for a token
/// that may write any actor. Streams: one created by the ops themselves is
/// not addressable up front, so `sid` is an existing open stream of the
/// session, appended to and finally closed.
fn session_ops(os: &str, sid: &str) -> Vec<Op> {
    let p = session_path(os);
    let mut ops = vec![
        Op::new("GET", p.clone(), None, 200),
        Op::new("GET", format!("{p}/events"), None, 200),
        Op::new(
            "POST",
            format!("{p}/events"),
            Some(session_event("messageHuman")),
            201,
        ),
        Op::new(
            "POST",
            format!("{p}/artifacts"),
            Some(json!({"kind": "notes", "contentBase64": b64(b"n")})),
            201,
        ),
        Op::new("GET", format!("{p}/artifacts?kind=notes"), None, 200),
        Op::new("GET", format!("{p}/artifact-list"), None, 200),
        Op::new(
            "POST",
            format!("{p}/deposits"),
            Some(json!({
                "artifacts": [{"kind": "notes", "contentBase64": b64(b"d")}],
                "event": Res::Session.ref_event(json!({"kind": "notes", "rev": -1})),
            })),
            201,
        ),
    ];
    ops.extend(stream_ops(Scope::Session, os, sid));
    ops
}

/// The stream operations on one stream of any scope: the family routes and
/// the top-level ones; the second close (top-level, asking another outcome)
/// meets an already-closed stream.
fn stream_ops(scope: Scope, id: &str, sid: &str) -> Vec<Op> {
    let sp = stream_path(scope, id, sid);
    let tp = top_path(sid);
    vec![
        Op::new(
            "POST",
            streams_path(scope, id),
            Some(json!({"label": "l"})),
            201,
        ),
        Op::new("GET", streams_path(scope, id), None, 200),
        Op::new("GET", sp.clone(), None, 200),
        Op::new("GET", tp.clone(), None, 200),
        Op::new(
            "POST",
            format!("{sp}/chunks"),
            Some(json!({"parts": [{"type": "start"}]})),
            201,
        ),
        Op::new(
            "POST",
            format!("{tp}/chunks"),
            Some(json!({"parts": [{"type": "finish"}]})),
            201,
        ),
        Op::new("GET", format!("{sp}/chunks"), None, 200),
        Op::new("GET", format!("{tp}/chunks?since=1"), None, 200),
        Op::new(
            "POST",
            format!("{sp}/close"),
            Some(json!({"outcome": "completed"})),
            200,
        ),
        Op::new(
            "POST",
            format!("{tp}/close"),
            Some(json!({"outcome": "aborted"})),
            200,
        ),
    ]
}

fn collection_ops(repo: &str) -> Vec<Op> {
    vec![
        Op::new(
            "POST",
            sessions_path(repo),
            Some(json!({"repo": repo, "operator": "alice"})),
            201,
        ),
        Op::new("GET", sessions_path(repo), None, 200),
    ]
}

async fn session_with_stream(c: &Ctx) -> Result<(String, String, String), String> {
    let (repo, os) = new_session(c).await?;
    let sid = create_stream(c, Scope::Session, &os, "s").await?["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    Ok((repo, os, sid))
}

// ── the matrix on real sessions ─────────────────────────────────────────────

async fn session_token_own(c: Ctx) -> CheckResult {
    c.need_secret()?;
    let (_, os, sid) = session_with_stream(&c).await?;
    let token = session_token(&c, &os, "*")?;
    all_ok(&c, &token, &session_ops(&os, &sid)).await?;
    let n = session_events(&c, &os, "").await?.len();
    ensure!(
        n == 3,
        "expected session.created plus two writes; got {n} events"
    );
    Ok(())
}

async fn session_token_elsewhere(c: Ctx) -> CheckResult {
    c.need_secret()?;
    let (repo, os, _) = session_with_stream(&c).await?;
    let (_, os2, sid2) = session_with_stream(&c).await?;
    let token = session_token(&c, &os, "*")?;
    // Another session, its streams included (family and top-level routes).
    all_403(
        &c,
        &token,
        &session_ops(&os2, &sid2),
        &denied("session", &os, "session", &os2),
    )
    .await?;
    // Not the session collection, not even of its own repository.
    all_403(
        &c,
        &token,
        &collection_ops(&repo),
        &denied("session", &os, "repo", &repo),
    )
    .await?;
    // Not the repository, a build, or their streams.
    let (_, rsid) = fresh_stream(&c, Scope::Repo).await?;
    let rs = c.get(&top_path(&rsid)).send().await?.json_status(200)?;
    let rid = rs["scope"]["repo"].as_str().unwrap_or_default().to_string();
    all_403(
        &c,
        &token,
        &stream_ops(Scope::Repo, &rid, &rsid),
        &denied("session", &os, "repo", &rid),
    )
    .await?;
    let (b, bsid) = fresh_stream(&c, Scope::Build).await?;
    all_403(
        &c,
        &token,
        &stream_ops(Scope::Build, &b, &bsid),
        &denied("session", &os, "build", &b),
    )
    .await?;
    c.get(&Res::Repo.path(&repo))
        .bearer(&token)
        .send()
        .await?
        .error_msg(403, "auth", &denied("session", &os, "repo", &repo))?;
    // Nothing was written to the other session.
    ensure!(
        session_events(&c, &os2, "").await?.len() == 1,
        "a refused write appended to another session"
    );
    Ok(())
}

async fn repo_token(c: Ctx) -> CheckResult {
    c.need_secret()?;
    let (repo, os, sid) = session_with_stream(&c).await?;
    let (other, _) = c.new_repo().await?;
    let token = c.mint(&resource_scope("repo", &repo, "*", c.exp_ms))?;
    all_ok(&c, &token, &collection_ops(&repo)).await?;
    all_403(
        &c,
        &token,
        &collection_ops(&other),
        &denied("repo", &repo, "repo", &other),
    )
    .await?;
    // Its repository's sessions are not its resources.
    all_403(
        &c,
        &token,
        &session_ops(&os, &sid),
        &denied("repo", &repo, "session", &os),
    )
    .await?;
    // Its own repository's streams are.
    let rsid = create_stream(&c, Scope::Repo, &repo, "r").await?["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    all_ok(&c, &token, &stream_ops(Scope::Repo, &repo, &rsid)).await?;
    Ok(())
}

async fn build_token(c: Ctx) -> CheckResult {
    c.need_secret()?;
    let (repo, os, sid) = session_with_stream(&c).await?;
    let (b, _) = c.new_build().await?;
    let token = c.mint(&resource_scope("build", &b, "*", c.exp_ms))?;
    all_403(
        &c,
        &token,
        &collection_ops(&repo),
        &denied("build", &b, "repo", &repo),
    )
    .await?;
    all_403(
        &c,
        &token,
        &session_ops(&os, &sid),
        &denied("build", &b, "session", &os),
    )
    .await?;
    let bsid = create_stream(&c, Scope::Build, &b, "b").await?["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    all_ok(&c, &token, &stream_ops(Scope::Build, &b, &bsid)).await?;
    Ok(())
}

async fn admin_deployment(c: Ctx) -> CheckResult {
    c.need_secret()?;
    for scope in [admin_scope(c.exp_ms), deployment_scope(c.exp_ms)] {
        let token = c.mint(&scope)?;
        let (repo, os, sid) = session_with_stream(&c).await?;
        all_ok(&c, &token, &collection_ops(&repo)).await?;
        all_ok(&c, &token, &session_ops(&os, &sid)).await?;
        for s in [Scope::Build, Scope::Repo] {
            let (id, sid) = fresh_stream(&c, s).await?;
            all_ok(&c, &token, &stream_ops(s, &id, &sid)).await?;
        }
    }
    Ok(())
}

// ── attribution and via on session events ───────────────────────────────────

async fn attribution_gate(c: Ctx) -> CheckResult {
    c.need_secret()?;
    let (_, os) = new_session(&c).await?;
    let token = session_token(&c, &os, "s_1")?;
    let p = session_path(&os);
    let mut agent = session_event("turnStarted");
    agent["actor"]["session"] = json!("s_1");
    let deposit = |ev: &Value| json!({"artifacts": [{"kind": "notes", "contentBase64": b64(b"n")}], "event": ev});
    let non_agent =
        "token scoped to session \"s_1\" may not write events attributed to a non-agent actor";
    let mut other_agent = agent.clone();
    other_agent["actor"]["session"] = json!("s_2");
    for (ev, msg) in [
        (session_event("messageHuman"), non_agent.to_string()),
        (session_event("wakeSetHuman"), non_agent.to_string()),
        (
            other_agent,
            "token scoped to session \"s_1\" may not write events attributed to session \"s_2\""
                .to_string(),
        ),
    ] {
        c.post(&format!("{p}/events"), &ev)
            .bearer(&token)
            .send()
            .await?
            .error_msg(403, "auth", &msg)?;
        c.post(&format!("{p}/deposits"), &deposit(&ev))
            .bearer(&token)
            .send()
            .await?
            .error_msg(403, "auth", &msg)?;
    }
    ensure!(
        session_events(&c, &os, "").await?.len() == 1,
        "attribution-refused writes appended events"
    );
    let env = c
        .post(&format!("{p}/events"), &agent)
        .bearer(&token)
        .send()
        .await?
        .json_status(201)?;
    ensure!(
        env["seq"] == json!(2),
        "own-agent append: expected seq 2; got {env}"
    );
    let v = c
        .post(&format!("{p}/deposits"), &deposit(&agent))
        .bearer(&token)
        .send()
        .await?
        .json_status(201)?;
    ensure!(
        v["event"]["seq"] == json!(3) && v["artifacts"][0]["revision"] == json!(0),
        "own-agent deposit after refused ones: expected seq 3 and notes revision 0; got {v}"
    );
    // Reads and standalone puts carry no attribution.
    c.get(&format!("{p}/events"))
        .bearer(&token)
        .send()
        .await?
        .status_is(200)?;
    c.post(
        &format!("{p}/artifacts"),
        &json!({"kind": "notes", "contentBase64": b64(b"x")}),
    )
    .bearer(&token)
    .send()
    .await?
    .status_is(201)?;
    Ok(())
}

/// Section 7, delegated-write attribution, applies to session resources too:
/// a human actor claiming a `via` the token does not carry is `403 auth`,
/// before catalog validation (which would reject any `via` on a session
/// event with `422`).
async fn via_unclaimed(c: Ctx) -> CheckResult {
    c.need_secret()?;
    let (_, os) = new_session(&c).await?;
    let p = session_path(&os);
    let plain = session_token(&c, &os, "*")?;
    let admin = c.mint(&admin_scope(c.exp_ms))?;
    for token in [&plain, &admin] {
        for via in [
            json!({"kind": "mcp", "client": "c"}),
            json!({"kind": "session", "id": "os_1"}),
        ] {
            let mut ev = session_event("messageHuman");
            ev["actor"]["via"] = via;
            c.post(&format!("{p}/events"), &ev)
                .bearer(token)
                .send()
                .await?
                .error(403, "auth")?;
            c.post(
                &format!("{p}/deposits"),
                &json!({"artifacts": [], "event": ev}),
            )
            .bearer(token)
            .send()
            .await?
            .error(403, "auth")?;
        }
    }
    ensure!(
        session_events(&c, &os, "").await?.len() == 1,
        "refused via writes appended events"
    );
    Ok(())
}

// ── streams ─────────────────────────────────────────────────────────────────

async fn toplevel_scope(c: Ctx) -> CheckResult {
    c.need_secret()?;
    for scope in Scope::ALL {
        let (id, sid) = fresh_stream(&c, scope).await?;
        let own = c.mint(&resource_scope(scope.key(), &id, "*", c.exp_ms))?;
        let sibling = scope.create(&c).await?;
        let (b, _) = c.new_build().await?;
        let (r, _) = c.new_repo().await?;
        let (_, os) = new_session(&c).await?;
        let tp = top_path(&sid);
        let ops = [
            Op::new("GET", tp.clone(), None, 200),
            Op::new("GET", format!("{tp}/chunks"), None, 200),
            Op::new(
                "POST",
                format!("{tp}/chunks"),
                Some(json!({"parts": [{"type": "start"}]})),
                201,
            ),
        ];
        for (kind, holder) in [
            (scope.key(), sibling.as_str()),
            ("build", b.as_str()),
            ("repo", r.as_str()),
            ("session", os.as_str()),
        ] {
            if kind == scope.key() && holder != sibling {
                continue;
            }
            let t = c.mint(&resource_scope(kind, holder, "*", c.exp_ms))?;
            all_403(&c, &t, &ops, &denied(kind, holder, scope.key(), &id)).await?;
            Op::new(
                "POST",
                format!("{tp}/close"),
                Some(json!({"outcome": "aborted"})),
                200,
            )
            .refused(&c, &t, &denied(kind, holder, scope.key(), &id))
            .await?;
            // Once the token verifies, an unknown stream is 404 whatever its scope.
            let unknown = format!("st_{}", crate::util::random_hex());
            c.get(&top_path(&unknown))
                .bearer(&t)
                .send()
                .await?
                .error_msg(404, "not-found", &unknown_stream_msg(&unknown))?;
        }
        let rd = read(&c, &tp, "").await?;
        ensure!(
            rd == json!({"chunks": [], "status": "open"}),
            "refused top-level writes changed the stream: {rd}"
        );
        all_ok(&c, &own, &ops).await?;
        Op::new(
            "POST",
            format!("{tp}/close"),
            Some(json!({"outcome": "completed"})),
            200,
        )
        .allowed(&c, &own)
        .await?;
    }
    Ok(())
}

async fn toplevel_401(c: Ctx) -> CheckResult {
    c.need_secret()?;
    let (_, sid) = fresh_stream(&c, Scope::Build).await?;
    let unknown = format!("st_{}", crate::util::random_hex());
    for s in [&sid, &unknown] {
        let tp = top_path(s);
        for (auth, msg) in [
            (None, "missing bearer token"),
            (Some("Bearer garbage.token"), "invalid or expired token"),
        ] {
            for (method, path, body) in [
                ("GET", tp.clone(), None),
                ("GET", format!("{tp}/chunks?wait=10"), None),
                ("POST", format!("{tp}/chunks"), Some(json!({"parts": []}))),
                (
                    "POST",
                    format!("{tp}/close"),
                    Some(json!({"outcome": "completed"})),
                ),
            ] {
                let mut call = c.call(method, &path).authorization(auth);
                if let Some(b) = body {
                    call = call.raw(b.to_string());
                }
                call.send().await?.error_msg(401, "auth", msg)?;
            }
        }
    }
    Ok(())
}

async fn family_gated(c: Ctx) -> CheckResult {
    c.need_secret()?;
    for scope in Scope::ALL {
        let (id, sid) = fresh_stream(&c, scope).await?;
        let (b, _) = c.new_build().await?;
        let token = c.mint(&resource_scope("build", &b, "*", c.exp_ms))?;
        if scope == Scope::Build {
            // A build token on another build.
            all_403(
                &c,
                &token,
                &stream_ops(scope, &id, &sid),
                &denied("build", &b, "build", &id),
            )
            .await?;
        } else {
            all_403(
                &c,
                &token,
                &stream_ops(scope, &id, &sid),
                &denied("build", &b, scope.key(), &id),
            )
            .await?;
        }
        // Authorization before lookup: an unknown stream (or resource) on a
        // family route the token does not cover is 403, not 404.
        let unknown = format!("st_{}", crate::util::random_hex());
        c.post(
            &format!("{}/chunks", stream_path(scope, &id, &unknown)),
            &json!({"parts": []}),
        )
        .bearer(&token)
        .send()
        .await?
        .error_msg(403, "auth", &denied("build", &b, scope.key(), &id))?;
        let missing = scope.unknown_id();
        c.get(&streams_path(scope, &missing))
            .bearer(&token)
            .send()
            .await?
            .error_msg(403, "auth", &denied("build", &b, scope.key(), &missing))?;
        let list = c
            .get(&streams_path(scope, &id))
            .send()
            .await?
            .json_status(200)?;
        ensure!(
            list.as_array().map(Vec::len) == Some(1) && list[0]["status"] == json!("open"),
            "refused stream writes changed the {} streams: {list}",
            scope.key()
        );
    }
    Ok(())
}

async fn no_attribution(c: Ctx) -> CheckResult {
    c.need_secret()?;
    for scope in Scope::ALL {
        let id = scope.create(&c).await?;
        let t = c.scoped(&resource_scope(scope.key(), &id, "s_1", c.exp_ms))?;
        let rec = create_stream(&t, scope, &id, "agent s_1").await?;
        let sid = rec["id"].as_str().unwrap_or_default().to_string();
        append(&t, &top_path(&sid), &json!([{"type": "start"}])).await?;
        append(
            &t,
            &stream_path(scope, &id, &sid),
            &json!([{"type": "finish"}]),
        )
        .await?;
        close(&t, &top_path(&sid), "completed").await?;
        read(&t, &stream_path(scope, &id, &sid), "").await?;
    }
    Ok(())
}

// ── no mutation; held reads ─────────────────────────────────────────────────

async fn no_mutation(c: Ctx) -> CheckResult {
    c.need_secret()?;
    let (repo, os, sid) = session_with_stream(&c).await?;
    let (_, other) = new_session(&c).await?;
    let wrong = session_token(&c, &other, "*")?;
    let p = session_path(&os);
    let writes = [
        (format!("{p}/events"), session_event("messageHuman")),
        (
            format!("{p}/artifacts"),
            json!({"kind": "notes", "contentBase64": b64(b"a")}),
        ),
        (
            format!("{p}/deposits"),
            json!({"artifacts": [{"kind": "notes", "contentBase64": b64(b"d")}], "event": session_event("messageHuman")}),
        ),
        (format!("{p}/streams"), json!({"label": "x"})),
        (
            format!("{p}/streams/{sid}/chunks"),
            json!({"parts": [{"type": "start"}]}),
        ),
        (
            format!("{}/chunks", top_path(&sid)),
            json!({"parts": [{"type": "start"}]}),
        ),
        (
            format!("{p}/streams/{sid}/close"),
            json!({"outcome": "completed"}),
        ),
        (
            format!("{}/close", top_path(&sid)),
            json!({"outcome": "completed"}),
        ),
        (
            sessions_path(&repo),
            json!({"repo": repo, "operator": "mallory"}),
        ),
    ];
    for (path, body) in &writes {
        for (auth, status) in [
            (None, 401),
            (Some("Bearer garbage.token".to_string()), 401),
            (Some(format!("Bearer {wrong}")), 403),
        ] {
            c.post(path, body)
                .authorization(auth.as_deref())
                .send()
                .await?
                .error(status, "auth")?;
        }
    }
    ensure!(
        session_events(&c, &os, "").await?.len() == 1,
        "a refused write appended a session event"
    );
    let arts = c
        .get(&format!("{p}/artifact-list"))
        .send()
        .await?
        .json_status(200)?;
    ensure!(
        arts == json!([]),
        "a refused write exposed artifacts: {arts}"
    );
    let streams = c
        .get(&format!("{p}/streams"))
        .send()
        .await?
        .json_status(200)?;
    ensure!(
        streams.as_array().map(Vec::len) == Some(1) && streams[0]["status"] == json!("open"),
        "a refused write created or closed a stream: {streams}"
    );
    let rd = read(&c, &top_path(&sid), "").await?;
    ensure!(
        rd["chunks"] == json!([]),
        "a refused append wrote a chunk: {rd}"
    );
    let sessions = c
        .get(&sessions_path(&repo))
        .send()
        .await?
        .json_status(200)?;
    ensure!(
        sessions.as_array().map(Vec::len) == Some(1),
        "a refused create made a session: {sessions}"
    );
    Ok(())
}

async fn held_refused(c: Ctx) -> CheckResult {
    c.need_secret()?;
    let (_, os, sid) = session_with_stream(&c).await?;
    let (_, other) = new_session(&c).await?;
    let wrong = session_token(&c, &other, "*")?;
    let limit = Duration::from_secs(5);
    let paths = [
        format!("{}/events?since=1&wait=20", session_path(&os)),
        format!("{}/chunks?since=0&wait=20", top_path(&sid)),
        format!(
            "{}/chunks?since=0&wait=20",
            stream_path(Scope::Session, &os, &sid)
        ),
    ];
    for path in &paths {
        for (what, auth, status) in [
            ("no token", None, 401),
            ("a bad token", Some("Bearer garbage.token".to_string()), 401),
            ("a wrong-scope token", Some(format!("Bearer {wrong}")), 403),
        ] {
            let r = c.get(path).authorization(auth.as_deref()).send().await?;
            r.error(status, "auth")?;
            ensure!(
                r.elapsed < limit,
                "GET {path} with {what} answered after {:?}; expected at once",
                r.elapsed
            );
        }
    }
    Ok(())
}
