//! Section 9 (and the actor rules of section 2): the exact error shape, invalid
//! JSON and body-schema 400s, unknown routes and methods, verbatim 422 catalog
//! messages, validation order, and no mutation on rejected writes.

use serde_json::json;

use super::{CheckResult, Registry};
use crate::client::{Ctx, Res, same};
use crate::ensure;
use crate::fixtures::{
    InvalidCase, build_event, invalid_build, invalid_build_names, invalid_repo, invalid_repo_names,
};
use crate::util::enc;

pub fn register(r: &mut Registry) {
    r.add("s9.json.invalid_json_create_build", "9", |c| {
        invalid_json(c, "/builds".into(), "{\"slug\":")
    });
    r.add("s9.json.invalid_json_ensure_repo", "9", |c| {
        invalid_json(c, "/repos".into(), "repo=x")
    });
    r.add("s9.json.empty_body", "9", |c| {
        invalid_json(c, "/builds".into(), "")
    });
    r.add("s9.json.trailing_garbage", "9", |c| {
        invalid_json(
            c,
            "/builds".into(),
            "{\"slug\":\"conf-trailing\",\"repo\":\"a/b\"} x",
        )
    });
    r.add("s9.json.invalid_json_append", "9", invalid_json_append);
    r.add("s9.json.invalid_json_artifact_put", "9", invalid_json_put);

    for (name, body) in [
        (
            "type_missing",
            json!({"actor": {"kind": "kernel"}, "payload": {}}),
        ),
        (
            "type_empty",
            json!({"actor": {"kind": "kernel"}, "type": "", "payload": {}}),
        ),
        (
            "type_not_string",
            json!({"actor": {"kind": "kernel"}, "type": 5, "payload": {}}),
        ),
        ("body_array", json!([])),
        ("body_string", json!("observation.recorded")),
    ] {
        for res in [Res::Build, Res::Repo] {
            let body = body.clone();
            r.add(
                format!("s9.schema.event_{name}_{}", res.key()),
                "9",
                move |c| event_schema(c, res, body.clone()),
            );
        }
    }

    r.add("s9.route.get_nope", "9", |c| {
        no_route(c, "GET", "/nope", Some("no route: GET /nope"))
    });
    r.add("s9.route.delete_builds", "9", |c| {
        no_route(c, "DELETE", "/builds", Some("no route: DELETE /builds"))
    });
    r.add("s9.route.put_repos", "9", |c| {
        no_route(c, "PUT", "/repos", Some("no route: PUT /repos"))
    });
    r.add("s9.route.post_health", "9", |c| {
        no_route(c, "POST", "/health", None)
    });
    r.add("s9.route.unknown_build_subroute", "9", |c| {
        resource_no_route(c, Res::Build, "GET", "nope")
    });
    r.add("s9.route.unknown_repo_subroute", "9", |c| {
        resource_no_route(c, Res::Repo, "GET", "nope")
    });
    r.add("s9.route.delete_build", "9", |c| {
        resource_no_route(c, Res::Build, "DELETE", "")
    });
    r.add("s9.route.get_on_post_only_route", "9", |c| {
        resource_no_route(c, Res::Build, "GET", "lease/claim")
    });
    r.add("s9.route.post_on_get_only_route", "9", |c| {
        resource_no_route(c, Res::Repo, "POST", "artifact-list")
    });

    for name in invalid_build_names() {
        r.add(format!("s9.catalog.build_{name}"), "9", move |c| {
            catalog_case(c, Res::Build, invalid_build(&name))
        });
    }
    for name in invalid_repo_names() {
        r.add(format!("s9.catalog.repo_{name}"), "9", move |c| {
            catalog_case(c, Res::Repo, invalid_repo(&name))
        });
    }
    r.add("s2.actor.human_via_session_accepted", "2", |c| {
        via_ok(c, "pauseRequestedViaSession")
    });
    r.add("s2.actor.human_via_mcp_accepted", "2", |c| {
        via_ok(c, "pauseRequestedViaMcp")
    });
    r.add(
        "s2.actor.agent_and_optional_payload_fields",
        "2",
        agent_optional,
    );
    r.add("s2.actor.repo_human_via_accepted", "2", repo_via_ok);
    r.add(
        "s9.catalog.rejected_append_writes_nothing",
        "9",
        rejected_writes_nothing,
    );

    r.add("s9.order.unknown_build_before_body", "9", |c| {
        unknown_before_body(c, Res::Build)
    });
    r.add("s9.order.unknown_repo_before_body", "9", |c| {
        unknown_before_body(c, Res::Repo)
    });
    r.add(
        "s9.order.body_schema_before_catalog",
        "9",
        schema_before_catalog,
    );
}

