//! A full disk through the real binary (issue 22, item 7): a small tmpfs
//! under the SQLite file, under PostgreSQL's tables (a tablespace), and
//! under the blob directory, filled to its last page while the server runs.
//!
//! - every write that needs the full storage answers `503` with
//!   `Retry-After` and `{"error": "database storage full" | "blob storage
//!   full", "kind": "internal"}`, never 500, also when a whole group commit
//!   fails; `abstore_storage_full_total{storage}` counts each refusal;
//! - writes that do not need it, and reads, go on;
//! - nothing acknowledged is lost or changed and nothing refused is kept:
//!   everything is read back and compared with what was acknowledged;
//! - once the filler is removed, the very requests that were refused succeed,
//!   with no restart; a restart afterwards (SIGKILL) finds it all again.
//!
//! Mounting needs root (and the PostgreSQL case the server binaries):
//! elsewhere these tests skip loudly (`abstore_testkit::skip`), and with
//! `CI=true` they must run.

use crate::support;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use abstore_conformance::fixtures::build_event;
use abstore_conformance::util::{b64, enc, sha256_hex, unb64};
use serde_json::{Value, json};
use sqlx::Connection as _;
use support::cluster::{Cluster, is_root, pg_bin_dir};
use support::{Server, await_readiness, metric};

const CHECK: &str = "storage full through the binary (tmpfs)";
const DATABASE_FULL: &str = "database storage full";
const BLOBS_FULL: &str = "blob storage full";
const BUILD: &str = "full";

/// A tmpfs mounted on a temporary directory for the test's lifetime.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// `None` (the skip recorded) where mounting is not permitted.
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().expect("tempdir");
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "abstore-test"])
            .arg(dir.path())
            .output();
        let why = match mounted {
            Ok(out) if out.status.success() => return Some(Tmpfs { dir }),
            Ok(out) => String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            Err(err) => format!("running mount: {err}"),
        };
        abstore_testkit::skip::skipped(CHECK, &format!("cannot mount a tmpfs (needs root): {why}"));
        None
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let umount = |args: &[&str]| {
            Command::new("umount")
                .args(args)
                .arg(self.dir.path())
                .status()
                .is_ok_and(|s| s.success())
        };
        // A server being killed may still hold its files: a lazy unmount
        // detaches the file system all the same.
        if !umount(&[]) && !umount(&["--lazy"]) {
            eprintln!("warning: could not unmount {}", self.dir.path().display());
        }
    }
}

/// A file taking every free page of the file system it is on.
struct Filler(PathBuf);

impl Filler {
    fn fill(dir: &Path) -> Filler {
        let path = dir.join("filler");
        let mut file = std::fs::File::create(&path).expect("create the filler");
        let chunk = vec![0xa5_u8; 64 * 1024];
        loop {
            match file.write_all(&chunk) {
                Ok(()) => {}
                Err(err) if err.kind() == std::io::ErrorKind::StorageFull => break,
                Err(err) => panic!("filling {}: {err}", dir.display()),
            }
        }
        // Not one more page fits (tmpfs allocates by page).
        let probe = dir.join("probe");
        let err = std::fs::write(&probe, [0_u8; 4096]).expect_err("the disk is not full");
        assert_eq!(err.kind(), std::io::ErrorKind::StorageFull, "{err}");
        std::fs::remove_file(&probe).expect("remove the probe");
        Filler(path)
    }

    fn free(self) {
        std::fs::remove_file(&self.0).expect("remove the filler");
    }
}

/// One answer: status, `Retry-After`, JSON body (`null` when none).
#[derive(Debug)]
struct Answer {
    status: u16,
    retry_after: Option<String>,
    body: Value,
}

/// What a write does, for the ledger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Append,
    Deposit,
    Put,
    Chunk,
    Close,
    CreateBuild,
}

/// A write request, kept to be sent again once space is freed.
#[derive(Clone, Debug)]
struct Write {
    op: Op,
    path: String,
    body: Value,
}

struct Client {
    http: reqwest::Client,
    base: String,
}

impl Client {
    fn new(base: &str) -> Client {
        Client {
            http: support::client(),
            base: base.to_owned(),
        }
    }

