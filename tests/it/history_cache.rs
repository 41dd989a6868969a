//! The history cache (src/history/) through the binary, on a SQLite file
//! and on PostgreSQL: a read spanning complete chunks, in zstd or as text
//! (for any other client), is exactly the ordinary answer for every `since`
//! (before, on and after chunk boundaries), for build logs and repository
//! journals, from the database the first time and from the cache after;
//! where a log ends is learnt from the reads (a log's first read is an
//! ordinary one); logs that grow complete new chunks; a log shorter than a
//! chunk is answered from its cached prefix in zstd, made again only once it
//! grew a quarter of a chunk, and from the store as text; the cache keeps
//! its byte bound; a client that leaves mid-answer leaves the server serving.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::support;

use support::{PROTOCOL, Server, VERSION, client, metric, with_pg};

/// Events per chunk in these servers: small, so a short log has many.
const CHUNK: i64 = 8;

/// A server with small chunks, metrics, and `extra` flags; and its metrics URL.
async fn server(database: &str, extra: &[&str]) -> (Server, String) {
    let server = Server::builder()
        .database(database)
        .flag("--history-chunk-events", &CHUNK.to_string())
        .metrics()
        .args(extra)
        .start()
        .await;
    let metrics = server.metrics_url().to_owned();
    (server, metrics)
}

/// Append `count` events to `path` (a build log or a repository journal).
async fn append(base: &str, path: &str, count: usize) {
    let c = client();
    for n in 0..count {
        let event = if path.starts_with("/repos/") {
            json!({"actor": {"kind": "dispatcher"}, "type": "dispatcher.tick-started",
                   "payload": {"run": format!("dispatch-{n}")}})
        } else {
            json!({"actor": {"kind": "kernel"}, "type": "observation.recorded",
                   "payload": {"id": format!("obs-{n}"), "kind": "followup",
                               "summary": format!("observation {n} of a growing log")}})
        };
        let res = c
            .post(format!("{base}{path}"))
            .json(&event)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), 201, "{}", res.text().await.unwrap());
    }
}

