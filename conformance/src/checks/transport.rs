//! Section 1, transport and conventions: JSON content types, the identity
//! headers (409 before anything else), percent-encoded path segments,
//! omitted optional members, time format, case sensitivity.

use serde_json::{Value, json};

use super::{CheckResult, Registry};
use crate::client::{Ctx, Res, shape, time_of};
use crate::ensure;
use crate::util::{enc, unique};

pub fn register(r: &mut Registry) {
    r.add("s1.content_type.success", "1", content_type_success);
    r.add("s1.content_type.errors", "1", content_type_errors);
    r.add("s1.content_type.null_results", "1", content_type_null);

    r.add("s1.identity.missing_version", "1", |c| {
        identity(c, Some(None), None, "/builds", "GET")
    });
    r.add("s1.identity.missing_protocol", "1", |c| {
        identity(c, None, Some(None), "/builds", "GET")
    });
    r.add("s1.identity.missing_both", "1", |c| {
        identity(c, Some(None), Some(None), "/builds", "GET")
    });
    r.add("s1.identity.wrong_version", "1", |c| {
        identity(c, Some(Some("0.7.9")), None, "/builds", "GET")
    });
    r.add("s1.identity.wrong_protocol", "1", |c| {
        identity(c, None, Some(Some("99")), "/builds", "GET")
    });
    r.add("s1.identity.version_exact_string", "1", |c| {
        identity(c, Some(Some("v0.8.0")), None, "/builds", "GET")
    });
    r.add("s1.identity.empty_version", "1", |c| {
        identity(c, Some(Some("")), None, "/builds", "GET")
    });
    r.add("s1.identity.empty_protocol", "1", |c| {
        identity(c, None, Some(Some("")), "/builds", "GET")
    });
    r.add("s1.identity.protocol_exact_string", "1", |c| {
        identity(c, None, Some(Some("02")), "/builds", "GET")
    });
    r.add("s1.identity.repos_route", "1", |c| {
        identity(c, Some(Some("0.7.9")), None, "/repos", "POST")
    });
    r.add("s1.identity.repo_resource_route", "1", |c| {
        identity(c, None, Some(Some("1")), "/repos/acme%2Fnope/events", "GET")
    });
    r.add("s1.identity.sessions_route", "1", |c| {
        identity(c, Some(None), None, "/sessions/os_nope", "GET")
    });
    r.add("s1.identity.before_not_found", "1", identity_before_404);
    r.add("s1.identity.before_body_parse", "1", identity_before_400);
    r.add("s1.identity.before_unknown_route", "1", |c| {
        identity(c, Some(Some("0.0.1")), None, "/builds", "DELETE")
    });
    r.add("s1.identity.success_with_exact_values", "1", identity_ok);
    r.add(
        "s1.identity.not_required_elsewhere",
        "1",
        identity_not_elsewhere,
    );

    r.add("s1.path.encoded_slash_round_trip", "1", encoded_slash);
    r.add(
        "s1.path.unencoded_slash_is_two_segments",
        "1",
        unencoded_slash,
    );
    r.add("s1.path.encoded_build_slug", "1", encoded_slug);
    for (name, seg) in [
        ("bad_hex", "%zz"),
        ("truncated", "abc%4"),
        ("invalid_utf8", "%FF%FE"),
    ] {
        r.add(
            format!("s1.path.malformed_percent_{name}_builds"),
            "1",
            move |c| malformed(c, "/builds", seg),
        );
        r.add(
            format!("s1.path.malformed_percent_{name}_repos"),
            "1",
            move |c| malformed(c, "/repos", seg),
        );
    }

    r.add("s1.optional.omitted_not_null", "1", omitted_not_null);
    r.add("s1.times.iso_format", "1", times_format);
    r.add("s1.case_sensitive.slugs", "1", case_slugs);
    r.add("s1.case_sensitive.repo_ids", "1", case_repos);
    r.add("s1.case_sensitive.kinds", "1", case_kinds);
    r.add("s1.case_sensitive.holders", "1", case_holders);
}