    async fn send(&self, request: reqwest::RequestBuilder, what: &str) -> Answer {
        let response = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap_or("(not text)").to_owned());
        let text = response.text().await.unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        assert!(status < 500 || status == 503, "{what}: {status} {text}");
        Answer {
            status,
            retry_after,
            body,
        }
    }

    async fn post(&self, path: &str, body: &Value) -> Answer {
        let url = format!("{}{path}", self.base);
        self.send(self.http.post(url).json(body), path).await
    }

    async fn write(&self, write: &Write) -> Answer {
        self.post(&write.path, &write.body).await
    }

    /// A new open stream on the build.
    async fn create_stream(&self) -> String {
        let path = format!("/builds/{BUILD}/streams");
        let created = self.post(&path, &json!({"label": "full"})).await;
        assert_eq!(created.status, 201, "{}", created.body);
        created.body["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no stream id: {}", created.body))
            .to_owned()
    }

    /// A read, which must answer 200.
    async fn get(&self, path: &str) -> Value {
        let answer = self
            .send(self.http.get(format!("{}{path}", self.base)), path)
            .await;
        assert_eq!(answer.status, 200, "GET {path}: {}", answer.body);
        answer.body
    }
}

/// The refusal a full storage answers.
fn assert_full(answer: &Answer, message: &str, what: &str) {
    assert_eq!(answer.status, 503, "{what}: {}", answer.body);
    assert_eq!(
        answer.retry_after.as_deref(),
        Some("10"),
        "{what}: Retry-After"
    );
    assert_eq!(
        answer.body,
        json!({"error": message, "kind": "internal"}),
        "{what}"
    );
}

fn is_success(answer: &Answer) -> bool {
    matches!(answer.status, 200 | 201)
}

/// `len` letters that do not compress (PostgreSQL compresses large values,
/// and a compressed write would need next to no space).
fn text(len: usize) -> String {
    let mut state: u32 = 0x9e37_79b9;
    (0..len)
        .map(|_| {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            char::from(b'a' + (state >> 24) as u8 % 26)
        })
        .collect()
}

/// An event whose summary makes it about `kib` KiB.
fn event(tag: &str, kib: usize) -> Value {
    let mut event = build_event("observation");
    event["payload"]["summary"] = json!(format!("{tag} {}", text(kib * 1024)));
    event
}

fn append(tag: &str, kib: usize) -> Write {
    Write {
        op: Op::Append,
        path: format!("/builds/{BUILD}/events"),
        body: event(tag, kib),
    }
}

fn deposit(tag: &str, kib: usize) -> Write {
    Write {
        op: Op::Deposit,
        path: format!("/builds/{BUILD}/deposits"),
        body: json!({
            "artifacts": [{"kind": "report", "contentBase64": b64(format!("report {tag}").as_bytes())}],
            "event": event(tag, kib),
        }),
    }
}

fn put(tag: &str) -> Write {
    Write {
        op: Op::Put,
        path: format!("/builds/{BUILD}/artifacts"),
        body: json!({"kind": "plan", "contentBase64": b64(format!("# Plan {tag}\n").as_bytes())}),
    }
}

fn chunk(stream: &str, tag: &str, kib: usize) -> Write {
    let delta = text(kib * 1024);
    Write {
        op: Op::Chunk,
        path: format!("/streams/{stream}/chunks"),
        body: json!({"parts": [
            {"type": "text-start", "id": tag},
            {"type": "text-delta", "id": tag, "delta": format!("{tag} {delta}")},
            {"type": "text-end", "id": tag}
        ]}),
    }
}

fn close(stream: &str) -> Write {
    Write {
        op: Op::Close,
        path: format!("/streams/{stream}/close"),
        body: json!({"outcome": "completed"}),
    }
}

fn create_build(slug: &str) -> Write {
    Write {
        op: Op::CreateBuild,
        path: "/builds".into(),
        body: json!({"slug": slug, "repo": "acme/full"}),
    }
}

