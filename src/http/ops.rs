//! Operator plumbing around every route: request ids (kept from the
//! request or generated), one log line per request inside a span that
//! carries the id and the matched route, and panics answered as the
//! protocol's `500 internal` instead of a dropped connection.

use std::time::Duration;

use axum::Router;
use axum::extract::MatchedPath;
use axum::http::{Request, Response};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{
    MakeRequestUuid, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};
use tower_http::trace::TraceLayer;
use tracing::Span;

use super::{ApiError, SharedState};

/// Wrap `router` in the request-id, trace and panic layers (outermost first:
/// the id is set before the span opens, and propagated onto every response).
pub fn layer(router: Router) -> Router {
    let trace = TraceLayer::new_for_http()
        .make_span_with(|request: &Request<_>| {
            let id = request.extensions().get::<RequestId>().and_then(|id| id.header_value().to_str().ok()).unwrap_or("-");
            // The matched route, never the raw path: ids stay out of labels.
            let route = request.extensions().get::<MatchedPath>().map_or("(unmatched)", MatchedPath::as_str);
            tracing::info_span!("request", request_id = %id, method = %request.method(), route = %route)
        })
        .on_request(())
        .on_response(|response: &Response<_>, latency: Duration, _span: &Span| {
            tracing::info!(status = response.status().as_u16(), latency_ms = latency.as_secs_f64() * 1000.0, "request");
        })
        .on_failure(());
    router
        .layer(CatchPanicLayer::custom(|_panic| {
            axum::response::IntoResponse::into_response(ApiError::Internal(
                "handler panicked".into(),
            ))
        }))
        .layer(trace)
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
}

/// The global bounds every request is under: a permit from the concurrency
/// limit (waiting for one when all are taken) and the request timeout, which
/// startup guarantees is longer than any held read.
pub async fn bound(
    axum::extract::State(state): axum::extract::State<SharedState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let Ok(_permit) = state.in_flight.acquire().await else {
        return ApiError::Internal("the concurrency limiter is closed".into()).into_response();
    };
    let limit = state.limits.request_timeout;
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::Internal(format!(
            "request exceeded the {}-second request timeout",
            limit.as_secs()
        ))
        .into_response(),
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
/// [`LINGER`]) and across the process ([`Drains`]): with every drain slot
/// taken, the connection closes without lingering.
pub async fn close_unread(
    axum::extract::State(state): axum::extract::State<SharedState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::header::{CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
    let headers = request.headers();
    let has_body = headers.contains_key(TRANSFER_ENCODING)
        || headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|n| n > 0);
    if !has_body {
        return next.run(request).await;
    }
    let unread = std::sync::Arc::new(std::sync::Mutex::new(None));
    let (parts, body) = request.into_parts();
    let body = axum::body::Body::new(Tracked {
        inner: Some(body),
        finished: false,
        unread: unread.clone(),
    });
    let mut response = next
        .run(axum::extract::Request::from_parts(parts, body))
        .await;
    let rest = unread
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .take();
    if let Some(rest) = rest {
        if let Ok(_slot) = state.drains.0.try_acquire() {
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

/// Lingering drains allowed at once across all connections.
pub struct Drains(tokio::sync::Semaphore);

impl Default for Drains {
    fn default() -> Drains {
        /// Each holds one frame (at most hyper's read buffer) at a time.
        const AT_ONCE: usize = 64;
        Drains(tokio::sync::Semaphore::new(AT_ONCE))
    }
}

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
/// back to [`close_unread`] to drain.
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