async fn content_type_success(c: Ctx) -> CheckResult {
    let (slug, _) = c.new_build().await?;
    for path in [
        format!("/builds/{}", enc(&slug)),
        "/builds".to_string(),
        format!("/builds/{}/events", enc(&slug)),
        format!("/builds/{}/artifact-list", enc(&slug)),
        "/health".to_string(),
    ] {
        let r = c.get(&path).send().await?;
        r.json_status(200)?;
    }
    let r = c
        .post("/repos", &json!({"repo": unique("acme")}))
        .send()
        .await?;
    r.json_status(200)?;
    let r = c
        .post(
            &format!("/builds/{}/lease/claim", enc(&slug)),
            &json!({"holder": "h", "ttlMs": 1000}),
        )
        .send()
        .await?;
    r.json_status(200)?;
    Ok(())
}

async fn content_type_errors(c: Ctx) -> CheckResult {
    // error() asserts the JSON content type for each status.
    c.get("/builds/conf-nope-xyz").send().await?.e404()?;
    c.post_raw("/builds", "{").send().await?.e400()?;
    c.get("/builds")
        .no_identity()
        .send()
        .await?
        .error(409, "conflict")?;
    c.get("/nope").send().await?.e404()?;
    let (slug, _) = c.new_build().await?;
    let bad = json!({"actor": {"kind": "kernel"}, "type": "conformance.nope", "payload": {}});
    c.post(&format!("/builds/{}/events", enc(&slug)), &bad)
        .send()
        .await?
        .e422()?;
    Ok(())
}

async fn content_type_null(c: Ctx) -> CheckResult {
    let (slug, _) = c.new_build().await?;
    let r = c
        .get(&format!("/builds/{}/artifacts?kind=absent", enc(&slug)))
        .send()
        .await?;
    let v = r.json_status(200)?;
    ensure!(
        v.is_null() && r.text.trim() == "null",
        "{}",
        r.fail("200 with body null")
    );
    c.append(Res::Build, &slug, &Res::Build.simple_event())
        .await?;
    let body = json!({"expectedSeq": 0, "event": Res::Build.simple_event()});
    let r = c
        .post(&format!("/builds/{}/events/conditional", enc(&slug)), &body)
        .send()
        .await?;
    let v = r.json_status(200)?;
    ensure!(
        v.is_null() && r.text.trim() == "null",
        "{}",
        r.fail("200 with body null")
    );
    Ok(())
}

/// Sends a request with altered identity headers and expects the 409 conflict
/// whose message names both sides' versions. `version`/`protocol`: `None` keeps
/// the correct value, `Some(None)` omits the header, `Some(Some(v))` sends `v`.
async fn identity(
    c: Ctx,
    version: Option<Option<&'static str>>,
    protocol: Option<Option<&'static str>>,
    path: &'static str,
    method: &'static str,
) -> CheckResult {
    let mut call = c.call(method, path);
    if method == "POST" {
        call = call.raw(json!({"repo": unique("acme")}).to_string());
    }
    if let Some(v) = version {
        call = call.version(v);
    }
    if let Some(p) = protocol {
        call = call.protocol(p);
    }
    let r = call.send().await?;
    let msg = r.error(409, "conflict")?;
    let mut must = vec![c.autobuild_version.clone(), c.protocol_version.clone()];
    if let Some(Some(v)) = version {
        must.push(v.to_string());
    }
    if let Some(Some(p)) = protocol {
        must.push(p.to_string());
    }
    for m in must {
        ensure!(
            msg.contains(&m),
            "{}",
            r.fail(format!(
                "a message naming client and server versions (containing {m:?})"
            ))
        );
    }
    Ok(())
}

async fn identity_before_404(c: Ctx) -> CheckResult {
    for path in [
        "/builds/conf-does-not-exist",
        "/repos/acme%2Fdoes-not-exist",
        "/builds/conf-nope/nope",
    ] {
        c.get(path)
            .version(Some("0.0.0"))
            .send()
            .await?
            .error(409, "conflict")?;
    }
    Ok(())
}

