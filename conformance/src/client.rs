//! The HTTP side of the suite: [`Ctx`] holds the base URL and identity, builds
//! requests, and wraps responses in [`Resp`], whose assertions produce failure
//! messages naming what was sent, what was expected and what came back.
//!
//! Paths are passed pre-encoded (use [`crate::util::enc`] for segments) so
//! checks control the exact bytes on the wire, including malformed escapes.

use std::time::{Duration, Instant};

use anyhow::Context as _;

use serde_json::{Value, json};

use crate::util::{b64, enc, format_iso_ms, is_iso_ms, parse_iso_ms, trunc, unique};

/// The shipped protocol version this suite speaks.
pub const PROTOCOL_VERSION: &str = "2";

/// How the client trusts an `https://` server beyond the system's roots.
#[derive(Debug, Clone, Default)]
pub struct Tls {
    /// PEM certificates (a private CA) trusted in addition to the system's.
    pub ca_file: Option<std::path::PathBuf>,
    /// Accept any certificate: for tests against a self-signed front only.
    pub insecure: bool,
}

/// Everything a check needs to talk to one server. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Ctx {
    /// Base URL without a trailing slash, e.g. `http://127.0.0.1:8787`.
    pub base: String,
    pub http: reqwest::Client,
    /// How `http` trusts the server, kept so that [`Ctx::unpooled`] builds
    /// its client the same way.
    tls: Tls,
    /// Sent as `X-Autobuild-Version` and expected in `/health`.
    pub autobuild_version: String,
    /// Sent as `X-Autobuild-Protocol-Version`.
    pub protocol_version: String,
    /// The server's decoded-byte artifact ceiling.
    pub max_artifact_bytes: usize,
    /// Whether `POST /_test/clock` exists (detected by the runner).
    pub clock: bool,
    /// The bearer token sent on every request (authenticated mode): the
    /// admin token minted from [`Ctx::secret`], or the runner's `--token`.
    pub token: Option<String>,
    /// The server's signing secret, when the runner has it: checks mint
    /// their own tokens (section 7).
    pub secret: Option<String>,
    /// `exp` for tokens the checks mint: the server's time when the run
    /// started plus a margin (see [`crate::runner::authenticate`]).
    pub exp_ms: i64,
}

impl Ctx {
    /// The catalog set the server serves this context's identity, whose
    /// catalog fixtures its checks send ([`crate::fixtures::catalog_set`]).
    pub fn catalog_set(&self) -> String {
        crate::fixtures::catalog_set(&self.autobuild_version, &self.protocol_version)
    }

    pub fn new(base: &str, autobuild_version: &str) -> anyhow::Result<Ctx> {
        Ctx::with_tls(base, autobuild_version, &Tls::default())
    }

    /// [`Ctx::new`] for an `https://` server whose certificate the system's
    /// trust store does not know: `tls` adds a CA or, for tests, trusts any.
    pub fn with_tls(base: &str, autobuild_version: &str, tls: &Tls) -> anyhow::Result<Ctx> {
        let http = http_client(tls, 64)?;
        Ok(Ctx {
            base: base.trim_end_matches('/').to_string(),
            http,
            tls: tls.clone(),
            autobuild_version: autobuild_version.to_string(),
            protocol_version: PROTOCOL_VERSION.to_string(),
            max_artifact_bytes: 1_048_576,
            clock: false,
            token: None,
            secret: None,
            exp_ms: 0,
        })
    }

    /// This context on a client that never reuses connections, trusting the
    /// server as this one does: for oversized bodies, which a server may
    /// answer (404, 413) without reading and then close the connection, which
    /// must not break the shared pool.
    pub fn unpooled(&self) -> Result<Ctx, String> {
        Ok(Ctx {
            http: http_client(&self.tls, 0)
                .map_err(|e| format!("building an unpooled HTTP client: {e:#}"))?,
            ..self.clone()
        })
    }

    /// True when requests carry a bearer token (the runner was given a
    /// secret or a token): the server is expected to be in authenticated mode.
    pub fn authenticated(&self) -> bool {
        self.token.is_some()
    }

