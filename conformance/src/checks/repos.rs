//! Section 4, repository journals: ensureRepo (200, idempotent, never resets
//! state), getRepo, no list route, no conditional append, and the append and
//! event-read rules shared with section 3.

use serde_json::{Value, json};

use super::{CheckResult, Registry, builds};
use crate::client::{Ctx, Res, same, shape, time_of};
use crate::ensure;
use crate::util::{enc, unique};

const REPO_KEYS: [&str; 5] = ["repo", "createdAt", "updatedAt", "lease", "heartbeatAt"];

pub fn register(r: &mut Registry) {
    r.add("s4.ensure.status_200_and_shape", "4", ensure_shape);
    r.add(
        "s4.ensure.idempotent_returns_existing",
        "4",
        ensure_idempotent,
    );
    r.add(
        "s4.ensure.preserves_events_artifacts_lease",
        "4",
        ensure_preserves,
    );
    r.add("s4.ensure.unknown_keys_ignored", "4", ensure_unknown_keys);
    let bad: [(&str, Value); 5] = [
        ("missing_repo", json!({})),
        ("empty_repo", json!({"repo": ""})),
        ("repo_not_string", json!({"repo": 12})),
        ("body_array", json!(["acme/x"])),
        ("body_string", json!("acme/x")),
    ];
    for (name, body) in bad {
        r.add(format!("s4.ensure.rejects_{name}"), "4", move |c| {
            ensure_rejects(c, body.clone())
        });
    }
    r.add("s4.list.no_route", "4", no_list);
    r.add("s4.get.record_matches_ensure", "4", get_matches);
    r.add("s4.get.unknown_404", "4", |c| {
        builds::get_unknown(c, Res::Repo)
    });
    r.add("s4.cond.no_route", "4", no_conditional);
    r.add(
        "s4.append.independent_of_builds",
        "4",
        independent_of_builds,
    );
    builds::register_stream_checks(r, Res::Repo);
}

async fn ensure_shape(c: Ctx) -> CheckResult {
    let id = format!("{}/widgets", unique("acme"));
    let r = c.post("/repos", &json!({"repo": id})).send().await?;
    let rec = r.json_status(200)?;
    shape(
        "RepositoryRecord",
        &rec,
        &["repo", "createdAt", "updatedAt"],
        &REPO_KEYS,
    )?;
    ensure!(
        rec["repo"] == json!(id),
        "{}",
        r.fail(format!("repo {id:?}"))
    );
    let created = time_of("RepositoryRecord", &rec, "createdAt")?;
    let updated = time_of("RepositoryRecord", &rec, "updatedAt")?;
    ensure!(
        created == updated,
        "{}",
        r.fail("createdAt == updatedAt on a new repository")
    );
    ensure!(
        rec.get("lease").is_none() && rec.get("heartbeatAt").is_none(),
        "{}",
        r.fail("no lease/heartbeatAt")
    );
    Ok(())
}

async fn ensure_idempotent(c: Ctx) -> CheckResult {
    let (id, first) = c.new_repo().await?;
    let r = c.post("/repos", &json!({"repo": id})).send().await?;
    let second = r.json_status(200)?;
    same(
        &format!("second ensureRepo (sent {})", r.sent),
        &second,
        &first,
    )?;
    Ok(())
}

