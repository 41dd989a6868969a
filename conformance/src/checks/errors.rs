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

/// Invalid JSON on a collection route: check name, (path, body). Each is
/// `400 validation` "request body is not valid JSON".
const INVALID_JSON: [(&str, (&str, &str)); 4] = [
    ("invalid_json_create_build", ("/builds", "{\"slug\":")),
    ("invalid_json_ensure_repo", ("/repos", "repo=x")),
    ("empty_body", ("/builds", "")),
    ("trailing_garbage", ("/builds", TRAILING_GARBAGE)),
];
const TRAILING_GARBAGE: &str = "{\"slug\":\"conf-trailing\",\"repo\":\"a/b\"} x";

/// Invalid JSON on a route of an existing resource: check name, (resource,
/// route tail, body). The same 400, and no event is written.
const INVALID_JSON_ON_RESOURCE: [(&str, (Res, &str, &str)); 2] = [
    ("invalid_json_append", (Res::Build, "events", APPEND_CUT)),
    (
        "invalid_json_artifact_put",
        (Res::Repo, "artifacts", "{kind: plan}"),
    ),
];
const APPEND_CUT: &str = "{\"actor\": {\"kind\": \"kernel\"},";

/// An unrouted request: method, path, and the exact 404 message (`None`:
/// any `no route: <method> …`).
type NoRoute = (&'static str, &'static str, Option<&'static str>);

/// Unrouted method and path: check name, request.
const NO_ROUTE: [(&str, NoRoute); 4] = [
    ("get_nope", ("GET", "/nope", Some("no route: GET /nope"))),
    (
        "delete_builds",
        ("DELETE", "/builds", Some("no route: DELETE /builds")),
    ),
    ("put_repos", ("PUT", "/repos", Some("no route: PUT /repos"))),
    ("post_health", ("POST", "/health", None)),
];

/// Unrouted method or tail on an existing resource: check name, (resource,
/// method, tail; empty: the resource itself). 404 `no route: <method> …`.
const RESOURCE_NO_ROUTE: [(&str, (Res, &str, &str)); 5] = [
    ("unknown_build_subroute", (Res::Build, "GET", "nope")),
    ("unknown_repo_subroute", (Res::Repo, "GET", "nope")),
    ("delete_build", (Res::Build, "DELETE", "")),
    ("get_on_post_only_route", (Res::Build, "GET", "lease/claim")),
    (
        "post_on_get_only_route",
        (Res::Repo, "POST", "artifact-list"),
    ),
];

/// Event bodies failing the wire schema, appended to a build and to a
/// repository: name, body. Each is 400 and writes nothing.
const EVENT_SCHEMA: [(&str, &str); 5] = [
    (
        "type_missing",
        r#"{"actor":{"kind":"kernel"},"payload":{}}"#,
    ),
    (
        "type_empty",
        r#"{"actor":{"kind":"kernel"},"type":"","payload":{}}"#,
    ),
    (
        "type_not_string",
        r#"{"actor":{"kind":"kernel"},"type":5,"payload":{}}"#,
    ),
    ("body_array", "[]"),
    ("body_string", r#""observation.recorded""#),
];

/// A human actor's `via`, accepted: check name, build-event fixture.
const VIA_ACCEPTED: [(&str, &str); 2] = [
    ("human_via_session_accepted", "pauseRequestedViaSession"),
    ("human_via_mcp_accepted", "pauseRequestedViaMcp"),
];

pub fn register(r: &mut Registry) {
    r.rows("s9.json.", "9", INVALID_JSON, |c, (path, body)| {
        invalid_json(c, path.into(), body)
    });
    r.rows("s9.json.", "9", INVALID_JSON_ON_RESOURCE, invalid_json_on);

    let schema_rows = EVENT_SCHEMA.into_iter().flat_map(|(name, body)| {
        [Res::Build, Res::Repo].map(|res| (format!("{name}_{}", res.key()), (res, body)))
    });
    r.rows("s9.schema.event_", "9", schema_rows, event_schema);

    r.rows("s9.route.", "9", NO_ROUTE, no_route);
    r.rows("s9.route.", "9", RESOURCE_NO_ROUTE, resource_no_route);

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
    r.rows("s2.actor.", "2", VIA_ACCEPTED, via_ok);
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

    let by_res =
        [Res::Build, Res::Repo].map(|res| (format!("unknown_{}_before_body", res.key()), res));
    r.rows("s9.order.", "9", by_res, unknown_before_body);
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

async fn invalid_json_on(c: Ctx, (res, tail, body): (Res, &str, &'static str)) -> CheckResult {
    let id = c.create(res).await?;
    invalid_json(c.clone(), format!("{}/{tail}", res.path(&id)), body).await?;
    c.no_events(
        res,
        &id,
        &format!("an invalid-JSON {} {tail} wrote an event", res.key()),
    )
    .await?;
    Ok(())
}

async fn event_schema(c: Ctx, (res, body): (Res, &'static str)) -> CheckResult {
    let id = c.create(res).await?;
    let path = format!("{}/events", res.path(&id));
    c.post_raw(&path, body).send().await?.e400()?;
    c.no_events(res, &id, "a 400-rejected append wrote an event")
        .await?;
    Ok(())
}

async fn no_route(c: Ctx, (method, path, exact): NoRoute) -> CheckResult {
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

async fn resource_no_route(c: Ctx, (res, method, tail): (Res, &str, &str)) -> CheckResult {
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
        c.no_events(
            res,
            &id,
            &format!("a 403-rejected append ({}) wrote an event", case.name),
        )
        .await?;
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
    c.no_events(
        res,
        &id,
        &format!("a 422-rejected append ({}) wrote an event", case.name),
    )
    .await?;
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
