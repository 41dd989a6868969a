//! Accepting and serving connections: HTTP/1.1 over hyper with the bounds
//! `axum::serve` does not have — a cap on open connections, a header-read
//! timeout, an idle keep-alive timeout and a body-read (stall) timeout
//! (tower-http's `TimeoutBody`) — and a graceful shutdown that lets
//! in-flight requests finish (hyper-util's `GracefulShutdown`).
//!
//! Over the cap a connection is accepted, answered `503` with the protocol's
//! JSON error and closed at once, so a flood cannot exhaust descriptors and
//! a client learns why instead of hanging in the kernel's backlog. A second
//! cap per client address keeps one client from taking every place, and a
//! new connection must deliver its first request head within the
//! header-read bound (issue 33).

mod activity;
mod io;
mod repoll;

use std::future::Future as _;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::AsyncWriteExt as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tower::Service as _;

pub use activity::Deadlines;
use activity::{Activity, GuardedBody};

/// The one path whose requests are told their peer's address: the
/// console's sign-in, limited per address (`crate::http::console` serves it).
/// Only there, so no other request pays for the extension.
pub const CONSOLE_SIGN_IN_PATH: &str = "/console/sign-in";

/// The connection-level bounds (each a flag).
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    pub deadlines: Deadlines,
    /// Longest a request body may go without data.
    pub body_read: Duration,
    /// Connections open at once.
    pub max_connections: u32,
    /// Connections open at once from one client address (an IPv6 client
    /// by its /64, which one host can spread over).
    pub max_per_address: u32,
}

/// Open connections by client address, for the per-address cap.
#[derive(Default)]
struct PerAddress {
    open: std::sync::Mutex<std::collections::HashMap<AddressKey, u32>>,
}

/// What one client is counted by: an IPv4 address, or an IPv6 /64 (a
/// single host is commonly given a whole /64).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
struct AddressKey(u128);

impl AddressKey {
    fn of(ip: std::net::IpAddr) -> AddressKey {
        match ip.to_canonical() {
            std::net::IpAddr::V4(v4) => AddressKey(u128::from(u32::from(v4))),
            std::net::IpAddr::V6(v6) => AddressKey((u128::from(v6) >> 64) | (1 << 127)),
        }
    }
}

impl PerAddress {
    /// A place for one more connection from `key`, or `None` at the cap.
    fn admit(self: &Arc<Self>, key: AddressKey, cap: u32) -> Option<AddressSlot> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let count = open.entry(key).or_insert(0);
        if *count >= cap {
            return None;
        }
        *count += 1;
        Some(AddressSlot {
            table: self.clone(),
            key,
        })
    }
}

/// One connection's place in [`PerAddress`], given back when dropped.
struct AddressSlot {
    table: Arc<PerAddress>,
    key: AddressKey,
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut open = self.table.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = open.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// Descriptors kept free of connections for the database, blob files,
/// the metrics listener and the like.
const RESERVED_DESCRIPTORS: u64 = 128;

/// Raise the open-file limit to its hard ceiling (as Go's runtime does) and
/// lower `wanted` connections to what the descriptors allow, so the cap is
/// reached before `accept` starts failing for everyone.
pub fn effective_max_connections(wanted: u32) -> u32 {
    let available = match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => limit.saturating_sub(RESERVED_DESCRIPTORS).max(1),
        Err(err) => {
            tracing::warn!(error = %err, "cannot read the open-file limit; the connection cap is not checked against it");
            return wanted;
        }
    };
    if u64::from(wanted) > available {
        let lowered = u32::try_from(available).unwrap_or(u32::MAX);
        tracing::warn!(
            max_connections = wanted,
            lowered_to = lowered,
            "the open-file limit allows fewer connections than --max-connections; raise `ulimit -n`"
        );
        lowered
    } else {
        wanted
    }
}

/// Serve `router` on `listener` until `shutdown` is cancelled, then stop
/// accepting, let every open connection finish its request, and return once
/// all are closed.
pub async fn serve(
    listener: &TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) {
    // Each connection finishes the request it is serving, then closes.
    accept_until(listener, router, limits, shutdown)
        .await
        .shutdown()
        .await;
}