async fn identity_before_400(c: Ctx) -> CheckResult {
    c.post_raw("/builds", "{not json")
        .protocol(None)
        .send()
        .await?
        .error(409, "conflict")?;
    c.post_raw("/repos", "[]")
        .version(None)
        .send()
        .await?
        .error(409, "conflict")?;
    let (slug, _) = c.new_build().await?;
    c.post_raw(&format!("/builds/{}/events", enc(&slug)), "{")
        .version(Some("9.9.9"))
        .send()
        .await?
        .error(409, "conflict")?;
    c.get(&format!("/builds/{}/events?since=abc", enc(&slug)))
        .no_identity()
        .send()
        .await?
        .error(409, "conflict")?;
    // And nothing was written by the rejected append.
    ensure!(
        c.seqs(Res::Build, &slug).await?.is_empty(),
        "409-rejected append wrote an event"
    );
    Ok(())
}

async fn identity_ok(c: Ctx) -> CheckResult {
    c.get("/builds").send().await?.json_status(200)?;
    Ok(())
}

async fn identity_not_elsewhere(c: Ctx) -> CheckResult {
    c.get("/health")
        .no_identity()
        .send()
        .await?
        .json_status(200)?;
    let r = c.get("/nope").no_identity().send().await?;
    ensure!(
        r.status == 404,
        "{}",
        r.fail("404 (no identity check outside /builds, /repos, /sessions)")
    );
    Ok(())
}

async fn encoded_slash(c: Ctx) -> CheckResult {
    let (id, rec) = c.new_repo().await?;
    ensure!(
        rec["repo"] == json!(id),
        "ensureRepo returned repo {} for {id:?}",
        rec["repo"]
    );
    let path = format!("/repos/{}", enc(&id));
    ensure!(path.contains("%2F"), "test bug: {path} has no %2F");
    let got = c.record(Res::Repo, &id).await?;
    ensure!(
        got["repo"] == json!(id),
        "GET {path}: expected repo {id:?}; got {}",
        got
    );
    let env = c.append(Res::Repo, &id, &Res::Repo.simple_event()).await?;
    ensure!(
        env["repo"] == json!(id),
        "append to {path}: envelope repo {} != {id:?}",
        env["repo"]
    );
    Ok(())
}

async fn unencoded_slash(c: Ctx) -> CheckResult {
    let (id, _) = c.new_repo().await?;
    // `/repos/acme-x/widgets` is repo `acme-x` + sub-route `widgets`, never the repo.
    let r = c.get(&format!("/repos/{id}")).send().await?;
    r.e404()?;
    Ok(())
}

async fn encoded_slug(c: Ctx) -> CheckResult {
    let slug = format!("{} x:y@z/é", unique("Conf"));
    let rec = c
        .post("/builds", &json!({"slug": slug, "repo": "acme/widgets"}))
        .send()
        .await?
        .json_status(201)?;
    ensure!(
        rec["slug"] == json!(slug),
        "create returned slug {}",
        rec["slug"]
    );
    let got = c.record(Res::Build, &slug).await?;
    ensure!(
        got["slug"] == json!(slug),
        "GET /builds/{}: slug {} != {slug:?}",
        enc(&slug),
        got["slug"]
    );
    let env = c
        .append(Res::Build, &slug, &Res::Build.simple_event())
        .await?;
    ensure!(
        env["build"] == json!(slug),
        "envelope build {} != {slug:?}",
        env["build"]
    );
    Ok(())
}

async fn malformed(c: Ctx, coll: &str, seg: &str) -> CheckResult {
    let r = c.get(&format!("{coll}/{seg}")).send().await?;
    r.e400()?;
    Ok(())
}

async fn omitted_not_null(c: Ctx) -> CheckResult {
    let (slug, rec) = c.new_build().await?;
    let build_keys = ["slug", "repo", "createdAt", "updatedAt"];
    shape("created BuildRecord", &rec, &build_keys, &build_keys)?;
    shape(
        "fetched BuildRecord",
        &c.record(Res::Build, &slug).await?,
        &build_keys,
        &build_keys,
    )?;
    let (id, rec) = c.new_repo().await?;
    let repo_keys = ["repo", "createdAt", "updatedAt"];
    shape("RepositoryRecord", &rec, &repo_keys, &repo_keys)?;
    shape(
        "fetched RepositoryRecord",
        &c.record(Res::Repo, &id).await?,
        &repo_keys,
        &repo_keys,
    )?;
    let env = c
        .append(Res::Build, &slug, &Res::Build.simple_event())
        .await?;
    let env_keys = ["build", "seq", "ts", "actor", "type", "payload"];
    shape("event envelope", &env, &env_keys, &env_keys)?;
    let payload = env["payload"].as_object().cloned().unwrap_or_default();
    ensure!(
        !payload.contains_key("files") && !payload.contains_key("refs"),
        "optional payload members absent from the write must stay absent; got {}",
        env["payload"]
    );
    Ok(())
}

