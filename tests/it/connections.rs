//! The connection layer through the real binary, over raw TCP: the
//! header-read, idle and body-read timeouts, the connection cap, held reads
//! outliving the connection timeouts, and the HTTP library's own rejections
//! answered in the protocol's JSON error shape.
//!
//! Bounds are set to a second or two and each check allows many times that:
//! what is asserted is which bound closed the connection, never how fast.

use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::support::Server;

async fn connect(server: &Server) -> TcpStream {
    let addr = server.url().strip_prefix("http://").unwrap();
    TcpStream::connect(addr).await.unwrap()
}

const HEADERS: &str =
    "Host: localhost\r\nX-Autobuild-Version: 0.8.0\r\nX-Autobuild-Protocol-Version: 2\r\n";

/// Read one response: its status and JSON body (`Null` when empty).
async fn read_response(stream: &mut TcpStream) -> (u16, Value) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        let n = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut chunk))
            .await
            .expect("a response within 30 s")
            .unwrap();
        assert!(
            n > 0,
            "closed before a response: {:?}",
            String::from_utf8_lossy(&buf)
        );
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).unwrap();
    let status = head[9..12].parse().unwrap();
    let length: usize = head
        .split("\r\n")
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().unwrap())
        })
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed mid-body");
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = &buf[head_end..head_end + length];
    let json = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(body).unwrap_or_else(|_| panic!("not JSON: {head}{body:?}"))
    };
    (status, json)
}

/// Wait until the server closes `stream` (EOF or reset); how long it took.
async fn closed_after(stream: &mut TcpStream) -> Duration {
    let started = Instant::now();
    let mut chunk = [0u8; 1024];
    loop {
        match tokio::time::timeout(Duration::from_secs(60), stream.read(&mut chunk))
            .await
            .expect("the server closed the connection within 60 s")
        {
            Ok(0) | Err(_) => return started.elapsed(),
            Ok(_) => {}
        }
    }
}

#[tokio::test]
async fn a_request_head_sent_too_slowly_is_closed_at_the_header_read_timeout() {
    let s = Server::builder()
        .flag("--header-read-timeout-seconds", "1")
        .flag("--idle-timeout-seconds", "600")
        .start()
        .await;
    let mut slow = connect(&s).await;
    slow.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n")
        .await
        .unwrap();
    let took = closed_after(&mut slow).await;
    assert!(
        took < Duration::from_secs(30),
        "closed after {took:?}: by the idle bound, not the header-read bound"
    );
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_at_the_idle_timeout() {
    let s = Server::builder()
        .flag("--idle-timeout-seconds", "1")
        .flag("--header-read-timeout-seconds", "600")
        .start()
        .await;
    let mut idle = connect(&s).await;
    idle.write_all(format!("GET /health HTTP/1.1\r\n{HEADERS}\r\n").as_bytes())
        .await
        .unwrap();
    let (status, _) = read_response(&mut idle).await;
    assert_eq!(status, 200);
    let took = closed_after(&mut idle).await;
    assert!(took < Duration::from_secs(30), "closed after {took:?}");
}

/// A keep-alive connection waiting for its next request is under the idle
/// bound, not the header-read one: it outlives the header-read bound and
/// serves its next request. hyper's own `header_read_timeout` runs its one
/// timer from the end of an answer, so it would close this connection at
/// the header-read bound (src/connections/activity.rs says why we keep our
/// own).
#[tokio::test]
async fn an_idle_keep_alive_connection_outlives_the_header_read_timeout() {
    let s = Server::builder()
        .flag("--header-read-timeout-seconds", "1")
        .flag("--idle-timeout-seconds", "600")
        .start()
        .await;
    let mut kept = connect(&s).await;
    let request = format!("GET /health HTTP/1.1\r\n{HEADERS}\r\n");
    kept.write_all(request.as_bytes()).await.unwrap();
    assert_eq!(read_response(&mut kept).await.0, 200);
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    kept.write_all(request.as_bytes()).await.unwrap();
    assert_eq!(
        read_response(&mut kept).await.0,
        200,
        "the idle connection was closed at the header-read bound"
    );
}

/// A new connection's first request head is due within the header-read
/// bound from the moment it opens: one that sends nothing is not kept for
/// the (longer) idle bound, so silent connections cannot hold the cap
/// (issue 33, finding 3).
#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_at_the_header_read_timeout() {
    let s = Server::builder()
        .flag("--header-read-timeout-seconds", "1")
        .flag("--idle-timeout-seconds", "600")
        .start()
        .await;
    let mut silent = connect(&s).await;
    let took = closed_after(&mut silent).await;
    assert!(
        took < Duration::from_secs(30),
        "closed after {took:?}: by the idle bound, not the header-read bound"
    );
}

