//! What protocol 3 (Autobuild 0.9.0) adds (docs/protocol-versions.md), but
//! for ticket assets, whose checks are [`super::ticket_assets`]: the
//! session compare-and-append
//! (`POST /sessions/{id}/events/conditional`), build digests
//! (`GET /repos/{repo}/build-digests`) and the bounded journal read
//! (`GET /repos/{repo}/state-events`), with their token cells. Every id
//! starts with `p3.`; the checks are registered for protocol 3, so a run
//! speaking protocol 2 leaves them out ([`super::checks_for`]).

use serde_json::{Value, json};

use super::sessions::{new_session, session_events, session_path, unknown_session_msg};
use super::{CheckResult, Registry};
use crate::client::{Ctx, Res, same, shape};
use crate::ensure;
use crate::fixtures::catalog_event;
use crate::token::{deployment_scope, resource_scope};
use crate::util::{enc, unique};

pub fn register(r: &mut Registry) {
    r.add(
        "p3.s5.session_conditional.appends_when_current",
        "5",
        session_current,
    );
    r.add(
        "p3.s5.session_conditional.stale_is_null_and_changes_nothing",
        "5",
        session_stale,
    );
    r.add(
        "p3.s5.session_conditional.validates_even_when_stale",
        "5",
        session_validates,
    );
    r.add(
        "p3.s5.session_conditional.bad_expected_seq_400",
        "5",
        session_bad_seq,
    );
    r.add(
        "p3.s5.session_conditional.unknown_session_404",
        "5",
        session_unknown,
    );
    r.add(
        "p3.s5.session_conditional.one_of_racers_wins",
        "5",
        session_race,
    );
    r.add("p3.s4.build_digests.derived_by_slug", "4", digests_derived);
    r.add(
        "p3.s4.build_digests.no_existence_gate",
        "4",
        digests_unknown,
    );
    r.add(
        "p3.s4.state_events.durable_only_without_anchor",
        "4",
        state_no_anchor,
    );
    r.add(
        "p3.s4.state_events.tail_from_latest_anchor",
        "4",
        state_anchor,
    );
    r.add("p3.s4.state_events.unknown_repo_404", "4", state_unknown);
    r.add("p3.s7.derived_reads.token_matrix", "7", derived_matrix);
    r.add(
        "p3.s7.session_conditional.session_family_cells",
        "7",
        session_cells,
    );
}

// ── helpers ──────────────────────────────────────────────────────────────────

fn conditional_path(os: &str) -> String {
    format!("{}/events/conditional", session_path(os))
}

fn digests_path(repo: &str) -> String {
    format!("/repos/{}/build-digests", enc(repo))
}

fn state_path(repo: &str) -> String {
    format!("/repos/{}/state-events", enc(repo))
}

/// A human's `message.posted` in Autobuild 0.9.0's session catalog
/// (`{text}`), the catalog protocol-3 clients are served.
fn message(n: usize) -> Value {
    json!({
        "actor": {"kind": "human", "user": "alice"},
        "type": "message.posted",
        "payload": {"text": format!("p3 message {n}")}
    })
}

/// `GET` a JSON array (expects 200).
async fn array(c: &Ctx, path: &str) -> Result<Vec<Value>, String> {
    let r = c.get(path).send().await?;
    let v = r.json_status(200)?;
    v.as_array().cloned().ok_or_else(|| r.fail("a JSON array"))
}

/// A build of `repo` (expects 201).
async fn build_of(c: &Ctx, slug: &str, repo: &str) -> Result<(), String> {
    c.post("/builds", &json!({"slug": slug, "repo": repo}))
        .send()
        .await?
        .json_status(201)?;
    Ok(())
}

/// Append a catalog fixture's event (as its writer in this mode).
async fn append_fixture(
    c: &Ctx,
    res: Res,
    id: &str,
    family: &str,
    ty: &str,
    file: &str,
) -> Result<Value, super::Failure> {
    let event = catalog_event(&c.catalog_set(), family, ty, file);
    let writer = c
        .writer_for(&event)?
        .ok_or_else(|| format!("fixture {family}/{ty}/{file} has no writer"))?;
    Ok(writer.append(res, id, &event).await?)
}

fn seq_ts(envelope: &Value) -> Value {
    json!({"seq": envelope["seq"], "ts": envelope["ts"]})
}

// ── session compare-and-append ───────────────────────────────────────────────