/// A build `slug` with `count` events.
async fn build_with_events(base: &str, slug: &str, count: usize) {
    let res = client()
        .post(format!("{base}/builds"))
        .json(&json!({"slug": slug, "repo": "acme/w"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 201);
    append(base, &format!("/builds/{slug}/events"), count).await;
}

/// `GET url` with `accept`: the status, `Content-Encoding`, and the body
/// decoded.
async fn get(url: &str, accept: &str) -> (u16, Option<String>, Vec<u8>) {
    support::get_decoded(&client(), url, accept).await
}

/// Every `since` of `events` (a log of `last` events) read in zstd, gzip,
/// brotli and identity (the cache answers them all), equals the
/// ordinary read of the store's rows (a held read finding events at once);
/// a range spanning a complete chunk comes in zstd.
async fn same_answers(events: &str, last: i64) {
    let sinces = [
        -3,
        0,
        1,
        CHUNK - 1,
        CHUNK,
        CHUNK + 1,
        2 * CHUNK,
        last - CHUNK,
        last - 1,
        last,
        last + 5,
    ];
    for since in sinces {
        let url = format!("{events}?since={since}");
        let (status, encoding, identity) = get(&url, "identity").await;
        assert_eq!((status, encoding), (200, None), "{url}");
        let (status, encoding, zstd) = get(&url, "gzip, deflate, br, zstd").await;
        assert_eq!(status, 200, "{url}");
        assert!(
            zstd == identity,
            "{url}: the zstd answer differs:\n{}\n{}",
            String::from_utf8_lossy(&zstd),
            String::from_utf8_lossy(&identity)
        );
        let (status, _, gzip) = get(&url, "gzip").await;
        assert!(
            status == 200 && gzip == identity,
            "{url}: the gzip answer differs"
        );
        let (status, _, brotli) = get(&url, "br").await;
        assert!(
            status == 200 && brotli == identity,
            "{url}: the brotli answer differs"
        );
        if since < last {
            let held = format!("{url}&wait=1");
            let (status, _, ordinary) = get(&held, "identity").await;
            assert!(
                status == 200 && ordinary == identity,
                "{url}: the identity answer differs from the store's rows:\n{}\n{}",
                String::from_utf8_lossy(&identity),
                String::from_utf8_lossy(&ordinary)
            );
        }
        let expected: Vec<i64> = (since.max(0) + 1..=last).collect();
        let seqs: Vec<i64> = serde_json::from_slice::<Vec<Value>>(&identity)
            .unwrap()
            .iter()
            .map(|e| e["seq"].as_i64().unwrap())
            .collect();
        assert_eq!(seqs, expected, "{url}");
        if (since.max(0) + CHUNK - 1) / CHUNK < last / CHUNK {
            assert_eq!(encoding.as_deref(), Some("zstd"), "{url}");
        }
    }
}

/// Sealed chunks read from the database so far.
async fn chunks_read(c: &reqwest::Client, metrics: &str) -> f64 {
    let name = "abstore_history_chunks_total{source=\"database\"}";
    metric(c, metrics, name).await.unwrap_or(0.0)
}

async fn complete_chunks(database: &str) {
    let (server, metrics) = server(database, &[]).await;
    let base = server.url().to_owned();
    let c = client();
    build_with_events(&base, "grows", 30).await;
    let log = format!("{base}/builds/grows/events");

    // A log no read has shown past its first chunk is read the ordinary
    // way, with no extra statement; the read teaches where it ends.
    let (status, encoding, _) = get(&format!("{log}?since=0"), "zstd").await;
    assert_eq!((status, encoding.as_deref()), (200, Some("zstd")));
    assert_eq!(
        chunks_read(&c, &metrics).await,
        0.0,
        "a first read seals nothing"
    );

    // Then: chunks from the database; again: from the cache.
    same_answers(&log, 30).await;
    let from_db = chunks_read(&c, &metrics).await;
    assert!(from_db >= 3.0, "three chunks complete: {from_db}");
    same_answers(&log, 30).await;
    let again = chunks_read(&c, &metrics).await;
    assert_eq!(
        again, from_db,
        "the second round reads no complete chunk again"
    );
    let cached = metric(
        &c,
        &metrics,
        "abstore_history_chunks_total{source=\"cache\"}",
    )
    .await;
    assert!(cached.is_some_and(|n| n > 0.0), "cache hits: {cached:?}");
    let bytes = metric(&c, &metrics, "abstore_history_cache_bytes").await;
    assert!(bytes.is_some_and(|n| n > 0.0), "cache bytes: {bytes:?}");

    // The log grows across boundaries. The server learns it from its reads,
    // never asking the database: the first zstd read after the growth sends
    // the new events in its live tail after the cached prefix 25-30 (no
    // chunk read), and teaches the next read to cache chunks 3 and 4 (seq
    // 25-40) and make the open chunk's prefix (41-43), once.
    append(&base, "/builds/grows/events", 13).await;
    let read_before = chunks_read(&c, &metrics).await;
    for (round, read) in [(1, 0.0), (2, 3.0), (3, 3.0)] {
        let (status, encoding, body) = get(&format!("{log}?since=0"), "zstd").await;
        assert_eq!((status, encoding.as_deref()), (200, Some("zstd")));
        let events: Vec<Value> = serde_json::from_slice(&body).unwrap();
        assert_eq!(events.len(), 43, "zstd read {round} after the growth");
        assert_eq!(
            chunks_read(&c, &metrics).await - read_before,
            read,
            "chunks read from the database by zstd read {round} after the growth"
        );
    }
    same_answers(&log, 43).await;

    // A repository journal, the same way.
    let res = c
        .post(format!("{base}/repos"))
        .json(&json!({"repo": "acme/w"}))
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success());
    append(&base, "/repos/acme%2Fw/events", 20).await;
    same_answers(&format!("{base}/repos/acme%2Fw/events"), 20).await;

    // An unknown log is still `404`, a held read still a held read.
    let (status, _, body) = get(&format!("{base}/builds/missing/events?since=0"), "zstd").await;
    assert_eq!(status, 404, "{}", String::from_utf8_lossy(&body));
    let (status, _, body) = get(&format!("{log}?since=0&wait=1"), "zstd").await;
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_slice::<Vec<Value>>(&body).unwrap().len(),
        43
    );
    let (status, _, body) = get(&format!("{log}?since=43&wait=1"), "zstd").await;
    assert_eq!((status, body), (200, b"[]".to_vec()));

    // Malformed Accept-Encoding never fails a read.
    for accept in ["zstd;q=", ";;;", "zstd;q=9,,", "zstd;q=0.5;q=1"] {
        let res = c
            .get(format!("{log}?since=0"))
            .header("accept-encoding", accept)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), 200, "{accept:?}");
    }

    // A client that leaves mid-answer (it asked for zstd) leaves the server
    // serving, and the answers whole.
    for round in 0..3 {
        let addr = base.trim_start_matches("http://");
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!(
            "GET /builds/grows/events?since=0 HTTP/1.1\r\nHost: {addr}\r\n\
             X-Autobuild-Version: {VERSION}\r\nX-Autobuild-Protocol-Version: {PROTOCOL}\r\n\
             Accept-Encoding: zstd\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut head = [0u8; 64];
        let n = stream.read(&mut head).await.unwrap();
        assert!(head[..n].starts_with(b"HTTP/1.1 200"), "round {round}");
        drop(stream);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    same_answers(&log, 43).await;
}

/// A log shorter than a chunk (a finished build's whole log, most often):
/// its second zstd read makes the prefix's frame, later ones copy it and
/// read only the tail; growth under a quarter of a chunk rides in the live
/// tail, more makes the prefix again.
async fn short_logs(database: &str) {
    // On a SQLite file the short-log cache (tests/it/short_log_cache.rs)
    // answers whole short logs before the history cache is asked: off here,
    // so that the prefix machinery (what PostgreSQL and later `since`s use)
    // is what is tested.
    let (server, metrics) = server(database, &["--short-log-cache-bytes", "0"]).await;
    let base = server.url().to_owned();
    let c = client();
    build_with_events(&base, "short", 5).await;
    let log = format!("{base}/builds/short/events?since=0");
    let cache_hits = || async {
        let name = "abstore_history_chunks_total{source=\"cache\"}";
        metric(&c, &metrics, name).await.unwrap_or(0.0)
    };
    // A read of `events` events; all but the first (`ordinary`: too short
    // for the compression layer) come in zstd.
    let zstd_read = |events: usize, ordinary: bool| {
        let log = log.clone();
        async move {
            let (status, encoding, body) = get(&log, "gzip, deflate, br, zstd").await;
            assert_eq!(status, 200);
            assert!(
                (encoding.as_deref() == Some("zstd")) != ordinary,
                "{events}: {encoding:?}"
            );
            let (_, _, identity) = get(&log, "identity").await;
            assert!(body == identity, "the zstd answer equals the identity one");
            let seqs: Vec<i64> = serde_json::from_slice::<Vec<Value>>(&body)
                .unwrap()
                .iter()
                .map(|e| e["seq"].as_i64().unwrap())
                .collect();
            assert_eq!(seqs, (1..=events as i64).collect::<Vec<_>>());
        }
    };
    // (reads from the database, cache hits) after each step.
    let mut seen = Vec::new();
    zstd_read(5, true).await;
    seen.push((chunks_read(&c, &metrics).await, cache_hits().await));
    zstd_read(5, false).await;
    seen.push((chunks_read(&c, &metrics).await, cache_hits().await));
    zstd_read(5, false).await;
    seen.push((chunks_read(&c, &metrics).await, cache_hits().await));
    // One more event: under a quarter of a chunk (2), so the cached prefix
    // (1-5) and a live tail of one answer.
    append(&base, "/builds/short/events", 1).await;
    zstd_read(6, false).await;
    zstd_read(6, false).await;
    seen.push((chunks_read(&c, &metrics).await, cache_hits().await));
    // Two more (8 in all, the whole first chunk): complete, read once.
    append(&base, "/builds/short/events", 2).await;
    zstd_read(8, false).await;
    zstd_read(8, false).await;
    zstd_read(8, false).await;
    seen.push((chunks_read(&c, &metrics).await, cache_hits().await));
    assert_eq!(
        seen,
        vec![
            (0.0, 0.0), // the first read is an ordinary one
            (1.0, 0.0), // the prefix 1-5 read and kept
            (1.0, 1.0), // then copied
            (1.0, 3.0), // 6: prefix + tail, twice
            // 8: prefix + tail; then chunk 0 complete, read once (by the
            // identity read, answered from it as text); then copied or
            // decompressed, four times
            (2.0, 8.0),
        ]
    );
}

#[tokio::test]
async fn short_logs_are_answered_from_their_prefix_on_a_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("abstore.db").display());
    short_logs(&database).await;
}

