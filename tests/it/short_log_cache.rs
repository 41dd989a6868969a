//! The short-log cache (src/history/short_logs.rs) through the binary: on a
//! SQLite file a whole-log read is kept and served from memory (identity,
//! zstd, gzip alike) until the log is written, by an append, a deposit or a
//! conditional append; no read ever misses an append that was acknowledged
//! before it began, even with appends and reads racing on one log; a log too
//! long for one piece, a read from a later `since`, an unknown resource and
//! PostgreSQL all take the ordinary path, with the same answers.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use abstore_conformance::Res;
use abstore_conformance::util::b64;
use serde_json::{Value, json};

use crate::support::{Server, client, get_decoded, metric, with_pg};

async fn create_build(base: &str, slug: &str) {
    let res = client()
        .post(format!("{base}/builds"))
        .json(&json!({"slug": slug, "repo": "acme/short"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 201);
}

/// Append one event; its sequence.
async fn append(base: &str, slug: &str, n: usize) -> i64 {
    let res = client()
        .post(format!("{base}/builds/{slug}/events"))
        .json(
            &json!({"actor": {"kind": "kernel"}, "type": "observation.recorded",
            "payload": {"id": format!("obs-{n}"), "kind": "followup",
                        "summary": format!("observation {n} {}", "x".repeat(n % 7 * 40))}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 201);
    res.json::<Value>().await.unwrap()["seq"].as_i64().unwrap()
}

/// `GET path` asking `accept`: status, `Content-Encoding`, body decoded.
async fn get(base: &str, path: &str, accept: &str) -> (u16, Option<String>, Vec<u8>) {
    get_decoded(&client(), &format!("{base}{path}"), accept).await
}

/// The whole log's sequences, identity; the zstd and gzip answers are the
/// same text.
async fn seqs(base: &str, slug: &str) -> Vec<i64> {
    let path = format!("/builds/{slug}/events?since=0");
    let (status, encoding, identity) = get(base, &path, "identity").await;
    assert_eq!((status, encoding), (200, None));
    for accept in ["gzip, deflate, br, zstd", "gzip"] {
        let (status, _, body) = get(base, &path, accept).await;
        assert_eq!(status, 200);
        assert_eq!(
            String::from_utf8_lossy(&body),
            String::from_utf8_lossy(&identity),
            "{accept}"
        );
    }
    let events: Vec<Value> = serde_json::from_slice(&identity).unwrap();
    events.iter().map(|e| e["seq"].as_i64().unwrap()).collect()
}

async fn answers(metrics: &str, source: &str) -> f64 {
    let name = format!("abstore_short_log_answers_total{{source=\"{source}\"}}");
    metric(&client(), metrics, &name).await.unwrap_or(0.0)
}

fn server(database: &str) -> crate::support::ServerBuilder {
    Server::builder()
        .database(database)
        .metrics()
        .flag("--compress-min-bytes", "16")
}

#[tokio::test]
async fn a_kept_log_is_served_until_it_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("s.db").display());
    let server = server(&url).start().await;
    let (base, metrics) = (server.url(), server.metrics_url());

    // An unknown build is 404, and not kept: once created it is `[]`.
    let (status, _, _) = get(base, "/builds/b/events", "identity").await;
    assert_eq!(status, 404);
    create_build(base, "b").await;
    assert_eq!(seqs(base, "b").await, Vec::<i64>::new());
    for n in 1..=3 {
        append(base, "b", n).await;
    }
    assert_eq!(seqs(base, "b").await, [1, 2, 3]);
    assert_eq!(answers(metrics, "database").await, 2.0);
    assert_eq!(answers(metrics, "cache").await, 4.0);
    let held = metric(&client(), metrics, "abstore_short_log_cache_bytes")
        .await
        .unwrap();
    assert!(held > 0.0);

    // A negative `since` is the whole log too; a later one is not kept.
    let (_, _, body) = get(base, "/builds/b/events?since=-4", "identity").await;
    assert_eq!(
        serde_json::from_slice::<Vec<Value>>(&body).unwrap().len(),
        3
    );
    assert_eq!(answers(metrics, "cache").await, 5.0);
    let (_, _, body) = get(base, "/builds/b/events?since=1", "identity").await;
    assert_eq!(
        serde_json::from_slice::<Vec<Value>>(&body).unwrap().len(),
        2
    );
    assert_eq!(answers(metrics, "cache").await, 5.0);

    // A deposit appends its event: the kept log goes.
    let deposit = json!({
        "artifacts": [{"kind": "plan", "contentBase64": b64(b"the plan")}],
        "event": Res::Build.ref_event(json!({"kind": "plan", "rev": -1})),
    });
    let res = client()
        .post(format!("{base}/builds/b/deposits"))
        .json(&deposit)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 201, "{}", res.text().await.unwrap());
    assert_eq!(seqs(base, "b").await, [1, 2, 3, 4]);
    // So does a conditional append that is kept, and not one that is stale.
    let conditional = format!("{base}/builds/b/events/conditional");
    let event = json!({"actor": {"kind": "kernel"}, "type": "observation.recorded",
        "payload": {"id": "obs-c", "kind": "followup", "summary": "conditional"}});
    for (expected, status) in [(4, 201), (4, 200)] {
        let res = client()
            .post(&conditional)
            .json(&json!({"expectedSeq": expected, "event": event}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), status);
        assert_eq!(seqs(base, "b").await, [1, 2, 3, 4, 5]);
    }
}

/// Appends and whole-log reads racing on one log: every read holds every
/// event acknowledged before it began, as a gapless prefix.
#[tokio::test]
async fn no_read_misses_an_acknowledged_append() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("s.db").display());
    let server = server(&url).start().await;
    let base = server.url().to_owned();
    create_build(&base, "race").await;
    let acked = Arc::new(AtomicI64::new(0));
    let writer = {
        let (base, acked) = (base.clone(), acked.clone());
        tokio::spawn(async move {
            for n in 1..=60 {
                let seq = append(&base, "race", n).await;
                acked.fetch_max(seq, Ordering::SeqCst);
            }
        })
    };
    let mut readers = Vec::new();
    for reader in 0..4 {
        let (base, acked) = (base.clone(), acked.clone());
        readers.push(tokio::spawn(async move {
            let accept = ["identity", "zstd", "gzip", "gzip, deflate, br, zstd"][reader];
            let mut reads = 0;
            while acked.load(Ordering::SeqCst) < 60 {
                let floor = acked.load(Ordering::SeqCst);
                let (status, _, body) = get(&base, "/builds/race/events", accept).await;
                assert_eq!(status, 200);
                let events: Vec<Value> = serde_json::from_slice(&body).unwrap();
                let got: Vec<i64> = events.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
                let want: Vec<i64> = (1..=got.len() as i64).collect();
                assert_eq!(got, want, "a gapless prefix");
                assert!(
                    got.len() as i64 >= floor,
                    "{accept}: a read begun after seq {floor} was acknowledged holds {}",
                    got.len()
                );
                reads += 1;
            }
            reads
        }));
    }
    writer.await.unwrap();
    for reader in readers {
        assert!(reader.await.unwrap() > 0);
    }
    assert_eq!(seqs(&base, "race").await, (1..=60).collect::<Vec<_>>());
}