    /// The secret, or a skip when the runner has none.
    pub fn need_secret(&self) -> Result<&str, crate::checks::Failure> {
        self.secret
            .as_deref()
            .ok_or_else(|| crate::checks::Failure::Skip(crate::checks::NEEDS_SECRET.to_string()))
    }

    /// Mints a token for `scope` (skips without a secret).
    pub fn mint(&self, scope: &Value) -> Result<String, crate::checks::Failure> {
        Ok(crate::token::mint(self.need_secret()?, scope))
    }

    /// This context with another default token (`None`: no `Authorization`).
    pub fn with_token(&self, token: Option<String>) -> Ctx {
        let mut c = self.clone();
        c.token = token;
        c
    }

    /// This context sending a token minted for `scope`.
    pub fn scoped(&self, scope: &Value) -> Result<Ctx, crate::checks::Failure> {
        Ok(self.with_token(Some(self.mint(scope)?)))
    }

    /// Who may write `event` (its `actor`) in this mode. In authenticated
    /// mode a human actor with a `via` must be written with a token carrying
    /// that `via` (section 7, "Delegated-write attribution"): a well-formed
    /// one gets a deployment token with it; a malformed one cannot be carried
    /// by any token, so the write is refused (`None`).
    pub fn writer_for(&self, event: &Value) -> Result<Option<Ctx>, crate::checks::Failure> {
        let actor = &event["actor"];
        let Some(via) = actor.get("via") else {
            return Ok(Some(self.clone()));
        };
        if !self.authenticated() || actor["kind"] != "human" {
            return Ok(Some(self.clone()));
        }
        if !crate::token::is_via(via) {
            return Ok(None);
        }
        let mut scope = crate::token::deployment_scope(self.exp_ms);
        scope["via"] = via.clone();
        Ok(Some(self.scoped(&scope)?))
    }

