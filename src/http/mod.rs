//! The HTTP face: one router per resource family merged here, the identity
//! check in front of every machine route, and the JSON response helpers.
//!
//! Request order (spec sections 1, 7, 9): identity headers (409) → auth
//! (401/403) → resource lookup (404) → body (400/413) → catalog (422)
//! → one store transaction.

mod auth;
mod builds;
mod compression;
mod error;
mod extract;
mod flights;
mod health;
mod hold;
mod identity;
mod ops;
mod path;
mod readiness;
mod repos;
mod request_id;
mod resources;
mod rows;
mod sessions;
mod streams;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use tokio_util::sync::CancellationToken;

pub use error::{ApiError, ApiResult};

use crate::blobs::Blobs;
use crate::clock::TestClock;
use crate::notify::Notifier;
use crate::store::Store;

/// The protocol version this server speaks (spec section 1).
pub const PROTOCOL_VERSION: &str = "2";

/// Configured bounds (docs/decisions.md, 10); each is a flag.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest decoded artifact, per artifact (413 above).
    pub max_artifact_bytes: usize,
    /// Largest request body of any route (413 above).
    pub max_body_bytes: usize,
    /// Largest serialised stream batch (413 above).
    pub max_stream_batch_bytes: usize,
    /// Ceiling a `wait` is clamped to.
    pub max_wait: Duration,
    /// Held reads allowed at once in this process; beyond it reads answer at once.
    pub max_held_reads: usize,
    /// Longest a request may run (always above `max_wait`).
    pub request_timeout: Duration,
    /// Requests served at once; more wait for a permit.
    pub max_concurrent_requests: usize,
    /// Answers of at least this many bytes are compressed when the client
    /// accepts it; `None`: never.
    pub compress_min_bytes: Option<u16>,
}

/// Counts held reads in flight against the cap.
#[derive(Default)]
pub struct HeldReads(std::sync::atomic::AtomicUsize);

/// One held read's place under the cap; released on drop.
pub struct HeldSlot<'a>(&'a HeldReads);

impl HeldReads {
    /// Take a place if fewer than `cap` are taken.
    pub fn acquire(&self, cap: usize) -> Option<HeldSlot<'_>> {
        use std::sync::atomic::Ordering::SeqCst;
        self.0
            .fetch_update(SeqCst, SeqCst, |n| (n < cap).then_some(n + 1))
            .ok()
            .map(|_| HeldSlot(self))
    }

    pub fn in_flight(&self) -> usize {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for HeldSlot<'_> {
    fn drop(&mut self) {
        self.0.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// What the shared state is built from; limiters and query flights are
/// derived from it by [`AppState::new`].
pub struct StateParts {
    pub store: Arc<dyn Store>,
    /// The one clock: token expiry is judged by it too.
    pub clock: Arc<dyn crate::clock::Clock>,
    /// The token secret; `None` is open mode.
    pub secret: Option<crate::secret::Secret>,
    pub blobs: Blobs,
    pub catalogs: abstore_catalog::Catalogs,
    pub notifier: Arc<Notifier>,
    pub test_clock: Option<Arc<TestClock>>,
    pub limits: Limits,
    /// The Autobuild package version clients must send.
    pub autobuild_version: String,
    /// The database pool's size: held reads' re-queries take at most half.
    pub db_pool_size: usize,
}

/// Everything a request handler reads, shared by all of them.
pub struct AppState {
    store: Arc<dyn Store>,
    clock: Arc<dyn crate::clock::Clock>,
    secret: Option<crate::secret::Secret>,
    blobs: Blobs,
    catalogs: abstore_catalog::Catalogs,
    notifier: Arc<Notifier>,
    test_clock: Option<Arc<TestClock>>,
    limits: Limits,
    autobuild_version: String,
    /// The server's one shutdown token: cancelled, held reads answer at once
    /// and background tasks stop.
    shutdown: CancellationToken,
    held_reads: HeldReads,
    /// Slots for lingering drains of refused requests' bodies.
    drains: ops::Drains,
    /// Permits for `Limits::max_concurrent_requests`.
    in_flight: tokio::sync::Semaphore,
    /// Held reads' queries after subscribing run at most this many at once
    /// (half the database pool), so a wake storm cannot starve writes.
    held_requeries: tokio::sync::Semaphore,
    /// Shared re-queries of woken event reads and chunk reads.
    event_flights: flights::Flights<Vec<String>>,
    chunk_flights: flights::Flights<(crate::store::StreamRecord, Vec<String>)>,
}

impl AppState {
    /// The state of a server that stops when `shutdown` is cancelled.
    pub fn new(parts: StateParts, shutdown: CancellationToken) -> SharedState {
        let StateParts {
            store,
            clock,
            secret,
            blobs,
            catalogs,
            notifier,
            test_clock,
            limits,
            autobuild_version,
            db_pool_size,
        } = parts;
        let in_flight = tokio::sync::Semaphore::new(
            limits
                .max_concurrent_requests
                .min(tokio::sync::Semaphore::MAX_PERMITS),
        );
        Arc::new(AppState {
            store,
            clock,
            secret,
            blobs,
            catalogs,
            notifier,
            test_clock,
            limits,
            autobuild_version,
            shutdown,
            held_reads: HeldReads::default(),
            drains: ops::Drains::default(),
            in_flight,
            held_requeries: tokio::sync::Semaphore::new((db_pool_size / 2).max(1)),
            event_flights: flights::Flights::default(),
            chunk_flights: flights::Flights::default(),
        })
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn notifier(&self) -> &Notifier {
        &self.notifier
    }

    /// The token secrets in force (`None` in open mode).
    pub fn secret(&self) -> Option<&crate::secret::Secret> {
        self.secret.as_ref()
    }

    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// Held reads in flight now, for the metrics gauge.
    pub fn held_reads_in_flight(&self) -> usize {
        self.held_reads.in_flight()
    }
}

pub type SharedState = Arc<AppState>;

pub fn router(state: SharedState) -> Router {
    let routes = Router::new()
        .merge(builds::router())
        .merge(repos::router())
        .merge(sessions::router())
        .merge(streams::routes(crate::protocol::ResourceKind::Stream))
        .merge(health::router(state.test_clock.is_some()))
        .merge(readiness::router())
        .fallback(no_route)
        .method_not_allowed_fallback(no_route)
        .with_state(state.clone());
    let compress = state.limits.compress_min_bytes;
    let router = ops::layer(routes, state);
    match compress {
        Some(min_bytes) => router.layer(compression::layer(min_bytes)),
        None => router,
    }
}

/// Unknown routes and unsupported methods are both `404 not-found`.
async fn no_route(method: Method, uri: Uri) -> ApiError {
    ApiError::NotFound(format!("no route: {method} {}", uri.path()))
}

/// A response whose body is already JSON text.
pub fn json_response(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A JSON response from bytes already serialised.
pub fn json_response_bytes(status: StatusCode, body: bytes::Bytes) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// Serialise `value` as a JSON response.
pub fn json(status: StatusCode, value: &impl serde::Serialize) -> Response {
    // Straight into a byte buffer, not through `Display`'s formatter; a
    // value that cannot be JSON (none of ours) is an internal error.
    match serde_json::to_string(value) {
        Ok(body) => json_response(status, body),
        Err(err) => ApiError::Internal(format!("serialising a response: {err}")).into_response(),
    }
}
