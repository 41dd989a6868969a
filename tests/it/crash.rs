//! Crash recovery through the real binary: the server is killed with SIGKILL
//! under mixed concurrent load (appends, conditional appends, deposits,
//! leases, stream appends and closes), restarted on the same database and
//! blob directory, and checked:
//!
//! - every acknowledged event is readable with its content, and each
//!   journal's sequences are exactly 1..n;
//! - every acknowledged artifact revision is readable, each kind's revisions
//!   are exactly 0..m (revisions start at 0), and every listed revision's bytes hash to its address;
//! - every stream acknowledged closed is closed with its artifact, whose
//!   bytes hash to its address.
//!
//! On a SQLite file and on PostgreSQL, with `file://` blobs. Default 3 kill
//! cycles of about 1.5 s of load; `ABSTORE_CRASH_CYCLES` runs more.
//! (SIGKILL keeps the OS page cache: this checks the server's own
//! atomicity and ordering, not power-loss durability.)

use crate::support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use abstore_conformance::fixtures::build_event;
use abstore_conformance::util::{b64, sha256_hex, unb64};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use support::{Raw, Server, with_pg};

const BUILDS: usize = 3;
const WORKERS: usize = 6;
const LOAD: Duration = Duration::from_millis(1500);

/// What the server acknowledged, to be found again after each restart.
#[derive(Default)]
struct Acked {
    /// build → seq → the event's unique summary.
    events: BTreeMap<String, BTreeMap<i64, String>>,
    /// (build, kind, revision) → blobRef.
    artifacts: BTreeMap<(String, String, i64), String>,
    /// stream id → its build.
    closed_streams: BTreeMap<String, String>,
}

type Shared = Arc<Mutex<Acked>>;

fn slug(i: usize) -> String {
    format!("crash-{i}")
}

/// POST and the reply when it is a success (anything else is "not acknowledged").
async fn post_ok(base: &str, path: &str, body: &Value) -> Option<Value> {
    let reply = Raw::new("POST", path, None)
        .json(body)
        .send(base)
        .await
        .ok()?;
    assert!(
        reply.status < 500,
        "POST {path}: {} {}",
        reply.status,
        reply.text()
    );
    (reply.status < 300).then(|| reply.json())
}

async fn get_json(base: &str, path: &str) -> Value {
    let reply = Raw::new("GET", path, None)
        .send(base)
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    assert_eq!(reply.status, 200, "GET {path}: {}", reply.text());
    reply.json()
}

fn record_event(acked: &Shared, build: &str, envelope: &Value) {
    let (Some(seq), Some(summary)) = (
        envelope["seq"].as_i64(),
        envelope["payload"]["summary"].as_str(),
    ) else {
        panic!("acknowledged envelope without seq or summary: {envelope}");
    };
    if let Ok(mut a) = acked.lock() {
        a.events
            .entry(build.to_owned())
            .or_default()
            .insert(seq, summary.to_owned());
    }
}

fn record_artifact(acked: &Shared, build: &str, meta: &Value) {
    let (Some(kind), Some(revision), Some(blob)) = (
        meta["kind"].as_str(),
        meta["revision"].as_i64(),
        meta["blobRef"].as_str(),
    ) else {
        panic!("acknowledged artifact without kind, revision or blobRef: {meta}");
    };
    if let Ok(mut a) = acked.lock() {
        a.artifacts.insert(
            (build.to_owned(), kind.to_owned(), revision),
            blob.to_owned(),
        );
    }
}