async fn session_current(c: Ctx) -> CheckResult {
    let (_, os) = new_session(&c).await?;
    let r = c
        .post(
            &conditional_path(&os),
            &json!({"expectedSeq": 1, "event": message(1)}),
        )
        .send()
        .await?;
    let env = r.json_status(201)?;
    shape(
        "the envelope",
        &env,
        &["session", "seq", "ts", "actor", "type", "payload"],
        &[],
    )?;
    same("session", &env["session"], &json!(os))?;
    same("seq", &env["seq"], &json!(2))?;
    let events = session_events(&c, &os, "").await?;
    same("the stored envelope", &events[1], &env)?;
    Ok(())
}

async fn session_stale(c: Ctx) -> CheckResult {
    let (_, os) = new_session(&c).await?;
    let before = c.get(&session_path(&os)).send().await?.json_status(200)?;
    for expected in [0, 2, 7] {
        let r = c
            .post(
                &conditional_path(&os),
                &json!({"expectedSeq": expected, "event": message(expected)}),
            )
            .send()
            .await?;
        same(
            &format!("expectedSeq {expected} on a log at 1"),
            &r.json_status(200)?,
            &Value::Null,
        )?;
    }
    let events = session_events(&c, &os, "").await?;
    ensure!(
        events.len() == 1,
        "a stale conditional append appended: {} events",
        events.len()
    );
    let after = c.get(&session_path(&os)).send().await?.json_status(200)?;
    same("the record after stale appends", &after, &before)?;
    // No sequence consumed: the next append is 2.
    let r = c
        .post(
            &conditional_path(&os),
            &json!({"expectedSeq": 1, "event": message(9)}),
        )
        .send()
        .await?;
    same("seq", &r.json_status(201)?["seq"], &json!(2))?;
    Ok(())
}

async fn session_validates(c: Ctx) -> CheckResult {
    let (_, os) = new_session(&c).await?;
    let mut invalid = message(1);
    invalid["type"] = json!("no.such-type");
    let r = c
        .post(
            &conditional_path(&os),
            &json!({"expectedSeq": 5, "event": invalid}),
        )
        .send()
        .await?;
    r.e422()?;
    ensure!(
        session_events(&c, &os, "").await?.len() == 1,
        "a refused write appended"
    );
    Ok(())
}

async fn session_bad_seq(c: Ctx) -> CheckResult {
    let (_, os) = new_session(&c).await?;
    for body in [
        json!({"expectedSeq": -1, "event": message(1)}),
        json!({"expectedSeq": "1", "event": message(1)}),
        json!({"expectedSeq": 1.5, "event": message(1)}),
        json!({"event": message(1)}),
    ] {
        c.post(&conditional_path(&os), &body).send().await?.e400()?;
    }
    ensure!(
        session_events(&c, &os, "").await?.len() == 1,
        "a refused write appended"
    );
    Ok(())
}

async fn session_unknown(c: Ctx) -> CheckResult {
    let os = super::sessions::unknown_session_id();
    c.post(
        &conditional_path(&os),
        &json!({"expectedSeq": 1, "event": message(1)}),
    )
    .send()
    .await?
    .error_msg(404, "not-found", &unknown_session_msg(&os))?;
    Ok(())
}

async fn session_race(c: Ctx) -> CheckResult {
    let (_, os) = new_session(&c).await?;
    let racers: Vec<_> = (0..8)
        .map(|n| {
            let (c, path) = (c.clone(), conditional_path(&os));
            tokio::spawn(async move {
                let r = c
                    .post(&path, &json!({"expectedSeq": 1, "event": message(n)}))
                    .send()
                    .await?;
                match r.status {
                    201 => Ok(true),
                    200 => {
                        same("a losing racer", &r.json_status(200)?, &Value::Null)?;
                        Ok(false)
                    }
                    _ => Err(r.fail("201 or 200 null")),
                }
            })
        })
        .collect();
    let mut won = 0;
    for racer in racers {
        let outcome: Result<bool, String> =
            racer.await.map_err(|e| format!("racer panicked: {e}"))?;
        won += usize::from(outcome?);
    }
    ensure!(won == 1, "{won} of 8 racers on expectedSeq 1 appended");
    ensure!(
        session_events(&c, &os, "").await?.len() == 2,
        "expected exactly one append"
    );
    Ok(())
}

// ── build digests ────────────────────────────────────────────────────────────

