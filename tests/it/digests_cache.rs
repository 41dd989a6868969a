//! The build-digests cache (src/history/digests.rs) through the binary, on a
//! SQLite file and on two PostgreSQL replicas: `GET /repos/{repo}/build-digests`
//! is the same answer, identity and zstd, whether derived from the database,
//! served from the cache or advanced by the events past the kept tails; a
//! build created or written (here or on the other replica) is in the very
//! next answer; a cache too small to keep the answer, or off, answers the
//! same.

use serde_json::{Value, json};

use crate::support;

use support::{Server, metric, protocol3_client, with_pg};

const REPO: &str = "acme%2Fdigests";

fn fixture(ty: &str, file: &str) -> Value {
    let path = format!(
        "{}/fixtures/catalog/build/{ty}/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

async fn create(base: &str, slug: &str) {
    let res = protocol3_client()
        .post(format!("{base}/builds"))
        .json(&json!({"slug": slug, "repo": "acme/digests"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 201, "{}", res.text().await.unwrap());
}

async fn append(base: &str, slug: &str, event: &Value) {
    let res = protocol3_client()
        .post(format!("{base}/builds/{slug}/events"))
        .json(event)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 201, "{}", res.text().await.unwrap());
}

async fn observe(base: &str, slug: &str) {
    append(
        base,
        slug,
        &fixture("observation.recorded", "valid-kernel.json"),
    )
    .await;
}

/// The digests, after checking that the zstd and gzip answers are the
/// identity one: `slug:terminal:observation seqs` per build.
async fn digests(base: &str) -> Vec<String> {
    let url = format!("{base}/repos/{REPO}/build-digests");
    let c = protocol3_client();
    let (status, encoding, identity) = support::get_decoded(&c, &url, "identity").await;
    assert_eq!((status, encoding), (200, None));
    let (status, encoding, zstd) = support::get_decoded(&c, &url, "gzip, br, zstd").await;
    assert_eq!(status, 200);
    // Answers under `--compress-min-bytes` (16) go as they are.
    let compressed = identity.len() >= 16;
    assert_eq!(encoding.as_deref(), compressed.then_some("zstd"));
    assert_eq!(
        String::from_utf8_lossy(&zstd),
        String::from_utf8_lossy(&identity)
    );
    let (_, encoding, gzip) = support::get_decoded(&c, &url, "gzip").await;
    assert_eq!(encoding.as_deref(), compressed.then_some("gzip"));
    assert_eq!(gzip, identity);
    let list: Vec<Value> = serde_json::from_slice(&identity).unwrap();
    list.iter()
        .map(|d| {
            let seqs: Vec<String> = d["observations"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| o["seq"].to_string())
                .collect();
            format!(
                "{}:{}:{}",
                d["slug"].as_str().unwrap(),
                d["terminal"].as_str().unwrap_or("-"),
                seqs.join(",")
            )
        })
        .collect()
}

async fn answers(metrics: &str, source: &str) -> f64 {
    let name = format!("abstore_build_digests_answers_total{{source=\"{source}\"}}");
    metric(&protocol3_client(), metrics, &name)
        .await
        .unwrap_or(0.0)
}

/// Writes through `writer`, reads through `reader` (the same server on a
/// SQLite file; another replica on PostgreSQL).
async fn digests_follow_every_write(reader: &Server, writer: &Server) {
    let (read, write, metrics) = (reader.url(), writer.url(), reader.metrics_url());
    assert!(digests(read).await.is_empty(), "no builds yet");
    assert_eq!(answers(metrics, "database").await, 1.0);
    assert_eq!(
        answers(metrics, "cache").await,
        2.0,
        "the empty answer kept"
    );
    create(write, "b-2").await;
    create(write, "b-1").await;
    observe(write, "b-1").await;
    assert_eq!(digests(read).await, ["b-1:-:1", "b-2:-:"]);
    assert_eq!(answers(metrics, "advanced").await, 1.0, "two new builds");
    assert_eq!(answers(metrics, "cache").await, 4.0, "zstd and gzip kept");

    // A write to one build: only its events past the kept tail are read.
    observe(write, "b-1").await;
    append(write, "b-1", &fixture("pr.merged", "valid-dispatcher.json")).await;
    assert_eq!(digests(read).await, ["b-1:-:1,2", "b-2:-:"]);
    assert_eq!(answers(metrics, "advanced").await, 2.0);
    // A new build, and a terminal fact on a build that had no events.
    create(write, "b-0").await;
    append(
        write,
        "b-2",
        &fixture("build.completed", "valid-dispatcher.json"),
    )
    .await;
    observe(write, "b-0").await;
    assert_eq!(digests(read).await, ["b-0:-:1", "b-1:-:1,2", "b-2:done:"]);
    // The merge time kept in b-1's digest survived the advance.
    let res = protocol3_client()
        .get(format!("{read}/repos/{REPO}/build-digests"))
        .send()
        .await
        .unwrap();
    let list: Vec<Value> = res.json().await.unwrap();
    assert!(list[1]["merged"].is_string(), "{list:?}");
    assert_eq!(answers(metrics, "advanced").await, 3.0);
    assert_eq!(answers(metrics, "database").await, 1.0);
    assert!(
        metric(
            &protocol3_client(),
            metrics,
            "abstore_build_digests_cache_bytes"
        )
        .await
        .unwrap()
            > 0.0
    );
    // An unknown repository has no builds.
    let res = protocol3_client()
        .get(format!("{read}/repos/acme%2Fnone/build-digests"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    assert_eq!(res.text().await.unwrap(), "[]");
}

fn server(database: &str) -> support::ServerBuilder {
    Server::builder()
        .database(database)
        .accept_protocol3()
        .metrics()
        .flag("--compress-min-bytes", "16")
}

#[tokio::test]
async fn a_sqlite_files_digests_follow_its_builds() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("s.db").display());
    let one = server(&url).start().await;
    digests_follow_every_write(&one, &one).await;
}

#[tokio::test]
async fn postgres_digests_follow_the_other_replicas_writes() {
    with_pg("build_digests", |url| async move {
        let reader = server(&url).start().await;
        let writer = server(&url).start().await;
        digests_follow_every_write(&reader, &writer).await;
    })
    .await;
}

/// A cache too small to keep the answer (a quarter of 256 bytes) and no
/// cache at all answer the same as the kept one.
#[tokio::test]
async fn digests_the_cache_cannot_keep_are_derived_every_time() {
    for bytes in ["256", "0"] {
        let one = Server::builder()
            .accept_protocol3()
            .metrics()
            .flag("--build-digests-cache-bytes", bytes)
            .flag("--compress-min-bytes", "16")
            .start()
            .await;
        let (base, metrics) = (one.url(), one.metrics_url());
        for n in 0..4 {
            create(base, &format!("b-{n}")).await;
            observe(base, &format!("b-{n}")).await;
        }
        let expected = ["b-0:-:1", "b-1:-:1", "b-2:-:1", "b-3:-:1"];
        assert_eq!(digests(base).await, expected, "cache {bytes}");
        observe(base, "b-3").await;
        assert_eq!(
            digests(base).await,
            ["b-0:-:1", "b-1:-:1", "b-2:-:1", "b-3:-:1,2"],
            "cache {bytes}"
        );
        assert_eq!(answers(metrics, "cache").await, 0.0, "cache {bytes}");
    }
}