/// One worker: random operations on random builds until `until`.
async fn worker(base: String, acked: Shared, seed: u64, until: Instant) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut open_stream: Option<(String, String)> = None;
    let mut counter = 0u64;
    while Instant::now() < until {
        counter += 1;
        let build = slug(rng.random_range(0..BUILDS));
        let b = format!("/builds/{build}");
        let mut event = build_event("observation");
        event["payload"]["summary"] = json!(format!("w{seed}-{counter}"));
        match rng.random_range(0..10) {
            0..=2 => {
                if let Some(envelope) = post_ok(&base, &format!("{b}/events"), &event).await {
                    record_event(&acked, &build, &envelope);
                }
            }
            3 => {
                // The current head; the server may be gone (killed) already.
                let Ok(read) = Raw::new("GET", format!("{b}/events?since=0"), None)
                    .send(&base)
                    .await
                else {
                    continue;
                };
                let expected = read
                    .json()
                    .as_array()
                    .and_then(|events| events.last())
                    .and_then(|e| e["seq"].as_i64())
                    .unwrap_or(0);
                let body = json!({"expectedSeq": expected, "event": event});
                if let Some(envelope) = post_ok(&base, &format!("{b}/events/conditional"), &body)
                    .await
                    .filter(|v| !v.is_null())
                {
                    record_event(&acked, &build, &envelope);
                }
            }
            4..=5 => {
                let bytes: Vec<u8> = (0..rng.random_range(1..4096))
                    .map(|_| rng.random())
                    .collect();
                let kind = ["plan", "report"][rng.random_range(0..2)];
                let body = json!({
                    "artifacts": [{"kind": kind, "contentBase64": b64(&bytes)}],
                    "event": event,
                });
                if let Some(reply) = post_ok(&base, &format!("{b}/deposits"), &body).await {
                    record_event(&acked, &build, &reply["event"]);
                    record_artifact(&acked, &build, &reply["artifacts"][0]);
                    assert_eq!(reply["artifacts"][0]["blobRef"], sha256_hex(&bytes));
                }
            }
            6 => {
                let body = json!({"holder": format!("w{seed}"), "ttlMs": 500});
                post_ok(&base, &format!("{b}/lease/claim"), &body).await;
            }
            _ => match open_stream.take() {
                None => {
                    let created =
                        post_ok(&base, &format!("{b}/streams"), &json!({"label": "crash"})).await;
                    if let Some(id) = created.as_ref().and_then(|s| s["id"].as_str()) {
                        open_stream = Some((id.to_owned(), build));
                    }
                }
                Some((id, scope)) if rng.random_bool(0.7) => {
                    let parts = json!({"parts": [
                        {"type": "text-start", "id": "t"},
                        {"type": "text-delta", "id": "t", "delta": format!("chunk {counter}")},
                        {"type": "text-end", "id": "t"}
                    ]});
                    post_ok(&base, &format!("/streams/{id}/chunks"), &parts).await;
                    open_stream = Some((id, scope));
                }
                Some((id, scope)) => {
                    let body = json!({"outcome": "completed"});
                    if let Some(stream) =
                        post_ok(&base, &format!("/streams/{id}/close"), &body).await
                    {
                        assert_eq!(stream["status"], "closed", "{stream}");
                        if let Ok(mut a) = acked.lock() {
                            a.closed_streams.insert(id, scope);
                        }
                    }
                }
            },
        }
    }
}

/// The bytes of `kind` revision `rev` of `build`, checked against `blob`.
async fn check_blob(base: &str, build: &str, kind: &str, rev: i64, blob: &str) {
    let path = format!(
        "/builds/{build}/artifacts?kind={}&rev={rev}",
        abstore_conformance::util::enc(kind)
    );
    let read = get_json(base, &path).await;
    assert_eq!(read["meta"]["blobRef"], blob, "{path}: {read}");
    let bytes = read["contentBase64"]
        .as_str()
        .and_then(unb64)
        .unwrap_or_else(|| panic!("{path}: no content"));
    assert_eq!(
        sha256_hex(&bytes),
        blob,
        "{path}: bytes do not hash to the address"
    );
}

