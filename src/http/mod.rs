//! The HTTP face: one router per resource family merged here, the identity
//! check in front of every machine route, and the JSON response helpers.
//!
//! Request order (spec sections 1, 7, 9): identity headers (409) → auth
//! (401/403) → resource lookup (404) → body (400/413) → catalog (422)
//! → one store transaction. Autobuild's hosted ticket operations
//! (`tickets`) follow the same order, their operation name standing for the
//! lookup.

mod accept;
mod auth;
mod builds;
mod compression;
mod error;
mod extract;
mod health;
mod host;
mod identity;
mod middleware;
mod path;
mod readiness;
mod repos;
mod request_id;
mod resources;
mod rows;
mod sealed;
mod sessions;
mod streams;
mod ticket_assets;
mod tickets;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use tokio_util::sync::CancellationToken;

pub use error::{ApiError, ApiResult};
pub use extract::JsonBudget;
pub use sealed::SealedChunks;

use crate::blobs::Blobs;
use crate::clock::TestClock;
use crate::held::HeldReads;
use crate::store::Store;

pub use host::{AllowedHost, HostCheck};
pub use identity::{Client, Clients, SUPPORTED_PROTOCOLS, min_protocol};

/// Configured bounds (docs/decisions.md, 10); each is a flag.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest decoded artifact, per artifact (413 above).
    pub max_artifact_bytes: usize,
    /// Largest request body of the routes that carry artifacts (put,
    /// deposit) and of the ticket-asset routes (413 above).
    pub max_body_bytes: usize,
    /// Largest request body of every other route (413 above).
    pub max_json_body_bytes: usize,
    /// Largest serialised stream batch (413 above).
    pub max_stream_batch_bytes: usize,
    /// Ceiling a `wait` is clamped to.
    pub max_wait: Duration,
    /// Longest a request may run (always above `max_wait`).
    pub request_timeout: Duration,
    /// Requests served at once; more wait for a permit.
    pub max_concurrent_requests: usize,
    /// Answers of at least this many bytes are compressed when the client
    /// accepts it; `None`: never.
    pub compress_min_bytes: Option<u16>,
}

impl Limits {
    /// The ticket-asset limits this server advertises and enforces: the
    /// request-body limit is the deployment ceiling (`maxRequestBytes`) on
    /// every ticket-asset request and answer, which lowers `maxBytes` by the
    /// protocol's formula (docs/protocol-versions.md, "Ticket assets").
    pub fn ticket_assets(&self) -> crate::protocol::ticket_assets::Limits {
        crate::protocol::ticket_assets::Limits::effective(Some(self.max_body_bytes as u64))
    }
}

/// Who may call: the identity check's accepted identities and the token check.
pub struct Access {
    /// The accepted client identities, each with its catalogs.
    pub clients: Clients,
    /// The token secret; `None` is open mode.
    pub secret: Option<crate::secret::Secret>,
    /// The one clock: token expiry is judged by it too.
    pub clock: Arc<dyn crate::clock::Clock>,
    /// `--max-token-lifetime`: how far beyond now a token's `exp` may lie.
    pub max_token_lifetime: crate::auth::MaxLifetime,
    /// The revoked tokens (authenticated mode; `None` in open mode).
    pub revocations: Option<Arc<crate::revocation::Revocations>>,
    /// Open mode on a loopback address: the `Host` names it answers
    /// (DNS rebinding, `host`); `None`: any.
    pub hosts: Option<HostCheck>,
}

/// Everything a request handler reads, shared by all of them; built once,
/// by [`App::build`](crate::app::App::build).
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub blobs: Blobs,
    pub access: Access,
    pub limits: Limits,
    pub held: Arc<HeldReads>,
    /// Compressed sealed history chunks (whole-history reads in zstd);
    /// `None` when compression or the cache is off.
    pub sealed: Option<Arc<SealedChunks>>,
    /// Turns for closing streams (`--max-concurrent-stream-closes`): each
    /// close holds the document it assembles in memory.
    pub stream_closes: tokio::sync::Semaphore,
    /// The memory all parsed request bodies may hold at once.
    pub json_budget: extract::JsonBudget,
    /// The settable clock behind `/_test/clock`; only with `--test-clock`.
    pub test_clock: Option<Arc<TestClock>>,
    /// The hosted tickets' lifecycle, bounds and response ceiling.
    pub tickets: Arc<crate::tickets::TicketSettings>,
    /// The server's one shutdown token: cancelled, held reads answer at once
    /// and background tasks stop.
    pub shutdown: CancellationToken,
}

pub type SharedState = Arc<AppState>;

impl AppState {
    /// The JSON body of a route without artifacts (`--max-json-body-bytes`).
    pub async fn json_body(&self, body: axum::body::Body) -> ApiResult<extract::ParsedJson> {
        extract::json_body(body, self.limits.max_json_body_bytes, &self.json_budget).await
    }

    /// The JSON body of a route carrying artifacts (`--max-body-bytes`).
    pub async fn artifact_body(&self, body: axum::body::Body) -> ApiResult<extract::ParsedJson> {
        extract::json_body(body, self.limits.max_body_bytes, &self.json_budget).await
    }
}

pub fn router(state: SharedState) -> Router {
    let routes = Router::new()
        .merge(builds::router())
        .merge(repos::router())
        .merge(ticket_assets::router())
        .merge(tickets::router())
        .merge(sessions::router())
        .merge(streams::routes(crate::protocol::ResourceKind::Stream))
        .merge(health::router(state.test_clock.is_some()))
        .merge(readiness::router())
        .fallback(no_route)
        .method_not_allowed_fallback(no_route)
        .with_state(state.clone());
    let compress = state.limits.compress_min_bytes;
    let router = middleware::layer(routes, state);
    match compress {
        Some(min_bytes) => router.layer(compression::layer(min_bytes)),
        None => router,
    }
}

/// Unknown routes and unsupported methods are both `404 not-found`.
async fn no_route(method: Method, uri: Uri) -> ApiError {
    unknown_route(&method, &uri)
}

/// The unknown-route answer, also given to a client whose protocol predates
/// the route it reached ([`min_protocol`]).
fn unknown_route(method: &Method, uri: &Uri) -> ApiError {
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
