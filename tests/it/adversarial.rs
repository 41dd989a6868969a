//! Adversarial tests through the RELEASE binary (issue 33; docs/decisions.md,
//! 21): release builds are what users run, and where a debug build panics
//! on an overflow (a `500` the panic catch answers) a release build would
//! wrap into a nonsense size and abort the process. `scripts/test` builds
//! the release binary once and names it in `ABSTORE_RELEASE_BIN`.
//!
//! - `extremes_*`: every read route with every query parameter at its
//!   extremes (huge, negative, fractional, exponent, radix, empty, repeated,
//!   long), each with one of the `Accept-Encoding`s clients send or could,
//!   with the history cache cold and then warm; the write routes' integers
//!   at theirs; every hosted ticket operation with every member of its body
//!   at the extremes of every JSON type, and hostile bodies and names. No
//!   answer is a 5xx, none drops its connection, the process stays up, and
//!   its memory stays bounded.
//! - slow readers, silent connections, dense JSON and hostile streams: each
//!   bound of docs/security.md at work, against the attack it is for.

use std::sync::Arc;
use std::time::{Duration, Instant};

use abstore_conformance::fixtures::{build_event, repo_event, session_event};
use abstore_conformance::token;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::support::{self, Raw, Reply, Server, ServerBuilder, enc, rss_kib, with_pg};

/// The server still answers and its process is alive.
async fn still_up(server: &mut Server, what: &str) {
    let health = Raw::new("GET", "/health", None)
        .send(server.url())
        .await
        .unwrap_or_else(|e| panic!("{what}: /health: {e}\n{}", server.stderr()));
    assert_eq!(health.status, 200, "{what}: /health");
    let pid = server.pid().expect("the server's pid");
    assert!(
        std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "{what}: the server process is gone:\n{}",
        server.stderr()
    );
}

/// The highest RSS a process reaches while watched (sampled every 20 ms).
struct PeakRss {
    peak: Arc<std::sync::atomic::AtomicU64>,
    sampler: tokio::task::JoinHandle<()>,
}