async fn times_format(c: Ctx) -> CheckResult {
    let (slug, rec) = c.new_build().await?;
    time_of("BuildRecord", &rec, "createdAt")?;
    time_of("BuildRecord", &rec, "updatedAt")?;
    let env = c
        .append(Res::Build, &slug, &Res::Build.simple_event())
        .await?;
    time_of("event envelope", &env, "ts")?;
    let meta = c
        .put_artifact(Res::Build, &slug, "notes", b"x", None)
        .await?;
    time_of("artifact metadata", &meta, "createdAt")?;
    ensure!(
        c.claim(Res::Build, &slug, "h1", 3_600_000).await?,
        "claim on a fresh build returned false"
    );
    ensure!(
        c.heartbeat(Res::Build, &slug, "h1").await?,
        "heartbeat by the holder returned false"
    );
    let rec = c.record(Res::Build, &slug).await?;
    time_of("BuildRecord.lease", &rec["lease"], "expiresAt")?;
    time_of("BuildRecord", &rec, "heartbeatAt")?;
    let (id, rec) = c.new_repo().await?;
    time_of("RepositoryRecord", &rec, "createdAt")?;
    let env = c.append(Res::Repo, &id, &Res::Repo.simple_event()).await?;
    time_of("repository event envelope", &env, "ts")?;
    Ok(())
}

async fn case_slugs(c: Ctx) -> CheckResult {
    let slug = unique("Conf-Case");
    c.post("/builds", &json!({"slug": slug, "repo": "acme/x"}))
        .send()
        .await?
        .json_status(201)?;
    let lower = slug.to_lowercase();
    let r = c.get(&format!("/builds/{}", enc(&lower))).send().await?;
    r.error_msg(404, "not-found", &Res::Build.unknown_msg(&lower))?;
    // A slug differing only by case is a different build, not a duplicate.
    c.post("/builds", &json!({"slug": lower, "repo": "acme/x"}))
        .send()
        .await?
        .json_status(201)?;
    Ok(())
}

async fn case_repos(c: Ctx) -> CheckResult {
    let id = format!("{}/Widgets", unique("Acme"));
    c.post("/repos", &json!({"repo": id}))
        .send()
        .await?
        .json_status(200)?;
    let lower = id.to_lowercase();
    let r = c.get(&format!("/repos/{}", enc(&lower))).send().await?;
    r.error_msg(404, "not-found", &Res::Repo.unknown_msg(&lower))?;
    Ok(())
}

async fn case_kinds(c: Ctx) -> CheckResult {
    let (slug, _) = c.new_build().await?;
    c.put_artifact(Res::Build, &slug, "Plan", b"upper", None)
        .await?;
    let v = c.get_artifact(Res::Build, &slug, "?kind=plan").await?;
    ensure!(
        v.is_null(),
        "kind \"plan\" must not find kind \"Plan\"; got {v}"
    );
    let meta = c
        .put_artifact(Res::Build, &slug, "plan", b"lower", None)
        .await?;
    ensure!(
        meta["revision"] == json!(0),
        "first \"plan\" after \"Plan\" must be revision 0; got {meta}"
    );
    Ok(())
}

async fn case_holders(c: Ctx) -> CheckResult {
    let (slug, _) = c.new_build().await?;
    ensure!(
        c.claim(Res::Build, &slug, "Runner", 3_600_000).await?,
        "first claim returned false"
    );
    ensure!(
        !c.claim(Res::Build, &slug, "runner", 3_600_000).await?,
        "holder \"runner\" claimed a lease held by \"Runner\" (holders are case-sensitive)"
    );
    let rec: Value = c.record(Res::Build, &slug).await?;
    ensure!(
        rec["lease"]["holder"] == json!("Runner"),
        "lease holder changed: {}",
        rec["lease"]
    );
    Ok(())
}
