//! PostgreSQL reads answer without stalls (issue 21): a client polling a
//! build's events every 10 ms on a fresh server sees each append within
//! 40 ms of its acknowledgement, and no read takes over 25 ms; and every
//! connection the server holds to PostgreSQL has `TCP_NODELAY` set.
//!
//! Before the fix a fresh server stalled about 100 ms whenever its pool had
//! to open a connection in a request's path, which the first reads and
//! writes always did: sqlx 0.9.0 opens sockets without `TCP_NODELAY`, so the
//! TLS handshake's back-to-back writes waited for delayed ACKs twice.
//!
//! This is the one timed test in the suite, because the defect *is* a
//! latency: the bounds are 4-10 times the normal figures (reads take 1-3 ms
//! here in a debug build), `.config/nextest.toml` runs this binary alone so
//! other tests' load cannot eat that margin, and a server that misses is
//! replaced by one more fresh server once (the defect misses on every one).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support;

use support::{client, start, with_pg};

/// Fresh servers, each on its own fresh database (the reproduction
/// used 8; each costs about 4 s).
const SERVERS: usize = 4;
/// Appends per server: 20 ms apart, with a 0.6 s pause after every fifth.
const APPENDS: usize = 30;
const POLL_EVERY: Duration = Duration::from_millis(10);
const SEEN_WITHIN: Duration = Duration::from_millis(40);
const READ_WITHIN: Duration = Duration::from_millis(25);

fn observation(n: usize) -> Value {
    json!({"actor": {"kind": "kernel"}, "type": "observation.recorded",
           "payload": {"id": format!("obs-{n}"), "kind": "followup", "summary": "poll me"}})
}

/// What one server's run saw: when each append was acknowledged and first
/// seen by the poller, and how long each poll took.
struct Run {
    acked: BTreeMap<i64, Instant>,
    seen: BTreeMap<i64, Instant>,
    reads: Vec<Duration>,
    /// The server's own log lines of requests that took over [`READ_WITHIN`]
    /// inside it: a miss without one was lost outside the server's handlers
    /// (scheduling, the network, the client).
    slow_in_server: Vec<String>,
}

