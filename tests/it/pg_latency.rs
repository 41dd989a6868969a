//! PostgreSQL reads answer without stalls (issue 21). The stalls had two
//! causes, each checked here on a fresh server, without timing anything:
//! sqlx 0.9.0 opened its sockets without `TCP_NODELAY`, so a connection's
//! back-to-back writes (its TLS handshake, then queries) waited for delayed
//! ACKs (~50 ms each); and the pool opened those connections inside the
//! first requests. So every PostgreSQL socket of the server must have
//! `TCP_NODELAY`, and the server must hold its `--db-min-connections` before
//! it answers its first request.
//!
//! The latency itself is measured by the benchmark (`abstore-load tail`:
//! per-route p50/p99/maximum from fresh servers;
//! docs/benchmarks/pg-read-stalls.md), not here: a timed test on a shared
//! two-core machine fails whenever something else runs (it failed on every server
//! while three builds ran beside the suite), which says nothing about the
//! server.

use serde_json::{Value, json};

use crate::support;

use support::sockets::{has_tcp_nodelay, sockets_to};
use support::{Server, client, with_pg};

fn observation(n: usize) -> Value {
    json!({"actor": {"kind": "kernel"}, "type": "observation.recorded",
           "payload": {"id": format!("obs-{n}"), "kind": "followup", "summary": "poll me"}})
}

/// Connections to `database` other than the asking one.
async fn backends_on(database: &str) -> i64 {
    use sqlx::Connection as _;
    let mut conn = sqlx::PgConnection::connect(database).await.unwrap();
    let (count,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    count
}

/// The pool's floor is open once the server says it is ready, before any
/// request: no request waits for a connection to be opened.
#[tokio::test]
async fn a_fresh_postgres_server_opens_its_connections_before_its_first_request() {
    with_pg("warm", |database| async move {
        for min in [4u32, 7] {
            let min_text = min.to_string();
            let server = Server::builder()
                .database(&database)
                .flag("--db-min-connections", &min_text)
                .flag("--db-pool-size", "8")
                .start()
                .await;
            let open = backends_on(&database).await;
            assert!(
                open >= i64::from(min),
                "--db-min-connections {min}: {open} connections open before the first request; \
                 stderr:\n{}",
                server.stderr()
            );
            drop(server);
            // The next server counts only its own connections.
            for _ in 0..100 {
                if backends_on(&database).await == 0 {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    })
    .await;
}

#[tokio::test]
async fn every_postgres_connection_has_tcp_nodelay() {
    with_pg("nodelay", |database| async move {
        let port = url::Url::parse(&database).unwrap().port().unwrap_or(5432);
        let server = Server::builder().database(&database).start().await;
        // A write and a read, so the pool, the NOTIFY publisher and the
        // LISTEN connection are all open.
        let c = client();
        let base = server.url();
        c.post(format!("{base}/builds"))
            .json(&json!({"slug": "n", "repo": "acme/w"}))
            .send()
            .await
            .unwrap();
        c.post(format!("{base}/builds/n/events"))
            .json(&observation(0))
            .send()
            .await
            .unwrap();
        c.get(format!("{base}/builds/n/events"))
            .send()
            .await
            .unwrap();

        let pid = server.pid().unwrap();
        let fds = sockets_to(pid, port);
        assert!(
            fds.len() >= 2,
            "expected the pool and LISTEN connections to port {port}, found {fds:?}"
        );
        for fd in fds {
            assert_ne!(
                has_tcp_nodelay(pid, fd),
                Some(false),
                "the server's PostgreSQL connection (fd {fd}) lacks TCP_NODELAY"
            );
        }
    })
    .await;
}
