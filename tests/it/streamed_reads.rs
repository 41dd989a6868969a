//! Whole-history reads are streamed (issue 22, item 2) through the binary,
//! on a SQLite file and on PostgreSQL: a long answer leaves in chunks and is
//! exactly the history; a short one keeps its `Content-Length`; a client
//! that goes away mid-answer, or stops reading, gives its database
//! connection back (the servers run with one connection, and a 2 s acquire
//! bound on PostgreSQL, so a connection kept would fail the next request).

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::support;

use support::{PROTOCOL, Server, ServerBuilder, VERSION, client, decode, with_pg};

/// Events in the long history: about 6 MB of envelopes, many pieces, and
/// more than the kernel's socket buffers hold (4 MB), so that a client that
/// stops reading really holds the server's writes up.
const EVENTS: usize = 2_000;

fn observation(n: usize) -> Value {
    // Varied text so the history is not one repeated payload.
    let summary = format!(
        "observation {n}: {} after {} retries in {}",
        [
            "publish failed",
            "lint warnings",
            "flaky test",
            "slow build"
        ][n % 4],
        n % 7,
        ["src/a.ts", "src/lib/b.ts", "packages/core/c.ts"][n % 3]
    );
    json!({"actor": {"kind": "kernel"}, "type": "observation.recorded",
           "payload": {"id": format!("obs-{n}"), "kind": "followup",
                       "summary": format!("{summary} {}", "x".repeat(1000 + n % 4000)),
                       "files": [format!("src/file{n}.ts")]}})
}