    /// A request with the identity headers set; `path` includes any query.
    pub fn call(&self, method: &str, path: &str) -> Call<'_> {
        Call {
            ctx: self,
            method: method.to_string(),
            path: path.to_string(),
            body: None,
            version: Some(self.autobuild_version.clone()),
            protocol: Some(self.protocol_version.clone()),
            authorization: self.token.as_ref().map(|t| format!("Bearer {t}")),
            headers: Vec::new(),
        }
    }

    pub fn get(&self, path: &str) -> Call<'_> {
        self.call("GET", path)
    }

    pub fn post(&self, path: &str, body: &Value) -> Call<'_> {
        self.call("POST", path).raw(body.to_string())
    }

    pub fn post_raw(&self, path: &str, body: impl Into<String>) -> Call<'_> {
        self.call("POST", path).raw(body)
    }

    // ── resource helpers (each asserts the documented success status) ───────

    /// `POST /builds` with a fresh slug; returns `(slug, record)`.
    pub async fn new_build(&self) -> Result<(String, Value), String> {
        let slug = unique("conf");
        let rec = self
            .post(
                "/builds",
                &json!({"slug": slug, "repo": "acme/conformance"}),
            )
            .send()
            .await?
            .json_status(201)?;
        Ok((slug, rec))
    }

    /// `POST /repos` with a fresh id containing a `/`; returns `(id, record)`.
    pub async fn new_repo(&self) -> Result<(String, Value), String> {
        let id = format!("{}/widgets", unique("acme"));
        let rec = self
            .post("/repos", &json!({"repo": id}))
            .send()
            .await?
            .json_status(200)?;
        Ok((id, rec))
    }

    /// Creates a fresh build or repository.
    pub async fn create(&self, res: Res) -> Result<String, String> {
        match res {
            Res::Build => self.new_build().await.map(|(s, _)| s),
            Res::Repo => self.new_repo().await.map(|(s, _)| s),
            Res::Session => self.new_session().await,
        }
    }

    /// A new operator session of a new repository; its id.
    pub async fn new_session(&self) -> Result<String, String> {
        let (repo, _) = self.new_repo().await?;
        let path = format!("{}/sessions", Res::Repo.path(&repo));
        let r = self
            .post(&path, &json!({"repo": repo, "operator": "alice"}))
            .send()
            .await?;
        let rec = r.json_status(201)?;
        rec["id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| r.fail("a session record with a string \"id\""))
    }

    /// A new resource holding `n` events (`n` ≥ its initial events).
    pub async fn with_events(&self, res: Res, n: usize) -> Result<String, String> {
        let id = self.create(res).await?;
        self.append_n(res, &id, n.saturating_sub(res.initial_events()))
            .await?;
        Ok(id)
    }

    /// `GET /builds/{slug}` or `GET /repos/{repo}` (expects 200).
    pub async fn record(&self, res: Res, id: &str) -> Result<Value, String> {
        self.get(&res.path(id)).send().await?.json_status(200)
    }

    /// Ordinary append (expects 201); returns the envelope.
    pub async fn append(&self, res: Res, id: &str, event: &Value) -> Result<Value, String> {
        self.post(&format!("{}/events", res.path(id)), event)
            .send()
            .await?
            .json_status(201)
    }

    /// Appends `n` copies of the resource's simple valid event.
    pub async fn append_n(&self, res: Res, id: &str, n: usize) -> Result<(), String> {
        for _ in 0..n {
            self.append(res, id, &res.simple_event()).await?;
        }
        Ok(())
    }

    /// `GET …/events{query}` (expects 200 and an array).
    pub async fn events(&self, res: Res, id: &str, query: &str) -> Result<Vec<Value>, String> {
        let r = self
            .get(&format!("{}/events{query}", res.path(id)))
            .send()
            .await?;
        let v = r.json_status(200)?;
        v.as_array()
            .cloned()
            .ok_or_else(|| r.fail("a JSON array of event envelopes"))
    }

    /// Sequence numbers of all events.
    /// Fails with `what` unless the resource has no events: a refused write
    /// appends nothing.
    pub async fn no_events(&self, res: Res, id: &str, what: &str) -> Result<(), String> {
        if self.seqs(res, id).await?.is_empty() {
            Ok(())
        } else {
            Err(what.to_string())
        }
    }

    pub async fn seqs(&self, res: Res, id: &str) -> Result<Vec<i64>, String> {
        Ok(self
            .events(res, id, "")
            .await?
            .iter()
            .map(|e| e["seq"].as_i64().unwrap_or(-1))
            .collect())
    }

    /// `POST …/artifacts` (expects 201); returns the metadata.
    pub async fn put_artifact(
        &self,
        res: Res,
        id: &str,
        kind: &str,
        bytes: &[u8],
        metadata: Option<Value>,
    ) -> Result<Value, String> {
        let mut body = json!({"kind": kind, "contentBase64": b64(bytes)});
        if let Some(m) = metadata {
            body["metadata"] = m;
        }
        self.post(&format!("{}/artifacts", res.path(id)), &body)
            .send()
            .await?
            .json_status(201)
    }

    /// `GET …/artifacts{query}` (expects 200); returns the value (may be null).
    pub async fn get_artifact(&self, res: Res, id: &str, query: &str) -> Result<Value, String> {
        self.get(&format!("{}/artifacts{query}", res.path(id)))
            .send()
            .await?
            .json_status(200)
    }

    /// `GET …/artifact-list{query}` (expects 200 and an array).
    pub async fn list_artifacts(
        &self,
        res: Res,
        id: &str,
        query: &str,
    ) -> Result<Vec<Value>, String> {
        let r = self
            .get(&format!("{}/artifact-list{query}", res.path(id)))
            .send()
            .await?;
        let v = r.json_status(200)?;
        v.as_array()
            .cloned()
            .ok_or_else(|| r.fail("a JSON array of artifact metadata"))
    }

    /// `POST …/deposits` (any status).
    pub async fn deposit(&self, res: Res, id: &str, body: &Value) -> Result<Resp, String> {
        self.post(&format!("{}/deposits", res.path(id)), body)
            .send()
            .await
    }

    /// A lease operation (`claim`, `heartbeat`, `release`); expects 200 with
    /// exactly `{"ok": bool}` and returns the boolean.
    pub async fn lease(&self, res: Res, id: &str, op: &str, body: &Value) -> Result<bool, String> {
        let r = self
            .post(&format!("{}/lease/{op}", res.path(id)), body)
            .send()
            .await?;
        let v = r.json_status(200)?;
        match v.as_object() {
            Some(o) if o.len() == 1 && o.get("ok").is_some_and(Value::is_boolean) => {
                Ok(o["ok"] == true)
            }
            _ => Err(r.fail(r#"exactly {"ok": <boolean>}"#)),
        }
    }

    pub async fn claim(&self, res: Res, id: &str, holder: &str, ttl: i64) -> Result<bool, String> {
        self.lease(res, id, "claim", &json!({"holder": holder, "ttlMs": ttl}))
            .await
    }

    pub async fn heartbeat(&self, res: Res, id: &str, holder: &str) -> Result<bool, String> {
        self.lease(res, id, "heartbeat", &json!({"holder": holder}))
            .await
    }

    pub async fn release(&self, res: Res, id: &str, holder: &str) -> Result<bool, String> {
        self.lease(res, id, "release", &json!({"holder": holder}))
            .await
    }

    // ── test clock (docs/decisions.md, 11) ──────────────────────────────────

    /// The server's current time, read from the `createdAt` of a fresh
    /// repository record.
    pub async fn now_ms(&self) -> Result<i64, String> {
        let (_, rec) = self.new_repo().await?;
        let created = rec["createdAt"].as_str().unwrap_or_default();
        parse_iso_ms(created).ok_or_else(|| format!("createdAt {created:?} is not an ISO time"))
    }

    /// `POST /_test/clock {"now": …}` (expects 200), with this context's
    /// token: in authenticated mode abstore takes only an admin or
    /// deployment token there (the runner's default token is admin).
    pub async fn set_clock(&self, ms: i64) -> Result<(), String> {
        let r = self
            .post("/_test/clock", &json!({"now": format_iso_ms(ms)}))
            .send()
            .await?;
        if r.status != 200 {
            return Err(r.fail("200 from the test clock route"));
        }
        Ok(())
    }

    /// Moves the clock forward by `delta_ms` from the server's current time;
    /// returns the new time.
    pub async fn advance(&self, delta_ms: i64) -> Result<i64, String> {
        let now = self.now_ms().await?;
        let t = now + delta_ms.max(0);
        self.set_clock(t).await?;
        Ok(t)
    }
}

/// The resource families that share rules: builds and repositories
/// (sections 3 and 4) share most; operator sessions (section 5) share the
/// event reads, and start with their `session.created` event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Res {
    Build,
    Repo,
    Session,
}

