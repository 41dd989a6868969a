//! Section 7 (authentication and token scope) and the `401`/`403` rows of
//! section 9, over HTTP only. The suite mints its own tokens from the
//! server's secret (`--secret`), so most checks skip without one; the checks
//! that need no minting (missing and garbage credentials) also run with only
//! a `--token`, and the open-mode checks run only when the runner has neither.
//!
//! Exact messages are asserted where Autobuild's shipped server fixes them:
//! `missing bearer token`, `invalid or expired token`,
//! `token scoped to <kind> "<id>" may not access <target>` and
//! `token scoped to session "<s>" may not write events attributed to …`.
//! The `via` refusal has no fixed wording: only `403 auth` is asserted.

use serde_json::{Value, json};

use super::{CheckResult, Failure, NEEDS_AUTH, NEEDS_OPEN, Registry};
use crate::client::{Ctx, Res, Resp, same};
use crate::ensure;
use crate::fixtures::{build_event, catalog_fixtures_of, invalid_build, invalid_repo, repo_event};
use crate::token::{
    admin_scope, b64url, deployment_scope, mint_text, resource_scope, sign, sign_segment,
};
use crate::util::{b64, enc, random_hex, unique};

const MISSING: &str = "missing bearer token";
const INVALID: &str = "invalid or expired token";
const NON_AGENT: &str = "a non-agent actor";
/// What a resource-scoped token may not reach on the collection routes.
const ADMIN: &str = "admin operations";

pub fn register(r: &mut Registry) {
    // ── 401: credentials ────────────────────────────────────────────────────
    r.add("s7.401.no_header", "7", no_header);
    r.add("s7.401.wrong_scheme", "7", wrong_scheme);
    r.add("s7.401.bearer_without_token", "7", bearer_without_token);
    r.add("s7.401.garbage_token", "7", garbage_token);
    let names = malformed_tokens("secret", 0)
        .into_iter()
        .map(|(name, _)| (name, name));
    r.rows("s7.401.malformed.", "7", names, malformed);
    r.add("s7.401.forged_signature", "7", forged_signature);
    r.add("s7.401.tampered_payload", "7", tampered_payload);
    r.add("s7.401.signature_over_decoded_json", "7", signed_decoded);
    r.add("s7.401.expired", "7", expired);
    r.add("s7.token.integral_exp_however_written", "7", integral_exp);
    r.add_clock("s7.401.expiry_boundary", "7", expiry_boundary);
    r.add("s7.401.health_needs_no_token", "7", health_open);

    // ── order ───────────────────────────────────────────────────────────────
    r.add("s7.order.identity_before_auth", "7", identity_before_auth);
    r.add("s7.order.auth_before_lookup", "7", auth_before_lookup);
    r.add("s7.order.auth_before_body", "7", auth_before_body);
    r.add("s7.order.scope_before_lookup_and_body", "7", scope_first);
    r.add("s7.order.scope_before_catalog", "7", scope_before_catalog);
    for res in [Res::Build, Res::Repo] {
        r.add(
            format!("s7.order.attribution_before_catalog_{}", res.key()),
            "7",
            move |c| attribution_before_catalog(c, res),
        );
        r.add(
            format!("s7.order.own_scope_unknown_{}_is_404", res.key()),
            "7",
            move |c| own_scope_unknown(c, res),
        );
    }

    // ── the resource matrix ─────────────────────────────────────────────────
    r.add("s7.matrix.admin", "7", |c| allow_all(c, admin_scope));
    r.add("s7.matrix.deployment", "7", |c| {
        allow_all(c, deployment_scope)
    });
    r.add("s7.matrix.build_legacy", "7", |c| matrix_build(c, true));
    r.add("s7.matrix.build_resource", "7", |c| matrix_build(c, false));
    r.add("s7.matrix.repo", "7", matrix_repo);
    r.add("s7.matrix.session", "7", matrix_session);
    r.add("s7.matrix.kinds_never_cross", "7", kinds_never_cross);
    r.add("s7.matrix.resource_star_is_not_admin", "7", resource_star);
    r.add("s7.matrix.operator_refused", "7", operator_refused);

    // ── session attribution ─────────────────────────────────────────────────
    for res in [Res::Build, Res::Repo] {
        r.add(
            format!("s7.attr.wildcard_any_actor_{}", res.key()),
            "7",
            move |c| wildcard_any_actor(c, res),
        );
        r.add(
            format!("s7.attr.session_agent_only_{}", res.key()),
            "7",
            move |c| session_agent_only(c, res, false),
        );
        r.add(
            format!("s7.attr.reads_puts_leases_unchecked_{}", res.key()),
            "7",
            move |c| reads_puts_leases(c, res),
        );
    }
    r.add("s7.attr.session_agent_only_build_legacy", "7", |c| {
        session_agent_only(c, Res::Build, true)
    });

    // ── via ─────────────────────────────────────────────────────────────────
    for res in [Res::Build, Res::Repo] {
        for (vname, via) in [
            ("session", json!({"kind": "session", "id": "os_1"})),
            ("mcp", json!({"kind": "mcp", "client": "c"})),
        ] {
            r.add(
                format!("s7.via.resource_token_stamps_{vname}_{}", res.key()),
                "7",
                move |c| via_stamps(c, res, false, via.clone()),
            );
        }
        r.add(
            format!("s7.via.deployment_token_stamps_{}", res.key()),
            "7",
            move |c| via_stamps(c, res, true, json!({"kind": "mcp", "client": "c"})),
        );
        r.add(
            format!("s7.via.unclaimed_via_refused_{}", res.key()),
            "7",
            move |c| via_unclaimed(c, res),
        );
        r.add(
            format!("s7.via.non_human_via_is_422_{}", res.key()),
            "7",
            move |c| via_non_human(c, res),
        );
        r.add(
            format!("s7.open.via_stored_unchanged_{}", res.key()),
            "7",
            move |c| open_via_unchanged(c, res),
        );
    }
    r.add(
        "s7.via.stamps_conditional_and_deposit",
        "7",
        via_other_writes,
    );
    r.add(
        "s7.open.authorization_ignored",
        "7",
        open_ignores_authorization,
    );

    // ── rejected writes change nothing; held reads answer at once ───────────
    for res in [Res::Build, Res::Repo] {
        r.add(
            format!("s7.nomutation.rejected_writes_{}", res.key()),
            "7",
            move |c| no_mutation(c, res),
        );
        r.add(
            format!("s7.held.refused_at_once_{}", res.key()),
            "7",
            move |c| held_refused(c, res),
        );
    }
}

// ── helpers ─────────────────────────────────────────────────────────────────

fn need_auth(c: &Ctx) -> Result<(), Failure> {
    if c.authenticated() {
        Ok(())
    } else {
        Err(Failure::Skip(NEEDS_AUTH.into()))
    }
}

fn need_open(c: &Ctx) -> Result<(), Failure> {
    if c.authenticated() || c.secret.is_some() {
        Err(Failure::Skip(NEEDS_OPEN.into()))
    } else {
        Ok(())
    }
}

fn denied(holder: &str, target: &str) -> String {
    format!("token scoped to {holder} may not access {target}")
}