/// Everything the server acknowledged.
#[derive(Default)]
struct Ledger {
    /// The build's envelopes, by sequence.
    events: BTreeMap<i64, Value>,
    /// Artifact metadata as acknowledged, by (kind, revision).
    artifacts: BTreeMap<(String, i64), Value>,
    /// Stream id → its chunks, by sequence.
    chunks: BTreeMap<String, BTreeMap<i64, Value>>,
    /// Streams acknowledged closed.
    closed: Vec<String>,
    builds: Vec<String>,
}

impl Ledger {
    fn record(&mut self, write: &Write, answer: &Value) {
        let seq = |v: &Value| v["seq"].as_i64().unwrap_or_else(|| panic!("no seq: {v}"));
        let mut artifact = |meta: &Value| {
            let key = (
                meta["kind"].as_str().unwrap_or_default().to_owned(),
                meta["revision"].as_i64().unwrap_or(-1),
            );
            assert!(self.artifacts.insert(key, meta.clone()).is_none(), "{meta}");
        };
        match write.op {
            Op::Append => {
                let old = self.events.insert(seq(answer), answer.clone());
                assert!(old.is_none(), "sequence reused: {answer}");
            }
            Op::Deposit => {
                artifact(&answer["artifacts"][0]);
                let event = &answer["event"];
                assert!(self.events.insert(seq(event), event.clone()).is_none());
            }
            Op::Put => artifact(answer),
            Op::Chunk => {
                let stream = answer["stream"].as_str().unwrap_or_default().to_owned();
                let chunks = self.chunks.entry(stream).or_default();
                assert!(chunks.insert(seq(answer), answer.clone()).is_none());
            }
            Op::Close => {
                assert_eq!(answer["status"], "closed", "{answer}");
                self.closed
                    .push(answer["id"].as_str().unwrap_or_default().to_owned());
            }
            Op::CreateBuild => self
                .builds
                .push(answer["slug"].as_str().unwrap_or_default().to_owned()),
        }
    }

    /// Send `write`, which must succeed, and record it.
    async fn acked(&mut self, c: &Client, write: &Write) {
        let answer = c.write(write).await;
        assert!(
            is_success(&answer),
            "{}: {} {}",
            write.path,
            answer.status,
            answer.body
        );
        self.record(write, &answer.body);
    }

    /// Send `make(0)`, `make(1)`, … until one is refused for `message`;
    /// every write before it must succeed (it is recorded). Returns the
    /// refused write, to be sent again once space is freed.
    async fn until_refused(
        &mut self,
        c: &Client,
        message: &str,
        make: impl Fn(usize) -> Write,
    ) -> Write {
        const LIMIT: usize = 2000;
        for i in 0..LIMIT {
            let write = make(i);
            let answer = c.write(&write).await;
            if answer.status == 503 {
                assert_full(&answer, message, &write.path);
                return write;
            }
            assert!(
                is_success(&answer),
                "{}: {} {}",
                write.path,
                answer.status,
                answer.body
            );
            self.record(&write, &answer.body);
        }
        panic!(
            "{LIMIT} writes like {:?} were all accepted on a full disk",
            make(0).path
        );
    }

    /// Send `write`, which may fit or be refused for `message`; returns it
    /// when refused.
    async fn maybe_refused(&mut self, c: &Client, message: &str, write: Write) -> Option<Write> {
        let answer = c.write(&write).await;
        if answer.status == 503 {
            assert_full(&answer, message, &write.path);
            return Some(write);
        }
        assert!(
            is_success(&answer),
            "{}: {} {}",
            write.path,
            answer.status,
            answer.body
        );
        self.record(&write, &answer.body);
        None
    }