#[tokio::test]
async fn short_logs_are_answered_from_their_prefix_on_postgres() {
    with_pg("shortlogs", |database| async move {
        short_logs(&database).await;
    })
    .await;
}

#[tokio::test]
async fn complete_chunks_answer_every_range_exactly_on_a_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("abstore.db").display());
    complete_chunks(&database).await;
}

#[tokio::test]
async fn complete_chunks_answer_every_range_exactly_on_sqlite_memory() {
    complete_chunks("sqlite::memory:").await;
}

#[tokio::test]
async fn complete_chunks_answer_every_range_exactly_on_postgres() {
    with_pg("history", |database| async move {
        complete_chunks(&database).await;
    })
    .await;
}

/// A client that does not take zstd is answered from the same frames: as
/// text, as one gzip member of deflated chunks or as one brotli stream of
/// catable chunk streams; its first read teaches, its second reads and
/// keeps the complete chunks, later ones read no chunk from the database;
/// a log shorter than a chunk is never answered from its prefix so.
async fn text_answers(database: &str) {
    let (server, metrics) = server(database, &["--short-log-cache-bytes", "0"]).await;
    let base = server.url().to_owned();
    let c = client();
    build_with_events(&base, "text", 3 * CHUNK as usize + 3).await;
    build_with_events(&base, "short", CHUNK as usize - 2).await;
    let cache_hits = || async {
        let name = "abstore_history_chunks_total{source=\"cache\"}";
        metric(&c, &metrics, name).await.unwrap_or(0.0)
    };
    let log = format!("{base}/builds/text/events?since=0");
    let cache_bytes = || async {
        metric(&c, &metrics, "abstore_history_cache_bytes")
            .await
            .unwrap_or(0.0)
    };
    let mut seen = Vec::new();
    let mut bytes = Vec::new();
    for accept in ["identity", "br", "br", "identity", "gzip", "gzip"] {
        let (status, encoding, body) = get(&log, accept).await;
        assert_eq!(status, 200, "{accept}");
        assert_eq!(
            encoding.as_deref(),
            Some(accept).filter(|a| *a != "identity"),
            "{accept}"
        );
        let seqs: Vec<i64> = serde_json::from_slice::<Vec<Value>>(&body)
            .unwrap()
            .iter()
            .map(|e| e["seq"].as_i64().unwrap())
            .collect();
        assert_eq!(seqs, (1..=3 * CHUNK + 3).collect::<Vec<_>>(), "{accept}");
        seen.push((chunks_read(&c, &metrics).await, cache_hits().await));
        bytes.push(cache_bytes().await);
    }
    assert_eq!(
        seen,
        vec![
            (0.0, 0.0),  // the first read is an ordinary one, and teaches
            (4.0, 0.0), // three complete chunks and the last one's prefix read, kept with their brotli streams
            (4.0, 4.0), // then the streams copied
            (4.0, 8.0), // the frames decompressed
            (4.0, 12.0), // and deflated for gzip
            (4.0, 16.0), // and copied deflated
        ]
    );
    // The first brotli and gzip answers kept each chunk's stream and
    // deflated text beside its frame; the second of each found it there.
    assert_eq!(bytes[2], bytes[1], "{bytes:?}");
    assert_eq!(bytes[3], bytes[2], "{bytes:?}");
    assert!(bytes[4] > bytes[3], "deflated chunks kept: {bytes:?}");
    assert_eq!(bytes[5], bytes[4], "{bytes:?}");
    same_answers(&format!("{base}/builds/text/events"), 3 * CHUNK + 3).await;

    // A short log: a prefix alone is read from the store as text.
    let short = format!("{base}/builds/short/events?since=0");
    let before = (chunks_read(&c, &metrics).await, cache_hits().await);
    for _ in 0..3 {
        let (status, encoding, body) = get(&short, "identity").await;
        assert_eq!((status, encoding), (200, None));
        assert_eq!(
            serde_json::from_slice::<Vec<Value>>(&body).unwrap().len(),
            CHUNK as usize - 2
        );
    }
    let after = (chunks_read(&c, &metrics).await, cache_hits().await);
    assert_eq!(before, after, "no chunk for a short log's text");
}