/// A connection from `source` (a loopback address of its own) to `server`.
async fn connect_from(server: &Server, source: &str) -> TcpStream {
    let addr = server.url().strip_prefix("http://").unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    socket.connect(addr.parse().unwrap()).await.unwrap()
}

/// One client address cannot take every place: over its own cap its next
/// connection is answered `503`, while another address is still served.
#[tokio::test]
async fn one_address_cannot_take_every_connection() {
    let s = Server::builder()
        .flag("--max-connections", "10")
        .flag("--max-connections-per-address", "2")
        .start()
        .await;
    let _first = connect_from(&s, "127.0.0.1").await;
    let mut second = connect_from(&s, "127.0.0.1").await;
    second
        .write_all(format!("GET /health HTTP/1.1\r\n{HEADERS}\r\n").as_bytes())
        .await
        .unwrap();
    assert_eq!(read_response(&mut second).await.0, 200);
    let mut third = connect_from(&s, "127.0.0.1").await;
    let (status, body) = read_response(&mut third).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["kind"], "internal", "{body}");
    let mut other = connect_from(&s, "127.0.0.2").await;
    other
        .write_all(format!("GET /health HTTP/1.1\r\n{HEADERS}\r\n").as_bytes())
        .await
        .unwrap();
    assert_eq!(read_response(&mut other).await.0, 200, "another address");
}