async fn ensure_preserves(c: Ctx) -> CheckResult {
    let (id, _) = c.new_repo().await?;
    c.append_n(Res::Repo, &id, 2).await?;
    c.put_artifact(Res::Repo, &id, "notes", b"kept", None)
        .await?;
    ensure!(
        c.claim(Res::Repo, &id, "harvest-1", 3_600_000).await?,
        "claim on a fresh repo returned false"
    );
    let before = c.record(Res::Repo, &id).await?;
    let r = c.post("/repos", &json!({"repo": id})).send().await?;
    let again = r.json_status(200)?;
    same(
        "ensureRepo on an existing repo (must return it unchanged)",
        &again,
        &before,
    )?;
    same(
        "getRepo after ensureRepo",
        &c.record(Res::Repo, &id).await?,
        &before,
    )?;
    let seqs = c.seqs(Res::Repo, &id).await?;
    ensure!(
        seqs == vec![1, 2],
        "events after ensureRepo: expected seqs [1, 2]; got {seqs:?}"
    );
    let list = c.list_artifacts(Res::Repo, &id, "").await?;
    ensure!(
        list.len() == 1,
        "artifacts after ensureRepo: expected 1; got {list:?}"
    );
    ensure!(
        !c.claim(Res::Repo, &id, "harvest-2", 1000).await?,
        "lease was reset by ensureRepo"
    );
    let env = c.append(Res::Repo, &id, &Res::Repo.simple_event()).await?;
    ensure!(
        env["seq"] == json!(3),
        "next append after ensureRepo: expected seq 3; got {}",
        env["seq"]
    );
    Ok(())
}

async fn ensure_unknown_keys(c: Ctx) -> CheckResult {
    let id = format!("{}/w", unique("acme"));
    let r = c
        .post(
            "/repos",
            &json!({"repo": id, "owner": "alice", "lease": {"holder": "x"}}),
        )
        .send()
        .await?;
    let rec = r.json_status(200)?;
    shape(
        "RepositoryRecord",
        &rec,
        &["repo", "createdAt", "updatedAt"],
        &["repo", "createdAt", "updatedAt"],
    )?;
    Ok(())
}

async fn ensure_rejects(c: Ctx, body: Value) -> CheckResult {
    c.post("/repos", &body).send().await?.e400()?;
    Ok(())
}

async fn no_list(c: Ctx) -> CheckResult {
    let r = c.get("/repos").send().await?;
    r.error_msg(404, "not-found", "no route: GET /repos")?;
    Ok(())
}

async fn get_matches(c: Ctx) -> CheckResult {
    let (id, rec) = c.new_repo().await?;
    same(
        "GET /repos/{repo} vs ensureRepo response",
        &c.record(Res::Repo, &id).await?,
        &rec,
    )?;
    Ok(())
}

async fn no_conditional(c: Ctx) -> CheckResult {
    let (id, _) = c.new_repo().await?;
    let body = json!({"expectedSeq": 0, "event": Res::Repo.simple_event()});
    let r = c
        .post(&format!("/repos/{}/events/conditional", enc(&id)), &body)
        .send()
        .await?;
    let msg = r.e404()?;
    ensure!(
        msg.starts_with("no route: POST "),
        "{}",
        r.fail("404 `no route: POST …` (repositories have no conditional append)")
    );
    ensure!(
        c.seqs(Res::Repo, &id).await?.is_empty(),
        "the unrouted request appended an event"
    );
    Ok(())
}

async fn independent_of_builds(c: Ctx) -> CheckResult {
    let name = format!("{}/same-name", unique("acme"));
    c.post("/builds", &json!({"slug": name, "repo": name}))
        .send()
        .await?
        .json_status(201)?;
    c.post("/repos", &json!({"repo": name}))
        .send()
        .await?
        .json_status(200)?;
    c.append_n(Res::Build, &name, 2).await?;
    let env = c
        .append(Res::Repo, &name, &Res::Repo.simple_event())
        .await?;
    ensure!(
        env["seq"] == json!(1),
        "repository sequence must be independent of a same-named build: expected 1; got {}",
        env["seq"]
    );
    c.put_artifact(Res::Build, &name, "notes", b"build", None)
        .await?;
    let meta = c
        .put_artifact(Res::Repo, &name, "notes", b"repo", None)
        .await?;
    ensure!(
        meta["revision"] == json!(0),
        "repository artifact revisions must be independent of builds: got {meta}"
    );
    ensure!(
        c.claim(Res::Build, &name, "a", 3_600_000).await?,
        "build claim returned false"
    );
    ensure!(
        c.claim(Res::Repo, &name, "b", 3_600_000).await?,
        "repository lease must be independent of a same-named build's lease"
    );
    Ok(())
}
