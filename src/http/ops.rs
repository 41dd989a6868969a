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