/// Serve `router` on `listener` until `shutdown` is cancelled, then stop
/// accepting and return at once, `listener` free for another server (a
/// starting server hands it on this way). Answers the connections' drain:
/// its `shutdown` has each still open close after the request it is
/// answering (or at once when idle) and waits for them all; dropped, it lets
/// them close the same way without waiting.
pub async fn accept_until(
    listener: &TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) -> GracefulShutdown {
    let open = Arc::new(Semaphore::new(limits.max_connections as usize));
    let per_address = Arc::new(PerAddress::default());
    let drain = GracefulShutdown::new();
    // Looked up once: a handle, not a registry lookup per connection.
    let open_gauge = metrics::gauge!("abstore_connections_open");
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shutdown.cancelled() => break,
        };
        let (stream, peer) = match accepted {
            Ok((stream, peer)) => {
                // Answers are written in several pieces (a streamed read's
                // last piece, a zstd answer's closing frames); with Nagle on,
                // a small last write waits for the client's delayed ACK
                // (~40 ms). A failure only costs that latency.
                let _ = stream.set_nodelay(true);
                (stream, peer)
            }
            Err(err) => {
                // Per-connection errors (reset before accept) are routine;
                // anything else (EMFILE) is waited out briefly, not spun on.
                if !is_connection_error(&err) {
                    tracing::warn!(error = %err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                continue;
            }
        };
        let Some(slot) = per_address.admit(AddressKey::of(peer.ip()), limits.max_per_address)
        else {
            metrics::counter!("abstore_connections_refused_total", "cap" => "address").increment(1);
            tokio::spawn(refuse(stream));
            continue;
        };
        match open.clone().try_acquire_owned() {
            Ok(permit) => {
                let router = router.clone();
                let watcher = drain.watcher();
                let open_gauge = open_gauge.clone();
                open_gauge.increment(1.0);
                tokio::spawn(async move {
                    serve_connection(stream, peer, router, limits, watcher, (permit, slot)).await;
                    open_gauge.decrement(1.0);
                });
            }
            Err(_) => {
                drop(slot);
                metrics::counter!("abstore_connections_refused_total", "cap" => "total")
                    .increment(1);
                tokio::spawn(refuse(stream));
            }
        }
    }
    drain
}

fn is_connection_error(err: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(
        err.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    )
}

/// Answer a connection over the cap and close it.
async fn refuse(mut stream: TcpStream) {
    const BODY: &str = r#"{"error":"too many open connections; retry shortly","kind":"internal"}"#;
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{BODY}",
        BODY.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
}

async fn serve_connection(
    stream: TcpStream,
    peer: std::net::SocketAddr,
    router: Router,
    limits: ConnectionLimits,
    drain: Watcher,
    _places: (OwnedSemaphorePermit, AddressSlot),
) {
    let activity = Activity::new();
    let io = TokioIo::new(io::WatchedStream::new(stream, activity.clone()));
    let service_activity = activity.clone();
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let guard = service_activity.begin();
        let mut request = request.map(|body| {
            axum::body::Body::new(tower_http::timeout::TimeoutBody::new(
                limits.body_read,
                body,
            ))
        });
        // The peer's address, for the console's sign-in attempts (bounded
        // per address); only there, so no other request pays for it.
        if request.uri().path() == CONSOLE_SIGN_IN_PATH {
            request
                .extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
        }
        // Called here, not in the future: the future then holds the
        // router's future alone, not also the request it was made from
        // (a held read's future lives as long as it waits). A router is
        // always ready.
        let routed = router.clone().call(request);
        async move {
            let response = routed.await?;
            Ok::<_, std::convert::Infallible>(response.map(|inner| GuardedBody {
                inner,
                guard: Some(guard),
            }))
        }
    });
    // Once the server stops, the connection finishes its request and closes.
    let connection =
        drain.watch(hyper::server::conn::http1::Builder::new().serve_connection(io, service));
    tokio::pin!(connection);
    let deadline = tokio::time::sleep_until(activity.deadline(limits.deadlines));
    tokio::pin!(deadline);
    let served = repoll::Repoll::new(std::future::poll_fn(|cx| {
        if let Poll::Ready(served) = connection.as_mut().poll(cx) {
            return Poll::Ready(Some(served));
        }
        // Whatever moves the deadline happened inside the poll just made
        // (`activity`'s module doc), so it is read here rather than each
        // change waking this task: a task woken inside its own poll is
        // rescheduled through tokio's yield path, which rouses an idle
        // worker for nothing, on every request.
        let due = activity.deadline(limits.deadlines);
        if due != deadline.deadline() {
            deadline.as_mut().reset(due);
        }
        if deadline.as_mut().poll(cx).is_ready() {
            // Idle, too slow sending a head (nothing in progress, so
            // closing loses nothing), or too slow taking an answer (which
            // is cut: the client learns it from the connection closing
            // before the answer's end).
            if activity.in_flight() {
                metrics::counter!("abstore_answers_cut_total").increment(1);
            }
            return Poll::Ready(None);
        }
        Poll::Pending
    }))
    .await;
    if let Some(Err(err)) = served {
        tracing::debug!(error = %err, "connection ended with an error");
    }
}

#[cfg(test)]
mod tests {
    use super::AddressKey;

    #[test]
    fn clients_are_counted_by_ipv4_address_or_ipv6_slash_64() {
        let key = |s: &str| AddressKey::of(s.parse().unwrap());
        assert_ne!(key("10.0.0.1"), key("10.0.0.2"));
        assert_eq!(key("::ffff:10.0.0.1"), key("10.0.0.1"));
        assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff::9"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        assert_ne!(key("::1"), key("0.0.0.1"));
    }
}
