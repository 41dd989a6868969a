//! PostgreSQL connections kept for writes (issue 52, item 4), through the
//! binary: reads of every kind share `--db-pool-size` less
//! `--db-write-connections`, so reads that hold all of their share (here:
//! stuck behind a table lock another session holds) leave appends and
//! creations a connection, while a further read waits its acquire bound and
//! is answered `503`. With no connection kept, the same reads starve the
//! append: the control run shows the test can tell the two apart.

use std::time::{Duration, Instant};

use serde_json::json;
use sqlx::Connection as _;

use crate::support::{Server, client, with_pg};

const POOL: usize = 4;
const ACQUIRE_MS: u64 = 3_000;

/// What a write got while the reads' share was held: its status and how
/// long it took.
struct Held {
    append: (u16, Duration),
    create: (u16, Duration),
    short_read: (u16, Duration),
}

async fn with_reads_held(database: &str, write_connections: usize) -> Held {
    let server = Server::builder()
        .database(database)
        .flag("--db-pool-size", &POOL.to_string())
        .flag("--db-min-connections", &POOL.to_string())
        .flag("--db-write-connections", &write_connections.to_string())
        .flag("--db-acquire-timeout-ms", &ACQUIRE_MS.to_string())
        .start()
        .await;
    let base = server.url().to_owned();
    let c = client();
    let status = |res: reqwest::Response| res.status().as_u16();
    let res = c
        .post(format!("{base}/builds"))
        .json(&json!({"slug": "b", "repo": "acme/w"}))
        .send()
        .await
        .unwrap();
    assert_eq!(status(res), 201);

    // Another session locks `streams`: every read of a stream then waits
    // in PostgreSQL, holding its pooled connection. Appends and builds
    // never touch that table.
    let mut lock = sqlx::PgConnection::connect(database).await.unwrap();
    sqlx::raw_sql("BEGIN; LOCK TABLE streams IN ACCESS EXCLUSIVE MODE;")
        .execute(&mut lock)
        .await
        .unwrap();
    let share = POOL - write_connections;
    let mut stuck = Vec::new();
    for n in 0..share {
        let (c, url) = (c.clone(), format!("{base}/streams/st_held{n}"));
        stuck.push(tokio::spawn(async move {
            c.get(url).send().await.unwrap().status().as_u16()
        }));
    }
    // Until PostgreSQL shows every one of them waiting on the lock.
    let mut watcher = sqlx::PgConnection::connect(database).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (waiting,): (i64,) = sqlx::query_as(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock' \
             AND query LIKE '%streams%'",
        )
        .fetch_one(&mut watcher)
        .await
        .unwrap();
        if waiting as usize >= share {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {waiting} of {share} stream reads reached the lock"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let timed = |request: reqwest::RequestBuilder| async move {
        let started = Instant::now();
        let res = request.send().await.unwrap();
        (res.status().as_u16(), started.elapsed())
    };
    let append = timed(c.post(format!("{base}/builds/b/events")).json(&json!({
        "actor": {"kind": "kernel"}, "type": "observation.recorded",
        "payload": {"id": "o1", "kind": "followup", "summary": "while reads wait"}
    })))
    .await;
    let create = timed(
        c.post(format!("{base}/builds"))
            .json(&json!({"slug": "c", "repo": "acme/w"})),
    )
    .await;
    let short_read = timed(c.get(format!("{base}/builds/b/events?since=0"))).await;

    sqlx::raw_sql("COMMIT").execute(&mut lock).await.unwrap();
    for read in stuck {
        // Unknown streams, answered once the lock is gone: never a 5xx.
        assert_eq!(read.await.unwrap(), 404);
    }
    // Once the reads are done, reads are served again and nothing was
    // marked unavailable for long.
    let res = c
        .get(format!("{base}/builds/b/events?since=0"))
        .send()
        .await
        .unwrap();
    assert_eq!(status(res), 200);
    Held {
        append,
        create,
        short_read,
    }
}

#[tokio::test]
async fn postgres_keeps_connections_for_writes_while_reads_hold_theirs() {
    with_pg("abwriteconns", |database| async move {
        let held = with_reads_held(&database, 1).await;
        let bound = Duration::from_millis(ACQUIRE_MS);
        for (what, (status, took)) in [("append", held.append), ("create", held.create)] {
            assert_eq!(status, 201, "{what} while the reads' share was held");
            assert!(
                took < bound / 2,
                "{what} took {took:?}: it waited for a read's connection"
            );
        }
        // The read share is full: a short read waits its bound, then 503.
        let (status, took) = held.short_read;
        assert_eq!(status, 503, "a read beyond its share");
        assert!(
            took >= bound - Duration::from_millis(200),
            "the read gave up after {took:?}, before its acquire bound"
        );
    })
    .await;
}

#[tokio::test]
async fn postgres_reads_starve_writes_when_no_connection_is_kept() {
    with_pg("abwriteconns0", |database| async move {
        let held = with_reads_held(&database, 0).await;
        let (status, took) = held.append;
        assert_eq!(
            status, 503,
            "with every connection held by reads, the append should wait its bound (took {took:?})"
        );
    })
    .await;
}