/// A log longer than one piece is streamed and not kept; PostgreSQL keeps
/// nothing; both answer exactly as without the cache.
async fn ordinary_paths(database: &str, kept: bool) {
    let server = server(database).start().await;
    let (base, metrics) = (server.url(), server.metrics_url());
    create_build(base, "long").await;
    create_build(base, "short").await;
    for n in 1..=3 {
        append(base, "short", n).await;
    }
    // About 300 bytes an event: 300 events are past one 64 KiB piece.
    for n in 1..=300 {
        append(base, "long", n).await;
    }
    assert_eq!(seqs(base, "long").await, (1..=300).collect::<Vec<_>>());
    assert_eq!(seqs(base, "short").await, [1, 2, 3]);
    append(base, "short", 4).await;
    assert_eq!(seqs(base, "short").await, [1, 2, 3, 4]);
    let from_cache = answers(metrics, "cache").await;
    if kept {
        // The short log: 2 of each 3 reads; never the long one.
        assert_eq!(from_cache, 4.0);
    } else {
        assert_eq!(from_cache, 0.0, "PostgreSQL keeps no short log");
        assert_eq!(answers(metrics, "database").await, 0.0);
    }
}

#[tokio::test]
async fn long_logs_stream_on_a_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("s.db").display());
    ordinary_paths(&url, true).await;
}

#[tokio::test]
async fn postgres_keeps_no_short_log() {
    with_pg("short_logs", |url| async move {
        ordinary_paths(&url, false).await;
    })
    .await;
}