fn attributed(session: &str, to: &str) -> String {
    format!("token scoped to session \"{session}\" may not write events attributed to {to}")
}

fn q(kind: &str, id: &str) -> String {
    format!("{kind} \"{id}\"")
}

/// One request of the matrix: what it is and the status it gets when the
/// token is allowed (`0`: anything but `401`/`403`, for routes that may not
/// exist yet or whose outcome after authorization does not matter here).
#[derive(Clone, Debug)]
pub(super) struct Op {
    method: &'static str,
    path: String,
    body: Option<Value>,
    ok: u16,
}

impl Op {
    pub(super) fn new(method: &'static str, path: String, body: Option<Value>, ok: u16) -> Op {
        Op {
            method,
            path,
            body,
            ok,
        }
    }

    async fn send(&self, c: &Ctx, auth: Option<&str>) -> Result<Resp, String> {
        let mut call = c.call(self.method, &self.path).authorization(auth);
        if let Some(b) = &self.body {
            call = call.raw(b.to_string());
        }
        call.send().await
    }

    pub(super) async fn allowed(&self, c: &Ctx, token: &str) -> Result<(), String> {
        let r = self.send(c, Some(&format!("Bearer {token}"))).await?;
        if self.ok == 0 {
            ensure!(
                r.status != 401 && r.status != 403,
                "{}",
                r.fail("authorization to pass (any status but 401/403)")
            );
            Ok(())
        } else {
            r.status_is(self.ok)
        }
    }

    pub(super) async fn refused(&self, c: &Ctx, token: &str, message: &str) -> Result<(), String> {
        let r = self.send(c, Some(&format!("Bearer {token}"))).await?;
        r.error_msg(403, "auth", message)
    }
}

fn coll_ops() -> Vec<Op> {
    vec![
        Op::new("GET", "/builds".into(), None, 200),
        Op::new(
            "POST",
            "/builds".into(),
            Some(json!({"slug": unique("conf-auth"), "repo": "acme/conformance"})),
            201,
        ),
        Op::new(
            "POST",
            "/repos".into(),
            Some(json!({"repo": format!("{}/auth", unique("acme"))})),
            200,
        ),
    ]
}

/// Every operation on one existing build or repository, each succeeding for
/// an allowed token with a `session: "*"`.
fn resource_ops(res: Res, id: &str) -> Vec<Op> {
    let p = res.path(id);
    let holder = unique("holder");
    let mut ops = vec![
        Op::new("GET", p.clone(), None, 200),
        Op::new("GET", format!("{p}/events"), None, 200),
        Op::new("POST", format!("{p}/events"), Some(res.simple_event()), 201),
    ];
    if res == Res::Build {
        ops.push(Op::new(
            "POST",
            format!("{p}/events/conditional"),
            Some(json!({"expectedSeq": 100_000, "event": res.simple_event()})),
            200,
        ));
    }
    ops.extend([
        Op::new(
            "POST",
            format!("{p}/artifacts"),
            Some(json!({"kind": "blob", "contentBase64": b64(b"auth")})),
            201,
        ),
        Op::new("GET", format!("{p}/artifacts?kind=blob"), None, 200),
        Op::new("GET", format!("{p}/artifact-list"), None, 200),
        Op::new(
            "POST",
            format!("{p}/deposits"),
            Some(json!({
                "artifacts": [{"kind": "plan", "contentBase64": b64(b"plan")}],
                "event": res.ref_event(json!({"kind": "plan", "rev": -1})),
            })),
            201,
        ),
        Op::new(
            "POST",
            format!("{p}/lease/claim"),
            Some(json!({"holder": holder, "ttlMs": 3_600_000})),
            200,
        ),
        Op::new(
            "POST",
            format!("{p}/lease/heartbeat"),
            Some(json!({"holder": holder})),
            200,
        ),
        Op::new(
            "POST",
            format!("{p}/lease/release"),
            Some(json!({"holder": holder})),
            200,
        ),
    ]);
    ops
}

/// `POST|GET /repos/{repo}/sessions` (section 5; may not be served yet).
fn repo_sessions_ops(repo: &str) -> Vec<Op> {
    let p = format!("/repos/{}/sessions", enc(repo));
    vec![
        Op::new(
            "POST",
            p.clone(),
            Some(json!({"repo": repo, "operator": "alice"})),
            0,
        ),
        Op::new("GET", p, None, 0),
    ]
}

/// Operations on one operator session (section 5; may not be served yet).
fn session_ops(id: &str) -> Vec<Op> {
    let p = format!("/sessions/{}", enc(id));
    vec![
        Op::new("GET", p.clone(), None, 0),
        Op::new("GET", format!("{p}/events"), None, 0),
        Op::new(
            "POST",
            format!("{p}/events"),
            Some(
                json!({"actor": {"kind": "human", "user": "alice"}, "type": "message.posted", "payload": {"text": "t"}}),
            ),
            0,
        ),
        Op::new(
            "POST",
            format!("{p}/artifacts"),
            Some(json!({"kind": "blob", "contentBase64": b64(b"s")})),
            0,
        ),
        Op::new("GET", format!("{p}/artifact-list"), None, 0),
    ]
}

fn session_id() -> String {
    format!("os_{}", random_hex())
}

async fn all_refused(c: &Ctx, token: &str, ops: &[Op], message: &str) -> Result<(), String> {
    for op in ops {
        op.refused(c, token, message).await?;
    }
    Ok(())
}

/// Each row's operations are refused for `token` (held by `holder`) with
/// `token scoped to <holder> may not access <row's target>`.
async fn refused_rows(
    c: &Ctx,
    token: &str,
    holder: &str,
    rows: Vec<(Vec<Op>, String)>,
) -> Result<(), String> {
    for (ops, target) in rows {
        all_refused(c, token, &ops, &denied(holder, &target)).await?;
    }
    Ok(())
}

async fn all_allowed(c: &Ctx, token: &str, ops: &[Op]) -> Result<(), String> {
    for op in ops {
        op.allowed(c, token).await?;
    }
    Ok(())
}

/// A valid event write of `res`'s catalog whose actor has `kind` (and no
/// `via`): from the conformance samples, else the first matching catalog
/// fixture.
fn event_by(c: &Ctx, res: Res, kind: &str) -> Option<Value> {
    let sample = match (res, kind) {
        (Res::Build, "kernel") => Some(build_event("observation")),
        (Res::Build, "agent") => Some(build_event("observationAgent")),
        (Res::Build, "human") => Some(build_event("pauseRequested")),
        (Res::Repo, "human") => Some(repo_event("pauseRequested")),
        (Res::Repo, "dispatcher") => Some(repo_event("tickStarted")),
        (Res::Repo, "agent") => {
            let mut e = repo_event("proposalsSubmitted");
            e["payload"]["artifact"]["rev"] = json!(0);
            Some(e)
        }
        _ => None,
    };
    sample.or_else(|| {
        let family = if res == Res::Build {
            "build"
        } else {
            "repository"
        };
        catalog_fixtures_of(&c.catalog_set())
            .ok()?
            .iter()
            .find(|f| {
                f.valid
                    && f.family == family
                    && f.event["actor"]["kind"] == kind
                    && f.event["actor"].get("via").is_none()
            })
            .map(|f| f.event.clone())
    })
}