async fn invalid_json(c: Ctx, path: String, body: &'static str) -> CheckResult {
    let r = c.post_raw(&path, body).send().await?;
    r.error_msg(400, "validation", "request body is not valid JSON")?;
    Ok(())
}

async fn invalid_json_append(c: Ctx) -> CheckResult {
    let (slug, _) = c.new_build().await?;
    invalid_json(
        c.clone(),
        format!("/builds/{}/events", enc(&slug)),
        "{\"actor\": {\"kind\": \"kernel\"},",
    )
    .await?;
    ensure!(
        c.seqs(Res::Build, &slug).await?.is_empty(),
        "an invalid-JSON append wrote an event"
    );
    Ok(())
}

async fn invalid_json_put(c: Ctx) -> CheckResult {
    let (id, _) = c.new_repo().await?;
    invalid_json(
        c.clone(),
        format!("/repos/{}/artifacts", enc(&id)),
        "{kind: plan}",
    )
    .await?;
    Ok(())
}

async fn event_schema(c: Ctx, res: Res, body: serde_json::Value) -> CheckResult {
    let id = c.create(res).await?;
    c.post(&format!("{}/events", res.path(&id)), &body)
        .send()
        .await?
        .e400()?;
    ensure!(
        c.seqs(res, &id).await?.is_empty(),
        "a 400-rejected append wrote an event"
    );
    Ok(())
}

async fn no_route(
    c: Ctx,
    method: &'static str,
    path: &'static str,
    exact: Option<&'static str>,
) -> CheckResult {
    let r = c.call(method, path).raw("{}").send().await?;
    let msg = r.e404()?;
    let want = exact
        .map(str::to_string)
        .unwrap_or_else(|| format!("no route: {method} {path}"));
    ensure!(
        if exact.is_some() {
            msg == want
        } else {
            msg.starts_with(&format!("no route: {method} "))
        },
        "{}",
        r.fail(format!("404 with error {want:?}"))
    );
    Ok(())
}

async fn resource_no_route(
    c: Ctx,
    res: Res,
    method: &'static str,
    tail: &'static str,
) -> CheckResult {
    let id = c.create(res).await?;
    let path = if tail.is_empty() {
        res.path(&id)
    } else {
        format!("{}/{tail}", res.path(&id))
    };
    let r = c.call(method, &path).raw("{}").send().await?;
    let msg = r.e404()?;
    ensure!(
        msg.starts_with(&format!("no route: {method} ")),
        "{}",
        r.fail(format!("404 `no route: {method} …`"))
    );
    c.record(res, &id).await?;
    Ok(())
}

async fn catalog_case(c: Ctx, res: Res, case: InvalidCase) -> CheckResult {
    let id = c.create(res).await?;
    let path = format!("{}/events", res.path(&id));
    let Some(w) = c.writer_for(&case.event)? else {
        // Authenticated mode: a human `via` no token can carry is refused by
        // attribution (403) before the catalog (section 7).
        c.post(&path, &case.event)
            .send()
            .await?
            .error(403, "auth")?;
        ensure!(
            c.seqs(res, &id).await?.is_empty(),
            "a 403-rejected append ({}) wrote an event",
            case.name
        );
        return Ok(());
    };
    let r = w.post(&path, &case.event).send().await?;
    let msg = r.e422()?;
    if let Some(exact) = &case.exact {
        ensure!(
            &msg == exact,
            "{}",
            r.fail(format!("422 with error exactly {exact:?}"))
        );
    }
    if let Some(prefix) = &case.prefix {
        ensure!(
            msg.starts_with(prefix.as_str()),
            "{}",
            r.fail(format!("422 with error starting {prefix:?}"))
        );
    }
    if let Some(needle) = &case.contains {
        ensure!(
            msg.contains(needle.as_str()),
            "{}",
            r.fail(format!("422 with error containing {needle:?}"))
        );
    }
    ensure!(
        c.seqs(res, &id).await?.is_empty(),
        "a 422-rejected append ({}) wrote an event",
        case.name
    );
    Ok(())
}

