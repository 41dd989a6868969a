//! Statements per write on PostgreSQL (issue 11, item 2), read from
//! `abstore_db_queries_total` through the real binary: an append and a
//! conditional append are one statement, a stream chunk one statement after
//! the stream's lookup, a deposit one read and one statement after the
//! resource check; each write adds at most one `NOTIFY`. The transaction
//! path would cost two or three more each, so these bounds fail if the fast
//! paths stop being taken.
//!
//! Protocol 3's session conditional append takes the same fast path, and its
//! two derived reads are one statement each.
//!
//! Requests are sequential and the counter is read once it has settled, so
//! each write's `NOTIFY` falls inside its own count; no held read makes the
//! sweep query.

use serde_json::{Value, json};

use crate::support::{self, Server};

struct Client {
    http: reqwest::Client,
    base: String,
    metrics: String,
}

impl Client {
    async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let res = self
            .http
            .post(format!("{}{path}", self.base))
            .json(body)
            .send()
            .await
            .unwrap();
        let status = res.status().as_u16();
        (status, res.json().await.unwrap_or(Value::Null))
    }

    async fn queries(&self) -> f64 {
        support::metric(&self.http, &self.metrics, "abstore_db_queries_total")
            .await
            .unwrap_or(0.0)
    }

    /// The counter once it has stopped moving: a write's `NOTIFY` is sent
    /// by a background task just after the response.
    async fn settled_queries(&self) -> f64 {
        let mut last = self.queries().await;
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            let now = self.queries().await;
            if now == last {
                return now;
            }
            last = now;
        }
    }

    /// Statements the server ran for one `GET path` answering 200.
    async fn read_statements(&self, path: &str) -> f64 {
        let before = self.settled_queries().await;
        let res = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), 200, "GET {path}");
        self.settled_queries().await - before
    }

    /// Statements the server ran for `n` sequential `POST path body`s,
    /// each answering `status`.
    async fn statements(&self, n: usize, path: &str, body: &Value, status: u16) -> f64 {
        let before = self.settled_queries().await;
        for _ in 0..n {
            let (got, reply) = self.post(path, body).await;
            assert_eq!(got, status, "POST {path}: {reply}");
        }
        self.settled_queries().await - before
    }
}

fn observation() -> Value {
    json!({"actor": {"kind": "kernel"}, "type": "observation.recorded",
           "payload": {"id": "o", "kind": "followup", "summary": "round trips"}})
}

#[tokio::test]
async fn writes_on_postgres_take_one_statement() {
    let Some(db) = support::pg_database("round_trips").await else {
        return;
    };
    let server = Server::builder()
        .database(&db.url)
        .metrics()
        .accept_protocol3()
        .start()
        .await;
    let c = Client {
        http: support::client(),
        base: server.url().to_owned(),
        metrics: server.metrics_url().to_owned(),
    };
    assert_eq!(
        c.post("/builds", &json!({"slug": "b", "repo": "r"}))
            .await
            .0,
        201
    );
    const N: usize = 10;

    let appends = c
        .statements(N, "/builds/b/events", &observation(), 201)
        .await;
    assert!(
        appends <= 2.0 * N as f64,
        "{N} appends ran {appends} statements"
    );

    let conditional = json!({"expectedSeq": N, "event": observation()});
    let conditionals = c
        .statements(1, "/builds/b/events/conditional", &conditional, 201)
        .await;
    assert!(
        conditionals <= 2.0,
        "a conditional append ran {conditionals} statements"
    );
    let stale = c
        .statements(1, "/builds/b/events/conditional", &conditional, 200)
        .await;
    assert!(
        stale <= 1.0,
        "a stale conditional append ran {stale} statements"
    );

    let deposit = json!({
        "artifacts": [{"kind": "plan", "contentBase64": "cGxhbg=="}],
        "event": {"actor": {"kind": "agent", "role": "plan", "session": "s1"},
                  "type": "plan.completed",
                  "payload": {"round": 1, "artifact": {"kind": "plan", "rev": -1}}}
    });
    let deposits = c.statements(N, "/builds/b/deposits", &deposit, 201).await;
    assert!(
        deposits <= 4.0 * N as f64,
        "{N} deposits ran {deposits} statements"
    );

    let (status, stream) = c.post("/builds/b/streams", &json!({"label": "l"})).await;
    assert_eq!(status, 201, "{stream}");
    let chunk = json!({"parts": [{"type": "text-delta", "delta": "x"}]});
    let path = format!("/streams/{}/chunks", stream["id"].as_str().unwrap());
    let chunks = c.statements(N, &path, &chunk, 201).await;
    assert!(
        chunks <= 3.0 * N as f64,
        "{N} chunk appends ran {chunks} statements"
    );

    // Protocol 3 (sent with the identity of its tests).
    let c = Client {
        http: support::protocol3_client(),
        ..c
    };
    assert_eq!(c.post("/repos", &json!({"repo": "r"})).await.0, 200);
    let (status, session) = c
        .post(
            "/repos/r/sessions",
            &json!({"repo": "r", "operator": "alice"}),
        )
        .await;
    assert_eq!(status, 201, "{session}");
    let path = format!(
        "/sessions/{}/events/conditional",
        session["id"].as_str().unwrap()
    );
    let message = json!({"expectedSeq": 1, "event": {"actor": {"kind": "human", "user": "alice"},
        "type": "message.posted", "payload": {"text": "round trips"}}});
    let conditionals = c.statements(1, &path, &message, 201).await;
    assert!(
        conditionals <= 2.0,
        "a session conditional append ran {conditionals} statements"
    );
    let stale = c.statements(1, &path, &message, 200).await;
    assert!(
        stale <= 1.0,
        "a stale session conditional append ran {stale} statements"
    );
    // The builds' tails, then the digest events past the kept tails (the
    // digests cache was empty); then only the tails while nothing moved.
    let digests = c.read_statements("/repos/r/build-digests").await;
    assert!(digests <= 2.0, "build digests ran {digests} statements");
    let again = c.read_statements("/repos/r/build-digests").await;
    assert!(
        again <= 1.0,
        "build digests of unchanged builds ran {again} statements"
    );
    let pause = json!({"actor": {"kind": "human", "user": "alice"},
        "type": "dispatcher.pause-set", "payload": {"enabled": false}});
    assert_eq!(c.post("/repos/r/events", &pause).await.0, 201);
    // The journal's tail, then the answer as of it (the state-events cache
    // was filled at an older tail); then only the tail while it holds.
    let state = c.read_statements("/repos/r/state-events").await;
    assert!(state <= 2.0, "state events ran {state} statements");
    let again = c.read_statements("/repos/r/state-events").await;
    assert!(
        again <= 1.0,
        "state events of an unchanged journal ran {again} statements"
    );

    drop(server);
    let _ = db.drop_db().await;
}
