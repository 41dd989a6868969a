//! The repository family (spec section 4): `ensureRepo` here, the
//! per-repository operations from [`resources`](super::resources). There is
//! deliberately no `GET /repos`.

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::post;

use super::extract::json_body;
use super::resources::family_routes;
use super::{ApiResult, SharedState, json};
use crate::protocol::ResourceKind;
use crate::protocol::wire;

pub fn router() -> Router<SharedState> {
    Router::new()
        .route("/repos", post(ensure_repo))
        .merge(family_routes(ResourceKind::Repo))
        .merge(super::streams::routes(ResourceKind::Repo))
}

/// `ensureRepo`: `POST /repos`, idempotent, `200` either way.
async fn ensure_repo(State(state): State<SharedState>, body: Body) -> ApiResult<Response> {
    let body = json_body(body, state.limits.max_body_bytes).await?;
    let obj = wire::object(&body, "the request body")?;
    let repo = wire::identifier(obj, "repo")?;
    let record = state.store.ensure_repo(repo).await?;
    Ok(json(StatusCode::OK, &record.to_json()))
}