    /// Read everything back: exactly what was acknowledged, byte for byte.
    async fn verify(&self, c: &Client, when: &str) {
        let events = c.get(&format!("/builds/{BUILD}/events?since=0")).await;
        let expected: Vec<&Value> = self.events.values().collect();
        let found: Vec<&Value> = events.as_array().into_iter().flatten().collect();
        assert_eq!(
            found.len(),
            expected.len(),
            "{when}: {} events stored, {} acknowledged",
            found.len(),
            expected.len()
        );
        for (found, expected) in found.iter().zip(&expected) {
            assert_eq!(found, expected, "{when}: an event was lost or changed");
        }
        let seqs: Vec<i64> = self.events.keys().copied().collect();
        let dense: Vec<i64> = (1..=seqs.len() as i64).collect();
        assert_eq!(seqs, dense, "{when}: sequences are not 1..n");

        let list = c.get(&format!("/builds/{BUILD}/artifact-list")).await;
        let listed: Vec<&Value> = list
            .as_array()
            .into_iter()
            .flatten()
            .filter(|meta| !meta["kind"].as_str().unwrap_or("").starts_with("stream:"))
            .collect();
        let expected: Vec<&Value> = self.artifacts.values().collect();
        assert_eq!(listed, expected, "{when}: artifact metadata");
        for meta in list.as_array().into_iter().flatten() {
            let path = format!(
                "/builds/{BUILD}/artifacts?kind={}&rev={}",
                enc(meta["kind"].as_str().unwrap_or_default()),
                meta["revision"]
            );
            let read = c.get(&path).await;
            let bytes = read["contentBase64"]
                .as_str()
                .and_then(unb64)
                .unwrap_or_else(|| panic!("{when}: {path}: no content"));
            assert_eq!(
                json!(sha256_hex(&bytes)),
                meta["blobRef"],
                "{when}: {path}: bytes"
            );
        }

        for (stream, chunks) in &self.chunks {
            let read = c.get(&format!("/streams/{stream}/chunks?since=0")).await;
            let found: Vec<&Value> = read["chunks"].as_array().into_iter().flatten().collect();
            let expected: Vec<&Value> = chunks.values().collect();
            assert_eq!(found, expected, "{when}: chunks of {stream}");
        }
        for stream in &self.closed {
            let read = c.get(&format!("/streams/{stream}")).await;
            assert_eq!(read["status"], "closed", "{when}: {read}");
            let kind = format!("stream:{stream}");
            assert_eq!(read["artifact"]["kind"], kind.as_str(), "{when}: {read}");
        }

        let builds = c.get("/builds").await;
        let mut slugs: Vec<&str> = builds
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|b| b["slug"].as_str())
            .collect();
        slugs.sort_unstable();
        let mut expected: Vec<&str> = self.builds.iter().map(String::as_str).collect();
        expected.sort_unstable();
        assert_eq!(slugs, expected, "{when}: builds");
    }
}

/// Start the server with its metrics on a port of their own (the same
/// after a restart); returns it and its metrics URL.
async fn serve(database: &str, blobs: &Path) -> (Server, String) {
    let server = Server::builder()
        .database(database)
        .blobs(support::path_text(blobs))
        .metrics()
        .start()
        .await;
    let metrics = server.metrics_url().to_owned();
    (server, metrics)
}

/// The refusals were logged at `ERROR`, but not once each: the line is
/// rate-limited to one per 10 s, and these tests refuse their writes within
/// a second or two.
fn assert_logged(stderr: &str, message: &str, refused: usize) {
    let text = format!("{message}: writes answer 503 until space is freed");
    let logged = stderr
        .lines()
        .filter(|line| line.contains("ERROR") && line.contains(&text))
        .count();
    assert!(
        (1..refused.max(2)).contains(&logged),
        "{logged} log lines for {refused} refusals:\n{stderr}"
    );
}

async fn refusals(metrics: &str, storage: &str) -> f64 {
    let series = format!("abstore_storage_full_total{{storage=\"{storage}\"}}");
    metric(&reqwest::Client::new(), metrics, &series)
        .await
        .unwrap_or_else(|| panic!("{series} is not on {metrics}"))
}