#[tokio::test]
async fn a_held_read_outlives_the_connection_timeouts() {
    let s = Server::builder()
        .flag("--idle-timeout-seconds", "1")
        .flag("--header-read-timeout-seconds", "1")
        .start()
        .await;
    let mut setup = connect(&s).await;
    let body = r#"{"repo":"acme/w"}"#;
    setup
        .write_all(
            format!(
                "POST /repos HTTP/1.1\r\n{HEADERS}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let (status, _) = read_response(&mut setup).await;
    assert!(status == 200 || status == 201, "{status}");

    let mut held = connect(&s).await;
    let started = Instant::now();
    held.write_all(
        format!("GET /repos/acme%2Fw/events?wait=3 HTTP/1.1\r\n{HEADERS}\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let (status, events) = read_response(&mut held).await;
    assert_eq!((status, events), (200, serde_json::json!([])));
    assert!(
        started.elapsed() >= Duration::from_millis(2900),
        "the held read was answered before its wait"
    );
}

#[tokio::test]
async fn connections_over_the_cap_are_answered_503_and_the_cap_frees_up() {
    let s = Server::builder()
        .flag("--max-connections", "2")
        .flag("--max-connections-per-address", "2")
        .start()
        .await;
    let first = connect(&s).await;
    let mut second = connect(&s).await;
    // The second is served: both are under the cap.
    second
        .write_all(format!("GET /health HTTP/1.1\r\n{HEADERS}\r\n").as_bytes())
        .await
        .unwrap();
    assert_eq!(read_response(&mut second).await.0, 200);

    let mut third = connect(&s).await;
    let (status, body) = read_response(&mut third).await;
    assert_eq!(status, 503);
    assert_eq!(body["kind"], "internal", "{body}");
    closed_after(&mut third).await;

    drop(first);
    // Once the server has seen the close, a place is free again.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut next = connect(&s).await;
        next.write_all(format!("GET /health HTTP/1.1\r\n{HEADERS}\r\n").as_bytes())
            .await
            .unwrap();
        if read_response(&mut next).await.0 == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the cap never freed up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_body_that_stalls_is_answered_400() {
    let s = Server::builder()
        .flag("--body-read-timeout-seconds", "1")
        .start()
        .await;
    let mut stalled = connect(&s).await;
    stalled
        .write_all(
            format!(
                "POST /builds HTTP/1.1\r\n{HEADERS}Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"slug\":"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let (status, body) = read_response(&mut stalled).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["kind"], "validation", "{body}");
}

#[tokio::test]
async fn the_http_librarys_own_rejections_carry_the_json_error() {
    let s = Server::builder().start().await;
    let too_many_headers: String = (0..200).map(|i| format!("X-H{i}: v\r\n")).collect();
    let long_target = "a".repeat(70_000);
    let cases = [
        ("malformed request line", "GARBAGE\r\n\r\n".to_owned(), 400),
        (
            "header without a colon",
            format!("GET /health HTTP/1.1\r\n{HEADERS}no colon here\r\n\r\n"),
            400,
        ),
        (
            "target too long",
            format!("GET /{long_target} HTTP/1.1\r\n{HEADERS}\r\n"),
            414,
        ),
        (
            "too many headers",
            format!("GET /health HTTP/1.1\r\n{HEADERS}{too_many_headers}\r\n"),
            431,
        ),
    ];
    for (name, request, expected) in cases {
        let mut stream = connect(&s).await;
        stream.write_all(request.as_bytes()).await.unwrap();
        let (status, body) = read_response(&mut stream).await;
        assert_eq!(status, expected, "{name}: {body}");
        assert_eq!(body["kind"], "validation", "{name}: {body}");
        assert!(body["error"].is_string(), "{name}: {body}");
    }
}

/// `VmRSS` and `VmHWM` (peak) of `pid`, in KiB.
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap()
            .parse()
            .unwrap()
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Refused requests' bodies are drained by dropping frames, not collected:
/// 20 unauthenticated 15 MB POSTs at once leave the peak RSS nearly where it
/// was (collecting them, as before, took tens of MB).
#[tokio::test]
async fn refused_large_bodies_are_drained_without_buffering_them() {
    const CLIENTS: usize = 20;
    const BODY: usize = 15 * 1_000_000;
    let s = Server::builder()
        .secret("connection-layer-test-secret-0123456789")
        .start()
        .await;
    let pid = s.pid().unwrap();
    // Warm up the paths (a refused body once) before the baseline.
    let mut warm = connect(&s).await;
    warm.write_all(
        format!("POST /builds HTTP/1.1\r\n{HEADERS}Content-Length: 2\r\n\r\n{{}}").as_bytes(),
    )
    .await
    .unwrap();
    assert_eq!(read_response(&mut warm).await.0, 401);
    let (_, peak_before) = memory_kib(pid);

    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let addr = s.url().strip_prefix("http://").unwrap().to_owned();
            tokio::spawn(async move {
                let mut stream = TcpStream::connect(addr).await.unwrap();
                let head = format!(
                    "POST /builds HTTP/1.1\r\n{HEADERS}Content-Type: application/json\r\nContent-Length: {BODY}\r\n\r\n"
                );
                stream.write_all(head.as_bytes()).await.unwrap();
                let chunk = vec![b' '; 64 * 1024];
                let mut sent = 0;
                while sent < BODY {
                    let n = chunk.len().min(BODY - sent);
                    if stream.write_all(&chunk[..n]).await.is_err() {
                        break; // the server may close once it has answered
                    }
                    sent += n;
                }
                read_response(&mut stream).await.0
            })
        })
        .collect();
    for client in clients {
        assert_eq!(client.await.unwrap(), 401);
    }
    let (_, peak_after) = memory_kib(pid);
    let grew_mib = (peak_after.saturating_sub(peak_before)) / 1024;
    eprintln!("peak RSS {peak_before} KiB -> {peak_after} KiB");
    assert!(
        grew_mib < 40,
        "peak RSS grew by {grew_mib} MiB while draining {CLIENTS} refused bodies of {BODY} bytes"
    );
}

/// Every accepted connection has `TCP_NODELAY`: answers are written in
/// several pieces (a streamed read's last piece, a sealed read's closing zstd
/// frames), and with Nagle's algorithm on, a small last piece waits for the
/// client's delayed ACK (~40 ms on Linux) whatever the answer's size. The
/// option is checked on the server's own socket, not timed.
#[tokio::test]
async fn accepted_connections_have_tcp_nodelay() {
    use crate::support::sockets::{has_tcp_nodelay, sockets_to};

    let s = Server::builder().start().await;
    let mut conn = connect(&s).await;
    // Answered, so the server has accepted this connection.
    conn.write_all(format!("GET /health HTTP/1.1\r\n{HEADERS}\r\n").as_bytes())
        .await
        .unwrap();
    assert_eq!(read_response(&mut conn).await.0, 200);

    let pid = s.pid().unwrap();
    // The server's end of this connection is the socket whose remote port is
    // this client's local port.
    let fds = sockets_to(pid, conn.local_addr().unwrap().port());
    assert_eq!(
        fds.len(),
        1,
        "the server's socket for this connection: {fds:?}"
    );
    assert_eq!(
        has_tcp_nodelay(pid, fds[0]),
        Some(true),
        "the server's accepted socket lacks TCP_NODELAY"
    );
}
