//! What the server answers while it starts: from the moment its port is
//! bound until its store is open and migrated (which, on PostgreSQL, may
//! mean waiting for another replica's migration: issue 53), so a load
//! balancer or an orchestrator sees a process that is alive, not ready,
//! and why.
//!
//! - `GET /health`: the protocol's identity answer, as when serving (the
//!   process is up; a liveness probe must not kill a replica that waits
//!   for a migration).
//! - `GET /readyz`: `503` with `{"ready": false, "starting": {"phase",
//!   "detail"}, …}`, the phase a stable name and the detail the start's
//!   own words (what it waits for, the migration lock's holder).
//! - every other request: `503` `internal`, `Retry-After: 1`, naming the
//!   phase. Nothing is read or written: the schema may be half-migrated.
//!
//! The connections it served are closed once the server is ready (the
//! starting server drains like a shutdown, `App::build`), so no client
//! keeps talking to it.

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse as _, Response};
use axum::routing::get;
use serde_json::json;

use super::error::ApiError;
use super::response::json;
use crate::store::Progress;

/// What the starting server knows: how far the start got, and the
/// identity `/health` reports.
#[derive(Clone)]
pub struct Starting {
    pub progress: Progress,
    /// The primary client identity's Autobuild version and protocol.
    pub identity: (String, String),
    /// Cancelled on SIGTERM/SIGINT (`/readyz`'s `shuttingDown`).
    pub shutdown: tokio_util::sync::CancellationToken,
}

/// The starting server's whole HTTP service.
pub fn starting_router(starting: Starting) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/readyz", get(readyz))
        .fallback(refuse)
        .with_state(starting)
}

async fn health(State(starting): State<Starting>) -> Response {
    let (version, protocol) = &starting.identity;
    super::health::identity(version, protocol)
}

async fn readyz(State(starting): State<Starting>) -> Response {
    let phase = starting.progress.phase();
    json(
        StatusCode::SERVICE_UNAVAILABLE,
        &json!({
            "ready": false,
            "starting": { "phase": phase.code(), "detail": phase.to_string() },
            "checks": { "database": "starting", "blobs": "not checked" },
            "shuttingDown": starting.shutdown.is_cancelled(),
        }),
    )
}

async fn refuse(State(starting): State<Starting>) -> Response {
    ApiError::Starting(starting.progress.phase().to_string()).into_response()
}
