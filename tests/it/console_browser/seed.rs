//! What the console shows, written the way clients write it: through the
//! protocol's HTTP routes, with tokens the server's secret signs (admin for
//! the store's records, deployment for tickets, as docs/tickets.md says).

use abstore_conformance::token;
use base64::Engine as _;
use serde_json::{Value, json};

use crate::support::{self, Raw, enc};

pub const SECRET: &str = "console-browser-secret-0123456789abcdef";

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A token for `scope` (an `exp` an hour from now is added).
pub fn mint(scope: Value) -> String {
    let mut scope = scope;
    scope["exp"] = json!(now_ms() + 3_600_000);
    token::mint(SECRET, &scope)
}

pub fn admin() -> String {
    mint(json!({"build": "*", "session": "*"}))
}

pub fn deployment() -> String {
    mint(json!({"operator": true, "session": "*"}))
}

pub fn repo_token(repo: &str) -> String {
    mint(json!({"resource": {"kind": "repo", "id": repo}, "session": "*"}))
}

pub fn build_token(slug: &str) -> String {
    mint(json!({"resource": {"kind": "build", "id": slug}, "session": "*"}))
}

/// A person's operator token, minted as an operator mints it:
/// `abstore token mint --operator-user NAME`.
pub fn operator_user(name: &str) -> String {
    support::run_ok(&[
        "token",
        "mint",
        "--secret",
        SECRET,
        "--operator-user",
        name,
        "--ttl",
        "1h",
    ])
    .trim()
    .to_owned()
}

/// The digest `abstore token inspect` prints (what revocation takes).
pub fn digest(token: &str) -> String {
    let out = support::run_ok(&["token", "inspect", token]);
    out.lines()
        .find_map(|l| l.strip_prefix("digest: "))
        .expect("token inspect prints the digest")
        .trim()
        .to_owned()
}

/// One server's writer.
pub struct Store {
    pub base: String,
    admin: String,
    deployment: String,
}

impl Store {
    pub fn new(base: &str) -> Store {
        Store {
            base: base.to_owned(),
            admin: admin(),
            deployment: deployment(),
        }
    }

    async fn send(&self, token: &str, path: &str, body: &Value) -> (u16, Value) {
        let reply = Raw::new("POST", path, Some(token))
            .json(body)
            .send(&self.base)
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        let value = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
        (reply.status, value)
    }

    /// `POST path` as admin; the answer of a 2xx.
    pub async fn post(&self, path: &str, body: Value) -> Value {
        let (status, value) = self.send(&self.admin, path, &body).await;
        assert!(
            (200..300).contains(&status),
            "POST {path} {body:.200}: {status} {value}"
        );
        value
    }

    pub async fn repo(&self, repo: &str) {
        self.post("/repos", json!({"repo": repo})).await;
    }

    pub async fn build(&self, repo: &str, slug: &str) {
        self.post("/builds", json!({"slug": slug, "repo": repo}))
            .await;
    }

    /// An observation by an agent, its fields as given.
    pub async fn observation(&self, slug: &str, role: &str, summary: &str) -> u64 {
        let event = json!({
            "actor": {"kind": "agent", "role": role, "session": role},
            "type": "observation.recorded",
            "payload": {"id": format!("o_{}", now_ms()), "kind": "followup",
                        "summary": summary, "files": [summary]}
        });
        let envelope = self
            .post(&format!("/builds/{}/events", enc(slug)), event)
            .await;
        envelope["seq"].as_u64().expect("the envelope's seq")
    }

    /// An escalation answered by a person named `user`.
    pub async fn answer(&self, slug: &str, user: &str, text: &str) {
        let event = json!({
            "actor": {"kind": "human", "user": user},
            "type": "escalation.answered",
            "payload": {"id": "esc-1", "answer": text, "resolution": "revise-spec",
                        "artifact": {"kind": "spec", "rev": 1}}
        });
        self.post(&format!("/builds/{}/events", enc(slug)), event)
            .await;
    }