impl Res {
    /// Collection route: `/builds` or `/repos`.
    pub fn coll(self) -> &'static str {
        match self {
            Res::Build => "/builds",
            Res::Repo => "/repos",
            Res::Session => "/sessions",
        }
    }

    /// The resource key in envelopes and artifact metadata.
    pub fn key(self) -> &'static str {
        match self {
            Res::Build => "build",
            Res::Repo => "repo",
            Res::Session => "session",
        }
    }

    /// `/builds/{slug}` or `/repos/{repo}` with the id percent-encoded.
    pub fn path(self, id: &str) -> String {
        format!("{}/{}", self.coll(), enc(id))
    }

    /// The exact 404 message for an unknown resource.
    pub fn unknown_msg(self, id: &str) -> String {
        match self {
            Res::Build => format!("unknown build \"{id}\""),
            Res::Repo => format!("unknown repo \"{id}\""),
            Res::Session => format!("unknown session \"{id}\""),
        }
    }

    /// A fresh id that names no existing resource.
    pub fn unknown_id(self) -> String {
        match self {
            Res::Build => unique("conf-missing"),
            Res::Repo => format!("{}/missing", unique("acme")),
            Res::Session => format!("os_{}", crate::util::random_hex()),
        }
    }

    /// A simple valid event write for this resource's catalog.
    pub fn simple_event(self) -> Value {
        match self {
            Res::Build => crate::fixtures::build_event("observation"),
            Res::Repo => crate::fixtures::repo_event("pauseRequested"),
            Res::Session => crate::fixtures::session_event("messageHuman"),
        }
    }

    /// A second, different valid event write.
    pub fn other_event(self) -> Value {
        match self {
            Res::Build => crate::fixtures::build_event("pauseRequested"),
            Res::Repo => crate::fixtures::repo_event("intakeSet"),
            Res::Session => crate::fixtures::session_event("turnStarted"),
        }
    }

    /// A valid event write whose payload refers to the placeholder
    /// `{kind, rev}` given: a build's or repository's `artifact`; on a
    /// session, inside an approval request's free-form `input` (the public
    /// session catalog has no artifact reference, so nothing there rejects
    /// an unsubstituted placeholder).
    pub fn ref_event(self, artifact: Value) -> Value {
        let mut e = match self {
            Res::Build => crate::fixtures::build_event("planCompleted"),
            Res::Repo => crate::fixtures::repo_event("proposalsSubmitted"),
            Res::Session => crate::fixtures::session_event("approvalRequested"),
        };
        match self {
            Res::Build | Res::Repo => e["payload"]["artifact"] = artifact,
            Res::Session => e["payload"]["input"]["artifacts"] = Value::Array(vec![artifact]),
        }
        e
    }

    /// Events a new resource has: a session's `session.created`.
    pub fn initial_events(self) -> usize {
        match self {
            Res::Build | Res::Repo => 0,
            Res::Session => 1,
        }
    }

    /// An event write the catalog rejects because the actor kind is not
    /// allowed to emit the type.
    pub fn disallowed_actor_event(self) -> Value {
        let mut e = self.ref_event(json!({"kind": "plan", "rev": -1}));
        e["actor"] = json!({"kind": "human", "user": "mallory"});
        e
    }

    /// The section number of the family's operations table.
    pub fn sec(self) -> &'static str {
        match self {
            Res::Build => "3",
            Res::Repo => "4",
            Res::Session => "5",
        }
    }
}

