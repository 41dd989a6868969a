//! The lease family (spec section 10), for builds and repositories
//! (sessions have none): claim, heartbeat and release (`store`'s
//! `leases`, which holds the truth table).

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::error::ApiResult;
use super::lookup::lookup_on_failure;
use super::path::ResourcePath;
use super::response::json;
use super::state::SharedState;
use crate::protocol::{ResourceRef, wire};

fn ok(value: bool) -> Response {
    json(StatusCode::OK, &serde_json::json!({ "ok": value }))
}

/// `claimLease` / `claimRepoLease` (section 10).
pub async fn claim_lease(
    State(state): State<SharedState>,
    path: ResourcePath,
    body: Body,
) -> ApiResult<Response> {
    let r = path.resource()?;
    let (holder, ttl) = lookup_on_failure(&state, &r, async {
        let body = state.json_body(body).await?;
        let obj = wire::object(&body, "the request body")?;
        Ok((
            wire::identifier(obj, "holder")?.to_owned(),
            wire::nonnegative_int(obj, "ttlMs")?,
        ))
    })
    .await?;
    let claimed = state.store.claim_lease(&r, &holder, ttl).await?;
    Ok(ok(claimed))
}

async fn holder_body(state: &SharedState, r: &ResourceRef, body: Body) -> ApiResult<String> {
    lookup_on_failure(state, r, async {
        let body = state.json_body(body).await?;
        let obj = wire::object(&body, "the request body")?;
        Ok(wire::identifier(obj, "holder")?.to_owned())
    })
    .await
}

/// `heartbeat` / `heartbeatRepo`.
pub async fn heartbeat(
    State(state): State<SharedState>,
    path: ResourcePath,
    body: Body,
) -> ApiResult<Response> {
    let r = path.resource()?;
    let holder = holder_body(&state, &r, body).await?;
    Ok(ok(state.store.heartbeat(&r, &holder).await?))
}

/// `releaseLease` / `releaseRepoLease`: a wrong holder is a successful no-op.
pub async fn release_lease(
    State(state): State<SharedState>,
    path: ResourcePath,
    body: Body,
) -> ApiResult<Response> {
    let r = path.resource()?;
    let holder = holder_body(&state, &r, body).await?;
    state.store.release_lease(&r, &holder).await?;
    Ok(ok(true))
}