async fn poll_while_appending(base: &str) -> Run {
    let slug = "polled";
    let c = client();
    let res = c
        .post(format!("{base}/builds"))
        .json(&json!({"slug": slug, "repo": "acme/w"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 201);

    let (stop_tx, mut stop) = tokio::sync::watch::channel(false);
    let poller = {
        // Its own client: one keep-alive connection, as Autobuild's poller has.
        let (c, url) = (client(), format!("{base}/builds/{slug}/events?since=0"));
        tokio::spawn(async move {
            let mut seen = BTreeMap::new();
            let mut reads = Vec::new();
            while !*stop.borrow_and_update() {
                let started = Instant::now();
                let res = c.get(&url).send().await.unwrap();
                assert_eq!(res.status().as_u16(), 200);
                let events: Vec<Value> = res.json().await.unwrap();
                let now = Instant::now();
                reads.push(now - started);
                for event in events {
                    seen.entry(event["seq"].as_i64().unwrap()).or_insert(now);
                }
                tokio::time::sleep(POLL_EVERY).await;
            }
            (seen, reads)
        })
    };

    let mut acked = BTreeMap::new();
    let url = format!("{base}/builds/{slug}/events");
    for n in 0..APPENDS {
        let res = c.post(&url).json(&observation(n)).send().await.unwrap();
        assert_eq!(res.status().as_u16(), 201);
        let envelope: Value = res.json().await.unwrap();
        acked.insert(envelope["seq"].as_i64().unwrap(), Instant::now());
        let pause = if n % 5 == 4 { 600 } else { 20 };
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop_tx.send(true).unwrap();
    let (seen, reads) = poller.await.unwrap();
    Run {
        acked,
        seen,
        reads,
        slow_in_server: Vec::new(),
    }
}

/// The lines of a server log whose `latency_ms` is over [`READ_WITHIN`].
fn slow_lines(log: &str) -> Vec<String> {
    log.lines()
        .filter(|line| {
            line.split("latency_ms=")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|ms| ms.parse::<f64>().ok())
                .is_some_and(|ms| ms > READ_WITHIN.as_secs_f64() * 1000.0)
        })
        .map(str::to_owned)
        .collect()
}

/// A run's misses: events seen late and reads over the bound.
fn misses(run: &Run) -> Vec<String> {
    let mut misses = Vec::new();
    for (seq, acked) in &run.acked {
        match run.seen.get(seq) {
            None => misses.push(format!("event {seq} never seen")),
            Some(seen) => {
                let lag = seen.saturating_duration_since(*acked);
                if lag > SEEN_WITHIN {
                    misses.push(format!("event {seq} seen {lag:?} after its append"));
                }
            }
        }
    }
    misses.extend(
        run.reads
            .iter()
            .filter(|read| **read > READ_WITHIN)
            .map(|read| format!("a read took {read:?}")),
    );
    if !misses.is_empty() {
        misses.push(format!(
            "requests over {READ_WITHIN:?} in the server's own log: {:?}",
            run.slow_in_server
        ));
    }
    misses
}

/// One fresh server on a fresh database; `None` without PostgreSQL.
async fn fresh_run() -> Option<Run> {
    let outcome = std::sync::Arc::new(std::sync::Mutex::new(None));
    let record = outcome.clone();
    with_pg("latency", move |database| async move {
        let server = start(&database, "memory://", None).await;
        let mut run = poll_while_appending(server.url()).await;
        run.slow_in_server = slow_lines(&server.stderr());
        *record.lock().unwrap() = Some(run);
    })
    .await;
    outcome.lock().unwrap().take()
}

/// Every fresh server must meet both bounds. A server that misses gets one
/// more fresh server in its place: the defect this guards against misses on
/// every fresh server (its first reads stalled ~100 ms), where a scheduling
/// hiccup of a shared machine does not repeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ten_ms_poller_sees_every_append_within_40_ms_on_fresh_postgres_servers() {
    let mut failed = Vec::new();
    for server in 0..SERVERS {
        let mut attempts = Vec::new();
        for _ in 0..2 {
            let Some(run) = fresh_run().await else {
                return; // no PostgreSQL here: with_pg said so loudly
            };
            let missed = misses(&run);
            eprintln!(
                "server {server}: {} reads, slowest {:?}; misses: {missed:?}",
                run.reads.len(),
                run.reads.iter().max().copied().unwrap_or_default()
            );
            if missed.is_empty() {
                attempts.clear();
                break;
            }
            attempts.push(missed);
        }
        if !attempts.is_empty() {
            failed.push(format!("server {server}: {attempts:?}"));
        }
    }
    let verdict = format!(
        "bounds: events seen within {SEEN_WITHIN:?}, reads within {READ_WITHIN:?}; \
         servers that missed twice: {failed:?}"
    );
    // The defect this guards against stalls every fresh server. One server
    // of four that missed twice is a different, known intermittent: inside
    // the full suite (never alone, and never on the other servers of the same
    // run) a read now and then takes 60-95 ms. It is reported at the end of
    // every run, CI included, until it is found (closing note, session 14).
    assert!(failed.len() <= 1, "{verdict}");
    if !failed.is_empty() {
        abstore_testkit::skip::known_defect(
            "pg_latency: one fresh PostgreSQL server of four missed twice",
            &verdict,
        );
    }
}

/// The sockets of `pid` connected to TCP `port` (IPv4 and IPv6), as the
/// process's own file descriptor numbers.
fn sockets_to(pid: u32, port: u16) -> Vec<i32> {
    let mut inodes = Vec::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // remote address is field 2 as HEX_ADDR:HEX_PORT; the inode is field 9.
            let remote_port = fields
                .get(2)
                .and_then(|addr| addr.rsplit(':').next())
                .and_then(|hex| u16::from_str_radix(hex, 16).ok());
            if remote_port == Some(port)
                && let Some(inode) = fields.get(9)
            {
                inodes.push(format!("socket:[{inode}]"));
            }
        }
    }
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let target = std::fs::read_link(entry.path()).ok()?;
            inodes
                .contains(&target.to_string_lossy().into_owned())
                .then(|| entry.file_name().to_str()?.parse().ok())?
        })
        .collect()
}

#[tokio::test]
async fn every_postgres_connection_has_tcp_nodelay() {
    with_pg("nodelay", |database| async move {
        let port = url::Url::parse(&database).unwrap().port().unwrap_or(5432);
        let server = start(&database, "memory://", None).await;
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
        let pidfd = rustix::process::pidfd_open(
            rustix::process::Pid::from_raw(i32::try_from(pid).unwrap()).unwrap(),
            rustix::process::PidfdFlags::empty(),
        )
        .unwrap();
        for fd in fds {
            // A duplicate of the server's socket: options are the socket's.
            let Ok(socket) =
                rustix::process::pidfd_getfd(&pidfd, fd, rustix::process::PidfdGetfdFlags::empty())
            else {
                continue; // closed since it was listed
            };
            assert!(
                rustix::net::sockopt::tcp_nodelay(&socket).unwrap(),
                "the server's PostgreSQL connection (fd {fd}) lacks TCP_NODELAY"
            );
        }
    })
    .await;
}
