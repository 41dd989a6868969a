//! The store's guarantees through the real binary: a request abandoned by
//! its client never leaves the store half-changed nor breaks it
//! (docs/decisions.md, 14), on `sqlite::memory:`, a SQLite file and
//! PostgreSQL; and one process per SQLite file.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use abstore_testkit::scratch_pg;
use serde_json::{Value, json};

use crate::support;

use support::{Server, client};

fn observation(id: &str) -> Value {
    json!({"actor": {"kind": "kernel"}, "type": "observation.recorded",
           "payload": {"id": id, "kind": "followup", "summary": "disconnect"}})
}

/// Many clients append and abandon their requests at random points (the
/// request future is dropped, closing the socket, before or while the
/// server works on it) for about a second. Afterwards every acknowledged
/// append is readable with its payload, the sequence has no holes, and the
/// server still serves writes and reads.
async fn disconnecting_clients_leave_the_store_whole(server: &Server) {
    let c = client();
    let base = server.url().to_owned();
    let res = c
        .post(format!("{base}/builds"))
        .json(&json!({"slug": "dc", "repo": "acme/w"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 201);

    // payload id → acknowledged seq
    let acknowledged = Arc::new(Mutex::new(BTreeMap::<String, i64>::new()));
    // Like wrk: every worker is cut off mid-request at the deadline, and in
    // between every other request is abandoned after 0–2 ms. Rounds repeat
    // until enough appends were acknowledged to mean something (a loaded
    // machine may acknowledge few in one round).
    for round in 0..20 {
        if acknowledged.lock().unwrap().len() >= 32 {
            break;
        }
        cut_off_clients(&base, round, &acknowledged).await;
    }

    // The server still writes (a replaced in-memory connection would answer
    // 500 here: no such table).
    let res = c
        .post(format!("{base}/builds/dc/events"))
        .json(&observation("after"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 201, "{}", res.text().await.unwrap());
    let events: Vec<Value> = c
        .get(format!("{base}/builds/dc/events?since=0"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let seqs: Vec<i64> = events.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as i64).collect::<Vec<_>>(),
        "a hole in the sequence"
    );
    let stored: BTreeMap<String, i64> = events
        .iter()
        .map(|e| {
            (
                e["payload"]["id"].as_str().unwrap().to_owned(),
                e["seq"].as_i64().unwrap(),
            )
        })
        .collect();
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(acknowledged.len() >= 32, "too few appends to mean anything");
    for (id, seq) in &acknowledged {
        assert_eq!(stored.get(id), Some(seq), "acknowledged {id} as {seq}");
    }
}

/// One round: 16 clients appending to build `dc` until they are all cut off
/// 1.2 s from now; acknowledged appends are recorded (payload id → seq).
async fn cut_off_clients(base: &str, round: u32, acknowledged: &Arc<Mutex<BTreeMap<String, i64>>>) {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(1200);
    let mut clients = Vec::new();
    for worker in 0..16 {
        let (c, base, acknowledged) = (client(), base.to_owned(), acknowledged.clone());
        clients.push(tokio::spawn(tokio::time::timeout_at(
            deadline,
            async move {
                for n in 0u32.. {
                    let id = format!("r{round}-w{worker}-{n}");
                    let request = c
                        .post(format!("{base}/builds/dc/events"))
                        .json(&observation(&id))
                        .send();
                    let patience = if n % 2 == 0 {
                        Duration::from_micros(rand::random::<u64>() % 2_000)
                    } else {
                        Duration::from_secs(30)
                    };
                    if let Ok(Ok(res)) = tokio::time::timeout(patience, request).await {
                        let status = res.status().as_u16();
                        assert_ne!(status / 100, 5, "a 5xx while clients disconnect");
                        if status == 201 {
                            let envelope: Value = res.json().await.unwrap();
                            acknowledged
                                .lock()
                                .unwrap()
                                .insert(id, envelope["seq"].as_i64().unwrap());
                        }
                    }
                }
            },
        )));
    }
    for client in clients {
        assert!(client.await.unwrap().is_err(), "cut off at the deadline");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn disconnects_on_sqlite_memory() {
    let server = Server::builder().start().await;
    disconnecting_clients_leave_the_store_whole(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn disconnects_on_a_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("abstore.db").display());
    let server = Server::builder().database(&db).start().await;
    disconnecting_clients_leave_the_store_whole(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn disconnects_on_postgres() {
    let Some(db) = scratch_pg::for_test("PostgreSQL disconnect test", "abstore_dc").await else {
        return;
    };
    let server = Server::builder().database(&db.url).start().await;
    disconnecting_clients_leave_the_store_whole(&server).await;
    drop(server);
    let _ = db.drop_db().await;
}

/// A second server on the same SQLite file refuses to start, naming the
/// reason; once the first is gone it starts.
#[tokio::test]
async fn one_process_per_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("abstore.db").display());
    let mut first = Server::builder().database(&db).start().await;
    let second = tokio::time::timeout(
        Duration::from_secs(60),
        Server::builder().database(&db).try_start(),
    )
    .await
    .expect("the second server neither failed nor stopped");
    let Err(second) = second else {
        panic!("a second server started on {db}");
    };
    let status = second.status.unwrap_or_else(|| panic!("{second}"));
    let stderr = second.stderr;
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("another abstore process is using the SQLite database"),
        "{stderr}"
    );
    first.stop().await.unwrap();
    let _again = Server::builder().database(&db).start().await;
    // In-memory databases are private to their process: no lock.
    let _m1 = Server::builder().start().await;
    let _m2 = Server::builder().start().await;
}

/// The one-process lock holds for the file itself, whatever path names it
/// (issue 49, item 1), through the release binary: a second server on the
/// same file through a symlink, a hard link or a symlinked directory
/// refuses to start, naming the file; so a write through a second process
/// can never be missing from the first's cached whole-log reads. Once the
/// first is gone, the file opens through any of its names.
#[tokio::test]
async fn one_process_per_sqlite_file_whatever_path_names_it() {
    let Some(release) = Server::builder().release() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("two.db");
    let url = |path: &std::path::Path| format!("sqlite://{}", path.display());
    let mut first = release.clone().database(&url(&file)).start().await;
    let symlink = dir.path().join("two-link.db");
    std::os::unix::fs::symlink(&file, &symlink).unwrap();
    let hard_link = dir.path().join("two-hard.db");
    std::fs::hard_link(&file, &hard_link).unwrap();
    let alias = dir.path().join("alias");
    std::os::unix::fs::symlink(dir.path(), &alias).unwrap();
    for other in [&symlink, &hard_link, &alias.join("two.db")] {
        let second = tokio::time::timeout(
            Duration::from_secs(60),
            release.clone().database(&url(other)).try_start(),
        )
        .await
        .expect("the second server neither failed nor stopped");
        let Err(second) = second else {
            panic!("a second server started on {}", other.display());
        };
        let stderr = second.stderr;
        assert!(
            second.status.is_some_and(|s| !s.success()),
            "{}: {stderr}",
            other.display()
        );
        assert!(
            stderr.contains("another abstore process is using the SQLite database"),
            "{stderr}"
        );
    }
    // Through the hard link the message names the file itself.
    let second = release.clone().database(&url(&hard_link)).try_start().await;
    let stderr = second.err().expect("refused").stderr;
    assert!(
        stderr.contains("the database file itself, device"),
        "{stderr}"
    );
    first.stop().await.unwrap();
    let again = release.database(&url(&symlink)).start().await;
    let listed = client()
        .get(format!("{}/builds", again.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status().as_u16(), 200);
}

/// Spec section 10 over HTTP: with the test clock moved BACKWARDS behind the
/// build's `updatedAt`, leases are still judged and extended by the clock's
/// own time (claim, heartbeat, release, expiry), on SQLite and PostgreSQL
/// alike (the rule is shared; SQLite is exercised here).
#[tokio::test]
async fn leases_follow_the_clock_when_it_steps_back() {
    let server = Server::builder().test_clock().start().await;
    let c = client();
    let base = server.url().to_owned();
    let post = |path: &str, body: Value| {
        let (c, url) = (c.clone(), format!("{base}{path}"));
        async move {
            let res = c.post(url).json(&body).send().await.unwrap();
            let status = res.status().as_u16();
            (status, res.json::<Value>().await.unwrap())
        }
    };
    let clock = |iso: &'static str| post("/_test/clock", json!({ "now": iso }));
    let lease = |op: &'static str, body: Value| async move {
        let (status, answer) = post(&format!("/builds/lc/lease/{op}"), body).await;
        assert_eq!(status, 200, "{answer}");
        answer["ok"].as_bool().unwrap()
    };
    assert_eq!(
        post("/builds", json!({"slug": "lc", "repo": "acme/w"}))
            .await
            .0,
        201
    );
    assert_eq!(clock("2026-07-15T12:00:01.000Z").await.0, 200);
    assert!(lease("claim", json!({"holder": "r1", "ttlMs": 1000})).await);
    assert_eq!(clock("2026-07-15T12:00:05.000Z").await.0, 200);
    assert_eq!(post("/builds/lc/events", observation("late")).await.0, 201);
    // Back to 12:00:01.500: r1's lease (until 12:00:02) still holds.
    assert_eq!(clock("2026-07-15T12:00:01.500Z").await.0, 200);
    assert!(!lease("claim", json!({"holder": "r2", "ttlMs": 1000})).await);
    assert!(lease("heartbeat", json!({"holder": "r1"})).await);
    let record: Value = c
        .get(format!("{base}/builds/lc"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(record["lease"]["expiresAt"], "2026-07-15T12:00:02.500Z");
    assert_eq!(record["heartbeatAt"], "2026-07-15T12:00:01.500Z");
    assert_eq!(record["updatedAt"], "2026-07-15T12:00:05.000Z");
    // Expired by the clock at 12:00:02.500 (expiresAt <= now).
    assert_eq!(clock("2026-07-15T12:00:02.500Z").await.0, 200);
    assert!(!lease("heartbeat", json!({"holder": "r1"})).await);
    assert!(lease("claim", json!({"holder": "r2", "ttlMs": 1000})).await);
    assert!(lease("release", json!({"holder": "r2"})).await);
    let record: Value = c
        .get(format!("{base}/builds/lc"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(record.get("lease").is_none(), "{record}");
}
