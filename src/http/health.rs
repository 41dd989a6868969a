//! `GET /health` (spec section 11) and, only with `--test-clock`, the
//! harness clock route `POST /_test/clock` (docs/decisions.md, 11).

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::error::{ApiError, ApiResult};
use super::extract::json_body;
use super::response::json;
use super::state::SharedState;
use crate::clock::Clock as _;
use crate::protocol::time::{format_iso, parse_iso};

/// Always open; exactly `{"ok":true,"autobuildVersion":…,"protocolVersion":…}`
/// of the primary (first configured) client identity, whatever the request
/// sends: one identity gives exactly the spec's answer, and with several the
/// body keeps that shape (docs/operations.md, "Upgrading a running team").
pub(super) async fn health(State(state): State<SharedState>) -> Response {
    let primary = state.access.clients.primary();
    identity(&primary.version, primary.protocol.as_str())
}

/// The identity answer: also what a starting server gives
/// (`super::starting`), which knows its clients before its store.
pub(super) fn identity(autobuild_version: &str, protocol_version: &str) -> Response {
    /// A struct, not a `json!` map: the probe runs often.
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Health<'a> {
        ok: bool,
        autobuild_version: &'a str,
        protocol_version: &'a str,
    }
    json(
        StatusCode::OK,
        &Health {
            ok: true,
            autobuild_version,
            protocol_version,
        },
    )
}

fn clock_body(now: i64) -> Response {
    json(
        StatusCode::OK,
        &serde_json::json!({ "now": format_iso(now) }),
    )
}

pub(super) async fn read_clock(State(state): State<SharedState>) -> ApiResult<Response> {
    let clock = state
        .test_clock
        .as_ref()
        .ok_or_else(|| ApiError::NotFound("no route: GET /_test/clock".into()))?;
    Ok(clock_body(clock.now_ms()))
}

/// Set the frozen clock: `{"now": "<ISO>"}`.
pub(super) async fn set_clock(State(state): State<SharedState>, body: Body) -> ApiResult<Response> {
    let clock = state
        .test_clock
        .as_ref()
        .ok_or_else(|| ApiError::NotFound("no route: POST /_test/clock".into()))?;
    let body = json_body(body, 4096, &state.json_budget).await?;
    let now = body
        .get("now")
        .and_then(|v| v.as_str())
        .and_then(parse_iso)
        .ok_or_else(|| {
            ApiError::BadRequest(
                "invalid request body: \"now\" must be an ISO-8601 UTC time".into(),
            )
        })?;
    clock.set(now);
    tracing::info!(now = %format_iso(now), "test clock set");
    Ok(clock_body(now))
}