fn with_actor(mut ev: Value, actor: Value) -> Value {
    ev["actor"] = actor;
    ev
}

fn agent(session: &str) -> Value {
    json!({"kind": "agent", "role": "implement", "session": session})
}

fn res_kind(res: Res) -> &'static str {
    res.key()
}

// ── 401 ─────────────────────────────────────────────────────────────────────

async fn no_header(c: Ctx) -> CheckResult {
    need_auth(&c)?;
    let (b, _) = c.new_build().await?;
    let (r, _) = c.new_repo().await?;
    let mut ops = coll_ops();
    ops.extend(resource_ops(Res::Build, &b));
    ops.extend(resource_ops(Res::Repo, &r));
    ops.extend(repo_sessions_ops(&r));
    ops.extend(session_ops(&session_id()));
    for op in &ops {
        op.send(&c, None).await?.error_msg(401, "auth", MISSING)?;
    }
    Ok(())
}

async fn wrong_scheme(c: Ctx) -> CheckResult {
    need_auth(&c)?;
    let token = c.token.clone().unwrap_or_default();
    let (b, _) = c.new_build().await?;
    for value in [
        "Basic dXNlcjpwYXNzd29yZA==".to_string(),
        format!("Basic {token}"),
        format!("Token {token}"),
        token.clone(),
    ] {
        for path in ["/builds".to_string(), Res::Build.path(&b)] {
            unauthorized(&c, &path, &value, MISSING).await?;
        }
    }
    Ok(())
}

async fn bearer_without_token(c: Ctx) -> CheckResult {
    need_auth(&c)?;
    for value in ["Bearer", "Bearer ", "bearer"] {
        unauthorized(&c, "/builds", value, MISSING).await?;
    }
    Ok(())
}

async fn garbage_token(c: Ctx) -> CheckResult {
    need_auth(&c)?;
    for t in ["x", "abc.def", "not a token", "e30.e30"] {
        refused_401(&c, "/builds", t).await?;
    }
    Ok(())
}

/// `GET path` with this bearer token is `401 invalid or expired token`.
async fn refused_401(c: &Ctx, path: &str, token: &str) -> Result<(), String> {
    unauthorized(c, path, &format!("Bearer {token}"), INVALID).await
}

/// `GET path` with exactly this `Authorization` value is `401 auth` with
/// `message`.
async fn unauthorized(c: &Ctx, path: &str, value: &str, message: &str) -> Result<(), String> {
    let r = c.get(path).authorization(Some(value)).send().await?;
    r.error_msg(401, "auth", message)
}

/// Malformed tokens, each otherwise correctly signed so that its one defect
/// is the only reason to refuse it.
fn malformed_tokens(secret: &str, exp: i64) -> Vec<(&'static str, String)> {
    let admin = admin_scope(exp);
    let good = crate::token::mint(secret, &admin);
    let (payload, sig) = good.split_once('.').unwrap_or_default();
    let (payload, sig) = (payload.to_string(), sig.to_string());
    let m = |v: Value| crate::token::mint(secret, &v);
    let res = |kind: &str| resource_scope(kind, "conf-x", "*", exp);
    let with = |mut v: Value, k: &str, x: Value| {
        v[k] = x;
        v
    };
    let without = |mut v: Value, k: &str| {
        if let Some(o) = v.as_object_mut() {
            o.remove(k);
        }
        v
    };
    vec![
        ("no_dot", payload.clone()),
        ("three_segments", format!("{good}.{sig}")),
        ("empty_payload", sign_segment(secret, "")),
        ("empty_signature", format!("{payload}.")),
        ("only_dot", ".".to_string()),
        ("payload_not_base64url", sign_segment(secret, "@@@@")),
        ("signature_not_base64url", format!("{payload}.@@@@")),
        ("scope_not_json", mint_text(secret, "not json")),
        ("scope_array", mint_text(secret, "[]")),
        ("scope_string", mint_text(secret, "\"admin\"")),
        ("scope_number", mint_text(secret, "42")),
        ("scope_null", mint_text(secret, "null")),
        ("scope_empty_object", mint_text(secret, "{}")),
        (
            "unknown_key_legacy",
            m(with(admin.clone(), "role", json!("x"))),
        ),
        (
            "unknown_key_resource",
            m(with(res("build"), "role", json!("x"))),
        ),
        (
            "unknown_key_in_resource",
            m(
                json!({"resource": {"kind": "build", "id": "conf-x", "name": "x"}, "session": "*", "exp": exp}),
            ),
        ),
        (
            "via_on_legacy_scope",
            m(with(
                admin.clone(),
                "via",
                json!({"kind": "mcp", "client": "c"}),
            )),
        ),
        ("missing_exp", m(without(admin.clone(), "exp"))),
        ("missing_session", m(without(admin.clone(), "session"))),
        (
            "missing_session_resource",
            m(without(res("repo"), "session")),
        ),
        (
            "missing_resource_id",
            m(json!({"resource": {"kind": "build"}, "session": "*", "exp": exp})),
        ),
        (
            "build_not_string",
            m(with(admin.clone(), "build", json!(5))),
        ),
        (
            "session_not_string",
            m(with(admin.clone(), "session", json!(true))),
        ),
        (
            "exp_string",
            m(with(admin.clone(), "exp", json!(exp.to_string()))),
        ),
        ("exp_null", m(with(admin.clone(), "exp", Value::Null))),
        (
            "exp_fraction",
            m(with(admin.clone(), "exp", json!(exp as f64 + 0.5))),
        ),
        (
            "resource_not_object",
            m(with(res("build"), "resource", json!("build"))),
        ),
        (
            "resource_kind_unknown",
            m(json!({"resource": {"kind": "team", "id": "conf-x"}, "session": "*", "exp": exp})),
        ),
        (
            "resource_id_not_string",
            m(json!({"resource": {"kind": "build", "id": 5}, "session": "*", "exp": exp})),
        ),
        ("via_not_object", m(with(res("build"), "via", json!("mcp")))),
        (
            "via_kind_unknown",
            m(with(
                res("build"),
                "via",
                json!({"kind": "pager", "id": "p"}),
            )),
        ),
        (
            "operator_not_bool_or_object",
            m(json!({"operator": "yes", "session": "*", "exp": exp})),
        ),
        ("empty_build", m(with(admin.clone(), "build", json!("")))),
        ("empty_session", m(with(admin, "session", json!("")))),
        (
            "empty_resource_id",
            m(json!({"resource": {"kind": "repo", "id": ""}, "session": "*", "exp": exp})),
        ),
        (
            "empty_via_id",
            m(with(
                res("build"),
                "via",
                json!({"kind": "session", "id": ""}),
            )),
        ),
        (
            "empty_operator_user",
            m(json!({"operator": {"user": ""}, "exp": exp})),
        ),
    ]
}

async fn malformed(c: Ctx, name: &'static str) -> CheckResult {
    let secret = c.need_secret()?.to_string();
    let token = malformed_tokens(&secret, c.exp_ms)
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| t)
        .ok_or("unknown malformed-token case")?;
    for path in ["/builds", "/repos/acme%2Fwidgets"] {
        refused_401(&c, path, &token).await?;
    }
    Ok(())
}

