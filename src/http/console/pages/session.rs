//! An operator session (spec section 8): its events and streams, drawn as a
//! build's page is (`super::build::render`), without a lease.

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse as _, Response};

use super::build::{EventsQuery, render};
use crate::http::SharedState;
use crate::protocol::{ResourceKind, ResourceRef};

/// `GET /console/sessions/{id}`.
pub async fn session(
    State(state): State<SharedState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(query): Query<EventsQuery>,
) -> Response {
    render(
        &state,
        &headers,
        ResourceRef::new(ResourceKind::Session, &id),
        query.after(),
    )
    .await
    .unwrap_or_else(|refused| refused.into_response())
}
