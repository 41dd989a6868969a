//! The caches behind a protocol-3 frame (the build-records cache under
//! `GET /builds`, src/store/record_cache.rs; the build digests,
//! src/history/digests.rs) raced against writes through the binary, on a
//! SQLite file and on two PostgreSQL replicas (writes and reads on both):
//! no answer may miss a write acknowledged before its request was sent.
//!
//! Each build goes through six acknowledged stages, each visible in the
//! answers: created (in `GET /builds`), observed (an observation in its
//! digest), claimed by `h1`, heartbeat (its `heartbeatAt`), released, and
//! claimed by `h2`. Readers note the stages acknowledged before each
//! request and check the answer shows at least those.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::support;

use support::{Server, protocol3_client, with_pg};

const REPO: &str = "acme/race";
const WRITERS: usize = 3;
const BUILDS_PER_WRITER: usize = 12;

/// The stage each build's last acknowledged write reached.
type Stages = Arc<Mutex<HashMap<String, u8>>>;

fn server(database: &str) -> support::ServerBuilder {
    Server::builder()
        .database(database)
        .accept_protocol3()
        .flag("--compress-min-bytes", "16")
}

async fn post_ok(base: &str, path: &str, body: Value, want: u16) -> Value {
    let res = protocol3_client()
        .post(format!("{base}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    let text = res.text().await.unwrap();
    assert_eq!(status, want, "{path}: {text}");
    serde_json::from_str(&text).unwrap()
}

fn observation() -> Value {
    let path = format!(
        "{}/fixtures/catalog/build/observation.recorded/valid-kernel.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// One writer's builds through their six stages, on `bases` in turn.
async fn write(bases: Vec<String>, writer: usize, stages: Stages) {
    for i in 0..BUILDS_PER_WRITER {
        let slug = format!("b-{writer}-{i:02}");
        let base = |step: usize| bases[(i + step) % bases.len()].clone();
        let lease = |holder: &str| json!({"holder": format!("{holder}-{slug}"), "ttlMs": 600_000});
        let steps: [(String, Value, u16); 6] = [
            ("/builds".into(), json!({"slug": slug, "repo": REPO}), 201),
            (format!("/builds/{slug}/events"), observation(), 201),
            (format!("/builds/{slug}/lease/claim"), lease("h1"), 200),
            (
                format!("/builds/{slug}/lease/heartbeat"),
                json!({"holder": format!("h1-{slug}")}),
                200,
            ),
            (
                format!("/builds/{slug}/lease/release"),
                json!({"holder": format!("h1-{slug}")}),
                200,
            ),
            (format!("/builds/{slug}/lease/claim"), lease("h2"), 200),
        ];
        for (step, (path, body, want)) in steps.into_iter().enumerate() {
            let answer = post_ok(&base(step), &path, body, want).await;
            if want == 200 {
                assert_eq!(answer["ok"], true, "{path}");
            }
            let stage = u8::try_from(step + 1).unwrap();
            stages.lock().unwrap().insert(slug.clone(), stage);
        }
    }
}

/// The stages a `GET /builds` record is consistent with.
fn listed_stages(record: &Value) -> &'static [u8] {
    let slug = record["slug"].as_str().unwrap();
    let heartbeat = record.get("heartbeatAt").is_some();
    match record["lease"]["holder"].as_str() {
        None if heartbeat => &[5],
        None => &[1, 2],
        Some(holder) if holder == format!("h1-{slug}") && heartbeat => &[4],
        Some(holder) if holder == format!("h1-{slug}") => &[3],
        Some(holder) if holder == format!("h2-{slug}") => &[6],
        Some(other) => panic!("{slug}: a holder never claimed, {other}"),
    }
}

/// Reads through `base` until `done`, checking each answer against the
/// stages acknowledged before it was asked; the answers checked.
async fn read(base: String, stages: Stages, done: Arc<tokio::sync::Notify>) -> usize {
    let c = protocol3_client();
    let mut checked = 0;
    let done = done.notified();
    tokio::pin!(done);
    for round in 0.. {
        let before = stages.lock().unwrap().clone();
        // Both encodings: the kept records are spliced into either.
        let accept = if round % 2 == 0 {
            "identity"
        } else {
            "gzip, br, zstd"
        };
        let (status, _, body) = support::get_decoded(&c, &format!("{base}/builds"), accept).await;
        assert_eq!(status, 200);
        let listed: Vec<Value> = serde_json::from_slice(&body).unwrap();
        let by_slug: HashMap<&str, &Value> = listed
            .iter()
            .map(|r| (r["slug"].as_str().unwrap(), r))
            .collect();
        for (slug, &stage) in &before {
            let record = by_slug
                .get(slug.as_str())
                .unwrap_or_else(|| panic!("{slug} acknowledged but not listed"));
            let shown = listed_stages(record);
            assert!(
                shown.iter().any(|&s| s >= stage),
                "{slug}: stage {stage} acknowledged, the listing shows {shown:?}: {record}"
            );
        }
        let (status, _, body) = support::get_decoded(
            &c,
            &format!("{base}/repos/acme%2Frace/build-digests"),
            accept,
        )
        .await;
        assert_eq!(status, 200);
        let digests: Vec<Value> = serde_json::from_slice(&body).unwrap();
        let observed: HashMap<&str, usize> = digests
            .iter()
            .map(|d| {
                let seen = d["observations"].as_array().unwrap().len();
                (d["slug"].as_str().unwrap(), seen)
            })
            .collect();
        for (slug, &stage) in &before {
            if stage >= 2 {
                assert_eq!(
                    observed.get(slug.as_str()),
                    Some(&1),
                    "{slug}: its observation acknowledged, not in the digests"
                );
            }
        }
        checked += 1;
        if futures_util::FutureExt::now_or_never(done.as_mut()).is_some() {
            break;
        }
    }
    checked
}

/// Writers on `writers`, two readers on each of `readers`.
async fn race(writers: &[&Server], readers: &[&Server]) {
    let stages: Stages = Arc::default();
    let done = Arc::new(tokio::sync::Notify::new());
    let bases: Vec<String> = writers.iter().map(|s| s.url().to_owned()).collect();
    let reading: Vec<_> = readers
        .iter()
        .flat_map(|s| [s.url().to_owned(), s.url().to_owned()])
        .map(|base| tokio::spawn(read(base, stages.clone(), done.clone())))
        .collect();
    let writing: Vec<_> = (0..WRITERS)
        .map(|w| tokio::spawn(write(bases.clone(), w, stages.clone())))
        .collect();
    for w in writing {
        w.await.unwrap();
    }
    // Each reader finishes the round it is in.
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    done.notify_waiters();
    let mut rounds = 0;
    for r in reading {
        rounds += r.await.unwrap();
    }
    assert!(rounds >= 4 * readers.len(), "only {rounds} rounds of reads");
    assert_eq!(stages.lock().unwrap().len(), WRITERS * BUILDS_PER_WRITER);
}

#[tokio::test]
async fn a_sqlite_files_frames_never_miss_an_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("s.db").display());
    let one = server(&url).start().await;
    race(&[&one], &[&one]).await;
}

/// Writes and reads on both replicas, the second with a build-records
/// bound that keeps about a third of the builds (the listing past its
/// bound); then a third replica without the cache lists the same bytes as
/// both.
#[tokio::test]
async fn postgres_frames_never_miss_the_other_replicas_writes() {
    with_pg("frame_caches", |url| async move {
        let a = server(&url).start().await;
        let b = server(&url)
            .flag("--build-records-cache-bytes", "5000")
            .start()
            .await;
        race(&[&a, &b], &[&a, &b]).await;
        let uncached = server(&url)
            .flag("--build-records-cache-bytes", "0")
            .start()
            .await;
        let c = protocol3_client();
        let listing = |base: String| {
            let c = c.clone();
            async move { support::get_decoded(&c, &format!("{base}/builds"), "identity").await }
        };
        let fresh = listing(uncached.url().to_owned()).await;
        for replica in [&a, &b] {
            let kept = listing(replica.url().to_owned()).await;
            assert_eq!(kept.0, 200);
            assert_eq!(
                String::from_utf8_lossy(&kept.2),
                String::from_utf8_lossy(&fresh.2)
            );
        }
    })
    .await;
}