/// A request under construction.
pub struct Call<'a> {
    ctx: &'a Ctx,
    method: String,
    path: String,
    body: Option<String>,
    version: Option<String>,
    protocol: Option<String>,
    /// The full `Authorization` value (`None`: header absent).
    authorization: Option<String>,
    headers: Vec<(String, String)>,
}

impl Call<'_> {
    /// Sets a raw body (sent with `Content-Type: application/json`).
    pub fn raw(mut self, body: impl Into<String>) -> Self {
        self.body = Some(body.into());
        self
    }

    /// Omits both identity headers.
    pub fn no_identity(mut self) -> Self {
        self.version = None;
        self.protocol = None;
        self
    }

    /// Overrides (or with `None` omits) `X-Autobuild-Version`.
    pub fn version(mut self, v: Option<&str>) -> Self {
        self.version = v.map(str::to_string);
        self
    }

    /// Overrides (or with `None` omits) `X-Autobuild-Protocol-Version`.
    pub fn protocol(mut self, v: Option<&str>) -> Self {
        self.protocol = v.map(str::to_string);
        self
    }

    /// Sends `Authorization: Bearer <token>` instead of the context's token.
    pub fn bearer(mut self, token: &str) -> Self {
        self.authorization = Some(format!("Bearer {token}"));
        self
    }

    /// Sends exactly this `Authorization` value (`None`: no header).
    pub fn authorization(mut self, value: Option<&str>) -> Self {
        self.authorization = value.map(str::to_string);
        self
    }

    /// Omits the `Authorization` header.
    pub fn no_auth(self) -> Self {
        self.authorization(None)
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    fn describe(&self) -> String {
        let mut s = format!("{} {}", self.method, self.path);
        match (&self.version, &self.protocol) {
            (Some(v), Some(p))
                if *v == self.ctx.autobuild_version && *p == self.ctx.protocol_version => {}
            (v, p) => s.push_str(&format!(
                " [X-Autobuild-Version: {}, X-Autobuild-Protocol-Version: {}]",
                v.as_deref().unwrap_or("<absent>"),
                p.as_deref().unwrap_or("<absent>")
            )),
        }
        if let Some(a) = &self.authorization {
            s.push_str(&format!(" [Authorization: {}]", describe_authorization(a)));
        } else if self.ctx.token.is_some() {
            s.push_str(" [no Authorization]");
        }
        if let Some(b) = &self.body {
            s.push_str(&format!(" body={}", trunc(b, 400)));
        }
        s
    }

    pub async fn send(self) -> Result<Resp, String> {
        let sent = self.describe();
        let method = reqwest::Method::from_bytes(self.method.as_bytes())
            .map_err(|e| format!("bad method {}: {e}", self.method))?;
        let url = format!("{}{}", self.ctx.base, self.path);
        let mut rb = self.ctx.http.request(method, &url);
        if let Some(v) = &self.version {
            rb = rb.header("X-Autobuild-Version", v);
        }
        if let Some(p) = &self.protocol {
            rb = rb.header("X-Autobuild-Protocol-Version", p);
        }
        if let Some(a) = &self.authorization {
            rb = rb.header("Authorization", a);
        }
        for (k, v) in &self.headers {
            rb = rb.header(k, v);
        }
        if let Some(b) = self.body {
            rb = rb.header("Content-Type", "application/json").body(b);
        }
        let start = Instant::now();
        let resp = rb
            .send()
            .await
            .map_err(|e| format!("sent {sent}; request failed: {e}"))?;
        let status = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let text = resp
            .text()
            .await
            .map_err(|e| format!("sent {sent}; reading the response failed: {e}"))?;
        let elapsed = start.elapsed();
        let json = serde_json::from_str(&text).ok();
        Ok(Resp {
            sent,
            status,
            content_type,
            text,
            json,
            elapsed,
        })
    }
}