async fn digests_derived(c: Ctx) -> CheckResult {
    let (repo, _) = c.new_repo().await?;
    let (other, _) = c.new_repo().await?;
    let base = unique("dg");
    let (a, b, z) = (
        format!("{base}-a"),
        format!("{base}-b"),
        format!("{base}-z"),
    );
    // Created out of slug order; one build of another repository.
    for slug in [&z, &a, &b] {
        build_of(&c, slug, &repo).await?;
    }
    build_of(&c, &format!("{base}-other"), &other).await?;
    let obs = |c: &Ctx, slug: &str| {
        let (c, slug) = (c.clone(), slug.to_owned());
        async move {
            append_fixture(
                &c,
                Res::Build,
                &slug,
                "build",
                "observation.recorded",
                "valid-kernel.json",
            )
            .await
        }
    };
    let o1 = obs(&c, &a).await?;
    append_fixture(
        &c,
        Res::Build,
        &a,
        "build",
        "build.completed",
        "valid-dispatcher.json",
    )
    .await?;
    let o2 = obs(&c, &a).await?;
    append_fixture(
        &c,
        Res::Build,
        &a,
        "build",
        "pr.merged",
        "valid-dispatcher.json",
    )
    .await?;
    append_fixture(
        &c,
        Res::Build,
        &a,
        "build",
        "build.aborted",
        "valid-kernel.json",
    )
    .await?;
    let m2 = append_fixture(
        &c,
        Res::Build,
        &a,
        "build",
        "pr.merged",
        "valid-dispatcher.json",
    )
    .await?;
    append_fixture(
        &c,
        Res::Build,
        &z,
        "build",
        "build.completed",
        "valid-dispatcher.json",
    )
    .await?;
    obs(&c, &format!("{base}-other")).await?;

    let got = array(&c, &digests_path(&repo)).await?;
    let want = vec![
        json!({
            "slug": a,
            "terminal": "aborted",
            "observations": [seq_ts(&o1), seq_ts(&o2)],
            "merged": m2["ts"],
        }),
        json!({"slug": b, "observations": []}),
        json!({"slug": z, "terminal": "done", "observations": []}),
    ];
    same(
        "the digests",
        &Value::Array(got.clone()),
        &Value::Array(want),
    )?;
    for d in &got {
        for key in ["terminal", "merged"] {
            ensure!(
                d.get(key) != Some(&Value::Null),
                "{key} is null in {d}: absent members are omitted"
            );
        }
    }
    Ok(())
}

async fn digests_unknown(c: Ctx) -> CheckResult {
    let unknown = format!("{}/none", unique("acme"));
    same(
        "digests of an unknown repository",
        &Value::Array(array(&c, &digests_path(&unknown)).await?),
        &json!([]),
    )?;
    let (repo, _) = c.new_repo().await?;
    same(
        "digests of a repository without builds",
        &Value::Array(array(&c, &digests_path(&repo)).await?),
        &json!([]),
    )?;
    Ok(())
}

// ── state events ─────────────────────────────────────────────────────────────

/// Append repository fixtures by short name; returns their envelopes.
async fn journal(c: &Ctx, repo: &str, names: &[&str]) -> Result<Vec<Value>, super::Failure> {
    let mut out = Vec::new();
    for name in names {
        let (ty, file) = match *name {
            "tick" => ("dispatcher.tick-started", "valid-dispatcher.json"),
            "run" => ("dispatcher.run-started", "valid-dispatcher.json"),
            "harvest" => ("harvest.started", "valid-kernel.json"),
            "pause" => ("dispatcher.pause-set", "valid-human.json"),
            "intake" => ("dispatcher.intake-set", "valid-human.json"),
            "reloaded" => ("dispatcher.config-reloaded", "valid-dispatcher.json"),
            other => return Err(format!("no journal fixture {other}").into()),
        };
        out.push(append_fixture(c, Res::Repo, repo, "repository", ty, file).await?);
    }
    Ok(out)
}

fn seqs(events: &[Value]) -> Vec<i64> {
    events
        .iter()
        .map(|e| e["seq"].as_i64().unwrap_or(-1))
        .collect()
}