#[tokio::test]
async fn text_answers_come_from_the_cache_on_a_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("abstore.db").display());
    text_answers(&database).await;
}

#[tokio::test]
async fn text_answers_come_from_the_cache_on_postgres() {
    with_pg("historytext", |database| async move {
        text_answers(&database).await;
    })
    .await;
}

/// The cache keeps its byte bound (`--history-cache-bytes`), and a cache
/// too small for any chunk keeps nothing, answering the same.
#[tokio::test]
async fn the_history_cache_keeps_its_byte_bound() {
    for bound in [1usize, 2048] {
        let dir = tempfile::tempdir().unwrap();
        let database = format!("sqlite://{}", dir.path().join("abstore.db").display());
        let bound_text = bound.to_string();
        let (server, metrics) = server(&database, &["--history-cache-bytes", &bound_text]).await;
        let base = server.url().to_owned();
        let c = client();
        build_with_events(&base, "b", 200).await;
        let log = format!("{base}/builds/b/events");
        same_answers(&log, 200).await;
        same_answers(&log, 200).await;
        let held = metric(&c, &metrics, "abstore_history_cache_bytes")
            .await
            .unwrap_or(0.0);
        assert!(
            held <= bound as f64,
            "{held} bytes held over a bound of {bound}"
        );
        let cached = metric(
            &c,
            &metrics,
            "abstore_history_chunks_total{source=\"cache\"}",
        )
        .await
        .unwrap_or(0.0);
        if bound == 1 {
            assert_eq!((held, cached), (0.0, 0.0), "a one-byte cache keeps nothing");
        } else {
            assert!(held > 0.0 && cached > 0.0, "{held} bytes, {cached} hits");
        }
    }
}

