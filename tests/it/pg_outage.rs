//! A PostgreSQL outage through the real binary (issue 12, items 7 and 8),
//! on a private cluster this test starts and stops itself (`initdb` and
//! `pg_ctl` from `/usr/lib/postgresql/*/bin`; as the `postgres` user when
//! run as root). Stopping the cluster (`pg_ctl stop -m fast`) must turn
//! requests into quick `503 internal` answers with `Retry-After: 1`,
//! `/readyz` into `503`, the LISTEN and availability gauges to 0, and held
//! reads must still answer within their bound. Starting it again must
//! recover without a restart: writes, `/readyz`, the gauges, and held reads
//! woken by appends.
//!
//! Without the server binaries the test skips loudly (a failure under
//! `CI=true`; `.ci/run` installs Debian's `postgresql` package).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support;

use support::Server;
use support::cluster::{Cluster, pg_bin_dir};

/// "Quickly": far under the 10 s default acquire timeout an outage used to cost.
const QUICK: Duration = Duration::from_secs(3);

struct Reply {
    status: u16,
    retry_after: Option<String>,
    body: Value,
    took: Duration,
}

struct Client {
    http: reqwest::Client,
    base: String,
    metrics: String,
}

impl Client {
    async fn send(&self, request: reqwest::RequestBuilder) -> Reply {
        let started = Instant::now();
        let res = request.send().await.unwrap();
        let status = res.status().as_u16();
        let retry_after = res
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned());
        let body = res.json().await.unwrap_or(Value::Null);
        Reply {
            status,
            retry_after,
            body,
            took: started.elapsed(),
        }
    }

    async fn get(&self, path: &str) -> Reply {
        self.send(self.http.get(format!("{}{path}", self.base)))
            .await
    }

    async fn post(&self, path: &str, body: &Value) -> Reply {
        self.send(self.http.post(format!("{}{path}", self.base)).json(body))
            .await
    }

    /// One gauge's value on `/metrics`.
    async fn gauge(&self, name: &str) -> Option<f64> {
        support::metric(&self.http, &self.metrics, name).await
    }

    /// Poll `gauge` until it reads `want`, for at most `within`.
    async fn gauge_becomes(&self, name: &str, want: f64, within: Duration) -> bool {
        let until = Instant::now() + within;
        loop {
            if self.gauge(name).await == Some(want) {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn observation(id: &str) -> Value {
    json!({"actor": {"kind": "kernel"}, "type": "observation.recorded",
           "payload": {"id": id, "kind": "followup", "summary": "outage test"}})
}

/// `what` answered the outage's `503 internal` with `Retry-After: 1`, quickly.
fn assert_unavailable(reply: &Reply, what: &str) {
    assert_eq!(reply.status, 503, "{what}: {}", reply.body);
    assert_eq!(reply.body["kind"], "internal", "{what}: {}", reply.body);
    assert!(reply.body["error"].is_string(), "{what}: {}", reply.body);
    assert_eq!(reply.retry_after.as_deref(), Some("1"), "{what}");
    assert!(reply.took < QUICK, "{what} took {:?}", reply.took);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_postgres_outage_answers_503_quickly_and_recovers_without_a_restart() {
    let Some(bin) = pg_bin_dir() else {
        abstore_testkit::skip::skipped(
            "PostgreSQL outage test",
            "no /usr/lib/postgresql/*/bin/initdb; install Debian's postgresql package",
        );
        return;
    };
    let cluster = Cluster::create(bin);
    let url = cluster.url();
    let mut server = Server::builder()
        .database(&url)
        .metrics()
        .accept_protocol3()
        .start()
        .await;
    let c = Client {
        http: support::client(),
        base: server.url().to_owned(),
        metrics: server.metrics_url().to_owned(),
    };

    // Up: a build with one event, gauges at 1.
    assert_eq!(
        c.post("/builds", &json!({"slug": "b", "repo": "r"}))
            .await
            .status,
        201
    );
    let appended = c.post("/builds/b/events", &observation("o1")).await;
    assert!(appended.status < 300, "append: {}", appended.body);
    assert!(
        c.gauge_becomes("abstore_listen_connected", 1.0, QUICK)
            .await
    );
    assert_eq!(c.gauge("abstore_db_available").await, Some(1.0));

    // A read held across the start of the outage answers within its bound.
    let held_across = {
        let http = c.http.clone();
        let url = format!("{}/builds/b/events?since=1&wait=3", c.base);
        tokio::spawn(async move {
            let started = Instant::now();
            let res = http.get(url).send().await.unwrap();
            let status = res.status().as_u16();
            (status, res.text().await.unwrap(), started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Down.
    cluster.stop_fast();
    let stopped = Instant::now();
    assert_unavailable(&c.get("/builds/b/events").await, "an event read");
    assert_unavailable(
        &c.post("/builds/b/events", &observation("o2")).await,
        "an append",
    );
    assert_unavailable(
        &c.post("/builds", &json!({"slug": "c", "repo": "r"})).await,
        "a build creation",
    );
    assert_unavailable(&c.get("/builds").await, "the build list");
    let ready = c.get("/readyz").await;
    assert_eq!(
        ready.status, 503,
        "/readyz during the outage: {}",
        ready.body
    );
    assert!(ready.took < QUICK, "/readyz took {:?}", ready.took);
    assert!(
        c.gauge_becomes("abstore_listen_connected", 0.0, QUICK)
            .await,
        "abstore_listen_connected stayed 1 with the database down"
    );
    assert_eq!(c.gauge("abstore_db_available").await, Some(0.0));

    let (status, body, took) = held_across.await.unwrap();
    assert!(
        took < Duration::from_millis(3000 + 250 + 500),
        "a read held across the outage's start took {took:?} (wait=3)"
    );
    assert!(
        (status == 200 && body == "[]") || status == 503,
        "a read held across the outage's start answered {status} {body}"
    );
    // A read held during the outage: its bound holds too.
    let held = c.get("/builds/b/events?since=1&wait=2").await;
    assert!(
        held.took < Duration::from_millis(2000 + 250 + 500),
        "a read held during the outage took {:?}",
        held.took
    );
    assert!(
        held.status == 503 || (held.status == 200 && held.body == json!([])),
        "a read held during the outage answered {} {}",
        held.status,
        held.body
    );
    // Still answering quickly seconds into the outage (pooled connections
    // idle long enough to be pinged, the LISTEN task backing off).
    tokio::time::sleep_until(tokio::time::Instant::from_std(
        stopped + Duration::from_millis(2500),
    ))
    .await;
    assert_unavailable(&c.get("/builds/b/events").await, "a later event read");

    // Up again, same server process.
    cluster.start();
    let recovering = Instant::now();
    let mut appended = c.post("/builds/b/events", &observation("o3")).await;
    while appended.status >= 300 && recovering.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        appended = c.post("/builds/b/events", &observation("o3")).await;
    }
    assert!(
        appended.status < 300,
        "no append succeeded within 10 s of the database's return: {} {}",
        appended.status,
        appended.body
    );
    let ready = c.get("/readyz").await;
    assert_eq!(ready.status, 200, "/readyz after recovery: {}", ready.body);
    assert!(
        c.gauge_becomes("abstore_listen_connected", 1.0, Duration::from_secs(5))
            .await,
        "abstore_listen_connected did not come back"
    );
    assert_eq!(c.gauge("abstore_db_available").await, Some(1.0));
    let events = c.get("/builds/b/events").await;
    let seqs: Vec<i64> = events
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(seqs, [1, 2], "the events after recovery: {}", events.body);

    // A held read is woken by an append, long before its bound.
    let held = {
        let http = c.http.clone();
        let url = format!("{}/builds/b/events?since=2&wait=20", c.base);
        tokio::spawn(async move {
            let started = Instant::now();
            let res = http.get(url).send().await.unwrap();
            let status = res.status().as_u16();
            (
                status,
                res.json::<Value>().await.unwrap(),
                started.elapsed(),
            )
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(c.post("/builds/b/events", &observation("o4")).await.status < 300);
    let (status, body, took) = held.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(body[0]["seq"], 3, "the woken read: {body}");
    assert!(
        took < Duration::from_secs(10),
        "the woken read took {took:?}"
    );

    // One ERROR line when the outage started, one INFO line when it ended:
    // not one per request.
    server.stop().await.unwrap();
    let log = server.stderr();
    assert_eq!(
        log.matches("database unavailable: answering 503").count(),
        1,
        "outage log lines:\n{log}"
    );
    assert_eq!(
        log.matches("database available again").count(),
        1,
        "recovery log lines:\n{log}"
    );
}

/// Revocations through an outage: while PostgreSQL is down, a refresh
/// fails, is logged once, and the set already loaded stays in force (a
/// revoked token is still refused, `401`, while other requests answer
/// `503`); once it is back, a revocation made meanwhile is picked up
/// without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn revocations_stay_in_force_through_a_postgres_outage() {
    let Some(bin) = pg_bin_dir() else {
        abstore_testkit::skip::skipped(
            "PostgreSQL outage test",
            "no /usr/lib/postgresql/*/bin/initdb; install Debian's postgresql package",
        );
        return;
    };
    let cluster = Cluster::create(bin);
    let database = cluster.url();
    let secret: String = (0..4)
        .map(|_| abstore_conformance::util::random_hex())
        .collect();
    let mut server = Server::builder()
        .database(&database)
        .secret(&secret)
        .flag("--revocation-refresh-seconds", "1")
        .start()
        .await;
    let exp = abstore_conformance::runner::local_now_ms() + 3_600_000;
    let token = |n: i64| {
        abstore_conformance::token::mint(&secret, &abstore_conformance::token::admin_scope(exp + n))
    };
    let (revoked, later, kept) = (token(0), token(1), token(2));
    let status = |token: String| {
        let url = format!("{}/builds", server.url());
        async move {
            support::client()
                .get(url)
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    let until = |token: String, want: u16| {
        let status = &status;
        async move {
            let deadline = Instant::now() + Duration::from_secs(10);
            while status(token.clone()).await != want {
                assert!(Instant::now() < deadline, "never answered {want}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let revoke = |token: &str| {
        let (ok, _, stderr) = support::run(&["token", "revoke", token, "--database", &database]);
        assert!(ok, "{stderr}");
    };
    revoke(&revoked);
    until(revoked.clone(), 401).await;

    cluster.stop_fast();
    until(kept.clone(), 503).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !server
        .stderr()
        .contains("cannot read the token revocations")
    {
        assert!(Instant::now() < deadline, "{}", server.stderr());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        status(revoked.clone()).await,
        401,
        "revoked during the outage"
    );

    cluster.start();
    until(kept.clone(), 200).await;
    revoke(&later);
    until(later.clone(), 401).await;
    assert_eq!(status(revoked.clone()).await, 401);
    server.stop().await.unwrap();
    let log = server.stderr();
    assert_eq!(
        log.matches("cannot read the token revocations").count(),
        1,
        "one line per outage:\n{log}"
    );
    assert!(log.contains("token revocations read again"), "{log}");
}