    /// A journal entry of the repository, reported by `user`.
    pub async fn journal(&self, repo: &str, user: &str, message: &str) {
        let event = json!({
            "actor": {"kind": "human", "user": user},
            "type": "dispatcher.operator-reported",
            "payload": {"run": message, "level": "info", "message": message}
        });
        self.post(&format!("/repos/{}/events", enc(repo)), event)
            .await;
    }

    pub async fn artifact(&self, slug: &str, kind: &str, content: &[u8]) {
        let body = json!({
            "kind": kind,
            "contentBase64": base64::engine::general_purpose::STANDARD.encode(content),
            "metadata": {"note": kind}
        });
        self.post(&format!("/builds/{}/artifacts", enc(slug)), body)
            .await;
    }

    pub async fn lease(&self, slug: &str, holder: &str) {
        self.post(
            &format!("/builds/{}/lease/claim", enc(slug)),
            json!({"holder": holder, "ttlMs": 3_600_000}),
        )
        .await;
    }

    /// A stream under `owner` (`/builds/{slug}` or `/sessions/{id}`)
    /// whose one text part is `text`, closed.
    pub async fn stream(&self, owner: &str, label: &str, text: &str) -> String {
        let record = self
            .post(&format!("{owner}/streams"), json!({"label": label}))
            .await;
        let id = record["id"].as_str().expect("stream id").to_owned();
        let parts = json!({"parts": [
            {"type": "start", "messageId": "m1"},
            {"type": "text-start", "id": "t0"},
            {"type": "text-delta", "id": "t0", "delta": text},
            {"type": "text-end", "id": "t0"},
            {"type": "finish"}
        ]});
        self.post(&format!("/streams/{id}/chunks"), parts).await;
        self.post(
            &format!("/streams/{id}/close"),
            json!({"outcome": "completed"}),
        )
        .await;
        id
    }

    /// An operator session in `repo` with one message; its id.
    pub async fn session(&self, repo: &str, operator: &str, title: &str, message: &str) -> String {
        let record = self
            .post(
                &format!("/repos/{}/sessions", enc(repo)),
                json!({"repo": repo, "operator": operator, "title": title}),
            )
            .await;
        let id = record["id"].as_str().expect("session id").to_owned();
        self.post(
            &format!("/sessions/{}/events", enc(&id)),
            json!({"actor": {"kind": "human", "user": operator},
                   "type": "message.posted", "payload": {"text": message}}),
        )
        .await;
        id
    }

    /// A ticket operation as Autobuild's hosted client sends it.
    pub async fn ticket(&self, team: &str, operation: &str, input: Value) -> (u16, Value) {
        let body = json!({"context": {"teamKey": team}, "input": input});
        let reply = Raw::new(
            "POST",
            format!("/tickets/{operation}"),
            Some(&self.deployment),
        )
        .json(&body)
        .send(&self.base)
        .await
        .unwrap_or_else(|e| panic!("tickets/{operation}: {e}"));
        let value = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
        (reply.status, value)
    }

    /// A new ticket in `state`; its id.
    pub async fn create_ticket(
        &self,
        team: &str,
        title: &str,
        body: &str,
        labels: &[&str],
        state: &str,
    ) -> String {
        let (status, ticket) = self
            .ticket(
                team,
                "create",
                json!({"draft": {"title": title, "body": body, "labels": labels},
                       "options": {"state": state}}),
            )
            .await;
        assert_eq!(status, 201, "create ticket: {ticket}");
        ticket["ref"]["id"].as_str().expect("ref.id").to_owned()
    }

    /// `POST /tickets/get`: the ticket as the protocol returns it.
    pub async fn get_ticket(&self, team: &str, id: &str) -> Value {
        let (status, ticket) = self.ticket(team, "get", json!({"id": id})).await;
        assert_eq!(status, 200, "get ticket: {ticket}");
        ticket
    }
}