/// With the cache off (`--history-cache-bytes 0`) zstd reads take the
/// ordinary path: no chunk is ever counted.
#[tokio::test]
async fn a_zero_history_cache_turns_the_cache_off() {
    let (server, metrics) = server("sqlite::memory:", &["--history-cache-bytes", "0"]).await;
    let base = server.url().to_owned();
    let c = client();
    build_with_events(&base, "b", 40).await;
    same_answers(&format!("{base}/builds/b/events"), 40).await;
    let chunks = metric(&c, &metrics, "abstore_history_chunks_total").await;
    assert!(chunks.is_none_or(|n| n == 0.0), "{chunks:?}");
}

/// The history cache answers in zstd exactly when the compression layer
/// (tower-http) would have: `src/http/accept.rs` restates tower-http's
/// negotiation, which cannot be called, so the two are compared here on the
/// same log, the cache on and off, for every shape of `Accept-Encoding`.
#[tokio::test]
async fn the_cache_picks_zstd_exactly_when_the_compression_layer_would() {
    let (cached, metrics) = server("sqlite::memory:", &[]).await;
    let (plain, _) = server("sqlite::memory:", &["--history-cache-bytes", "0"]).await;
    let cached_base = cached.url().to_owned();
    let plain_base = plain.url().to_owned();
    for base in [&cached_base, &plain_base] {
        build_with_events(base, "neg", 3 * CHUNK as usize).await;
    }
    let read = |base: &str| format!("{base}/builds/neg/events?since=0");
    // A first read teaches the cache where the log ends.
    get(&read(&cached_base), "identity").await;
    let c = client();
    let before = metric(
        &c,
        &metrics,
        "abstore_history_chunks_total{source=\"database\"}",
    )
    .await;
    for accept in [
        "zstd",
        "gzip, deflate, br, zstd",
        "identity, zstd",
        "gzip;q=0.5, zstd;q=0.6",
        "gzip;q=1, zstd;q=0.999",
        "br, zstd;q=0.5",
        "identity;q=1, zstd;q=0.9",
        "zstd;q=0",
        "zstd;q=0.000",
        "zstd;q=2, gzip",
        "zstd;q=0.1234, gzip;q=0.1",
        "zstd;Q=0.5",
        "ZSTD ; q=1.000",
        "x-gzip, zstd;q=0.2",
        "gzip, br",
        "",
    ] {
        let (status_a, coding_a, body_a) = get(&read(&cached_base), accept).await;
        let (status_b, coding_b, body_b) = get(&read(&plain_base), accept).await;
        assert_eq!((status_a, status_b), (200, 200), "{accept:?}");
        assert_eq!(coding_a, coding_b, "Accept-Encoding {accept:?}");
        let events = |body: &[u8]| serde_json::from_slice::<Vec<Value>>(body).unwrap().len();
        assert_eq!(events(&body_a), events(&body_b), "{accept:?}");
    }
    // The zstd answers came from the cache (its chunks were read once).
    let after = metric(
        &c,
        &metrics,
        "abstore_history_chunks_total{source=\"database\"}",
    )
    .await;
    assert!(
        after.unwrap_or(0.0) > before.unwrap_or(0.0),
        "{before:?} → {after:?}"
    );
}