/// The scenario for a database whose storage is on `disk`: history, the
/// disk filled, every kind of database write refused, reads, space freed,
/// the refused writes again, a restart.
async fn database_fills(disk: &Tmpfs, database: &str) {
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let (mut server, metrics) = serve(database, &elsewhere.path().join("blobs")).await;
    let c = Client::new(server.url());
    let mut ledger = Ledger::default();
    ledger.acked(&c, &create_build(BUILD)).await;
    let stream = c.create_stream().await;
    ledger.acked(&c, &chunk(&stream, "before", 1)).await;
    let closing = c.create_stream().await;
    ledger.acked(&c, &chunk(&closing, "before", 1)).await;
    // SQLite: more than the 1000-page auto-checkpoint, so the WAL has been
    // checkpointed and restarted; on the full disk, commits first reuse its
    // pages while every checkpoint fails to grow the database file.
    for i in 0..80 {
        ledger.acked(&c, &append(&format!("history {i}"), 64)).await;
    }

    let filler = Filler::fill(disk.path());
    let mut refused = vec![
        ledger
            .until_refused(&c, DATABASE_FULL, |i| append(&format!("full {i}"), 64))
            .await,
    ];
    // Concurrent writes (on SQLite, a group commit of many, failing as a
    // whole): each answers the refusal, none a 500.
    let mut burst = tokio::task::JoinSet::new();
    for i in 0..16 {
        let (c, write) = (Client::new(&c.base), append(&format!("burst {i}"), 64));
        burst.spawn(async move { (c.write(&write).await, write) });
    }
    let mut burst_refused = 0;
    while let Some(done) = burst.join_next().await {
        let (answer, write) = done.expect("burst task");
        if answer.status == 503 {
            assert_full(&answer, DATABASE_FULL, "burst append");
            burst_refused += 1;
            refused.push(write);
        } else {
            assert!(is_success(&answer), "burst: {answer:?}");
            ledger.record(&write, &answer.body);
        }
    }
    assert!(
        burst_refused > 0,
        "every burst append fitted on a full disk"
    );
    refused.push(
        ledger
            .until_refused(&c, DATABASE_FULL, |i| deposit(&format!("full {i}"), 16))
            .await,
    );
    refused.push(
        ledger
            .until_refused(&c, DATABASE_FULL, |i| put(&format!("full {i}")))
            .await,
    );
    refused.push(
        ledger
            .until_refused(&c, DATABASE_FULL, |i| chunk(&stream, &format!("c{i}"), 32))
            .await,
    );
    refused.push(
        ledger
            .until_refused(&c, DATABASE_FULL, |i| create_build(&format!("new-{i}")))
            .await,
    );
    // A close writes its blob (elsewhere), then needs a few pages: it may
    // still fit where the writes above did not, and closes once only.
    refused.extend(
        ledger
            .maybe_refused(&c, DATABASE_FULL, close(&closing))
            .await,
    );

    // What the operator sees: the count, the log line (not one per
    // refusal), readiness unchanged since reads are served.
    let counted = refusals(&metrics, "database").await;
    assert_eq!(counted, refused.len() as f64, "refusals counted");
    assert_eq!(refusals(&metrics, "blobs").await, 0.0);
    assert_logged(&server.stderr(), DATABASE_FULL, refused.len());
    await_readiness(server.url(), 200).await;
    ledger.verify(&c, "while full").await;
    // A held read waits and answers as ever.
    let last = ledger.events.keys().last().copied().unwrap_or(0);
    let held = c
        .get(&format!("/builds/{BUILD}/events?since={last}&wait=1"))
        .await;
    assert_eq!(held, json!([]), "held read while full");

    filler.free();
    for write in &refused {
        ledger.acked(&c, write).await;
    }
    ledger.acked(&c, &close(&stream)).await;
    ledger.acked(&c, &append("after", 64)).await;
    ledger.verify(&c, "after space was freed").await;
    assert_eq!(refusals(&metrics, "database").await, counted);

    server.restart().await.expect("restart");
    let c = Client::new(server.url());
    ledger.verify(&c, "after a restart").await;
    server.stop().await.ok();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_disk_under_the_sqlite_file() {
    let Some(disk) = Tmpfs::mount("16m") else {
        return;
    };
    let database = format!("sqlite://{}", disk.path().join("abstore.db").display());
    database_fills(&disk, &database).await;
}

/// PostgreSQL answers SQLSTATE 53100 when a table cannot grow: abstore's
/// tables are put on the small disk (a tablespace on the tmpfs, the
/// database's default), on a cluster of the test's own. Its catalog and WAL
/// stay on the cluster's disk: a full WAL disk stops PostgreSQL, which is
/// an outage (`tests/it/pg_outage.rs`), not this.
#[tokio::test(flavor = "multi_thread")]
async fn a_full_disk_under_postgresql() {
    let Some(bin) = pg_bin_dir() else {
        abstore_testkit::skip::skipped(
            "storage full on PostgreSQL",
            "no /usr/lib/postgresql/*/bin/initdb; install Debian's postgresql package",
        );
        return;
    };
    let Some(disk) = Tmpfs::mount("16m") else {
        return;
    };
    let space = disk.path().join("tablespace");
    std::fs::create_dir(&space).expect("tablespace directory");
    if is_root() {
        let owned = Command::new("chown")
            .arg("postgres:postgres")
            .arg(&space)
            .status()
            .is_ok_and(|s| s.success());
        assert!(owned, "chown postgres {}", space.display());
    }
    let cluster = Cluster::create(bin);
    let mut admin = sqlx::PgConnection::connect(&cluster.url())
        .await
        .expect("connect to the cluster");
    for sql in [
        format!(
            "CREATE TABLESPACE abstore_full LOCATION '{}'",
            space.display()
        ),
        "CREATE DATABASE abstore_full".to_owned(),
        "ALTER DATABASE abstore_full SET default_tablespace = abstore_full".to_owned(),
    ] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.clone()))
            .execute(&mut admin)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    admin.close().await.ok();
    database_fills(&disk, &cluster.database_url("abstore_full")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_disk_under_the_blob_directory() {
    let Some(disk) = Tmpfs::mount("2m") else {
        return;
    };
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let database = format!("sqlite://{}", elsewhere.path().join("abstore.db").display());
    let blobs = disk.path().join("blobs");
    let (mut server, metrics) = serve(&database, &blobs).await;
    let c = Client::new(server.url());
    let mut ledger = Ledger::default();
    ledger.acked(&c, &create_build(BUILD)).await;
    let stream = c.create_stream().await;
    ledger.acked(&c, &chunk(&stream, "before", 1)).await;
    ledger.acked(&c, &deposit("before", 1)).await;
    ledger.acked(&c, &put("before")).await;

    let filler = Filler::fill(disk.path());
    let refused = vec![
        ledger
            .until_refused(&c, BLOBS_FULL, |i| deposit(&format!("full {i}"), 1))
            .await,
        ledger
            .until_refused(&c, BLOBS_FULL, |i| put(&format!("full {i}")))
            .await,
        ledger
            .until_refused(&c, BLOBS_FULL, |_| close(&stream))
            .await,
    ];
    // Writes that need no blob go on.
    ledger.acked(&c, &append("while blobs are full", 1)).await;
    ledger.acked(&c, &chunk(&stream, "while", 1)).await;

    let counted = refusals(&metrics, "blobs").await;
    assert_eq!(counted, refused.len() as f64, "refusals counted");
    assert_eq!(refusals(&metrics, "database").await, 0.0);
    assert_logged(&server.stderr(), BLOBS_FULL, refused.len());
    let down = await_readiness(server.url(), 503).await;
    assert_eq!(down.json()["checks"]["blobs"], "failed", "{}", down.text());
    ledger.verify(&c, "while full").await;
    // A refused write leaves no partial file behind (it would hold space).
    let stored = blob_files(&blobs);
    let referenced = ledger
        .artifacts
        .values()
        .filter_map(|meta| meta["blobRef"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(stored, referenced, "blob files");

    filler.free();
    await_readiness(server.url(), 200).await;
    for write in &refused {
        ledger.acked(&c, write).await;
    }
    ledger.acked(&c, &deposit("after", 1)).await;
    ledger.verify(&c, "after space was freed").await;
    assert_eq!(refusals(&metrics, "blobs").await, counted);

    server.restart().await.expect("restart");
    let c = Client::new(server.url());
    ledger.verify(&c, "after a restart").await;
    server.stop().await.ok();
}

/// The names of the files under a blob directory.
fn blob_files(dir: &Path) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("read the blob directory") {
            let entry = entry.expect("directory entry");
            if entry.file_type().expect("file type").is_dir() {
                pending.push(entry.path());
            } else {
                names.insert(entry.file_name().to_string_lossy().into_owned());
            }
        }
    }
    names
}
