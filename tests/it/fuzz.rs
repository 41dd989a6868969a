//! A bounded HTTP fuzz test with a fixed seed, through the real release
//! binary (where overflow wraps instead of panicking: issue 33), in open and
//! authenticated mode, on SQLite (memory) and PostgreSQL.
//!
//! Every route family gets mutated paths (percent escapes, NUL, huge ids,
//! unicode, dot segments), queries (`since`/`rev`/`wait`/`kind`/`name`/
//! `path` grammar edges), headers (identity, tokens) and bodies (JSON
//! mutations, wrong types, huge numbers, deep nesting, invalid UTF-8,
//! base64 edges). Protocol 3's ticket-asset routes are sent as a
//! protocol-3 client ([`support::PROTOCOL3_CLIENT`]). Every
//! answer must be below 500, every error body the JSON error shape, no
//! connection may drop, and the server's RSS must stay flat between the
//! two halves of the run.
//!
//! `ABSTORE_FUZZ_REQUESTS` (default 2,000 per mode and backend) runs longer;
//! `ABSTORE_FUZZ_SEED` replays another seed.

use crate::support;

use std::sync::Arc;

use abstore::protocol::ident::MAX_ID_BYTES;
use abstore_conformance::fixtures::{build_event, repo_event, session_event};
use abstore_conformance::token;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom as _;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use support::{Raw, Server, enc, rss_kib, with_pg};

const DEFAULT_REQUESTS: usize = 2000;
const DEFAULT_SEED: u64 = 0x0ab5_70e0;
const CONCURRENCY: usize = 8;
/// RSS growth allowed between the end of the first half and the end of the run.
const RSS_GROWTH_KIB: u64 = 24 * 1024;

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Valid ids the run creates first, so mutations also reach real resources.
struct Known {
    build: String,
    repo: String,
    session: String,
    stream: String,
    token: Option<String>,
    secret: Option<String>,
}