async fn via_ok(c: Ctx, fixture: &'static str) -> CheckResult {
    let (slug, _) = c.new_build().await?;
    let ev = build_event(fixture);
    let w = c.writer_for(&ev)?.ok_or("fixture via is malformed")?;
    let env = w.append(Res::Build, &slug, &ev).await?;
    same(
        "human actor with via (stored and returned unchanged)",
        &env["actor"],
        &ev["actor"],
    )?;
    let read = c.events(Res::Build, &slug, "").await?;
    same(
        "human actor with via read back",
        &read[0]["actor"],
        &ev["actor"],
    )?;
    Ok(())
}

async fn repo_via_ok(c: Ctx) -> CheckResult {
    let (id, _) = c.new_repo().await?;
    let mut ev = crate::fixtures::repo_event("pauseRequested");
    ev["actor"] =
        json!({"kind": "human", "user": "alice", "via": {"kind": "mcp", "client": "claude-code"}});
    let w = c.writer_for(&ev)?.ok_or("fixture via is malformed")?;
    let env = w.append(Res::Repo, &id, &ev).await?;
    same(
        "repository event human actor with via",
        &env["actor"],
        &ev["actor"],
    )?;
    Ok(())
}

async fn agent_optional(c: Ctx) -> CheckResult {
    let (slug, _) = c.new_build().await?;
    let ev = build_event("observationAgent");
    let env = c.append(Res::Build, &slug, &ev).await?;
    same("agent actor", &env["actor"], &ev["actor"])?;
    same(
        "payload with optional arrays",
        &env["payload"],
        &ev["payload"],
    )?;
    Ok(())
}

async fn rejected_writes_nothing(c: Ctx) -> CheckResult {
    let (slug, _) = c.new_build().await?;
    c.append(Res::Build, &slug, &build_event("observation"))
        .await?;
    let before = c.record(Res::Build, &slug).await?;
    for name in [
        "unknown_type",
        "actor_kind_not_allowed",
        "payload_missing_field",
    ] {
        let case = invalid_build(name);
        c.post(&format!("/builds/{}/events", enc(&slug)), &case.event)
            .send()
            .await?
            .e422()?;
    }
    same(
        "record after 422 appends",
        &c.record(Res::Build, &slug).await?,
        &before,
    )?;
    let env = c
        .append(Res::Build, &slug, &build_event("observation"))
        .await?;
    ensure!(
        env["seq"] == json!(2),
        "422 appends must not consume sequences: expected seq 2; got {}",
        env["seq"]
    );
    Ok(())
}

async fn unknown_before_body(c: Ctx, res: Res) -> CheckResult {
    let id = res.unknown_id();
    for tail in ["events", "artifacts", "deposits", "lease/claim"] {
        let r = c
            .post_raw(&format!("{}/{tail}", res.path(&id)), "{not json")
            .send()
            .await?;
        r.error_msg(404, "not-found", &res.unknown_msg(&id))?;
    }
    Ok(())
}

async fn schema_before_catalog(c: Ctx) -> CheckResult {
    // A body failing the wire schema is 400 even when its event is also invalid.
    let (slug, _) = c.new_build().await?;
    let body = json!({"expectedSeq": -1, "event": {"actor": {"kind": "robot"}, "type": "nope", "payload": {}}});
    c.post(&format!("/builds/{}/events/conditional", enc(&slug)), &body)
        .send()
        .await?
        .e400()?;
    Ok(())
}
