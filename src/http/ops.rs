//! Operator plumbing around every route: request ids (kept from the
//! request or generated), one log line per request inside a span that
//! carries the id and the matched route, and panics answered as the
//! protocol's `500 internal` instead of a dropped connection.

use std::time::Duration;

use axum::Router;
use axum::extract::MatchedPath;
use axum::http::{Request, Response};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, RequestId, SetRequestIdLayer};
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
            axum::response::IntoResponse::into_response(ApiError::Internal("handler panicked".into()))
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
        Err(_) => ApiError::Internal(format!("request exceeded the {}-second request timeout", limit.as_secs())).into_response(),
    }
}

/// Requests answered without reading their body to the end (a 401, 403, 404
/// or 409 comes before the body by the spec's order; a 413 stops reading)
/// leave bytes on the connection, so hyper closes it after the response.
/// Say so with `Connection: close`, or keep-alive clients and proxies (nginx
/// upstream pools) reuse a connection that is about to go away.
pub async fn close_unread(request: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    use axum::http::header::{CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
    let headers = request.headers();
    let has_body = headers.contains_key(TRANSFER_ENCODING)
        || headers.get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok()).is_some_and(|n| n > 0);
    if !has_body {
        return next.run(request).await;
    }
    let finished = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (parts, body) = request.into_parts();
    let body = axum::body::Body::new(Tracked { inner: body, finished: finished.clone() });
    let mut response = next.run(axum::extract::Request::from_parts(parts, body)).await;
    if !finished.load(std::sync::atomic::Ordering::SeqCst) {
        response.headers_mut().insert(CONNECTION, axum::http::HeaderValue::from_static("close"));
    }
    response
}

/// A request body that records whether it was read to its end.
struct Tracked {
    inner: axum::body::Body,
    finished: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl http_body::Body for Tracked {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, std::task::Poll::Ready(None)) {
            self.finished.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        let end = self.inner.is_end_stream();
        if end {
            self.finished.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        end
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
