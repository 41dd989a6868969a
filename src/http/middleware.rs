//! The middleware around every route, as ONE layer so a request pays for
//! one boxed future instead of one (plus a cloned inner service) per
//! concern. In order, outermost first: the request id (kept from the
//! request or generated), a span carrying the id, method and matched route,
//! the host check of open mode on loopback (403), the lingering drain of an
//! unread body, the concurrency permit and request timeout, then the panic
//! catch (a panic answers the protocol's `500 internal` instead of dropping
//! the connection) around the route, whose own gate (`super::gate`) checks
//! identity (409), protocol and token (401/403). On the way out: one log
//! line (with the acting scope, or why authentication refused the request),
//! the request metrics and the `x-request-id` response header.

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
use axum::routing::future::RouteFuture;
use futures_util::FutureExt as _;
use tokio::time::Instant;
use tower::Service as _;
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
        Box::pin(self.start(request))
    }
}

impl Middleware {
    /// Everything around the route, outermost first (see the module doc).
    ///
    /// The request is taken apart here, before the returned future first
    /// waits: the future keeps only the route's future and what the log
    /// line needs. A held read waits for up to `--max-wait` seconds, and
    /// every byte of its future is held that long by each of thousands of
    /// waiting clients; an async fn that took the request would keep a
    /// copy of it (~240 bytes) per nesting level for the whole wait.
    fn start(
        &mut self,
        request: Request,
    ) -> impl Future<Output = Result<Response, Infallible>> + use<> {
        let started = Instant::now();
        let id = request_id::of(&request);
        let method = request.method().clone();
        // The matched route, never the raw path: ids stay out of logs' and
        // metrics' route labels.
        let matched = request.extensions().get::<MatchedPath>().cloned();
        // `scope` and `refused` are filled by the auth check (`super::auth`).
        let span = tracing::info_span!(
            "request",
            request_id = %id.to_str().unwrap_or("-"),
            method = %method,
            route = %route_label(&matched),
            scope = tracing::field::Empty,
            refused = tracing::field::Empty,
        );
        let state = self.state.clone();
        let gates = self.gates.clone();
        let host_refused = span.in_scope(|| host_refusal(&state, &request));
        let (request, unread) = track_unread(request);
        // Calling a route only builds its future; nothing runs until the
        // permit below is held. Boxed, so moving it into the bounds below
        // moves a pointer: a moved future's old place stays reserved in the
        // future it was moved out of.
        let routed = match host_refused {
            Some(refused) => Err(refused),
            None => Ok(Box::pin(self.route.call(request))),
        };
        async move {
            let mut response = match routed {
                Err(refused) => refused,
                Ok(route) => {
                    bounded(&state, &gates, route)
                        .instrument(span.clone())
                        .await
                }
            };
            if let Some(unread) = unread {
                linger(&state, &gates, &unread, &mut response).await;
            }
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
            crate::metrics::record_request(route_label(&matched), &method, status, latency);
            response.headers_mut().insert(request_id::X_REQUEST_ID, id);
            Ok(response)
        }
    }
}

/// The label of a request's route in logs and metrics: its template.
fn route_label(matched: &Option<MatchedPath>) -> &str {
    matched.as_ref().map_or("(unmatched)", MatchedPath::as_str)
}

/// The host check of open mode on loopback: the `403` for a host that is
/// not allowed, recorded on the request's span.
fn host_refusal(state: &SharedState, request: &Request) -> Option<Response> {
    let hosts = state.access.hosts.as_ref()?;
    let refused = hosts.admit(request.uri(), request.headers()).err()?;
    crate::metrics::record_auth_failure(crate::auth::Failure::Host);
    let reason = crate::auth::Failure::Host.label();
    tracing::Span::current().record("refused", tracing::field::display(reason));
    Some(ApiError::Forbidden(refused.0).into_response())
}

/// The global bounds every request is under: a permit from the concurrency
/// limit (waiting for one when all are taken) and the request timeout, which
/// startup guarantees is longer than any held read; and the panic catch,
/// which answers the protocol's `500 internal` instead of dropping the
/// connection.
async fn bounded(
    state: &SharedState,
    gates: &Gates,
    route: Pin<Box<RouteFuture<Infallible>>>,
) -> Response {
    let Ok(_permit) = gates.requests.acquire().await else {
        return ApiError::Internal("the concurrency limiter is closed".into()).into_response();
    };
    let limit = state.limits.request_timeout;
    match tokio::time::timeout(limit, AssertUnwindSafe(route).catch_unwind()).await {
        Ok(Ok(Ok(response))) => response,
        Ok(Ok(Err(never))) => match never {},
        Ok(Err(_panic)) => ApiError::Internal("handler panicked".into()).into_response(),
        Err(_) => ApiError::Internal(format!(
            "request exceeded the {}-second request timeout",
            limit.as_secs()
        ))
        .into_response(),
    }
}

/// Where a tracked body leaves what its handler did not read.
type Unread = Arc<std::sync::Mutex<Option<axum::body::Body>>>;

/// A request with a body gets it wrapped in [`Tracked`], which hands back
/// what the handler leaves unread for [`linger`] to drain.
fn track_unread(request: Request) -> (Request, Option<Unread>) {
    use axum::http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
    let headers = request.headers();
    let has_body = headers.contains_key(TRANSFER_ENCODING)
        || headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|n| n > 0);
    if !has_body {
        return (request, None);
    }
    let unread = Unread::default();
    let (parts, body) = request.into_parts();
    let body = axum::body::Body::new(Tracked {
        inner: Some(body),
        finished: false,
        unread: unread.clone(),
    });
    (Request::from_parts(parts, body), Some(unread))
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
async fn linger(state: &SharedState, gates: &Gates, unread: &Unread, response: &mut Response) {
    use axum::http::header::CONNECTION;
    let rest = unread
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .take();
    let Some(rest) = rest else {
        return;
    };
    if let Ok(_slot) = gates.drains.try_acquire() {
        let _ = tokio::time::timeout(LINGER, discard(rest, state.limits.max_body_bytes)).await;
    }
    response
        .headers_mut()
        .insert(CONNECTION, axum::http::HeaderValue::from_static("close"));
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
/// back to [`linger`] to drain.
struct Tracked {
    inner: Option<axum::body::Body>,
    finished: bool,
    unread: Unread,
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