impl PeakRss {
    fn watch(pid: u32) -> PeakRss {
        let peak = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let sampler = tokio::spawn({
            let peak = peak.clone();
            async move {
                loop {
                    peak.fetch_max(
                        rss_kib(pid).unwrap_or(0),
                        std::sync::atomic::Ordering::Relaxed,
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        });
        PeakRss { peak, sampler }
    }

    /// Stop watching; the peak in KiB.
    fn stop(self) -> u64 {
        self.sampler.abort();
        self.peak.load(std::sync::atomic::Ordering::Relaxed)
    }
}

// ── Every parameter at its extremes ─────────────────────────────────────────

/// Query values at the edges of every grammar the server parses: `since`
/// and `rev` (JavaScript `Number()`), `wait` (digits), ids and flags.
fn extreme_values() -> Vec<String> {
    let mut values: Vec<String> = [
        "",
        "0",
        "-0",
        "1",
        "-1",
        "1.5",
        "0.5e1",
        "1e-1",
        "1e300",
        "-1e300",
        "1e18",
        "1e19",
        "9223372036854775806",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775808",
        "-9223372036854775809",
        "18446744073709551615",
        "18446744073709551616",
        "99999999999999999999999999999999",
        "9007199254740993",
        "4294967296",
        "2147483648",
        "0x7fffffffffffffff",
        "0xffffffffffffffffffffffff",
        "0o7777777777777777777777777",
        "Infinity",
        "-Infinity",
        "NaN",
        "%20",
        "+",
        "1e",
        "%00",
        "1%2C2",
        "30",
        "31",
        "3600",
        "%C3%A9",
    ]
    .iter()
    .map(|v| (*v).to_owned())
    .collect();
    values.push(format!("0b{}", "1".repeat(70)));
    values.push("9".repeat(400));
    values.push("x".repeat(3000));
    values
}

/// What clients send as `Accept-Encoding`, and what they could.
const ENCODINGS: [Option<&str>; 9] = [
    None,
    Some("identity"),
    Some("zstd"),
    Some("gzip"),
    Some("br"),
    Some("gzip, deflate, br, zstd"),
    Some("*"),
    Some("zstd;q=0, gzip;q=0"),
    Some("zstd;q=abc, , ;;"),
];

const PARAMS: [&str; 8] = [
    "since",
    "rev",
    "wait",
    "kind",
    "name",
    "path",
    "revisions",
    "limit",
];

/// The resources a sweep reads: made before it, with enough history that
/// the history cache has sealed chunks to answer from.
struct Seeded {
    token: Option<String>,
    stream: String,
    session: String,
}

/// Events in the build's and the repository's logs: several history
/// chunks of 8 (`--history-chunk-events 8`) and an open one.
const EVENTS: usize = 45;

async fn seed(base: &str, token: Option<&str>) -> Seeded {
    let ok = |reply: Result<Reply, String>, what: &str| -> Value {
        let reply = reply.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(
            reply.status < 300,
            "{what}: {} {}",
            reply.status,
            reply.text()
        );
        reply.json()
    };
    ok(
        Raw::new("POST", "/builds", token)
            .json(&json!({"slug": "b1", "repo": "acme/x"}))
            .send(base)
            .await,
        "create build",
    );
    ok(
        Raw::new("POST", "/repos", token)
            .json(&json!({"repo": "acme/x"}))
            .send(base)
            .await,
        "ensure repo",
    );
    for _ in 0..EVENTS {
        ok(
            Raw::new("POST", "/builds/b1/events", token)
                .json(&build_event("observation"))
                .send(base)
                .await,
            "build event",
        );
        ok(
            Raw::new("POST", "/repos/acme%2Fx/events", token)
                .json(&repo_event("pauseRequested"))
                .send(base)
                .await,
            "repo event",
        );
    }
    for i in 0..3 {
        ok(
            Raw::new("POST", "/builds/b1/artifacts", token)
                .json(&json!({"kind": "plan", "contentBase64": "aGk=", "metadata": {"i": i}}))
                .send(base)
                .await,
            "artifact",
        );
    }
    let session = ok(
        Raw::new("POST", "/repos/acme%2Fx/sessions", token)
            .json(&json!({"repo": "acme/x", "operator": "op"}))
            .send(base)
            .await,
        "session",
    )["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    ok(
        Raw::new("POST", format!("/sessions/{}/events", enc(&session)), token)
            .json(&session_event("turnCompleted"))
            .send(base)
            .await,
        "session event",
    );
    let stream = ok(
        Raw::new("POST", "/builds/b1/streams", token)
            .json(&json!({"label": "s"}))
            .send(base)
            .await,
        "stream",
    )["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    for _ in 0..20 {
        ok(
            Raw::new("POST", format!("/streams/{}/chunks", enc(&stream)), token)
                .json(&json!({"parts": [{"type": "text-delta", "id": "t", "delta": "x"}]}))
                .send(base)
                .await,
            "chunk",
        );
    }
    let mut asset = Raw::new("POST", "/repos/acme%2Fx/tickets/AUT-1/assets", token).json(&json!({
        "kind": "design", "name": "home", "layout": "tree",
        "entries": [{"type": "file", "path": "a/index.html", "contentBase64": "aGk="}]
    }));
    protocol3(&mut asset);
    ok(asset.send(base).await, "ticket asset");
    Seeded {
        token: token.map(str::to_owned),
        stream,
        session,
    }
}

/// Send `raw` as a protocol-3 client (the ticket-asset routes need one).
fn protocol3(raw: &mut Raw<'_>) {
    let (version, protocol) = support::PROTOCOL3_CLIENT;
    raw.headers[0].1 = version.as_bytes().to_vec();
    raw.headers[1].1 = protocol.as_bytes().to_vec();
}

/// Every read route of the seeded resources.
fn read_routes(seeded: &Seeded) -> Vec<String> {
    let st = enc(&seeded.stream);
    let s = enc(&seeded.session);
    vec![
        "/builds".into(),
        "/builds/b1".into(),
        "/builds/b1/events".into(),
        "/builds/b1/artifacts".into(),
        "/builds/b1/artifact-list".into(),
        "/builds/b1/streams".into(),
        format!("/builds/b1/streams/{st}/chunks"),
        format!("/streams/{st}"),
        format!("/streams/{st}/chunks"),
        "/repos/acme%2Fx".into(),
        "/repos/acme%2Fx/events".into(),
        "/repos/acme%2Fx/state-events".into(),
        "/repos/acme%2Fx/build-digests".into(),
        "/repos/acme%2Fx/sessions".into(),
        "/repos/acme%2Fx/artifacts".into(),
        "/repos/acme%2Fx/ticket-asset-limits".into(),
        "/repos/acme%2Fx/tickets/AUT-1/assets".into(),
        "/repos/acme%2Fx/tickets/AUT-1/assets/file".into(),
        "/repos/acme%2Fx/tickets/AUT-1/assets/list".into(),
        format!("/sessions/{s}"),
        format!("/sessions/{s}/events"),
        format!("/sessions/{s}/artifact-list"),
    ]
}

/// One answer: below 500, in the error shape when an error, on a
/// connection that was not dropped. Returns its status and encoding.
async fn judged(raw: Raw<'static>, base: Arc<str>) -> (u16, Option<String>) {
    let what = format!(
        "{} {} (accept-encoding {:?})",
        raw.method,
        raw.target.chars().take(200).collect::<String>(),
        raw.headers
            .iter()
            .find(|(name, _)| name == "Accept-Encoding")
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    );
    let reply = raw
        .send(&base)
        .await
        .unwrap_or_else(|e| panic!("{what}: the connection was dropped: {e}"));
    assert!(
        reply.status < 500,
        "{what}: {} {}",
        reply.status,
        reply.text()
    );
    reply.assert_error_shape(&what);
    (reply.status, reply.encoding)
}

/// How many answers had each status and each `Content-Encoding`.
type Tally = std::collections::BTreeMap<(u16, Option<String>), usize>;

/// Run `requests` with 8 in flight.
async fn fire(base: &str, requests: Vec<Raw<'static>>) -> Tally {
    let base: Arc<str> = Arc::from(base);
    let limit = Arc::new(tokio::sync::Semaphore::new(8));
    let mut tasks = tokio::task::JoinSet::new();
    for raw in requests {
        let permit = limit.clone().acquire_owned().await.expect("semaphore");
        let base = base.clone();
        tasks.spawn(async move {
            let _permit = permit;
            judged(raw, base).await
        });
    }
    let mut tally = Tally::new();
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(answer) => *tally.entry(answer).or_default() += 1,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
    tally
}

/// Answers of `status` in `encoding`.
fn count(tally: &Tally, status: u16, encoding: Option<&str>) -> usize {
    tally
        .get(&(status, encoding.map(str::to_owned)))
        .copied()
        .unwrap_or(0)
}

/// Every read route × every parameter × every extreme value, the
/// encodings taken in turn; plus repeated parameters and every value of
/// `since` with each encoding on the whole-history reads (the history
/// cache's path).
fn sweep(seeded: &Seeded) -> Vec<Raw<'static>> {
    let values = extreme_values();
    let mut requests = Vec::new();
    let mut turn = 0usize;
    let mut add = |target: String, encoding: Option<&str>| {
        let mut raw = Raw::new("GET", target.clone(), seeded.token.as_deref());
        if target.contains("/tickets/") || target.contains("ticket-asset") {
            protocol3(&mut raw);
        }
        if let Some(encoding) = encoding {
            raw = raw.header("Accept-Encoding", encoding);
        }
        requests.push(raw);
    };
    for route in read_routes(seeded) {
        for param in PARAMS {
            for value in &values {
                let encoding = ENCODINGS[turn % ENCODINGS.len()];
                turn += 1;
                add(format!("{route}?{param}={value}"), encoding);
            }
        }
        add(
            format!("{route}?since=1&since=1e300&wait=1&wait=x"),
            Some("zstd"),
        );
        add(format!("{route}?since"), Some("zstd"));
    }
    for log in ["/builds/b1/events", "/repos/acme%2Fx/events"] {
        for value in &values {
            for encoding in ENCODINGS {
                add(format!("{log}?since={value}"), encoding);
            }
        }
    }
    requests
}

/// Integers of the write routes at their extremes.
fn write_extremes(seeded: &Seeded) -> Vec<Raw<'static>> {
    let numbers: Vec<Value> = vec![
        json!(0),
        json!(-1),
        json!(1.5),
        json!(1e300),
        json!(-1e300),
        json!(i64::MAX),
        json!(i64::MIN),
        json!(u64::MAX),
        json!(9_007_199_254_740_993_i64),
        json!("1"),
        Value::Null,
    ];
    let token = seeded.token.as_deref();
    let mut requests = Vec::new();
    for n in &numbers {
        for (path, body) in [
            (
                "/builds/b1/lease/claim".to_owned(),
                json!({"holder": "h", "ttlMs": n}),
            ),
            (
                "/repos/acme%2Fx/lease/claim".to_owned(),
                json!({"holder": "h", "ttlMs": n}),
            ),
            (
                "/builds/b1/events/conditional".to_owned(),
                json!({"expectedSeq": n, "event": build_event("observation")}),
            ),
            (
                "/builds/b1/deposits".to_owned(),
                json!({
                    "artifacts": [{"kind": "plan", "contentBase64": "aGk="}],
                    "event": {"actor": {"kind": "kernel"}, "type": "artifact.deposited",
                              "payload": {"kind": "plan", "rev": n, "ref": {"kind": "plan", "rev": n}}}
                }),
            ),
            (
                format!("/streams/{}/chunks", enc(&seeded.stream)),
                json!({"parts": [{"type": "text-delta", "id": "t", "delta": "x", "n": n}]}),
            ),
        ] {
            requests.push(Raw::new("POST", path, token).json(&body));
        }
    }
    requests
}

/// Set the member of `value` at `path` (objects all the way), creating it.
fn set_member(value: &mut Value, path: &[&str], member: Value) {
    let Some((last, parents)) = path.split_last() else {
        *value = member;
        return;
    };
    let mut at = value;
    for key in parents {
        at = &mut at[*key];
    }
    at[*last] = member;
}

/// Every hosted ticket operation (docs/tickets.md) with hostile input: each
/// member of its input and of the context given values of every JSON type
/// at their extremes (NUL, long strings, huge arrays, big numbers, the
/// seeded ticket's id, configured states); then hostile raw bodies and
/// operation names. `token` is a deployment token in authenticated mode.
fn ticket_extremes(token: Option<&str>, ticket: &str) -> Vec<Raw<'static>> {
    let values: Vec<Value> = vec![
        Value::Null,
        json!(true),
        json!(0),
        json!(-1),
        json!(1e300),
        json!(u64::MAX),
        json!(""),
        json!(" \n\t"),
        json!("\u{0}"),
        json!("x".repeat(600)),
        json!("x".repeat(300_000)),
        json!(ticket),
        json!("Ready"),
        json!("Done"),
        json!("é𝄞\u{feff}\u{85}"),
        json!([]),
        json!([ticket, ticket]),
        json!(["\u{0}", ""]),
        json!(vec!["a"; 5_000]),
        json!(vec![ticket; 3_000]),
        json!({}),
        json!({"title": "t"}),
    ];
    let context = json!({"teamKey": "ENG"});
    let operations: Vec<(&str, Value, Vec<Vec<&str>>)> = vec![
        ("list-ready", json!({}), vec![vec!["labels"], vec!["state"]]),
        ("get", json!({"id": ticket}), vec![vec!["id"]]),
        ("claim", json!({"id": ticket}), vec![vec!["id"]]),
        (
            "comment",
            json!({"id": ticket, "body": "c"}),
            vec![vec!["id"], vec!["body"]],
        ),
        (
            "transition",
            json!({"id": ticket, "state": "Ready"}),
            vec![vec!["id"], vec!["state"]],
        ),
        (
            "create",
            json!({"draft": {"title": "t", "body": "b"}, "options": {}}),
            vec![
                vec!["draft", "title"],
                vec!["draft", "body"],
                vec!["draft", "labels"],
                vec!["draft", "blockedBy"],
                vec!["options", "state"],
                vec!["options", "idempotencyKey"],
                vec!["draft"],
                vec!["options"],
            ],
        ),
        (
            "update",
            json!({"id": ticket, "patch": {"title": "t"}}),
            vec![
                vec!["id"],
                vec!["patch", "title"],
                vec!["patch", "body"],
                vec!["patch", "labels"],
                vec!["patch"],
            ],
        ),
        (
            "add-blocker",
            json!({"id": ticket, "blockerId": ticket}),
            vec![vec!["id"], vec!["blockerId"]],
        ),
        (
            "remove-blocker",
            json!({"id": ticket, "blockerId": ticket}),
            vec![vec!["id"], vec!["blockerId"]],
        ),
        (
            "dependency-states",
            json!({"ids": [ticket]}),
            vec![vec!["ids"]],
        ),
    ];
    let mut requests = Vec::new();
    let mut add = |operation: &str, body: Vec<u8>| {
        requests.push(Raw::new("POST", format!("/tickets/{operation}"), token).body(body));
    };
    for (operation, input, members) in &operations {
        let members = members.iter().map(|m| [&["input"][..], m].concat()).chain([
            vec!["context", "teamKey"],
            vec!["context", "claimedState"],
            vec!["context", "createState"],
            vec!["input"],
            vec!["context"],
        ]);
        for member in members {
            for value in &values {
                let mut body = json!({"context": context, "input": input});
                set_member(&mut body, &member, value.clone());
                add(operation, body.to_string().into_bytes());
            }
        }
        for raw in [
            &b""[..],
            b"null",
            b"[]",
            b"{",
            b"\"\\ud800\"",
            b"{\"context\":{\"teamKey\":\"\\ud800\"},\"input\":{}}",
            b"{\"context\":{\"teamKey\":\"E\"},\"input\":{\"id\":1e999999}}",
            b"\xff\xfe{}",
        ] {
            add(operation, raw.to_vec());
        }
        add(
            operation,
            format!("{}{}", "[".repeat(10_000), "]".repeat(10_000)).into_bytes(),
        );
    }
    for name in ["", "%00", "..", "get%2F", "GET", &"x".repeat(5_000)] {
        requests.push(Raw::new("POST", format!("/tickets/{name}"), token).body(b"{}".to_vec()));
    }
    requests
}