async fn forged_signature(c: Ctx) -> CheckResult {
    let secret = c.need_secret()?;
    let other = format!("{secret}-but-not-quite");
    let forged = crate::token::mint(&other, &admin_scope(c.exp_ms));
    refused_401(&c, "/builds", &forged).await?;
    Ok(())
}

async fn tampered_payload(c: Ctx) -> CheckResult {
    let (b, _) = c.new_build().await?;
    let narrow = c.mint(&resource_scope("build", &b, "*", c.exp_ms))?;
    let sig = narrow.split_once('.').map(|(_, s)| s).unwrap_or_default();
    // The same signature over a re-encoded scope: admin, and the same build
    // with a later expiry.
    for scope in [
        admin_scope(c.exp_ms),
        resource_scope("build", &b, "*", c.exp_ms + 1),
    ] {
        let token = format!("{}.{sig}", b64url(scope.to_string().as_bytes()));
        for path in ["/builds".to_string(), Res::Build.path(&b)] {
            refused_401(&c, &path, &token).await?;
        }
    }
    // The untampered token still works.
    c.get(&Res::Build.path(&b))
        .bearer(&narrow)
        .send()
        .await?
        .status_is(200)?;
    Ok(())
}

async fn signed_decoded(c: Ctx) -> CheckResult {
    let secret = c.need_secret()?;
    let json = admin_scope(c.exp_ms).to_string();
    let token = format!("{}.{}", b64url(json.as_bytes()), sign(secret, &json));
    refused_401(&c, "/builds", &token).await?;
    Ok(())
}

