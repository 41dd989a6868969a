//! The live growth of a timeline: `GET /console/live/{family}/{id}?after=N`
//! is one held read (`crate::held`, the protocol's own `wait`): it answers
//! as soon as an event past `N` exists, or empty after the wait. The page's
//! script keeps one such read open at a time, so an open page costs one
//! waiting request, never a polling storm. The answer is JSON holding the
//! new rows drawn by the same template as the page's (escaped there). It
//! uses the cookie session; a browser has no bearer token.

use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::json;

use super::pages::build::{EventsQuery, parse_events, rows};
use super::viewer::{self, Sight};
use crate::http::SharedState;
use crate::protocol::{ResourceKind, ResourceRef};

/// The longest a live read waits (the server's `--max-wait-seconds` may
/// lower it): a proxy's idle timeout is rarely shorter.
const WAIT: Duration = Duration::from_secs(25);

/// `GET /console/live/{family}/{id}`.
pub async fn events(
    State(state): State<SharedState>,
    headers: HeaderMap,
    Path((family, id)): Path<(String, String)>,
    Query(query): Query<EventsQuery>,
) -> Response {
    let answer = |status: StatusCode, body: serde_json::Value| {
        super::headers::secured(crate::http::json(status, &body))
    };
    let kind = match family.as_str() {
        "builds" => ResourceKind::Build,
        "sessions" => ResourceKind::Session,
        "repos" => ResourceKind::Repo,
        _ => return answer(StatusCode::NOT_FOUND, json!({"error": "not found"})),
    };
    let Some(console) = state.console.clone() else {
        return answer(StatusCode::NOT_FOUND, json!({"error": "not found"}));
    };
    let Ok(viewer) = viewer::resolve(&state, &console, &headers) else {
        return answer(StatusCode::UNAUTHORIZED, json!({"error": "sign in"}));
    };
    let sight = match kind {
        ResourceKind::Build => Sight::Build(&id),
        ResourceKind::Session => Sight::Session(&id),
        _ => Sight::Repo(&id),
    };
    if !viewer.may(sight) {
        return answer(StatusCode::NOT_FOUND, json!({"error": "not found"}));
    }
    let resource = ResourceRef::new(kind, &id);
    let wait = WAIT.min(state.limits.max_wait);
    match state.held.events(&resource, query.after(), wait).await {
        Ok(envelopes) => {
            let more = envelopes.len() as i64 >= crate::held::PROBE_ROWS;
            let events = parse_events(&envelopes);
            let html = rows(&events).into_string();
            let last = events.last().map_or(query.after(), |e| e.seq);
            answer(
                StatusCode::OK,
                json!({"html": html, "last": last, "more": more}),
            )
        }
        Err(crate::store::StoreError::NotFound(_)) => {
            answer(StatusCode::NOT_FOUND, json!({"error": "not found"}))
        }
        Err(err) => {
            tracing::warn!(error = %err, "console: live read failed");
            answer(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"error": "unavailable"}),
            )
        }
    }
}