/// The HTTP chunks of `path`'s answer asked in zstd by a raw client (as a
/// client decoding each read apart sees them): each chunk's data, and
/// where the zstd frames of their concatenation end.
async fn zstd_chunks(base: &str, path: &str, agent: &str) -> (Vec<Vec<u8>>, Vec<usize>) {
    let addr = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nX-Autobuild-Version: {VERSION}\r\n\
         X-Autobuild-Protocol-Version: {PROTOCOL}\r\nAccept-Encoding: zstd\r\n\
         User-Agent: {agent}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    stream.read_to_end(&mut got).await.unwrap();
    let head_end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&got[..head_end]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{path}: {head}");
    assert!(head.contains("content-encoding: zstd"), "{path}: {head}");
    let mut body = &got[head_end + 4..];
    let mut chunks = Vec::new();
    if head.contains("transfer-encoding: chunked") {
        loop {
            let line = body.windows(2).position(|w| w == b"\r\n").unwrap();
            let size =
                usize::from_str_radix(std::str::from_utf8(&body[..line]).unwrap(), 16).unwrap();
            body = &body[line + 2..];
            if size == 0 {
                break;
            }
            chunks.push(body[..size].to_vec());
            body = &body[size + 2..];
        }
    } else {
        chunks.push(body.to_vec());
    }
    let whole = chunks.concat();
    let mut frame_ends = Vec::new();
    let mut at = 0;
    while at < whole.len() {
        let size = zstd::zstd_safe::find_frame_compressed_size(&whole[at..])
            .unwrap_or_else(|e| panic!("{path}: no zstd frame at {at}: {e}"));
        at += size;
        frame_ends.push(at);
    }
    assert!(
        zstd::decode_all(&whole[..]).is_ok(),
        "{path}: the frames decode"
    );
    (chunks, frame_ends)
}

/// A zstd answer from the history cache is several frames, but no HTTP
/// chunk of it ends where a frame ends except the last (issue 49:
/// httpx's and urllib3 2.0–2.5's decoders fail on a read of the body that
/// ends there, and each chunk is at least one read), from the database and
/// from the cache, whole and from any `since`; a short answer is one chunk.
/// Python's clients, known by their User-Agent, get one frame.
#[tokio::test]
async fn no_zstd_chunk_ends_where_a_frame_ends() {
    let (server, _) = server("sqlite::memory:", &[]).await;
    let base = server.url().to_owned();
    build_with_events(&base, "seams", 12 * CHUNK as usize + 3).await;
    build_with_events(&base, "small", CHUNK as usize + 2).await;
    let events = "/builds/seams/events";
    // The log's first read teaches where it ends.
    get(&format!("{base}{events}?since=0"), "identity").await;
    let mut frames_seen = 0;
    for (since, what) in [
        (0, "from the database"),
        (0, "from the cache"),
        (CHUNK - 1, "a live head"),
        (CHUNK, "a chunk's end"),
        (5 * CHUNK + 3, "in a chunk"),
    ] {
        let path = format!("{events}?since={since}");
        let (chunks, frame_ends) = zstd_chunks(&base, &path, "abstore-test").await;
        assert!(frame_ends.len() > 3, "{what}: {} frames", frame_ends.len());
        frames_seen += frame_ends.len();
        let mut at = 0;
        for chunk in &chunks[..chunks.len() - 1] {
            at += chunk.len();
            assert!(
                !frame_ends.contains(&at),
                "{what} ({path}): a chunk ends where a frame ends, at byte {at} of {}",
                frame_ends.last().unwrap()
            );
        }
    }
    assert!(frames_seen > 20);
    // A short answer (`[`, a prefix and a live tail, `]`): one chunk.
    get(&format!("{base}/builds/small/events?since=0"), "identity").await;
    let (chunks, frame_ends) =
        zstd_chunks(&base, "/builds/small/events?since=0", "abstore-test").await;
    assert!(frame_ends.len() > 1, "{frame_ends:?}");
    assert_eq!(chunks.len(), 1, "{} chunks", chunks.len());
    // httpx (and requests, urllib3) by their own User-Agent: one frame.
    for agent in [
        "python-httpx/0.29.0",
        "python-requests/2.34.2",
        "python-urllib3/2.8.0",
    ] {
        let (_, frame_ends) = zstd_chunks(&base, &format!("{events}?since=0"), agent).await;
        assert_eq!(frame_ends.len(), 1, "{agent}: {} frames", frame_ends.len());
    }
}