async fn extremes(database: &str, secret: Option<&str>, extra: &[&str]) {
    let Some(release) = Server::builder().release() else {
        return;
    };
    let mut args = vec![
        "--history-chunk-events",
        "8",
        "--max-wait-seconds",
        "1",
        "--request-timeout-seconds",
        "6",
    ];
    args.extend(support::ACCEPT_PROTOCOL3);
    args.extend_from_slice(extra);
    if let Some(secret) = secret {
        args.extend(["--secret", secret]);
    }
    let mut server = release.database(database).args(&args).start().await;
    let base = server.url().to_owned();
    let token = secret.map(|s| token::mint(s, &token::admin_scope(now_ms() + 3_600_000)));
    let seeded = seed(&base, token.as_deref()).await;
    let pid = server.pid().expect("pid");

    // Cold: no whole read has taught the history cache these logs yet.
    let cold = fire(&base, sweep(&seeded)).await;
    still_up(&mut server, "after the cold sweep").await;
    // Warm: whole reads in zstd seal the logs' chunks, then the same again.
    for log in ["/builds/b1/events", "/repos/acme%2Fx/events"] {
        let reply = Raw::new("GET", log, token.as_deref())
            .header("Accept-Encoding", "zstd")
            .send(&base)
            .await
            .expect("a whole read");
        assert_eq!(reply.status, 200, "{log}: {}", reply.text());
    }
    let after_warming = rss_kib(pid).unwrap_or(0);
    let warm = fire(&base, sweep(&seeded)).await;
    let writes = fire(&base, write_extremes(&seeded)).await;
    still_up(&mut server, "after the warm sweep").await;
    let end = rss_kib(pid).unwrap_or(0);
    eprintln!(
        "extremes: cold {cold:?}, warm {warm:?}, writes {writes:?}; RSS {after_warming} KiB warm, {end} KiB at end"
    );
    assert!(
        end <= after_warming + 32 * 1024,
        "RSS grew from {after_warming} KiB to {end} KiB over a sweep"
    );
    // The hosted ticket operations, with a deployment token when one is
    // needed (no other token passes them).
    let deployment = secret.map(|s| token::mint(s, &token::deployment_scope(now_ms() + 3_600_000)));
    let created = Raw::new("POST", "/tickets/create", deployment.as_deref())
        .json(&json!({"context": {"teamKey": "ENG"}, "input": {"draft": {"title": "t", "body": "b"}}}))
        .send(&base)
        .await
        .expect("a ticket");
    assert_eq!(created.status, 201, "{}", created.text());
    let ticket = created.json()["ref"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let tickets = fire(&base, ticket_extremes(deployment.as_deref(), &ticket)).await;
    eprintln!("extremes: tickets {tickets:?}");
    assert!(
        count(&tickets, 200, None) > 0 && count(&tickets, 400, None) > 0,
        "{tickets:?}"
    );
    still_up(&mut server, "after the ticket sweep").await;
    // The sweeps reached the handlers, and with compression on, the
    // compressed paths (the history cache's among them) answered too.
    assert!(count(&warm, 200, None) > 0, "{warm:?}");
    if !extra.contains(&"--no-compression") {
        assert!(count(&warm, 200, Some("zstd")) > 0, "{warm:?}");
        assert!(count(&cold, 200, Some("gzip")) > 0, "{cold:?}");
    }
    let stderr = server.stderr();
    for sign in ["panicked", "internal error", "overflow"] {
        assert!(
            !stderr.contains(sign),
            "the server logged {sign:?}:\n{stderr}"
        );
    }
    server.stop().await.ok();
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// `since=1e300` with zstd after a read used to abort the release binary:
/// the history planner's round-up wrapped and asked for ~10^18 bytes.
#[tokio::test(flavor = "multi_thread")]
async fn extremes_on_a_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("a.db").display());
    extremes(&database, None, &[]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn extremes_authenticated_without_compression() {
    let secret: String = (0..4)
        .map(|_| abstore_conformance::util::random_hex())
        .collect();
    extremes("sqlite::memory:", Some(&secret), &["--no-compression"]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn extremes_on_postgres() {
    with_pg("adversarial", |database| async move {
        extremes(&database, None, &[]).await;
    })
    .await;
}

// ── Slow readers ────────────────────────────────────────────────────────────

/// Events of about 5 KB: 1,500 of them make a history of some 7.5 MB, more
/// than the kernel's socket buffers hold, so a reader that stops reading
/// really holds its answer (and its database connection) up.
fn big_event(n: usize) -> Value {
    json!({"actor": {"kind": "kernel"}, "type": "observation.recorded",
           "payload": {"id": format!("obs-{n}"), "kind": "followup",
                       "summary": format!("{n} {}", "y".repeat(5000)),
                       "files": ["a.ts"]}})
}

async fn long_history(base: &str) {
    let reply = Raw::new("POST", "/builds", None)
        .json(&json!({"slug": "long", "repo": "acme/w"}))
        .send(base)
        .await
        .unwrap();
    assert_eq!(reply.status, 201, "{}", reply.text());
    let c = support::client();
    let mut writers = Vec::new();
    for w in 0..4 {
        let (c, url) = (c.clone(), format!("{base}/builds/long/events"));
        writers.push(tokio::spawn(async move {
            for n in (w..1500).step_by(4) {
                let res = c.post(&url).json(&big_event(n)).send().await.unwrap();
                assert_eq!(res.status().as_u16(), 201);
            }
        }));
    }
    for writer in writers {
        writer.await.unwrap();
    }
}

/// A reader that asks for the whole history, takes a first piece, and then
/// reads nothing (a small receive window, so nothing piles up on our side):
/// the connection, and what it took.
async fn stalled_reader(base: &str) -> (tokio::net::TcpStream, Vec<u8>) {
    let addr = base.trim_start_matches("http://");
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(addr.parse().unwrap()).await.unwrap();
    let request = format!(
        "GET /builds/long/events?since=0 HTTP/1.1\r\nHost: {addr}\r\nX-Autobuild-Version: {}\r\n\
         X-Autobuild-Protocol-Version: {}\r\n\r\n",
        support::VERSION,
        support::PROTOCOL
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut first = [0u8; 1024];
    let n = stream.read(&mut first).await.unwrap();
    assert!(n > 0, "no answer began");
    (stream, first[..n].to_vec())
}

/// Sixteen readers that never read their answers cannot take the pool from
/// writes and short reads (finding 1): only `--max-streamed-reads` of them
/// hold a connection, the rest are refused `503` before any byte, and every
/// held one is cut at the answer deadline however it reads.
async fn slow_readers(database: &str) {
    let Some(release) = Server::builder().release() else {
        return;
    };
    let mut server = release
        .database(database)
        .args([
            "--db-pool-size",
            "4",
            "--db-acquire-timeout-ms",
            "2000",
            "--read-stall-timeout-seconds",
            "600",
            "--request-timeout-seconds",
            "10",
            "--max-wait-seconds",
            "1",
            "--answer-deadline-seconds",
            "12",
            "--no-compression",
        ])
        .start()
        .await;
    let base = server.url().to_owned();
    long_history(&base).await;
    let whole = support::client()
        .get(format!("{base}/builds/long/events?since=0"))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let mut stalled = Vec::new();
    for _ in 0..16 {
        stalled.push(tokio::spawn({
            let base = base.clone();
            async move { stalled_reader(&base).await }
        }));
    }
    let mut readers = Vec::new();
    for reader in stalled {
        readers.push(reader.await.unwrap());
    }
    // Every answer began by now, so each is past its deadline (12 s from
    // its head) by `cut_by`, however fast the requests below run.
    let cut_by = tokio::time::Instant::now() + Duration::from_secs(14);
    // Writes and short reads are served while they stall.
    let c = support::client();
    let started = Instant::now();
    for i in 0..10 {
        let res = c
            .post(format!("{base}/builds/long/events"))
            .json(&big_event(10_000 + i))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), 201, "append {i} while readers stall");
        let res = c
            .get(format!("{base}/builds/long/events?since=1500"))
            .send()
            .await
            .unwrap();
        assert_eq!(
            res.status().as_u16(),
            200,
            "short read {i} while readers stall"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "ordinary requests waited behind the stalled readers: {:?}",
        started.elapsed()
    );
    // Every stalled answer ends, cut, by the answer deadline: none is read
    // before it passed, so a whole answer could only have come from a
    // server that never cut it (the history, ~7.7 MB, is larger than the
    // socket buffers can hold). Cut means no chunked terminator, and a
    // strict prefix of the history that is no JSON array (an answer cut
    // after a row's `"files":["a.ts"]` ends in `]` too: issue 49, item 10).
    // The readers refused a place (`503` before any byte) got a whole,
    // short answer.
    tokio::time::sleep_until(cut_by).await;
    let mut cut = 0;
    for (i, (mut reader, mut got)) in readers.into_iter().enumerate() {
        let mut rest = Vec::new();
        let ended =
            tokio::time::timeout(Duration::from_secs(90), reader.read_to_end(&mut rest)).await;
        assert!(ended.is_ok(), "stalled reader {i} was never cut");
        got.extend_from_slice(&rest);
        if got.starts_with(b"HTTP/1.1 503") {
            continue;
        }
        crate::cut_answers::assert_cut(&got, "identity", &whole, &format!("stalled reader {i}"));
        cut += 1;
    }
    assert!(cut > 0, "no stalled reader's answer began");
    still_up(&mut server, "after the slow readers").await;
    server.stop().await.ok();
}

#[tokio::test(flavor = "multi_thread")]
async fn slow_readers_cannot_starve_the_pool_on_a_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("a.db").display());
    slow_readers(&database).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn slow_readers_cannot_starve_the_pool_on_postgres() {
    with_pg("slow_readers", |database| async move {
        slow_readers(&database).await;
    })
    .await;
}

// ── Connections that send nothing ───────────────────────────────────────────

/// A flood of connections that never send a byte (finding 3): one address
/// holds at most its own cap, another address is still served, and the
/// silent ones are closed at the header-read bound.
#[tokio::test(flavor = "multi_thread")]
async fn silent_connections_cannot_fill_the_server() {
    let Some(release) = Server::builder().release() else {
        return;
    };
    let mut server = release
        .args([
            "--max-connections",
            "64",
            "--max-connections-per-address",
            "16",
            "--header-read-timeout-seconds",
            "2",
            "--idle-timeout-seconds",
            "600",
        ])
        .start()
        .await;
    let addr = server.url().trim_start_matches("http://").to_owned();
    let mut silent = Vec::new();
    for _ in 0..64 {
        silent.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
    }
    // Another address is served: the flood took only its own share.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut other = socket.connect(addr.parse().unwrap()).await.unwrap();
    other
        .write_all(
            format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    let mut answer = Vec::new();
    other.read_to_end(&mut answer).await.unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    // Every silent one is closed: 48 at once (answered 503 over the
    // address's cap), the others at the header-read bound.
    let mut refused = 0;
    for (i, mut conn) in silent.into_iter().enumerate() {
        let mut bytes = Vec::new();
        tokio::time::timeout(Duration::from_secs(30), conn.read_to_end(&mut bytes))
            .await
            .unwrap_or_else(|_| panic!("silent connection {i} was kept open"))
            .ok();
        if bytes.starts_with(b"HTTP/1.1 503") {
            refused += 1;
        }
    }
    assert_eq!(refused, 48, "connections over the address's cap");
    still_up(&mut server, "after the silent flood").await;
}

// ── Dense JSON ──────────────────────────────────────────────────────────────

/// Bodies of tiny numbers inflate many times when parsed (finding 4):
/// sixteen at once cannot take the server's memory beyond its parsing
/// budget. Each is answered (a 4xx, or `503` to retry while others hold the
/// budget), never with a dropped connection.
#[tokio::test(flavor = "multi_thread")]
async fn dense_json_bodies_stay_within_the_parsing_budget() {
    let Some(release) = Server::builder().release() else {
        return;
    };
    let mut server = release
        .args(["--max-json-memory-bytes", "67108864"])
        .start()
        .await;
    let base = server.url().to_owned();
    let pid = server.pid().expect("pid");
    Raw::new("POST", "/builds", None)
        .json(&json!({"slug": "b", "repo": "acme/x"}))
        .send(&base)
        .await
        .unwrap();
    let before = rss_kib(pid).unwrap_or(0);
    // 1 MiB of `0,`: half a million values, some 36 MiB of tree; one fits
    // the budget at a time.
    let dense = format!(
        "{{\"actor\":{{\"kind\":\"kernel\"}},\"type\":\"observation.recorded\",\"payload\":{{\"n\":[{}0]}}}}",
        "0,".repeat(500_000)
    );
    let watcher = PeakRss::watch(pid);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let (base, dense) = (base.clone(), dense.clone());
        tasks.spawn(async move {
            let reply = Raw::new("POST", "/builds/b/events", None)
                .body(dense)
                .send(&base)
                .await
                .unwrap_or_else(|e| panic!("a dense body's connection was dropped: {e}"));
            reply.assert_error_shape("dense body");
            reply.status
        });
    }
    let mut statuses = Vec::new();
    while let Some(status) = tasks.join_next().await {
        statuses.push(status.unwrap());
    }
    let peak = watcher.stop();
    eprintln!("dense bodies: statuses {statuses:?}, RSS {before} KiB before, peak {peak} KiB");
    assert!(
        statuses.iter().all(|s| *s < 500 || *s == 503),
        "{statuses:?}"
    );
    // What fits is parsed (and refused by the catalog: the payload is not
    // an observation's), what does not fit beside it is told to retry.
    assert!(statuses.contains(&422), "no body was parsed: {statuses:?}");
    // The budget (64 MiB) and the raw bodies (16 × 1 MiB), with room for
    // the allocator's slack: far below the 16 × 36 MiB the trees would take.
    assert!(
        peak <= before + 160 * 1024,
        "RSS peaked at {peak} KiB from {before} KiB"
    );
    still_up(&mut server, "after the dense bodies").await;
}

// ── Hostile streams ─────────────────────────────────────────────────────────

/// Closing streams assembles each one's document (finding 2), whose tree
/// can be many times the stream's text: closes run at most
/// `--max-concurrent-stream-closes` at a time, read their chunks page by
/// page, and charge the trees they hold to the parsing budget (a close that
/// does not fit beside the others is answered `503` and retried), so eight
/// concurrent closes stay within the budget where, before, each held every
/// chunk and every tree at once.
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_closes_of_dense_streams_stay_within_the_budget() {
    let Some(release) = Server::builder().release() else {
        return;
    };
    let mut server = release
        .args([
            "--max-concurrent-stream-closes",
            "2",
            "--max-json-memory-bytes",
            "134217728",
        ])
        .start()
        .await;
    let base = server.url().to_owned();
    let pid = server.pid().expect("pid");
    Raw::new("POST", "/builds", None)
        .json(&json!({"slug": "b", "repo": "acme/x"}))
        .send(&base)
        .await
        .unwrap();
    let c = support::client();
    // Data parts of many small values: ~240 KB of text a chunk, some 8 MiB
    // of tree; each stream's document is about 70 MiB of tree.
    let batch = |chunk: usize| {
        json!({"parts": (0..4).map(|i| json!({
            "type": "data-points", "id": format!("c{chunk}p{i}"), "data": vec![0; 30_000]
        })).collect::<Vec<_>>()})
    };
    let mut streams = Vec::new();
    for s in 0..8 {
        let res: Value = c
            .post(format!("{base}/builds/b/streams"))
            .json(&json!({"label": format!("s{s}")}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let id = res["id"].as_str().unwrap().to_owned();
        for chunk in 0..8 {
            let res = c
                .post(format!("{base}/streams/{}/chunks", enc(&id)))
                .json(&batch(chunk))
                .send()
                .await
                .unwrap();
            assert_eq!(res.status().as_u16(), 201);
        }
        streams.push(id);
    }
    let before = rss_kib(pid).unwrap_or(0);
    let watcher = PeakRss::watch(pid);
    let mut closes = tokio::task::JoinSet::new();
    for id in streams {
        let (c, base) = (c.clone(), base.clone());
        closes.spawn(async move {
            let mut busy = 0;
            loop {
                let res = c
                    .post(format!("{base}/streams/{}/close", enc(&id)))
                    .json(&json!({"outcome": "completed"}))
                    .send()
                    .await
                    .unwrap();
                match res.status().as_u16() {
                    200 => return busy,
                    503 => {
                        assert!(res.headers().contains_key("retry-after"));
                        busy += 1;
                        assert!(busy < 600, "a close never found room");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    other => panic!("close: {other} {}", res.text().await.unwrap()),
                }
            }
        });
    }
    let mut retried = 0;
    while let Some(busy) = closes.join_next().await {
        retried += busy.unwrap();
    }
    let peak = watcher.stop();
    eprintln!("closes: {retried} answered 503 first; RSS {before} KiB before, peak {peak} KiB");
    // The budget (128 MiB), two documents being serialised, and the
    // allocator's slack: far below eight closes' worth (over 1 GiB).
    assert!(
        peak <= before + 400 * 1024,
        "RSS peaked at {peak} KiB from {before} KiB"
    );
    still_up(&mut server, "after the closes").await;
}

// ── Every bound's flag at its edges ─────────────────────────────────────────

/// Every numeric flag of `abstore serve` at and past its edges: the server
/// either starts and serves, or refuses to start with a message naming the
/// flag. Never a panic: a deadline or a semaphore built from an unchecked
/// value would overflow later, in a connection or at the first request.
#[tokio::test(flavor = "multi_thread")]
async fn every_bound_flag_at_its_edges_starts_or_is_refused_by_name() {
    let Some(release) = Server::builder().release() else {
        return;
    };
    let flags = [
        "--db-pool-size",
        "--db-min-connections",
        "--db-acquire-timeout-ms",
        "--db-unavailable-acquire-timeout-ms",
        "--max-artifact-bytes",
        "--max-body-bytes",
        "--max-json-body-bytes",
        "--max-json-memory-bytes",
        "--max-stream-batch-bytes",
        "--max-wait-seconds",
        "--request-timeout-seconds",
        "--max-concurrent-requests",
        "--shutdown-grace-seconds",
        "--max-connections",
        "--max-connections-per-address",
        "--header-read-timeout-seconds",
        "--idle-timeout-seconds",
        "--body-read-timeout-seconds",
        "--read-stall-timeout-seconds",
        "--answer-deadline-seconds",
        "--max-streamed-reads",
        "--db-write-connections",
        "--max-concurrent-stream-closes",
        "--compress-min-bytes",
        "--history-cache-bytes",
        "--history-chunk-events",
        "--max-held-reads",
        "--retention-prune-limit",
        "--revocation-refresh-seconds",
        "--max-team-tickets",
        "--max-ticket-labels",
        "--max-ticket-blockers",
        "--max-ticket-comments",
        "--max-ticket-text-bytes",
    ];
    let values = [
        "0",
        "1",
        "-1",
        "1.5",
        "4294967295",
        "4294967296",
        "18446744073709551615",
        "18446744073709551616",
    ];
    let mut started = 0;
    let mut refused = 0;
    for flag in flags {
        for value in values {
            let output = tokio::time::timeout(
                Duration::from_secs(20),
                start_or_exit(&release, &format!("{flag}={value}")),
            )
            .await
            .unwrap_or_else(|_| panic!("{flag} {value}: neither served nor exited"));
            match output {
                Outcome::Served => started += 1,
                Outcome::Exited(stderr) => {
                    refused += 1;
                    let name = flag.trim_start_matches("--");
                    assert!(
                        stderr.contains(name) && !stderr.contains("panicked"),
                        "{flag} {value}: refused without naming the flag, or by a panic:\n{stderr}"
                    );
                }
            }
        }
    }
    eprintln!("flag edges: {started} started and served, {refused} refused by name");
    assert!(started > 0 && refused > 0);
}

enum Outcome {
    Served,
    Exited(String),
}

/// `abstore serve FLAG=VALUE` from `release`: served (`/health` answered
/// `200`), or the process's stderr once it exited.
async fn start_or_exit(release: &ServerBuilder, setting: &str) -> Outcome {
    match release.clone().arg(setting).try_start().await {
        Ok(server) => {
            let reply = Raw::new("GET", "/health", None)
                .send(server.url())
                .await
                .unwrap_or_else(|e| panic!("{setting}: started but /health failed: {e}"));
            assert_eq!(reply.status, 200, "{setting}");
            Outcome::Served
        }
        Err(stopped) => {
            let status = stopped
                .status
                .unwrap_or_else(|| panic!("{setting}: {stopped}"));
            assert!(!status.success(), "{setting}: exited 0 without serving");
            Outcome::Exited(stopped.stderr)
        }
    }
}