/// An `Authorization` value for failure messages: a bearer token whose first
/// segment decodes to JSON is shown as that scope (the signature elided).
fn describe_authorization(value: &str) -> String {
    use base64::Engine as _;
    let decoded = value
        .strip_prefix("Bearer ")
        .and_then(|t| t.split_once('.'))
        .and_then(|(p, _)| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(p)
                .ok()
        })
        .and_then(|b| String::from_utf8(b).ok())
        .filter(|t| serde_json::from_str::<Value>(t).is_ok());
    match decoded {
        Some(scope) => format!("Bearer <scope {}>", trunc(&scope, 300)),
        None => trunc(value, 120),
    }
}

/// A received response plus the description of the request that caused it.
#[derive(Debug, Clone)]
pub struct Resp {
    pub sent: String,
    pub status: u16,
    pub content_type: Option<String>,
    pub text: String,
    pub json: Option<Value>,
    pub elapsed: Duration,
}

impl Resp {
    /// `"<status> <body>"`, truncated.
    pub fn got(&self) -> String {
        format!("{} {}", self.status, trunc(&self.text, 600))
    }

    /// A failure message: sent / expected / got.
    pub fn fail(&self, expected: impl std::fmt::Display) -> String {
        format!(
            "sent {}; expected {expected}; got {}",
            self.sent,
            self.got()
        )
    }

    /// True when the media type is `application/json` (parameters allowed).
    pub fn is_json_ct(&self) -> bool {
        self.content_type.as_deref().is_some_and(|ct| {
            ct.split(';')
                .next()
                .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
        })
    }

    /// Asserts `Content-Type: application/json`.
    pub fn json_ct(&self) -> Result<(), String> {
        if self.is_json_ct() {
            Ok(())
        } else {
            Err(format!(
                "sent {}; expected Content-Type: application/json; got Content-Type {:?} with {}",
                self.sent,
                self.content_type,
                self.got()
            ))
        }
    }

    /// Asserts the status only.
    pub fn status_is(&self, status: u16) -> Result<(), String> {
        if self.status == status {
            Ok(())
        } else {
            Err(self.fail(format!("status {status}")))
        }
    }

    /// Asserts status, JSON content type and a JSON body; returns the body.
    pub fn json_status(&self, status: u16) -> Result<Value, String> {
        self.status_is(status)?;
        self.json_ct()?;
        self.json
            .clone()
            .ok_or_else(|| self.fail(format!("status {status} with a JSON body")))
    }