async fn state_no_anchor(c: Ctx) -> CheckResult {
    let (repo, _) = c.new_repo().await?;
    same(
        "state events of an empty journal",
        &Value::Array(array(&c, &state_path(&repo)).await?),
        &json!([]),
    )?;
    let written = journal(
        &c,
        &repo,
        &["tick", "harvest", "reloaded", "pause", "tick", "intake"],
    )
    .await?;
    let got = array(&c, &state_path(&repo)).await?;
    ensure!(
        seqs(&got) == [2, 4, 6],
        "without dispatcher.run-started only durable types: expected seqs [2, 4, 6], got {:?}",
        seqs(&got)
    );
    for e in &got {
        let i = usize::try_from(e["seq"].as_i64().unwrap_or(0) - 1).unwrap_or(0);
        same("a state event", e, &written[i])?;
    }
    Ok(())
}

async fn state_anchor(c: Ctx) -> CheckResult {
    let (repo, _) = c.new_repo().await?;
    journal(
        &c,
        &repo,
        &[
            "tick", "harvest", "run", "tick", "pause", "reloaded", "run", "tick", "intake",
            "reloaded",
        ],
    )
    .await?;
    let got = array(&c, &state_path(&repo)).await?;
    // Durable 2 and 5 before the latest anchor (7); everything from 7 on.
    ensure!(
        seqs(&got) == [2, 5, 7, 8, 9, 10],
        "expected seqs [2, 5, 7, 8, 9, 10] (durable, then from the latest dispatcher.run-started), got {:?}",
        seqs(&got)
    );
    let all = c.events(Res::Repo, &repo, "").await?;
    for e in &got {
        let i = usize::try_from(e["seq"].as_i64().unwrap_or(0) - 1).unwrap_or(0);
        same("a state event (as GET events serves it)", e, &all[i])?;
    }
    Ok(())
}

async fn state_unknown(c: Ctx) -> CheckResult {
    let unknown = format!("{}/none", unique("acme"));
    c.get(&state_path(&unknown)).send().await?.error_msg(
        404,
        "not-found",
        &Res::Repo.unknown_msg(&unknown),
    )?;
    Ok(())
}

// ── token cells ──────────────────────────────────────────────────────────────

async fn derived_matrix(c: Ctx) -> CheckResult {
    c.need_secret()?;
    let (repo, _) = c.new_repo().await?;
    let (other, _) = c.new_repo().await?;
    let (slug, _) = c.new_build().await?;
    let (_, os) = new_session(&c).await?;
    let allowed = [
        ("admin", c.clone()),
        ("deployment", c.scoped(&deployment_scope(c.exp_ms))?),
        (
            "its repository's token",
            c.scoped(&resource_scope("repo", &repo, "*", c.exp_ms))?,
        ),
    ];
    let refused = [
        (
            "another repository's token",
            c.scoped(&resource_scope("repo", &other, "*", c.exp_ms))?,
        ),
        (
            "a build token",
            c.scoped(&resource_scope("build", &slug, "*", c.exp_ms))?,
        ),
        (
            "a session token",
            c.scoped(&resource_scope("session", &os, "*", c.exp_ms))?,
        ),
    ];
    for path in [digests_path(&repo), state_path(&repo)] {
        for (who, ctx) in &allowed {
            let r = ctx.get(&path).send().await?;
            ensure!(r.status == 200, "{who} on GET {path}: {}", r.fail("200"));
        }
        for (who, ctx) in &refused {
            let r = ctx.get(&path).send().await?;
            r.error(403, "auth").map_err(|e| format!("{who}: {e}"))?;
        }
        let r = c.get(&path).no_auth().send().await?;
        r.error(401, "auth").map_err(|e| format!("no token: {e}"))?;
    }
    Ok(())
}

async fn session_cells(c: Ctx) -> CheckResult {
    c.need_secret()?;
    let (repo, os) = new_session(&c).await?;
    let (_, os2) = new_session(&c).await?;
    let body = |n| json!({"expectedSeq": 1, "event": message(n)});
    let refused = [
        (
            "another session's token",
            c.scoped(&resource_scope("session", &os2, "*", c.exp_ms))?,
        ),
        (
            "its repository's token",
            c.scoped(&resource_scope("repo", &repo, "*", c.exp_ms))?,
        ),
    ];
    for (who, ctx) in &refused {
        let r = ctx.post(&conditional_path(&os), &body(1)).send().await?;
        r.error(403, "auth").map_err(|e| format!("{who}: {e}"))?;
    }
    let own = c.scoped(&resource_scope("session", &os, "*", c.exp_ms))?;
    own.post(&conditional_path(&os), &body(2))
        .send()
        .await?
        .json_status(201)?;
    ensure!(
        session_events(&c, &os, "").await?.len() == 2,
        "refused writes appended"
    );
    Ok(())
}