async fn verify(base: &str, acked: &Acked, cycle: usize) {
    for i in 0..BUILDS {
        let build = slug(i);
        let events = get_json(base, &format!("/builds/{build}/events?since=0")).await;
        let events = events.as_array().cloned().unwrap_or_default();
        let seqs: Vec<i64> = events.iter().filter_map(|e| e["seq"].as_i64()).collect();
        let expected: Vec<i64> = (1..=seqs.len() as i64).collect();
        assert_eq!(seqs, expected, "cycle {cycle}: {build} sequences not 1..n");
        for (seq, summary) in acked.events.get(&build).into_iter().flatten() {
            let found = events.get((*seq - 1) as usize);
            assert_eq!(
                found.map(|e| &e["payload"]["summary"]),
                Some(&json!(summary)),
                "cycle {cycle}: acknowledged {build} seq {seq} lost or changed"
            );
        }
        let metas = get_json(base, &format!("/builds/{build}/artifact-list")).await;
        let mut revisions: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        for meta in metas.as_array().into_iter().flatten() {
            let kind = meta["kind"].as_str().unwrap_or_default().to_owned();
            let rev = meta["revision"].as_i64().unwrap_or(-1);
            revisions.entry(kind.clone()).or_default().push(rev);
            let blob = meta["blobRef"].as_str().unwrap_or_default();
            check_blob(base, &build, &kind, rev, blob).await;
        }
        for (kind, mut revs) in revisions {
            revs.sort_unstable();
            let expected: Vec<i64> = (0..revs.len() as i64).collect();
            assert_eq!(
                revs, expected,
                "cycle {cycle}: {build} {kind} revisions not 0..m"
            );
        }
    }
    for ((build, kind, rev), blob) in &acked.artifacts {
        check_blob(base, build, kind, *rev, blob).await;
    }
    for (id, build) in &acked.closed_streams {
        let stream = get_json(base, &format!("/streams/{id}")).await;
        assert_eq!(stream["status"], "closed", "cycle {cycle}: {stream}");
        let artifact = &stream["artifact"];
        let (Some(kind), Some(rev), Some(blob)) = (
            artifact["kind"].as_str(),
            artifact["revision"].as_i64(),
            artifact["blobRef"].as_str(),
        ) else {
            panic!("cycle {cycle}: closed stream without its artifact: {stream}");
        };
        check_blob(base, build, kind, rev, blob).await;
    }
}

async fn crash_cycles(database: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let blobs = format!("file://{}", dir.path().join("blobs").display());
    let mut server = Server::builder()
        .database(database)
        .blobs(&blobs)
        .start()
        .await;
    for i in 0..BUILDS {
        let body = json!({"slug": slug(i), "repo": "acme/crash"});
        post_ok(server.url(), "/builds", &body)
            .await
            .expect("create build");
    }
    let cycles = std::env::var("ABSTORE_CRASH_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3usize);
    let acked: Shared = Arc::default();
    for cycle in 0..cycles {
        let until = Instant::now() + LOAD;
        let mut workers = tokio::task::JoinSet::new();
        for w in 0..WORKERS {
            let seed = (cycle * WORKERS + w) as u64;
            workers.spawn(worker(server.url().to_owned(), acked.clone(), seed, until));
        }
        // Kill while the workers are still sending.
        tokio::time::sleep(LOAD - Duration::from_millis(300)).await;
        server.stop().await.expect("SIGKILL the server");
        while let Some(done) = workers.join_next().await {
            if let Err(e) = done {
                std::panic::resume_unwind(e.into_panic());
            }
        }
        server.restart().await.expect("restart after SIGKILL");
        let snapshot = acked.lock().map(|a| Acked {
            events: a.events.clone(),
            artifacts: a.artifacts.clone(),
            closed_streams: a.closed_streams.clone(),
        });
        let snapshot = snapshot.unwrap_or_default();
        let events: usize = snapshot.events.values().map(BTreeMap::len).sum();
        eprintln!(
            "crash cycle {cycle}: {events} acknowledged events, {} artifacts, {} closed streams",
            snapshot.artifacts.len(),
            snapshot.closed_streams.len()
        );
        assert!(events > 0, "cycle {cycle}: the load acknowledged nothing");
        verify(server.url(), &snapshot, cycle).await;
    }
    server.stop().await.ok();
}

#[tokio::test(flavor = "multi_thread")]
async fn crash_recovery_sqlite_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let database = format!("sqlite://{}", dir.path().join("abstore.db").display());
    crash_cycles(&database).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn crash_recovery_postgres() {
    with_pg(
        "robust_crash",
        |url| async move { crash_cycles(&url).await },
    )
    .await;
}
