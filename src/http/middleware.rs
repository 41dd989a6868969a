//! The middleware around every route, as ONE layer so a request pays for
//! one boxed future instead of one (plus a cloned inner service) per
//! concern. In order, outermost first: the request id (kept from the
//! request or generated), a span carrying the id, method and matched route,
//! the panic catch (a panic answers the protocol's `500 internal` instead of
//! dropping the connection), the lingering drain of an unread body, the
//! concurrency permit and request timeout, then the host check of open mode
//! on loopback (403) before the route, whose own gate (`super::gate`) checks
//! identity (409), protocol and token (401/403). On the way out: one log line (with the acting scope, or
//! why authentication refused the request), the request metrics and the
//! `x-request-id` response header.

use std::convert::Infallible;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use std::sync::Arc;

use axum::Router;
use axum::extract::{MatchedPath, Request};
use axum::response::{IntoResponse as _, Response};
use axum::routing::Route;
use futures_util::FutureExt as _;
use tokio::time::Instant;
use tower::ServiceExt as _;
use tracing::Instrument as _;

use super::error::ApiError;
use super::request_id;
use super::state::SharedState;

/// Wrap every route of `router` (and its fallback) in [`Middleware`]. Per
/// route, not around the router, so the matched route is known when the
/// span opens; every route shares one set of [`Gates`].
pub fn layer(router: Router, state: SharedState) -> Router {
    let gates = Arc::new(Gates::new(state.limits.max_concurrent_requests));
    router.layer(MiddlewareLayer { state, gates })
}

/// The process's gates in front of the handlers.
struct Gates {
    /// Permits for `Limits::max_concurrent_requests`.
    requests: tokio::sync::Semaphore,
    /// Slots for lingering drains of refused requests' bodies.
    drains: tokio::sync::Semaphore,
}

impl Gates {
    fn new(max_concurrent_requests: usize) -> Gates {
        /// Lingering drains at once; each holds one frame (at most hyper's
        /// read buffer) at a time.
        const DRAINS: usize = 64;
        Gates {
            requests: tokio::sync::Semaphore::new(
                max_concurrent_requests.min(tokio::sync::Semaphore::MAX_PERMITS),
            ),
            drains: tokio::sync::Semaphore::new(DRAINS),
        }
    }
}

#[derive(Clone)]
struct MiddlewareLayer {
    state: SharedState,
    gates: Arc<Gates>,
}

impl tower::Layer<Route> for MiddlewareLayer {
    type Service = Middleware;

    fn layer(&self, route: Route) -> Middleware {
        Middleware {
            route,
            state: self.state.clone(),
            gates: self.gates.clone(),
        }
    }
}

/// One route behind the middleware.
#[derive(Clone)]
struct Middleware {
    route: Route,
    state: SharedState,
    gates: Arc<Gates>,
}

impl tower::Service<Request> for Middleware {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // A route is always ready; readiness is not reserved across calls.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { Ok(this.handle(request).await) })
    }
}

impl Middleware {
    /// Everything around the route, outermost first (see the module doc).
    async fn handle(self, request: Request) -> Response {
        let Middleware {
            route,
            state,
            gates,
        } = self;
        let started = Instant::now();
        let id = request_id::of(&request);
        let method = request.method().clone();
        // The matched route, never the raw path: ids stay out of logs' and
        // metrics' route labels.
        let matched = request.extensions().get::<MatchedPath>().cloned();
        let route_label = matched.as_ref().map_or("(unmatched)", MatchedPath::as_str);
        // `scope` and `refused` are filled by the auth check (`super::auth`).
        let span = tracing::info_span!(
            "request",
            request_id = %id.to_str().unwrap_or("-"),
            method = %method,
            route = %route_label,
            scope = tracing::field::Empty,
            refused = tracing::field::Empty,
        );
        let served = AssertUnwindSafe(drain_unread(&state, &gates, route, request))
            .catch_unwind()
            .instrument(span.clone())
            .await;
        let mut response = served.unwrap_or_else(|_panic| {
            span.in_scope(|| ApiError::Internal("handler panicked".into()).into_response())
        });
        let latency = started.elapsed();
        let status = response.status();
        span.in_scope(|| {
            tracing::info!(
                status = status.as_u16(),
                // Whole microseconds: `0.165`, not `0.16480999999999998`.
                latency_ms = latency.as_micros() as f64 / 1000.0,
                "request"
            );
        });
        crate::metrics::record_request(route_label, &method, status, latency);
        response.headers_mut().insert(request_id::X_REQUEST_ID, id);
        response
    }
}

