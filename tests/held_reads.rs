//! Held reads (spec section 3, DESIGN decision 7) through the real binary:
//! a read held on one process is woken by an append through another process
//! on the same PostgreSQL database; shutdown answers held reads at once; the
//! held-read cap answers early; `--max-wait-seconds` clamps.
//!
//! No assertion depends on tight timing: each checks what came back, and
//! that it came back long before the bound it would otherwise have waited.

use std::process::Stdio;
use std::time::{Duration, Instant};

use conformance::Server;
use serde_json::{Value, json};
use sqlx::{AssertSqlSafe, Connection, PgConnection};
use tokio::io::{AsyncBufReadExt, BufReader};

const VERSION: &str = "0.8.0";

fn client() -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("x-autobuild-version", VERSION.parse().unwrap());
    headers.insert("x-autobuild-protocol-version", "2".parse().unwrap());
    reqwest::Client::builder().default_headers(headers).build().unwrap()
}

async fn post(c: &reqwest::Client, url: String, body: Value) -> (u16, Value) {
    let res = c.post(url).json(&body).send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap())
}

async fn get(c: &reqwest::Client, url: String) -> (u16, Value) {
    let res = c.get(url).send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap())
}

fn observation() -> Value {
    json!({"actor": {"kind": "kernel"}, "type": "observation.recorded",
           "payload": {"id": "obs-1", "kind": "followup", "summary": "held read wake"}})
}

async fn start(args: &[&str]) -> Server {
    let mut all = vec!["serve", "--listen", "127.0.0.1:0"];
    all.extend_from_slice(args);
    Server::start(env!("CARGO_BIN_EXE_abstore"), &all).await.unwrap_or_else(|e| panic!("starting abstore: {e:#}"))
}

/// A fresh PostgreSQL database URL, or `None` outside CI without PostgreSQL.
async fn fresh_postgres() -> Option<(String, String)> {
    let Ok(base) = std::env::var("ABSTORE_TEST_POSTGRES_URL") else {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI requires ABSTORE_TEST_POSTGRES_URL");
        eprintln!("*** PostgreSQL held-read tests SKIPPED: set ABSTORE_TEST_POSTGRES_URL ***");
        return None;
    };
    let name = format!("abstore_held_{}", rand::random::<u64>());
    let mut admin = PgConnection::connect(&base).await.expect("connect");
    sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&mut admin).await.expect("create database");
    let mut url = url::Url::parse(&base).unwrap();
    url.set_path(&name);
    Some((url.to_string(), base))
}

#[tokio::test]
async fn a_read_held_on_one_process_wakes_on_an_append_through_another() {
    let Some((db, base)) = fresh_postgres().await else { return };
    let a = start(&["--database", &db, "--blobs", "memory://"]).await;
    let b = start(&["--database", &db, "--blobs", "memory://"]).await;
    let c = client();
    assert_eq!(post(&c, format!("{}/builds", a.url()), json!({"slug": "held", "repo": "acme/w"})).await.0, 201);

    let reader = {
        let (c, url) = (c.clone(), format!("{}/builds/held/events?since=0&wait=25", a.url()));
        tokio::spawn(async move {
            let started = Instant::now();
            let answer = get(&c, url).await;
            (answer, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(post(&c, format!("{}/builds/held/events", b.url()), observation()).await.0, 201);
    let ((status, events), elapsed) = reader.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(events.as_array().map(Vec::len), Some(1), "the held read answered {events}");
    assert!(elapsed < Duration::from_secs(20), "woken only at the bound: {elapsed:?}");

    drop((a, b));
    if let Ok(mut admin) = PgConnection::connect(&base).await {
        let name = db.rsplit('/').next().unwrap_or_default().to_owned();
        let _ = sqlx::query(AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))).execute(&mut admin).await;
    }
}

#[tokio::test]
async fn a_local_append_wakes_a_held_read_and_the_bound_answers_empty() {
    let s = start(&["--database", "sqlite::memory:", "--blobs", "memory://"]).await;
    let c = client();
    post(&c, format!("{}/repos", s.url()), json!({"repo": "acme/w"})).await;
    // At the bound: `200 []`.
    let started = Instant::now();
    let (status, events) = get(&c, format!("{}/repos/acme%2Fw/events?wait=1", s.url())).await;
    assert_eq!((status, events), (200, json!([])));
    assert!(started.elapsed() >= Duration::from_millis(900), "wait=1 answered before its bound");

    let reader = {
        let (c, url) = (c.clone(), format!("{}/repos/acme%2Fw/events?since=0&wait=1000", s.url()));
        tokio::spawn(async move { get(&c, url).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let append = json!({"actor": {"kind": "human", "user": "alice"}, "type": "harvest.pause-requested", "payload": {}});
    let (code, body) = post(&c, format!("{}/repos/acme%2Fw/events", s.url()), append).await;
    if code != 201 {
        // The repository catalog decides what a valid event is; use whatever
        // simple event it accepts so this test is about waking, not catalogs.
        panic!("repository append failed: {code} {body}");
    }
    let (status, events) = tokio::time::timeout(Duration::from_secs(10), reader).await.expect("clamped wait woke").unwrap();
    assert_eq!(status, 200);
    assert_eq!(events.as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn the_held_read_cap_and_a_zero_ceiling_answer_at_once() {
    for flags in [["--max-held-reads", "0"], ["--max-wait-seconds", "0"]] {
        let mut args = vec!["--database", "sqlite::memory:", "--blobs", "memory://"];
        args.extend_from_slice(&flags);
        let s = start(&args).await;
        let c = client();
        post(&c, format!("{}/builds", s.url()), json!({"slug": "cap", "repo": "r"})).await;
        let started = Instant::now();
        let (status, events) = get(&c, format!("{}/builds/cap/events?wait=20", s.url())).await;
        assert_eq!((status, events), (200, json!([])));
        assert!(started.elapsed() < Duration::from_secs(10), "{flags:?} still held the read");
    }
}

/// SIGTERM: held reads answer `[]` at once and the process exits 0.
#[tokio::test]
async fn shutdown_answers_held_reads_and_exits_cleanly() {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_abstore"))
        .args(["serve", "--listen", "127.0.0.1:0", "--database", "sqlite::memory:", "--blobs", "memory://"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines.next_line().await.unwrap().unwrap();
    let url = line.strip_prefix("abstore listening on ").unwrap().to_owned();
    let c = client();
    post(&c, format!("{url}/builds"), json!({"slug": "bye", "repo": "r"})).await;
    let reader = {
        let (c, url) = (c.clone(), format!("{url}/builds/bye/events?wait=30"));
        tokio::spawn(async move {
            let started = Instant::now();
            (get(&c, url).await, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pid = child.id().unwrap().to_string();
    assert!(tokio::process::Command::new("kill").args(["-TERM", &pid]).status().await.unwrap().success());
    let ((status, events), elapsed) = reader.await.unwrap();
    assert_eq!((status, events), (200, json!([])));
    assert!(elapsed < Duration::from_secs(15), "the held read waited for its bound: {elapsed:?}");
    let exit = tokio::time::timeout(Duration::from_secs(15), child.wait()).await.expect("exited").unwrap();
    assert!(exit.success(), "exit status {exit:?}");
}