    /// Asserts an error response: status, JSON content type, exactly the
    /// keys `error` (string) and `kind` (the given kind). Returns the message.
    pub fn error(&self, status: u16, kind: &str) -> Result<String, String> {
        let expected = format!("{status} {{\"error\": …, \"kind\": \"{kind}\"}}");
        if self.status != status {
            return Err(self.fail(&expected));
        }
        self.json_ct()?;
        let obj = self
            .json
            .as_ref()
            .and_then(Value::as_object)
            .ok_or_else(|| self.fail(&expected))?;
        let msg = obj.get("error").and_then(Value::as_str);
        if obj.len() != 2 || msg.is_none() || obj.get("kind") != Some(&json!(kind)) {
            return Err(self.fail(format!("{expected} with exactly those two keys")));
        }
        Ok(msg.unwrap_or_default().to_string())
    }

    /// Asserts a `400 validation` error.
    pub fn e400(&self) -> Result<String, String> {
        self.error(400, "validation")
    }

    /// Asserts a `404 not-found` error.
    pub fn e404(&self) -> Result<String, String> {
        self.error(404, "not-found")
    }

    /// Asserts a `422 validation` error.
    pub fn e422(&self) -> Result<String, String> {
        self.error(422, "validation")
    }

    /// Asserts an error with an exact message.
    pub fn error_msg(&self, status: u16, kind: &str, message: &str) -> Result<(), String> {
        let got = self.error(status, kind)?;
        if got == message {
            Ok(())
        } else {
            Err(self.fail(format!("{status} {kind} with error exactly {message:?}")))
        }
    }
}

/// Asserts that a record/envelope/meta value is a JSON object whose keys are
/// all in `allowed` and include every key in `required`; no value is `null`.
pub fn shape(what: &str, v: &Value, required: &[&str], allowed: &[&str]) -> Result<(), String> {
    let obj = v.as_object().ok_or_else(|| {
        format!(
            "{what}: expected a JSON object, got {}",
            trunc(&v.to_string(), 400)
        )
    })?;
    for k in required {
        if !obj.contains_key(*k) {
            return Err(format!(
                "{what}: expected member {k:?}; got {}",
                trunc(&v.to_string(), 400)
            ));
        }
    }
    for (k, val) in obj {
        if !allowed.contains(&k.as_str()) && !required.contains(&k.as_str()) {
            return Err(format!(
                "{what}: unexpected member {k:?} (allowed: {allowed:?}); got {}",
                trunc(&v.to_string(), 400)
            ));
        }
        if val.is_null() {
            return Err(format!(
                "{what}: member {k:?} is null; optional members must be omitted; got {}",
                trunc(&v.to_string(), 400)
            ));
        }
    }
    Ok(())
}

/// Asserts that `v[key]` is an ISO time string and returns it in epoch ms.
pub fn time_of(what: &str, v: &Value, key: &str) -> Result<i64, String> {
    let s = v[key].as_str().unwrap_or_default();
    if !is_iso_ms(s) {
        return Err(format!(
            "{what}: {key} must match YYYY-MM-DDTHH:MM:SS.mmmZ; got {}",
            v[key]
        ));
    }
    parse_iso_ms(s).ok_or_else(|| format!("{what}: {key} {s:?} is not a valid date"))
}

/// Asserts equality of two JSON values with a descriptive message.
pub fn same(what: &str, got: &Value, want: &Value) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!(
            "{what}: expected {}; got {}",
            trunc(&want.to_string(), 500),
            trunc(&got.to_string(), 500)
        ))
    }
}

/// `ensure!(cond, "fmt", args…)`: fail the check with a formatted message.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+).into());
        }
    };
}

/// The HTTP client of a context: `tls`'s trust, at most `idle_per_host`
/// idle connections kept for reuse.
fn http_client(tls: &Tls, idle_per_host: usize) -> anyhow::Result<reqwest::Client> {
    let mut builder = reqwest::Client::builder()
        .timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(idle_per_host);
    if let Some(path) = &tls.ca_file {
        let pem =
            std::fs::read(path).with_context(|| format!("reading --ca-file {}", path.display()))?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .with_context(|| format!("--ca-file {} is not PEM certificates", path.display()))?;
        builder = builder.tls_certs_merge(certs);
    }
    if tls.insecure {
        builder = builder.tls_danger_accept_invalid_certs(true);
    }
    Ok(builder.build()?)
}