/// A build with `EVENTS` events, appended by 8 concurrent clients.
async fn long_history(base: &str) {
    let c = client();
    let res = c
        .post(format!("{base}/builds"))
        .json(&json!({"slug": "long", "repo": "acme/w"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 201);
    let mut writers = Vec::new();
    for w in 0..8 {
        let (c, url) = (c.clone(), format!("{base}/builds/long/events"));
        writers.push(tokio::spawn(async move {
            for n in (w..EVENTS).step_by(8) {
                let res = c.post(&url).json(&observation(n)).send().await.unwrap();
                assert_eq!(res.status().as_u16(), 201);
            }
        }));
    }
    for writer in writers {
        writer.await.unwrap();
    }
}

/// Open a raw connection, send a GET and read the head plus `take` body
/// bytes; the rest stays unread.
async fn start_reading(base: &str, path: &str, take: usize) -> (tokio::net::TcpStream, Vec<u8>) {
    let addr = base.trim_start_matches("http://");
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    // A small receive window: the server cannot park the answer in our buffers.
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(addr.parse().unwrap()).await.unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nX-Autobuild-Version: {VERSION}\r\n\
         X-Autobuild-Protocol-Version: {PROTOCOL}\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while got.len() < take {
        let n = stream.read(&mut buf).await.unwrap();
        assert!(n > 0, "connection closed early");
        got.extend_from_slice(&buf[..n]);
    }
    (stream, got)
}

/// Ordinary traffic must still be served within `bound`: a read and an
/// append (each needs the one database connection).
async fn still_served(base: &str, what: &str) {
    let c = client();
    let work = async {
        let res = c
            .get(format!("{base}/builds/long/events?since={}", EVENTS - 1))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), 200, "{what}: read");
        let res = c
            .post(format!("{base}/builds"))
            .json(&json!({"slug": format!("after-{}", rand_suffix()), "repo": "acme/w"}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), 201, "{what}: write");
    };
    tokio::time::timeout(Duration::from_secs(20), work)
        .await
        .unwrap_or_else(|_| panic!("{what}: not served: the read kept its connection"));
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

async fn streamed_reads(server: ServerBuilder) {
    let server = server
        .flag("--db-pool-size", "1")
        .flag("--db-acquire-timeout-ms", "2000")
        .flag("--read-stall-timeout-seconds", "1")
        .start()
        .await;
    let base = server.url().to_owned();
    long_history(&base).await;
    let c = client();

    // A long answer is chunked and is exactly the history, in order.
    let res = c
        .get(format!("{base}/builds/long/events?since=0"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    assert!(
        res.headers().get("content-length").is_none(),
        "a long answer is streamed, not sized up front"
    );
    assert_eq!(res.headers()["content-type"], "application/json");
    let whole: Vec<Value> = res.json().await.unwrap();
    assert_eq!(whole.len(), EVENTS);
    for (i, event) in whole.iter().enumerate() {
        assert_eq!(event["seq"], i as i64 + 1);
        assert_eq!(event["build"], "long");
    }
    // Every suffix is the same rows (a `since` in the middle of a piece).
    for since in [1, 977, 1999] {
        let part: Vec<Value> = c
            .get(format!("{base}/builds/long/events?since={since}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(part, whole[since..].to_vec(), "since={since}");
    }
    // A held read of a long backlog answers it whole at once too.
    let held: Vec<Value> = c
        .get(format!("{base}/builds/long/events?since=0&wait=5"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(held, whole);

    // A short answer keeps its length; an unknown build is still 404.
    let res = c.get(format!("{base}/builds")).send().await.unwrap();
    assert!(res.headers().get("content-length").is_some());
    assert_eq!(res.json::<Vec<Value>>().await.unwrap().len(), 1);
    let res = c
        .get(format!("{base}/builds/missing/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 404);

    // Clients that go away mid-answer give the one connection back.
    for round in 0..5 {
        let (stream, got) = start_reading(&base, "/builds/long/events?since=0", 20_000).await;
        assert!(got.starts_with(b"HTTP/1.1 200"), "round {round}");
        drop(stream);
        still_served(&base, &format!("after client {round} left")).await;
    }

    // A client that stops reading is cut off after the stall bound, and
    // its connection given back meanwhile.
    let (mut stalled, mut got) = start_reading(&base, "/builds/long/events?since=0", 20_000).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    still_served(&base, "while a client stalls").await;
    let rest = tokio::time::timeout(Duration::from_secs(30), async {
        let mut rest = Vec::new();
        let _ = stalled.read_to_end(&mut rest).await;
        rest
    })
    .await
    .expect("the stalled answer ends");
    got.extend_from_slice(&rest);
    assert!(
        !got.ends_with(b"0\r\n\r\n"),
        "an abandoned answer must not end like a whole one ({} bytes)",
        got.len()
    );
}

#[tokio::test]
async fn whole_reads_stream_on_a_sqlite_file() {
    streamed_reads(Server::builder().sqlite_file()).await;
}

#[tokio::test]
async fn whole_reads_stream_on_postgres() {
    with_pg("streamed", |database| async move {
        streamed_reads(Server::builder().database(&database)).await;
    })
    .await;
}

/// A client that decodes nothing itself: the raw bytes and headers.
fn raw_client() -> reqwest::Client {
    // Without reqwest's decompression features (not enabled here), nothing
    // is decoded or asked for behind the test's back.
    client()
}

async fn compressed_reads(server: ServerBuilder) {
    let server = server.start().await;
    let base = server.url().to_owned();
    long_history(&base).await;
    let c = raw_client();
    let url = format!("{base}/builds/long/events?since=0");
    let identity = c.get(&url).send().await.unwrap();
    assert!(identity.headers().get("content-encoding").is_none());
    let identity = match identity.bytes().await {
        Ok(bytes) => bytes,
        Err(err) => panic!("{err}: {}", server.stderr()),
    };
    assert_eq!(
        serde_json::from_slice::<Vec<Value>>(&identity)
            .unwrap()
            .len(),
        EVENTS
    );

    // Negotiation: q-values, preference on equal weight, identity.
    for (accept, chosen) in [
        ("zstd", Some("zstd")),
        ("br", Some("br")),
        ("gzip", Some("gzip")),
        // What Bun's fetch sends.
        ("gzip, deflate, br, zstd", Some("zstd")),
        ("gzip;q=1, zstd;q=0.5", Some("gzip")),
        ("identity", None),
        ("zstd;q=0, identity", None),
        ("compress", None),
    ] {
        let res = c
            .get(&url)
            .header("accept-encoding", accept)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), 200, "{accept}");
        let encoding = res
            .headers()
            .get("content-encoding")
            .map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(encoding.as_deref(), chosen, "Accept-Encoding: {accept}");
        let vary = res
            .headers()
            .get("vary")
            .map(|v| v.to_str().unwrap().to_ascii_lowercase());
        assert!(
            vary.as_deref()
                .is_some_and(|v| v.contains("accept-encoding")),
            "Accept-Encoding: {accept}: Vary is {vary:?}"
        );
        let body = res.bytes().await.unwrap();
        let decoded = match &encoding {
            Some(encoding) => {
                assert!(
                    body.len() * 2 < identity.len(),
                    "{encoding}: {} of {} bytes",
                    body.len(),
                    identity.len()
                );
                decode(encoding, &body)
            }
            None => body.to_vec(),
        };
        assert!(
            decoded == identity,
            "Accept-Encoding: {accept}: not the same answer"
        );
    }

    // A whole answer (20 events: one piece, with its length) is compressed
    // too, and decodes to the identity answer.
    let short = format!("{base}/builds/long/events?since={}", EVENTS - 20);
    let identity = c.get(&short).send().await.unwrap().bytes().await.unwrap();
    for (accept, chosen) in [("gzip, deflate, br, zstd", "zstd"), ("gzip", "gzip")] {
        let res = c
            .get(&short)
            .header("accept-encoding", accept)
            .send()
            .await
            .unwrap();
        let headers = res.headers().clone();
        assert_eq!(
            headers.get("content-encoding").map(|v| v.to_str().unwrap()),
            Some(chosen),
            "whole answer, Accept-Encoding: {accept}"
        );
        let vary = headers
            .get_all("vary")
            .iter()
            .map(|v| v.to_str().unwrap().to_ascii_lowercase());
        assert_eq!(
            vary.filter(|v| v.contains("accept-encoding")).count(),
            1,
            "whole answer, Accept-Encoding: {accept}: one Vary: Accept-Encoding"
        );
        let body = res.bytes().await.unwrap();
        assert!(
            body.len() < identity.len(),
            "{chosen}: {} of {}",
            body.len(),
            identity.len()
        );
        assert!(
            decode(chosen, &body) == identity,
            "{chosen}: not the same answer"
        );
    }

    // Small answers stay plain: a held read's `[]`, a short listing.
    let res = c
        .get(format!("{base}/builds/long/events?since={EVENTS}&wait=1"))
        .header("accept-encoding", "zstd, br, gzip")
        .send()
        .await
        .unwrap();
    assert!(res.headers().get("content-encoding").is_none());
    assert_eq!(res.text().await.unwrap(), "[]");
    let res = c
        .get(format!("{base}/builds"))
        .header("accept-encoding", "zstd, br, gzip")
        .send()
        .await
        .unwrap();
    assert!(res.headers().get("content-encoding").is_none());
}

/// A real client decodes a compressed whole read by itself: Node's fetch
/// (undici), and Bun's, which is Autobuild's client. `runtime` is `node` or
/// `bun` (the test names carry it: scripts/test leaves a test out when its
/// runtime is absent, and .ci/run installs both).
async fn fetch_decodes(runtime: &str) {
    let Some(program) = support::installed(runtime) else {
        abstore_testkit::skip::skipped(
            &format!("compressed reads through {runtime}'s fetch"),
            &format!("{runtime} is not installed"),
        );
        return;
    };
    let server = Server::builder().sqlite_file().start().await;
    let base = server.url().to_owned();
    long_history(&base).await;
    // A streamed answer (the whole log) and a whole one (its last 20 events:
    // one piece, sent with its length). The whole log three times, as the
    // runtime asks and then asking gzip and br: the first read is an
    // ordinary one, the second fills the history cache, the third is put
    // together from it (zstd frames, one gzip member of deflated chunks, or
    // one brotli stream of the chunks' catable streams).
    let since = EVENTS - 20;
    let whole = format!("{base}/builds/long/events?since=0");
    let tail = format!("{base}/builds/long/events?since={since}");
    let reads = [
        (whole.clone(), ""),
        (tail, ""),
        (whole.clone(), ""),
        (whole.clone(), ""),
        (whole.clone(), "gzip"),
        (whole.clone(), "gzip"),
        (whole.clone(), "br"),
        (whole, "br"),
    ];
    let reads: Vec<Vec<&str>> = reads
        .iter()
        .map(|(url, accept)| vec![url.as_str(), accept])
        .collect();
    let script = format!(
        "const seen = []; for (const [url, accept] of {reads:?}) {{ \
         const headers = {{'x-autobuild-version': '{VERSION}', \
         'x-autobuild-protocol-version': '{PROTOCOL}'}}; \
         if (accept) headers['accept-encoding'] = accept; \
         const r = await fetch(url, {{headers}}); const events = await r.json(); \
         seen.push({{encoding: r.headers.get('content-encoding'), \
         count: events.length, last: events[events.length - 1].seq}}); }} \
         console.log(JSON.stringify(seen));"
    );
    let mut command = tokio::process::Command::new(&program);
    match runtime {
        "node" => command.args(["--input-type=module", "-e", &script]),
        _ => command.args(["-e", &script]),
    };
    let out = command.output().await.unwrap();
    assert!(
        out.status.success(),
        "{runtime}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    let counts = [EVENTS, 20, EVENTS, EVENTS, EVENTS, EVENTS, EVENTS, EVENTS];
    for (answer, count) in seen.as_array().unwrap().iter().zip(counts) {
        assert_eq!(answer["count"], count, "{runtime}: {seen}");
        assert_eq!(answer["last"], EVENTS, "{runtime}: {seen}");
        assert!(
            matches!(answer["encoding"].as_str(), Some("zstd" | "br" | "gzip")),
            "{runtime} was sent an uncompressed answer: {seen}"
        );
    }
    assert_eq!(seen[5]["encoding"], "gzip", "{runtime}: {seen}");
    // brotli: the chunks' streams made, then copied (the runtime's own
    // decoder, not the crate that encoded them, reads both).
    assert_eq!(seen[6]["encoding"], "br", "{runtime}: {seen}");
    assert_eq!(seen[7]["encoding"], "br", "{runtime}: {seen}");
}

#[tokio::test]
async fn whole_reads_compress_on_a_sqlite_file() {
    compressed_reads(Server::builder().sqlite_file()).await;
}

#[tokio::test]
async fn whole_reads_compress_on_postgres() {
    with_pg("compressed", |database| async move {
        compressed_reads(Server::builder().database(&database)).await;
    })
    .await;
}

#[tokio::test]
async fn compressed_reads_decode_in_fetch_of_node() {
    fetch_decodes("node").await;
}

#[tokio::test]
async fn compressed_reads_decode_in_fetch_of_bun() {
    fetch_decodes("bun").await;
}