/// `exp` is a JavaScript number checked for integrality (Autobuild's zod
/// `.int()`): `N.0` and `Ne0` are the integer `N` and verify; `N.5` does not.
async fn integral_exp(c: Ctx) -> CheckResult {
    let secret = c.need_secret()?;
    for exp in [format!("{}.0", c.exp_ms), format!("{}e0", c.exp_ms)] {
        let text = format!(r#"{{"build":"*","session":"*","exp":{exp}}}"#);
        let token = crate::token::mint_text(secret, &text);
        c.get("/builds")
            .bearer(&token)
            .send()
            .await?
            .json_status(200)
            .map_err(|e| format!("scope {text}: {e}"))?;
    }
    let text = format!(r#"{{"build":"*","session":"*","exp":{}.5}}"#, c.exp_ms);
    c.get("/builds")
        .bearer(&crate::token::mint_text(secret, &text))
        .send()
        .await?
        .error_msg(401, "auth", INVALID)
        .map_err(|e| format!("scope {text}: {e}"))?;
    Ok(())
}

async fn expired(c: Ctx) -> CheckResult {
    c.need_secret()?;
    let past = c.exp_ms - crate::runner::TOKEN_MARGIN_MS - 3_600_000;
    for scope in [
        admin_scope(past),
        deployment_scope(past),
        resource_scope("build", "conf-x", "*", 0),
    ] {
        let token = c.mint(&scope)?;
        refused_401(&c, "/builds/conf-x", &token).await?;
    }
    Ok(())
}

/// `exp <= now` is expired: `exp == now` is refused, `now + 1` accepted
/// (the test clock holds `now` still).
async fn expiry_boundary(c: Ctx) -> CheckResult {
    c.need_secret()?;
    let now = crate::runner::server_now_ms(&c, None).await?;
    let (b, _) = c.new_build().await?;
    // Scope, path, and whether it is refused (401 `invalid or expired
    // token`) or answered (200).
    let rows = [
        (admin_scope(now), "/builds".to_string(), true),
        (
            resource_scope("build", &b, "*", now),
            Res::Build.path(&b),
            true,
        ),
        (admin_scope(now + 1), "/builds".to_string(), false),
        (
            resource_scope("build", &b, "*", now + 1),
            Res::Build.path(&b),
            false,
        ),
    ];
    for (scope, path, refused) in rows {
        let r = c.get(&path).bearer(&c.mint(&scope)?).send().await?;
        if refused {
            r.error_msg(401, "auth", INVALID)?;
        } else {
            r.status_is(200)?;
        }
    }
    Ok(())
}

async fn health_open(c: Ctx) -> CheckResult {
    need_auth(&c)?;
    for auth in [None, Some("Bearer garbage"), Some("Basic eDp5")] {
        c.get("/health")
            .authorization(auth)
            .send()
            .await?
            .status_is(200)?;
        c.get("/health")
            .no_identity()
            .authorization(auth)
            .send()
            .await?
            .status_is(200)?;
    }
    Ok(())
}

// ── order ───────────────────────────────────────────────────────────────────

async fn identity_before_auth(c: Ctx) -> CheckResult {
    need_auth(&c)?;
    let unknown = Res::Build.unknown_id();
    for path in [
        "/builds".to_string(),
        Res::Build.path(&unknown),
        format!("{}/events", Res::Repo.path(&Res::Repo.unknown_id())),
    ] {
        for auth in [None, Some("Bearer garbage")] {
            c.get(&path)
                .no_identity()
                .authorization(auth)
                .send()
                .await?
                .error(409, "conflict")?;
            c.post_raw(&path, "{not json")
                .version(Some("0.0.0-not-this"))
                .authorization(auth)
                .send()
                .await?
                .error(409, "conflict")?;
        }
    }
    Ok(())
}

async fn auth_before_lookup(c: Ctx) -> CheckResult {
    need_auth(&c)?;
    for res in [Res::Build, Res::Repo] {
        let p = res.path(&res.unknown_id());
        for tail in ["", "/events", "/artifact-list", "/artifacts?kind=x"] {
            let path = format!("{p}{tail}");
            c.get(&path)
                .no_auth()
                .send()
                .await?
                .error_msg(401, "auth", MISSING)?;
            refused_401(&c, &path, "garbage.token").await?;
        }
    }
    Ok(())
}

async fn auth_before_body(c: Ctx) -> CheckResult {
    need_auth(&c)?;
    let (b, _) = c.new_build().await?;
    let (r, _) = c.new_repo().await?;
    let paths = [
        "/builds".to_string(),
        "/repos".to_string(),
        format!("{}/events", Res::Build.path(&b)),
        format!("{}/deposits", Res::Repo.path(&r)),
        format!("{}/lease/claim", Res::Build.path(&b)),
        format!("{}/events", Res::Build.path(&Res::Build.unknown_id())),
    ];
    for path in &paths {
        c.post_raw(path, "{not json")
            .no_auth()
            .send()
            .await?
            .error_msg(401, "auth", MISSING)?;
        c.post_raw(path, "[1,2")
            .bearer("garbage.token")
            .send()
            .await?
            .error_msg(401, "auth", INVALID)?;
    }
    Ok(())
}

/// A token scoped elsewhere is refused (403) before the unknown-resource
/// lookup and before the body is read.
async fn scope_first(c: Ctx) -> CheckResult {
    let (b, _) = c.new_build().await?;
    let (r, _) = c.new_repo().await?;
    let bt = c.mint(&resource_scope("build", &b, "*", c.exp_ms))?;
    let rt = c.mint(&resource_scope("repo", &r, "*", c.exp_ms))?;
    let ub = Res::Build.unknown_id();
    let ur = Res::Repo.unknown_id();
    let (bq, rq, ubq, urq) = (
        q("build", &b),
        q("repo", &r),
        q("build", &ub),
        q("repo", &ur),
    );
    let (ubp, urp) = (Res::Build.path(&ub), Res::Repo.path(&ur));
    // Token, its holder, path, the target the 403 names.
    let rows = [
        (&bt, &bq, format!("{ubp}/events"), ubq.as_str()),
        (&bt, &bq, format!("{ubp}/deposits"), &ubq),
        (&bt, &bq, "/builds".to_string(), ADMIN),
        (&bt, &bq, "/repos".to_string(), ADMIN),
        (&rt, &rq, format!("{urp}/deposits"), &urq),
        (&rt, &rq, format!("{urp}/lease/claim"), &urq),
        (&rt, &rq, "/repos".to_string(), ADMIN),
        (&rt, &rq, format!("{ubp}/events"), &ubq),
    ];
    for (token, holder, path, target) in &rows {
        let message = denied(holder, target);
        for body in ["{not json", "{\"actor\": 5}"] {
            c.post_raw(path, body)
                .bearer(token)
                .send()
                .await?
                .error_msg(403, "auth", &message)?;
        }
    }
    Ok(())
}

async fn scope_before_catalog(c: Ctx) -> CheckResult {
    let (a, _) = c.new_build().await?;
    let (b, _) = c.new_build().await?;
    let token = c.mint(&resource_scope("build", &a, "*", c.exp_ms))?;
    let bad = invalid_build("unknown_type").event;
    c.post(&format!("{}/events", Res::Build.path(&b)), &bad)
        .bearer(&token)
        .send()
        .await?
        .error_msg(403, "auth", &denied(&q("build", &a), &q("build", &b)))?;
    Ok(())
}

async fn attribution_before_catalog(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let token = c.mint(&resource_scope(res_kind(res), &id, "s_1", c.exp_ms))?;
    let bad = match res {
        Res::Build => invalid_build("unknown_type").event,
        Res::Repo => invalid_repo_first().event,
        Res::Session => return Err(Failure::Skip("a build and repository check".into())),
    };
    let p = res.path(&id);
    for (actor, to) in [
        (json!({"kind": "kernel"}), NON_AGENT.to_string()),
        (agent("s_2"), "session \"s_2\"".to_string()),
    ] {
        let ev = with_actor(bad.clone(), actor);
        let mut writes = vec![
            (format!("{p}/events"), ev.clone()),
            (
                format!("{p}/deposits"),
                json!({"artifacts": [{"kind": "plan", "contentBase64": b64(b"p")}], "event": ev.clone()}),
            ),
        ];
        if res == Res::Build {
            writes.push((
                format!("{p}/events/conditional"),
                json!({"expectedSeq": 0, "event": ev.clone()}),
            ));
        }
        for (path, body) in writes {
            c.post(&path, &body)
                .bearer(&token)
                .send()
                .await?
                .error_msg(403, "auth", &attributed("s_1", &to))?;
        }
    }
    // With its own agent, the same invalid event reaches the catalog: 422.
    let own = with_actor(bad, agent("s_1"));
    c.post(&format!("{p}/events"), &own)
        .bearer(&token)
        .send()
        .await?
        .e422()?;
    c.no_events(res, &id, "refused writes appended events")
        .await?;
    Ok(())
}

fn invalid_repo_first() -> crate::fixtures::InvalidCase {
    let names = crate::fixtures::invalid_repo_names();
    let name = names
        .iter()
        .find(|n| n.contains("unknown_type"))
        .or_else(|| names.first())
        .cloned()
        .unwrap_or_default();
    invalid_repo(&name)
}

async fn own_scope_unknown(c: Ctx, res: Res) -> CheckResult {
    let id = res.unknown_id();
    let token = c.mint(&resource_scope(res_kind(res), &id, "*", c.exp_ms))?;
    // Token, method, path, body: each 404 for the unknown resource.
    let mut rows = vec![
        (token.clone(), "GET", res.path(&id), None),
        (
            token,
            "POST",
            format!("{}/events", res.path(&id)),
            Some(res.simple_event()),
        ),
    ];
    if res == Res::Build {
        let legacy = c.mint(&json!({"build": id, "session": "*", "exp": c.exp_ms}))?;
        rows.push((legacy, "GET", res.path(&id), None));
    }
    for (token, method, path, body) in rows {
        Op::new(method, path, body, 0)
            .send(&c, Some(&format!("Bearer {token}")))
            .await?
            .error_msg(404, "not-found", &res.unknown_msg(&id))?;
    }
    Ok(())
}

// ── matrix ──────────────────────────────────────────────────────────────────

async fn allow_all(c: Ctx, scope: fn(i64) -> Value) -> CheckResult {
    let token = c.mint(&scope(c.exp_ms))?;
    let (b, _) = c.new_build().await?;
    let (r, _) = c.new_repo().await?;
    let mut ops = coll_ops();
    ops.extend(resource_ops(Res::Build, &b));
    ops.extend(resource_ops(Res::Repo, &r));
    ops.extend(repo_sessions_ops(&r));
    ops.extend(session_ops(&session_id()));
    all_allowed(&c, &token, &ops).await?;
    Ok(())
}

async fn matrix_build(c: Ctx, legacy: bool) -> CheckResult {
    c.need_secret()?;
    let (b, _) = c.new_build().await?;
    let (b2, _) = c.new_build().await?;
    let (r, _) = c.new_repo().await?;
    let scope = if legacy {
        json!({"build": b, "session": "*", "exp": c.exp_ms})
    } else {
        resource_scope("build", &b, "*", c.exp_ms)
    };
    let token = c.mint(&scope)?;
    all_allowed(&c, &token, &resource_ops(Res::Build, &b)).await?;
    let os = session_id();
    let rows = vec![
        (resource_ops(Res::Build, &b2), q("build", &b2)),
        (coll_ops(), ADMIN.into()),
        (resource_ops(Res::Repo, &r), q("repo", &r)),
        (repo_sessions_ops(&r), q("repo", &r)),
        (session_ops(&os), q("session", &os)),
    ];
    refused_rows(&c, &token, &q("build", &b), rows).await?;
    Ok(())
}

async fn matrix_repo(c: Ctx) -> CheckResult {
    c.need_secret()?;
    let (r, _) = c.new_repo().await?;
    let (r2, _) = c.new_repo().await?;
    let (b, _) = c.new_build().await?;
    let token = c.mint(&resource_scope("repo", &r, "*", c.exp_ms))?;
    all_allowed(&c, &token, &resource_ops(Res::Repo, &r)).await?;
    all_allowed(&c, &token, &repo_sessions_ops(&r)).await?;
    let mut colls = coll_ops();
    colls.push(Op::new(
        "POST",
        "/repos".into(),
        Some(json!({"repo": r})),
        200,
    ));
    let os = session_id();
    let rows = vec![
        (resource_ops(Res::Repo, &r2), q("repo", &r2)),
        (repo_sessions_ops(&r2), q("repo", &r2)),
        (colls, ADMIN.into()),
        (resource_ops(Res::Build, &b), q("build", &b)),
        (session_ops(&os), q("session", &os)),
    ];
    refused_rows(&c, &token, &q("repo", &r), rows).await?;
    Ok(())
}

async fn matrix_session(c: Ctx) -> CheckResult {
    c.need_secret()?;
    let os = session_id();
    let os2 = session_id();
    let (r, _) = c.new_repo().await?;
    let (b, _) = c.new_build().await?;
    let token = c.mint(&resource_scope("session", &os, "*", c.exp_ms))?;
    all_allowed(&c, &token, &session_ops(&os)).await?;
    let rows = vec![
        (session_ops(&os2), q("session", &os2)),
        (repo_sessions_ops(&r), q("repo", &r)),
        (resource_ops(Res::Repo, &r), q("repo", &r)),
        (resource_ops(Res::Build, &b), q("build", &b)),
        (coll_ops(), ADMIN.into()),
    ];
    refused_rows(&c, &token, &q("session", &os), rows).await?;
    Ok(())
}

/// Build, repo and session scopes with the same id string never cross.
async fn kinds_never_cross(c: Ctx) -> CheckResult {
    c.need_secret()?;
    let x = unique("conf-cross");
    c.post("/builds", &json!({"slug": x, "repo": "acme/conformance"}))
        .send()
        .await?
        .status_is(201)?;
    let repo_created = c.post("/repos", &json!({"repo": x})).send().await?.status == 200;
    let bt = c.mint(&resource_scope("build", &x, "*", c.exp_ms))?;
    let lt = c.mint(&json!({"build": x, "session": "*", "exp": c.exp_ms}))?;
    let rt = c.mint(&resource_scope("repo", &x, "*", c.exp_ms))?;
    let st = c.mint(&resource_scope("session", &x, "*", c.exp_ms))?;
    let (build, repo, session) = (q("build", &x), q("repo", &x), q("session", &x));
    for t in [&bt, &lt] {
        let rows = vec![
            (resource_ops(Res::Repo, &x), repo.clone()),
            (repo_sessions_ops(&x), repo.clone()),
            (session_ops(&x), session.clone()),
        ];
        refused_rows(&c, t, &build, rows).await?;
        c.get(&Res::Build.path(&x))
            .bearer(t)
            .send()
            .await?
            .status_is(200)?;
    }
    let rows = vec![
        (resource_ops(Res::Build, &x), build.clone()),
        (session_ops(&x), session.clone()),
    ];
    refused_rows(&c, &rt, &repo, rows).await?;
    if repo_created {
        c.get(&Res::Repo.path(&x))
            .bearer(&rt)
            .send()
            .await?
            .status_is(200)?;
    }
    let rows = vec![
        (resource_ops(Res::Build, &x), build),
        (resource_ops(Res::Repo, &x), repo.clone()),
        (repo_sessions_ops(&x), repo),
    ];
    refused_rows(&c, &st, &session, rows).await?;
    Ok(())
}

/// An explicit resource whose id is `"*"` is an ordinary scope, not admin.
async fn resource_star(c: Ctx) -> CheckResult {
    c.need_secret()?;
    let (b, _) = c.new_build().await?;
    let (r, _) = c.new_repo().await?;
    let os = session_id();
    for kind in ["build", "repo", "session"] {
        let token = c.mint(&resource_scope(kind, "*", "*", c.exp_ms))?;
        let rows = vec![
            (coll_ops(), ADMIN.into()),
            (resource_ops(Res::Build, &b), q("build", &b)),
            (resource_ops(Res::Repo, &r), q("repo", &r)),
            (session_ops(&os), q("session", &os)),
        ];
        refused_rows(&c, &token, &q(kind, "*"), rows).await?;
    }
    Ok(())
}

/// Attributed operator scopes never authorize raw store routes.
async fn operator_refused(c: Ctx) -> CheckResult {
    c.need_secret()?;
    let (b, _) = c.new_build().await?;
    let (r, _) = c.new_repo().await?;
    let mut ops = coll_ops();
    ops.extend(resource_ops(Res::Build, &b));
    ops.extend(resource_ops(Res::Repo, &r));
    ops.extend(repo_sessions_ops(&r));
    ops.extend(session_ops(&session_id()));
    for scope in [
        json!({"operator": {"user": "alice"}, "exp": c.exp_ms}),
        json!({"operator": {"user": "alice"}, "exp": c.exp_ms, "via": {"kind": "mcp", "client": "c"}}),
    ] {
        let token = c.mint(&scope)?;
        for op in &ops {
            let r = op.send(&c, Some(&format!("Bearer {token}"))).await?;
            r.error(403, "auth")?;
        }
    }
    ensure!(
        c.seqs(Res::Build, &b).await?.is_empty() && c.seqs(Res::Repo, &r).await?.is_empty(),
        "an operator-scoped write appended an event"
    );
    Ok(())
}

// ── attribution ─────────────────────────────────────────────────────────────

async fn wildcard_any_actor(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let token = c.mint(&resource_scope(res_kind(res), &id, "*", c.exp_ms))?;
    let mut n = 0;
    for kind in ["kernel", "agent", "human", "dispatcher", "ingester"] {
        let Some(ev) = event_by(&c, res, kind) else {
            continue;
        };
        let env = c
            .post(&format!("{}/events", res.path(&id)), &ev)
            .bearer(&token)
            .send()
            .await?
            .json_status(201)?;
        same(&format!("{kind} actor"), &env["actor"], &ev["actor"])?;
        n += 1;
    }
    ensure!(n >= 3, "too few actor kinds found in the samples ({n})");
    Ok(())
}

async fn session_agent_only(c: Ctx, res: Res, legacy: bool) -> CheckResult {
    let id = c.create(res).await?;
    let scope = if legacy {
        json!({"build": id, "session": "s_1", "exp": c.exp_ms})
    } else {
        resource_scope(res_kind(res), &id, "s_1", c.exp_ms)
    };
    let token = c.mint(&scope)?;
    let p = res.path(&id);
    let own = |ev: Value| {
        let mut ev = ev;
        ev["actor"]["session"] = json!("s_1");
        ev
    };
    let agent_ev = own(event_by(&c, res, "agent").ok_or("no agent sample")?);
    let dep_ev = own(res.ref_event(json!({"kind": "plan", "rev": -1})));
    ensure!(
        dep_ev["actor"]["kind"] == "agent",
        "the deposit sample's actor is not an agent"
    );
    let deposit = |ev: &Value| json!({"artifacts": [{"kind": "plan", "contentBase64": b64(b"p")}], "event": ev});

    // Refused: every other actor, on every event-bearing write.
    let base = event_by(&c, res, "kernel")
        .or_else(|| event_by(&c, res, "human"))
        .ok_or("no sample")?;
    let refusals = [
        (json!({"kind": "kernel"}), NON_AGENT.to_string()),
        (
            json!({"kind": "human", "user": "alice"}),
            NON_AGENT.to_string(),
        ),
        (json!({"kind": "dispatcher"}), NON_AGENT.to_string()),
        (
            json!({"kind": "ingester", "source": "sentry"}),
            NON_AGENT.to_string(),
        ),
        (agent("s_2"), "session \"s_2\"".to_string()),
        (agent("S_1"), "session \"S_1\"".to_string()),
    ];
    for (actor, to) in &refusals {
        let message = attributed("s_1", to);
        let ev = with_actor(base.clone(), actor.clone());
        c.post(&format!("{p}/events"), &ev)
            .bearer(&token)
            .send()
            .await?
            .error_msg(403, "auth", &message)?;
        let dev = with_actor(dep_ev.clone(), actor.clone());
        c.post(&format!("{p}/deposits"), &deposit(&dev))
            .bearer(&token)
            .send()
            .await?
            .error_msg(403, "auth", &message)?;
        if res == Res::Build {
            c.post(
                &format!("{p}/events/conditional"),
                &json!({"expectedSeq": 0, "event": ev}),
            )
            .bearer(&token)
            .send()
            .await?
            .error_msg(403, "auth", &message)?;
        }
    }
    c.no_events(res, &id, "attribution-refused writes appended events")
        .await?;
    ensure!(
        c.list_artifacts(res, &id, "").await?.is_empty(),
        "an attribution-refused deposit exposed artifacts"
    );

    // Allowed: its own agent session.
    let env = c
        .post(&format!("{p}/events"), &agent_ev)
        .bearer(&token)
        .send()
        .await?
        .json_status(201)?;
    ensure!(
        env["seq"] == json!(1),
        "own-agent append: expected seq 1; got {env}"
    );
    let mut seq = 1;
    if res == Res::Build {
        let env = c
            .post(
                &format!("{p}/events/conditional"),
                &json!({"expectedSeq": 1, "event": agent_ev}),
            )
            .bearer(&token)
            .send()
            .await?
            .json_status(201)?;
        ensure!(
            env["seq"] == json!(2),
            "own-agent conditional append: expected seq 2; got {env}"
        );
        seq = 2;
    }
    let v = c
        .post(&format!("{p}/deposits"), &deposit(&dep_ev))
        .bearer(&token)
        .send()
        .await?
        .json_status(201)?;
    ensure!(
        v["event"]["seq"] == json!(seq + 1) && v["artifacts"][0]["revision"] == json!(0),
        "own-agent deposit after refused ones: expected seq {} and plan revision 0; got {v}",
        seq + 1
    );
    Ok(())
}

async fn reads_puts_leases(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    c.append(res, &id, &res.simple_event()).await?;
    let token = c.mint(&resource_scope(res_kind(res), &id, "s_1", c.exp_ms))?;
    let s = c.with_token(Some(token));
    s.record(res, &id).await?;
    ensure!(
        s.events(res, &id, "").await?.len() == 1,
        "read under an s_1 token"
    );
    s.put_artifact(res, &id, "blob", b"x", None).await?;
    s.get_artifact(res, &id, "?kind=blob").await?;
    s.list_artifacts(res, &id, "").await?;
    ensure!(
        s.claim(res, &id, "h1", 3_600_000).await?,
        "claim under an s_1 token returned false"
    );
    ensure!(
        s.heartbeat(res, &id, "h1").await?,
        "heartbeat under an s_1 token returned false"
    );
    s.release(res, &id, "h1").await?;
    Ok(())
}

// ── via ─────────────────────────────────────────────────────────────────────

fn human_event(res: Res) -> Value {
    match res {
        Res::Build => build_event("pauseRequested"),
        Res::Repo => repo_event("pauseRequested"),
        Res::Session => crate::fixtures::session_event("messageHuman"),
    }
}

fn human_with(res: Res, via: Option<&Value>) -> Value {
    let mut ev = human_event(res);
    ev["actor"] = json!({"kind": "human", "user": "alice"});
    if let Some(v) = via {
        ev["actor"]["via"] = v.clone();
    }
    ev
}

async fn via_stamps(c: Ctx, res: Res, deployment: bool, via: Value) -> CheckResult {
    let id = c.create(res).await?;
    let mut scope = if deployment {
        deployment_scope(c.exp_ms)
    } else {
        resource_scope(res_kind(res), &id, "*", c.exp_ms)
    };
    scope["via"] = via.clone();
    let w = c.scoped(&scope)?;
    let stamped = json!({"kind": "human", "user": "alice", "via": via});
    for (what, ev) in [
        ("no via claimed", human_with(res, None)),
        ("the token's via claimed", human_with(res, Some(&via))),
    ] {
        let env = w.append(res, &id, &ev).await?;
        same(&format!("returned actor ({what})"), &env["actor"], &stamped)?;
    }
    for env in c.events(res, &id, "").await? {
        same("stored actor read back", &env["actor"], &stamped)?;
    }
    // Another via, or a malformed one, is not the token's: 403.
    let other = if via["kind"] == "mcp" {
        json!({"kind": "session", "id": "os_1"})
    } else {
        json!({"kind": "session", "id": "os_2"})
    };
    for claim in [other, json!({"kind": "mcp", "client": "someone-else"})] {
        if claim == via {
            continue;
        }
        w.post(
            &format!("{}/events", res.path(&id)),
            &human_with(res, Some(&claim)),
        )
        .send()
        .await?
        .error(403, "auth")?;
    }
    // Non-human actors are never stamped.
    if let Some(ev) = event_by(
        &c,
        res,
        if res == Res::Build {
            "kernel"
        } else {
            "dispatcher"
        },
    ) {
        let env = w.append(res, &id, &ev).await?;
        same("non-human actor (not stamped)", &env["actor"], &ev["actor"])?;
    }
    ensure!(
        c.seqs(res, &id).await?.len() == 3,
        "expected exactly 3 events"
    );
    Ok(())
}

async fn via_unclaimed(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let plain = c.mint(&resource_scope(res_kind(res), &id, "*", c.exp_ms))?;
    let admin = c.mint(&admin_scope(c.exp_ms))?;
    for token in [&plain, &admin] {
        for via in [
            json!({"kind": "session", "id": "os_1"}),
            json!({"kind": "mcp", "client": "c"}),
        ] {
            c.post(
                &format!("{}/events", res.path(&id)),
                &human_with(res, Some(&via)),
            )
            .bearer(token)
            .send()
            .await?
            .error(403, "auth")?;
        }
        // Without a claim the human actor is stored as written.
        let ev = human_with(res, None);
        let env = c
            .post(&format!("{}/events", res.path(&id)), &ev)
            .bearer(token)
            .send()
            .await?
            .json_status(201)?;
        same(
            "human actor under a token without via",
            &env["actor"],
            &ev["actor"],
        )?;
    }
    ensure!(
        c.seqs(res, &id).await?.len() == 2,
        "refused via writes appended events"
    );
    Ok(())
}

async fn via_non_human(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let via = json!({"kind": "session", "id": "os_1"});
    let mut scope = resource_scope(res_kind(res), &id, "*", c.exp_ms);
    scope["via"] = via.clone();
    let w = c.scoped(&scope)?;
    let mut cases = Vec::new();
    for kind in ["kernel", "dispatcher", "agent"] {
        if let Some(mut ev) = event_by(&c, res, kind) {
            ev["actor"]["via"] = via.clone();
            cases.push(ev);
        }
    }
    ensure!(!cases.is_empty(), "no non-human samples");
    for ev in cases {
        w.post(&format!("{}/events", res.path(&id)), &ev)
            .send()
            .await?
            .e422()?;
    }
    c.no_events(res, &id, "a 422 write appended an event")
        .await?;
    Ok(())
}

/// Stamping applies to conditional appends and deposits too.
async fn via_other_writes(c: Ctx) -> CheckResult {
    let (b, _) = c.new_build().await?;
    let via = json!({"kind": "mcp", "client": "c"});
    let mut scope = resource_scope("build", &b, "*", c.exp_ms);
    scope["via"] = via.clone();
    let w = c.scoped(&scope)?;
    let stamped = json!({"kind": "human", "user": "alice", "via": via});
    let env = w
        .post(
            &format!("{}/events/conditional", Res::Build.path(&b)),
            &json!({"expectedSeq": 0, "event": human_with(Res::Build, None)}),
        )
        .send()
        .await?
        .json_status(201)?;
    same("conditional append actor", &env["actor"], &stamped)?;
    let dep = json!({"artifacts": [{"kind": "note", "contentBase64": b64(b"n")}], "event": human_with(Res::Build, None)});
    let v = w.deposit(Res::Build, &b, &dep).await?.json_status(201)?;
    same("deposit event actor", &v["event"]["actor"], &stamped)?;
    let bad = json!({"artifacts": [{"kind": "note", "contentBase64": b64(b"n")}], "event": human_with(Res::Build, Some(&json!({"kind": "mcp", "client": "x"})))});
    w.deposit(Res::Build, &b, &bad).await?.error(403, "auth")?;
    let metas = c.list_artifacts(Res::Build, &b, "").await?;
    ensure!(
        metas.len() == 1,
        "a refused deposit exposed artifacts: {metas:?}"
    );
    Ok(())
}

async fn open_via_unchanged(c: Ctx, res: Res) -> CheckResult {
    need_open(&c)?;
    let id = c.create(res).await?;
    for via in [
        json!({"kind": "session", "id": "os_1"}),
        json!({"kind": "mcp", "client": "c"}),
    ] {
        let ev = human_with(res, Some(&via));
        let env = c.append(res, &id, &ev).await?;
        same(
            "open-mode human actor with via",
            &env["actor"],
            &ev["actor"],
        )?;
    }
    let ev = human_with(res, None);
    let env = c.append(res, &id, &ev).await?;
    same(
        "open-mode human actor without via",
        &env["actor"],
        &ev["actor"],
    )?;
    Ok(())
}

async fn open_ignores_authorization(c: Ctx) -> CheckResult {
    need_open(&c)?;
    let (b, _) = c.new_build().await?;
    for auth in ["Bearer garbage", "Basic eDp5", "Bearer"] {
        c.get(&Res::Build.path(&b))
            .authorization(Some(auth))
            .send()
            .await?
            .status_is(200)?;
    }
    // An agent actor of any session is accepted: no attribution gate.
    let ev = with_actor(build_event("observationAgent"), agent("s_anything"));
    c.append(Res::Build, &b, &ev).await?;
    Ok(())
}

// ── no mutation; held reads ─────────────────────────────────────────────────

async fn no_mutation(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let other = c.create(res).await?;
    let p = res.path(&id);
    let wrong = c.mint(&resource_scope(res_kind(res), &other, "*", c.exp_ms))?;
    let s1 = c.mint(&resource_scope(res_kind(res), &id, "s_1", c.exp_ms))?;
    let dep = json!({
        "artifacts": [{"kind": "plan", "contentBase64": b64(b"p")}],
        "event": res.ref_event(json!({"kind": "plan", "rev": -1})),
    });
    let writes = [
        (format!("{p}/events"), res.simple_event()),
        (
            format!("{p}/artifacts"),
            json!({"kind": "plan", "contentBase64": b64(b"a")}),
        ),
        (format!("{p}/deposits"), dep.clone()),
        (
            format!("{p}/lease/claim"),
            json!({"holder": "intruder", "ttlMs": 3_600_000}),
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
    // Attribution refusals (a kernel-ish actor under an s_1 token).
    let mut refused_dep = dep;
    refused_dep["event"]["actor"] = json!({"kind": "kernel"});
    for (path, body) in [
        (
            format!("{p}/events"),
            with_actor(res.simple_event(), json!({"kind": "kernel"})),
        ),
        (format!("{p}/deposits"), refused_dep),
    ] {
        c.post(&path, &body)
            .bearer(&s1)
            .send()
            .await?
            .error(403, "auth")?;
    }
    c.no_events(res, &id, "a refused write appended an event")
        .await?;
    let metas = c.list_artifacts(res, &id, "").await?;
    ensure!(
        metas.is_empty(),
        "a refused write exposed artifacts: {metas:?}"
    );
    let rec = c.record(res, &id).await?;
    ensure!(
        rec.get("lease").is_none(),
        "a refused claim stored a lease: {rec}"
    );
    let meta = c.put_artifact(res, &id, "plan", b"first", None).await?;
    ensure!(
        meta["revision"] == json!(0),
        "refused writes consumed an artifact revision: first admin put got {meta}"
    );
    ensure!(
        c.claim(res, &id, "owner", 3_600_000).await?,
        "a refused claim holds the lease"
    );
    let env = c.append(res, &id, &res.simple_event()).await?;
    ensure!(
        env["seq"] == json!(1),
        "refused writes consumed a sequence: got {env}"
    );
    Ok(())
}

async fn held_refused(c: Ctx, res: Res) -> CheckResult {
    need_auth(&c)?;
    let id = c.create(res).await?;
    c.append(res, &id, &res.simple_event()).await?;
    let path = format!("{}/events?since=1&wait=20", res.path(&id));
    let limit = std::time::Duration::from_secs(5);
    let mut cases: Vec<(&str, Option<String>, bool, u16, &str)> = vec![
        ("no token", None, true, 401, "auth"),
        (
            "a bad token",
            Some("Bearer garbage.token".into()),
            true,
            401,
            "auth",
        ),
        (
            "wrong version headers",
            c.token.as_ref().map(|t| format!("Bearer {t}")),
            false,
            409,
            "conflict",
        ),
    ];
    if c.secret.is_some() {
        let other = c.create(res).await?;
        let wrong = c.mint(&resource_scope(res_kind(res), &other, "*", c.exp_ms))?;
        cases.push((
            "a wrong-scope token",
            Some(format!("Bearer {wrong}")),
            true,
            403,
            "auth",
        ));
    }
    for (what, auth, identity, status, kind) in cases {
        let mut call = c.get(&path).authorization(auth.as_deref());
        if !identity {
            call = call.version(Some("0.0.0-not-this"));
        }
        let r = call.send().await?;
        r.error(status, kind)?;
        ensure!(
            r.elapsed < limit,
            "a held read with {what} answered after {:?}; expected at once (under {limit:?})",
            r.elapsed
        );
    }
    Ok(())
}
