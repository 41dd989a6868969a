//! The state-events cache (src/history/state_events.rs) through the binary,
//! on a SQLite file and on PostgreSQL: a protocol-3 client's
//! `GET /repos/{repo}/state-events` is the same answer, identity and zstd,
//! whether it comes from the database or from the cache; an append to the
//! journal (a durable event, a run-scoped one, a new run) is in the very next
//! answer; an answer too large to keep is streamed, correctly, every time;
//! the cache holds its byte bound and can be turned off; an unknown
//! repository is still `404`.

use serde_json::{Value, json};

use crate::support;

use support::{Server, metric, protocol3_client, with_pg};

const REPO: &str = "acme%2Fstate";

/// A catalog fixture (`fixtures/catalog/repository/<type>/<file>`).
fn fixture(ty: &str, file: &str) -> Value {
    let path = format!(
        "{}/fixtures/catalog/repository/{ty}/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn tick() -> Value {
    fixture("dispatcher.tick-started", "valid-dispatcher.json")
}
fn run_started() -> Value {
    fixture("dispatcher.run-started", "valid-dispatcher.json")
}
fn pause() -> Value {
    fixture("dispatcher.pause-set", "valid-human.json")
}

/// `POST /repos` of the repository these tests read.
async fn ensure_repo(base: &str) {
    let res = protocol3_client()
        .post(format!("{base}/repos"))
        .json(&json!({"repo": "acme/state"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
}

async fn append(base: &str, event: &Value) {
    let res = protocol3_client()
        .post(format!("{base}/repos/{REPO}/events"))
        .json(event)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 201, "{}", res.text().await.unwrap());
}

/// The state events asking `accept`: status, `Content-Encoding`, body decoded.
async fn state(base: &str, accept: &str) -> (u16, Option<String>, Vec<u8>) {
    let url = format!("{base}/repos/{REPO}/state-events");
    support::get_decoded(&protocol3_client(), &url, accept).await
}

/// The sequences of the identity answer, after checking that the zstd one
/// (and the gzip one the compression layer makes) is the same text.
async fn seqs(base: &str) -> Vec<i64> {
    let (status, encoding, identity) = state(base, "identity").await;
    assert_eq!((status, encoding), (200, None));
    let (status, encoding, zstd) = state(base, "gzip, deflate, br, zstd").await;
    assert_eq!(status, 200);
    assert_eq!(encoding.as_deref(), Some("zstd"));
    assert_eq!(
        String::from_utf8_lossy(&zstd),
        String::from_utf8_lossy(&identity),
        "the zstd answer is the identity one"
    );
    let (_, encoding, gzip) = state(base, "gzip").await;
    assert_eq!(encoding.as_deref(), Some("gzip"));
    assert_eq!(gzip, identity);
    let events: Vec<Value> = serde_json::from_slice(&identity).unwrap();
    events.iter().map(|e| e["seq"].as_i64().unwrap()).collect()
}

async fn answers(metrics: &str, source: &str) -> f64 {
    let name = format!("abstore_state_events_answers_total{{source=\"{source}\"}}");
    metric(&protocol3_client(), metrics, &name)
        .await
        .unwrap_or(0.0)
}

async fn journal_grows_and_every_answer_follows(database: &str) {
    let server = Server::builder()
        .database(database)
        .accept_protocol3()
        .metrics()
        .flag("--compress-min-bytes", "16")
        .start()
        .await;
    let (base, metrics) = (server.url(), server.metrics_url());
    ensure_repo(base).await;

    // No anchor: only the durable event.
    append(base, &tick()).await;
    append(base, &pause()).await;
    append(base, &tick()).await;
    assert_eq!(seqs(base).await, [2]);
    let (from_db, from_cache) = (
        answers(metrics, "database").await,
        answers(metrics, "cache").await,
    );
    assert_eq!(from_db, 1.0, "the first read filled the cache");
    assert_eq!(from_cache, 2.0, "the zstd and gzip reads came from it");

    // A run-scoped append before any run changes nothing in the answer, but
    // it is a new tail: read again, not served stale.
    append(base, &tick()).await;
    assert_eq!(seqs(base).await, [2]);
    assert_eq!(answers(metrics, "database").await, 2.0);
    // An anchor, then its run's events: everything from it on.
    append(base, &run_started()).await;
    append(base, &tick()).await;
    assert_eq!(seqs(base).await, [2, 5, 6]);
    // A new run drops the earlier run's events; durable ones stay.
    append(base, &pause()).await;
    append(base, &run_started()).await;
    assert_eq!(seqs(base).await, [2, 7, 8]);
    append(base, &tick()).await;
    assert_eq!(seqs(base).await, [2, 7, 8, 9]);
    assert_eq!(answers(metrics, "database").await, 5.0);
    assert_eq!(answers(metrics, "cache").await, 10.0);
    let held = metric(
        &protocol3_client(),
        metrics,
        "abstore_state_events_cache_bytes",
    )
    .await
    .unwrap();
    assert!(held > 0.0, "the cache holds the answer and its zstd form");

    // An unknown repository is 404, cache or not.
    let res = protocol3_client()
        .get(format!("{base}/repos/acme%2Fnone/state-events"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 404);
    let error: Value = res.json().await.unwrap();
    assert_eq!(error["kind"], "not-found");
}

#[tokio::test]
async fn a_sqlite_files_state_events_follow_its_journal() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("s.db").display());
    journal_grows_and_every_answer_follows(&url).await;
}

#[tokio::test]
async fn postgres_state_events_follow_its_journal() {
    with_pg("state_events", |url| async move {
        journal_grows_and_every_answer_follows(&url).await;
    })
    .await;
}

/// Too large to keep (a quarter of a 1 KiB cache), or with the cache off:
/// the answer is read and streamed every time, and right.
#[tokio::test]
async fn answers_the_cache_cannot_keep_are_streamed_every_time() {
    for bytes in ["1024", "0"] {
        let server = Server::builder()
            .accept_protocol3()
            .metrics()
            .flag("--state-events-cache-bytes", bytes)
            .flag("--compress-min-bytes", "16")
            .start()
            .await;
        let (base, metrics) = (server.url(), server.metrics_url());
        ensure_repo(base).await;
        append(base, &run_started()).await;
        for _ in 0..6 {
            append(base, &tick()).await;
        }
        assert_eq!(seqs(base).await, [1, 2, 3, 4, 5, 6, 7], "cache {bytes}");
        append(base, &pause()).await;
        assert_eq!(seqs(base).await, [1, 2, 3, 4, 5, 6, 7, 8], "cache {bytes}");
        assert_eq!(answers(metrics, "cache").await, 0.0, "cache {bytes}");
        let streamed = answers(metrics, "streamed").await;
        if bytes == "0" {
            assert_eq!(streamed, 0.0, "no cache, no cache metrics");
        } else {
            assert_eq!(streamed, 6.0, "every read of a too-large answer");
        }
    }
}