/// The global bounds every request is under: a permit from the concurrency
/// limit (waiting for one when all are taken) and the request timeout, which
/// startup guarantees is longer than any held read.
async fn bounded(state: &SharedState, gates: &Gates, route: Route, request: Request) -> Response {
    let Ok(_permit) = gates.requests.acquire().await else {
        return ApiError::Internal("the concurrency limiter is closed".into()).into_response();
    };
    let limit = state.limits.request_timeout;
    match tokio::time::timeout(limit, checked(state, route, request)).await {
        Ok(response) => response,
        Err(_) => ApiError::Internal(format!(
            "request exceeded the {}-second request timeout",
            limit.as_secs()
        ))
        .into_response(),
    }
}

/// The host check (403, open mode on loopback only), then the route, whose
/// own gate (`super::gate`) checks identity and token.
async fn checked(state: &SharedState, route: Route, request: Request) -> Response {
    if let Some(hosts) = &state.access.hosts
        && let Err(refused) = hosts.admit(&request)
    {
        let reason = crate::auth::Failure::Host.label();
        tracing::Span::current().record("refused", tracing::field::display(reason));
        return refused.into_response();
    }
    match route.oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

/// Requests answered without reading their body to the end (a 401, 403, 404
/// or 409 comes before the body by the spec's order) would leave the client
/// still sending when the server closes: the kernel then resets the
/// connection and the client can lose the response. So the unread rest of
/// the body is drained first (a lingering close), and the response says
/// `Connection: close`, so keep-alive clients and proxy upstream pools do not
/// reuse the connection.
///
/// The drain reads and drops frames, never collects them: memory stays at
/// one frame per drain. It is bounded per request (the body limit and
/// [`LINGER`]) and across the process ([`Gates::drains`]): with every drain
/// slot taken, the connection closes without lingering.
async fn drain_unread(
    state: &SharedState,
    gates: &Gates,
    route: Route,
    request: Request,
) -> Response {
    use axum::http::header::{CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
    let headers = request.headers();
    let has_body = headers.contains_key(TRANSFER_ENCODING)
        || headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|n| n > 0);
    if !has_body {
        return bounded(state, gates, route, request).await;
    }
    let unread = std::sync::Arc::new(std::sync::Mutex::new(None));
    let (parts, body) = request.into_parts();
    let body = axum::body::Body::new(Tracked {
        inner: Some(body),
        finished: false,
        unread: unread.clone(),
    });
    let mut response = bounded(state, gates, route, Request::from_parts(parts, body)).await;
    let rest = unread
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .take();
    if let Some(rest) = rest {
        if let Ok(_slot) = gates.drains.try_acquire() {
            let _ = tokio::time::timeout(LINGER, discard(rest, state.limits.max_body_bytes)).await;
        }
        response
            .headers_mut()
            .insert(CONNECTION, axum::http::HeaderValue::from_static("close"));
    }
    response
}

/// Longest a refused request's body is drained before the connection closes.
const LINGER: Duration = Duration::from_secs(5);

/// Read `body` to its end or `limit` bytes, dropping every frame; errors
/// just end the drain (the connection closes anyway).
async fn discard(mut body: axum::body::Body, limit: usize) {
    use http_body_util::BodyExt as _;
    let mut seen = 0usize;
    while let Some(Ok(frame)) = body.frame().await {
        if let Some(data) = frame.data_ref() {
            seen = seen.saturating_add(data.len());
            if seen > limit {
                return;
            }
        }
    }
}

/// A request body that, when dropped before its end, hands what is left
/// back to [`drain_unread`] to drain.
struct Tracked {
    inner: Option<axum::body::Body>,
    finished: bool,
    unread: std::sync::Arc<std::sync::Mutex<Option<axum::body::Body>>>,
}

impl http_body::Body for Tracked {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let Some(inner) = self.inner.as_mut() else {
            return std::task::Poll::Ready(None);
        };
        let polled = std::pin::Pin::new(inner).poll_frame(cx);
        if matches!(polled, std::task::Poll::Ready(None)) {
            self.finished = true;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.finished
            || self
                .inner
                .as_ref()
                .is_none_or(http_body::Body::is_end_stream)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner
            .as_ref()
            .map(http_body::Body::size_hint)
            .unwrap_or_default()
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        let inner = self.inner.take();
        if let Some(inner) =
            inner.filter(|body| !self.finished && !http_body::Body::is_end_stream(body))
        {
            *self
                .unread
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(inner);
        }
    }
}
