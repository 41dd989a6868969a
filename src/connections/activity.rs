//! What one connection is doing, for its idle and header-read deadlines:
//! whether a request is in progress, when the last one finished, and when
//! the bytes of the next request head started to arrive.
//!
//! hyper 1.x has a single header-read timer (`header_read_timeout`) that
//! starts when it begins reading a head, which on a keep-alive connection is
//! as soon as the last answer ends: it also runs while the connection waits
//! for its next request, so it cannot give the two bounds separately
//! (checked against hyper 1.12; `tests/it/connections.rs`,
//! `an_idle_keep_alive_connection_outlives_the_header_read_timeout`, fails
//! with it). This does, from the connection's own reads and requests. Everything here happens on the connection's task, inside its
//! poll of hyper's connection (hyper polls the service future and drops
//! the answer's body there), so relaxed atomics are enough, and the
//! connection's watch reads the deadline after each such poll instead of
//! being woken for each change (`super::serve_connection`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use tokio::time::Instant;

/// Marks "no request head has started since the last response".
const NONE: u64 = u64::MAX;

pub struct Activity {
    epoch: Instant,
    in_flight: AtomicU32,
    /// Milliseconds since `epoch` when the request in progress began.
    request_started: AtomicU64,
    /// Milliseconds since `epoch` since when the socket has refused the
    /// answer's bytes (the client is not reading), or [`NONE`].
    write_blocked: AtomicU64,
    /// Milliseconds since `epoch` when the first byte of the next head came.
    head_started: AtomicU64,
    /// Milliseconds since `epoch` when the last request finished (or the
    /// connection opened).
    last_finished: AtomicU64,
}

/// The per-connection bounds.
#[derive(Clone, Copy, Debug)]
pub struct Deadlines {
    /// From a request head's first byte to its end.
    pub header_read: Duration,
    /// A connection with no request in progress and no bytes arriving.
    pub idle: Duration,
    /// How long the socket may refuse an answer's bytes (its client not
    /// reading) before the connection is closed.
    pub answer_stall: Duration,
    /// From a request's head to its answer's last byte, whatever the client
    /// does: longer than the request timeout, so it only ever cuts an
    /// answer its client takes too slowly.
    pub answer_deadline: Duration,
}

impl Activity {
    pub fn new() -> Arc<Activity> {
        Arc::new(Activity {
            epoch: Instant::now(),
            in_flight: AtomicU32::new(0),
            // A new connection's first request head is under way from the
            // moment it opens: a client that connects and sends nothing is
            // closed after the header-read bound, not kept for the idle one
            // (issue 33: a few hundred silent connections a second would
            // otherwise hold the connection cap).
            head_started: AtomicU64::new(0),
            request_started: AtomicU64::new(0),
            write_blocked: AtomicU64::new(NONE),
            last_finished: AtomicU64::new(0),
        })
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(NONE - 1)
    }

    fn at(&self, ms: u64) -> Instant {
        self.epoch + Duration::from_millis(ms)
    }

    pub fn in_flight(&self) -> bool {
        self.in_flight.load(Relaxed) > 0
    }

    /// Bytes arrived: between requests they start the header-read clock.
    pub fn on_read(&self) {
        if !self.in_flight() && self.head_started.load(Relaxed) == NONE {
            self.head_started.store(self.now_ms(), Relaxed);
        }
    }

    /// A request head was parsed and handed to the service.
    pub fn begin(self: &Arc<Self>) -> RequestGuard {
        self.in_flight.fetch_add(1, Relaxed);
        // The request began when its head began to arrive.
        let started = match self.head_started.swap(NONE, Relaxed) {
            NONE => self.now_ms(),
            started => started,
        };
        self.request_started.store(started, Relaxed);
        RequestGuard(self.clone())
    }

    /// The socket refused bytes of an answer: the stall clock starts (once).
    pub fn on_write_blocked(&self) {
        if self.write_blocked.load(Relaxed) == NONE {
            self.write_blocked.store(self.now_ms(), Relaxed);
        }
    }

    /// The socket took bytes: no stall.
    pub fn on_write(&self) {
        if self.write_blocked.load(Relaxed) != NONE {
            self.write_blocked.store(NONE, Relaxed);
        }
    }

    /// When the connection is due to close if nothing changes: while a
    /// request is in progress, at its answer's deadline or once its client
    /// has refused the answer's bytes for the stall bound; between
    /// requests, at the idle or header-read bound.
    pub fn deadline(&self, bounds: Deadlines) -> Instant {
        if self.in_flight() {
            let whole = self.at(self.request_started.load(Relaxed)) + bounds.answer_deadline;
            return match self.write_blocked.load(Relaxed) {
                NONE => whole,
                since => whole.min(self.at(since) + bounds.answer_stall),
            };
        }
        match self.head_started.load(Relaxed) {
            NONE => self.at(self.last_finished.load(Relaxed)) + bounds.idle,
            started => self.at(started) + bounds.header_read,
        }
    }
}

/// A request in progress; dropped when its response body has been sent (or
/// the request was abandoned), which restarts the idle clock.
pub struct RequestGuard(Arc<Activity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let activity = &self.0;
        activity.in_flight.fetch_sub(1, Relaxed);
        activity.write_blocked.store(NONE, Relaxed);
        activity.last_finished.store(activity.now_ms(), Relaxed);
    }
}

/// A response body that holds its request's [`RequestGuard`] until the
/// body is done, so a long download is not mistaken for an idle connection.
pub struct GuardedBody {
    pub inner: axum::body::Body,
    pub guard: Option<RequestGuard>,
}

impl http_body::Body for GuardedBody {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, std::task::Poll::Ready(None)) {
            self.guard = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