async fn setup(base: &str, secret: Option<&str>) -> Known {
    let exp = now_ms() + 3_600_000;
    let token = secret.map(|s| token::mint(s, &token::admin_scope(exp)));
    let t = token.as_deref();
    let ok = |r: Result<support::Reply, String>, what: &str| {
        let r = r.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(r.status < 300, "{what}: {} {}", r.status, r.text());
        r.json()
    };
    let build = "fuzz-build".to_owned();
    ok(
        Raw::new("POST", "/builds", t)
            .json(&json!({"slug": build, "repo": "acme/fuzz"}))
            .send(base)
            .await,
        "create build",
    );
    let repo = "acme/fuzz".to_owned();
    ok(
        Raw::new("POST", "/repos", t)
            .json(&json!({"repo": repo}))
            .send(base)
            .await,
        "ensure repo",
    );
    let session = ok(
        Raw::new("POST", format!("/repos/{}/sessions", enc(&repo)), t)
            .json(&json!({"repo": repo, "operator": "fuzzer"}))
            .send(base)
            .await,
        "create session",
    )["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let stream = ok(
        Raw::new("POST", format!("/builds/{build}/streams"), t)
            .json(&json!({"label": "fuzz"}))
            .send(base)
            .await,
        "create stream",
    )["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    Known {
        build,
        repo,
        session,
        stream,
        token,
        secret: secret.map(str::to_owned),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// An id: mostly a known one, else a mutation (all percent-encoded so the
/// request target stays valid HTTP; hyper answers bare bytes itself).
fn id(rng: &mut StdRng, known: &str) -> String {
    match rng.random_range(0..12) {
        0..=4 => enc(known),
        5 => "%00".into(),
        6 => enc(&format!("{known}\0")),
        7 => "a".repeat(MAX_ID_BYTES + rng.random_range(0..2)),
        8 => "x".repeat(rng.random_range(3000..6000)),
        9 => ["..", ".", "%2e%2e", "%2E", "%2F", "a%2Fb%2F..%2F"]
            .choose(rng)
            .map_or_else(String::new, |s| (*s).to_owned()),
        10 => enc(["é", "😀", "\u{FFFF}", "\u{202E}rtl", "日本"]
            .choose(rng)
            .unwrap_or(&"é")),
        _ => ["%", "%2", "%ZZ", "%C3", "%FF", "%E0%80%80", ""]
            .choose(rng)
            .map_or_else(String::new, |s| (*s).to_owned()),
    }
}

fn query(rng: &mut StdRng) -> String {
    let values = [
        "",
        "0",
        "1",
        "-1",
        "%201%20",
        "1e3",
        "1.5",
        "0x10",
        "Infinity",
        "NaN",
        "%00",
        "+1",
        "99999999999999999999999",
        "9007199254740993",
        "%FF",
        "1,2",
        "%D9%A3",
        "+",
        "1e300",
        "-1e300",
        "9223372036854775807",
        "-9223372036854775808",
        "0xffffffffffffffffffff",
    ];
    let mut parts = Vec::new();
    for name in [
        "since",
        "rev",
        "wait",
        "kind",
        "kind",
        "name",
        "path",
        "revisions",
    ] {
        if rng.random_bool(0.35) {
            let value = if name == "kind" && rng.random_bool(0.5) {
                ["plan", "%00", "p%00", "", "stream%3Ax"]
                    .choose(rng)
                    .map_or_else(String::new, |s| (*s).to_owned())
            } else if name == "kind" && rng.random_bool(0.3) {
                "k".repeat(MAX_ID_BYTES + 1)
            } else {
                values
                    .choose(rng)
                    .map_or_else(String::new, |s| (*s).to_owned())
            };
            parts.push(format!("{name}={value}"));
        }
    }
    if rng.random_bool(0.1) {
        parts.push("since".into()); // no `=`
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

/// A JSON value to put where a field's value was.
fn junk(rng: &mut StdRng) -> Value {
    match rng.random_range(0..14) {
        0 => Value::Null,
        1 => json!(true),
        2 => json!(-1),
        3 => json!(1.5),
        4 => json!(u64::MAX),
        5 => json!(1e300),
        6 => json!(""),
        7 => json!("\u{0}"),
        8 => json!("x".repeat(MAX_ID_BYTES + 1)),
        9 => json!([]),
        10 => json!({}),
        11 => json!("😀\u{202E}"),
        12 => json!({"nested": {"deeper": [1, {"k": null}]}}),
        _ => json!(9_007_199_254_740_993_i64),
    }
}

/// Mutate one member somewhere in `body` (recursing into objects).
fn mutate(rng: &mut StdRng, body: &mut Value) {
    match body {
        Value::Object(map) if !map.is_empty() && rng.random_bool(0.8) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            let key = keys.choose(rng).cloned().unwrap_or_default();
            match rng.random_range(0..4) {
                0 => {
                    map.remove(&key);
                }
                1 => {
                    if let Some(inner) = map.get_mut(&key) {
                        mutate(rng, inner);
                    }
                }
                _ => {
                    map.insert(key, junk(rng));
                }
            }
        }
        Value::Array(items) if !items.is_empty() => {
            let i = rng.random_range(0..items.len());
            mutate(rng, &mut items[i]);
        }
        other => *other = junk(rng),
    }
}

fn base64_edge(rng: &mut StdRng) -> Value {
    json!(
        [
            "", "=", "a", "YQ", "YQ=", "YQ==", "YQ===", "Y Q==", "YR==", "****", "aGk=\n", "-_8=",
            "AAAA"
        ]
        .choose(rng)
        .copied()
        .unwrap_or("")
    )
}

/// A valid body for a route, or one mutation of it.
fn body_for(rng: &mut StdRng, route: &str, known: &Known) -> Vec<u8> {
    let event = if route.starts_with("/repos") {
        repo_event("pauseRequested")
    } else if route.starts_with("/sessions") {
        session_event("turnCompleted")
    } else {
        build_event("observation")
    };
    let artifact = json!({"kind": "plan", "contentBase64": "aGk=", "metadata": {"a": 1}});
    let mut body = match route.rsplit('/').next().unwrap_or("") {
        "builds" => json!({"slug": format!("f{}", rng.random::<u32>()), "repo": "acme/fuzz"}),
        "repos" => json!({"repo": format!("acme/{}", rng.random::<u16>())}),
        "sessions" => json!({"repo": known.repo, "operator": "op", "title": "t"}),
        "streams" => json!({"label": "l"}),
        "events" => event,
        "conditional" => json!({"expectedSeq": rng.random_range(0..4), "event": event}),
        "deposits" => json!({"artifacts": [artifact], "event": event}),
        "artifacts" => artifact,
        "assets" => json!({
            "kind": "design",
            "name": "home",
            "layout": "tree",
            "entries": [
                {"type": "file", "path": "a/index.html", "contentBase64": "aGk="},
                {"type": "dir", "path": "img"}
            ]
        }),
        "remove" => json!({"kind": "design", "name": "home"}),
        "claim" => json!({"holder": "h", "ttlMs": 1000}),
        "heartbeat" | "release" => json!({"holder": "h"}),
        "chunks" => json!({"parts": [{"type": "text-delta", "delta": "x"}]}),
        "close" => json!({"outcome": "completed"}),
        _ => json!({}),
    };
    match rng.random_range(0..16) {
        0..=3 => {}
        4..=8 => mutate(rng, &mut body),
        9 => {
            if let Some(obj) = body.as_object_mut() {
                obj.insert("contentBase64".into(), base64_edge(rng));
            }
            if let Some(a) = body.pointer_mut("/artifacts/0/contentBase64") {
                *a = base64_edge(rng);
            }
            if let Some(a) = body.pointer_mut("/entries/0/contentBase64") {
                *a = base64_edge(rng);
            }
        }
        10 => return b"{\"slug\": \"\xff\xfe\", \"repo\": \"\xc3\"}".to_vec(),
        11 => {
            let depth = rng.random_range(100..3000);
            return format!("{}{}", "[".repeat(depth), "]".repeat(depth)).into_bytes();
        }
        12 => return b"{\"truncated\": ".to_vec(),
        13 => return b"1e99999".to_vec(),
        14 => return Vec::new(),
        _ => return format!("{{\"label\": {}}}", "9".repeat(400)).into_bytes(),
    }
    body.to_string().into_bytes()
}

/// One random request against one route family.
fn request(rng: &mut StdRng, known: &Known) -> Raw<'static> {
    let b = id(rng, &known.build);
    let r = id(rng, &known.repo);
    let s = id(rng, &known.session);
    let st = id(rng, &known.stream);
    let tk = id(rng, "AUT-1");
    let routes: Vec<(&'static str, String)> = vec![
        ("GET", "/health".into()),
        ("GET", "/readyz".into()),
        ("GET", "/builds".into()),
        ("POST", "/builds".into()),
        ("POST", "/repos".into()),
        ("GET", format!("/builds/{b}")),
        ("GET", format!("/builds/{b}/events")),
        ("POST", format!("/builds/{b}/events")),
        ("POST", format!("/builds/{b}/events/conditional")),
        ("POST", format!("/builds/{b}/deposits")),
        ("POST", format!("/builds/{b}/artifacts")),
        ("GET", format!("/builds/{b}/artifacts")),
        ("GET", format!("/builds/{b}/artifact-list")),
        ("POST", format!("/builds/{b}/lease/claim")),
        ("POST", format!("/builds/{b}/lease/heartbeat")),
        ("POST", format!("/builds/{b}/lease/release")),
        ("POST", format!("/builds/{b}/streams")),
        ("GET", format!("/builds/{b}/streams")),
        ("GET", format!("/builds/{b}/streams/{st}")),
        ("POST", format!("/builds/{b}/streams/{st}/chunks")),
        ("GET", format!("/builds/{b}/streams/{st}/chunks")),
        ("GET", format!("/repos/{r}")),
        ("POST", format!("/repos/{r}/events")),
        ("GET", format!("/repos/{r}/events")),
        ("POST", format!("/repos/{r}/deposits")),
        ("GET", format!("/repos/{r}/artifacts")),
        ("POST", format!("/repos/{r}/lease/claim")),
        ("POST", format!("/repos/{r}/sessions")),
        ("GET", format!("/repos/{r}/sessions")),
        ("POST", format!("/repos/{r}/streams")),
        ("GET", format!("/repos/{r}/ticket-asset-limits")),
        ("POST", format!("/repos/{r}/tickets/{tk}/assets")),
        ("GET", format!("/repos/{r}/tickets/{tk}/assets")),
        ("GET", format!("/repos/{r}/tickets/{tk}/assets/file")),
        ("GET", format!("/repos/{r}/tickets/{tk}/assets/list")),
        ("POST", format!("/repos/{r}/tickets/{tk}/assets/remove")),
        ("GET", format!("/sessions/{s}")),
        ("POST", format!("/sessions/{s}/events")),
        ("GET", format!("/sessions/{s}/events")),
        ("POST", format!("/sessions/{s}/artifacts")),
        ("GET", format!("/sessions/{s}/artifact-list")),
        ("POST", format!("/sessions/{s}/streams")),
        ("GET", format!("/streams/{st}")),
        ("POST", format!("/streams/{st}/chunks")),
        ("GET", format!("/streams/{st}/chunks")),
        ("POST", format!("/streams/{st}/close")),
        ("DELETE", format!("/builds/{b}")),
        ("GET", format!("/builds/{b}/nope/../events")),
    ];
    let (method, path) = routes.choose(rng).cloned().unwrap_or(("GET", "/".into()));
    let target = format!("{path}{}", query(rng));
    let token = match (&known.token, rng.random_range(0..10)) {
        (None, _) | (Some(_), 0..=5) => known.token.clone(),
        (Some(t), 6) => Some(format!("{t}x")),
        (Some(t), 7) => Some(t[..t.len() / 2].to_owned()),
        (Some(_), 8) => Some("not.a.token".into()),
        (Some(_), _) => known.secret.as_ref().map(|secret| {
            let scope = token::resource_scope("build", "other", "agent-1", now_ms() + 60_000);
            token::mint(secret, &scope)
        }),
    };
    let mut raw = Raw::new(method, target, token.as_deref());
    if path.contains("/tickets/") || path.ends_with("/ticket-asset-limits") {
        let (version, protocol) = support::PROTOCOL3_CLIENT;
        raw.headers[0].1 = version.as_bytes().to_vec();
        raw.headers[1].1 = protocol.as_bytes().to_vec();
    }
    match rng.random_range(0..30) {
        0 => raw.headers.retain(|(n, _)| n != "X-Autobuild-Version"),
        1 => raw.headers[0].1 = b"9.9.9".to_vec(),
        2 => raw
            .headers
            .push(("X-Autobuild-Version".into(), b"0.0.1".to_vec())),
        3 => raw.headers[1].1 = b"\xff\xfe".to_vec(),
        4 => raw
            .headers
            .push(("Authorization".into(), b"Bearer".to_vec())),
        _ => {}
    }
    // Compressed answers and the history cache take other paths than
    // identity ones: every request may ask for any encoding.
    let encodings = [
        "zstd",
        "gzip",
        "br",
        "gzip, deflate, br, zstd",
        "*",
        "zstd;q=0",
    ];
    if rng.random_bool(0.5)
        && let Some(encoding) = encodings.choose(rng)
    {
        raw = raw.header("Accept-Encoding", *encoding);
    }
    if method == "POST" {
        let body = body_for(rng, &path, known);
        raw = raw.body(body);
    }
    raw
}

/// Send `count` requests with `CONCURRENCY` in flight; panics on a dropped
/// connection, a 5xx or an error body out of shape.
/// Returns how many answers had each status.
async fn fire(
    base: &Arc<str>,
    known: &Arc<Known>,
    rng: &mut StdRng,
    count: usize,
) -> std::collections::BTreeMap<u16, usize> {
    let limit = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..count {
        let raw = request(rng, known);
        let (base, limit) = (base.clone(), limit.clone());
        let permit = limit.acquire_owned().await.expect("semaphore");
        tasks.spawn(async move {
            let _permit = permit;
            let what = format!(
                "{} {}",
                raw.method,
                raw.target.chars().take(160).collect::<String>()
            );
            let reply = raw
                .send(&base)
                .await
                .unwrap_or_else(|e| panic!("{what}: connection dropped: {e}"));
            assert!(
                reply.status < 500,
                "{what}: {} {}",
                reply.status,
                reply.text()
            );
            reply.assert_error_shape(&what);
            reply.status
        });
    }
    let mut statuses = std::collections::BTreeMap::new();
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(status) => *statuses.entry(status).or_default() += 1,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
    statuses
}

async fn fuzz(database: &str, secret: Option<&str>) {
    let Some(release) = Server::builder().release() else {
        return;
    };
    let mut server = release
        .database(database)
        // Held reads answer within a second, so `wait=` values cannot stall the run.
        .flag("--max-wait-seconds", "1")
        .flag("--request-timeout-seconds", "6")
        .accept_protocol3();
    if let Some(secret) = secret {
        server = server.secret(secret);
    }
    let mut server = server.start().await;
    let base: Arc<str> = Arc::from(server.url());
    let known = Arc::new(setup(&base, secret).await);
    let seed = env_number("ABSTORE_FUZZ_SEED", DEFAULT_SEED);
    let total = env_number("ABSTORE_FUZZ_REQUESTS", DEFAULT_REQUESTS as u64) as usize;
    let mut rng = StdRng::seed_from_u64(seed);
    let pid = server.pid().expect("server pid");

    let mut statuses = fire(&base, &known, &mut rng, total / 2).await;
    let warm = rss_kib(pid).unwrap_or(0);
    for (status, n) in fire(&base, &known, &mut rng, total - total / 2).await {
        *statuses.entry(status).or_default() += n;
    }
    let end = rss_kib(pid).unwrap_or(0);
    eprintln!(
        "fuzz seed {seed:#x}: {total} requests, statuses {statuses:?}; RSS {warm} KiB after half, {end} KiB at end"
    );
    // The mutations must not all bounce off the first check: a share of the
    // requests has to reach the handlers and succeed.
    let succeeded: usize = statuses.range(200..300).map(|(_, n)| n).sum();
    assert!(succeeded * 10 >= total, "too few successes: {statuses:?}");
    assert!(
        end <= warm + RSS_GROWTH_KIB,
        "server RSS grew from {warm} KiB to {end} KiB over the second half (seed {seed:#x})"
    );
    let stderr = server.stderr();
    assert!(
        !stderr.contains("internal error"),
        "the server logged an internal error:\n{stderr}"
    );
    server.stop().await.ok();
}

fn secret() -> String {
    (0..4)
        .map(|_| abstore_conformance::util::random_hex())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn fuzz_sqlite_open() {
    fuzz("sqlite::memory:", None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn fuzz_sqlite_authenticated() {
    fuzz("sqlite::memory:", Some(&secret())).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn fuzz_postgres_open() {
    with_pg("robust_fuzz", |url| async move { fuzz(&url, None).await }).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn fuzz_postgres_authenticated() {
    with_pg("robust_fuzz", |url| async move {
        fuzz(&url, Some(&secret())).await;
    })
    .await;
}
