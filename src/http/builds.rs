//! The build family (spec section 3): the collection routes here, the
//! per-build operations from [`resources`](super::resources).

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::post;
use serde_json::{Map, Value};

use super::extract::json_body;
use super::resources::{Builds, append_conditional, family_routes};
use super::{ApiError, ApiResult, SharedState, json};
use crate::protocol::wire;
use crate::protocol::{ResourceKind, ResourceRef};

pub fn router() -> Router<SharedState> {
    Router::new()
        .route("/builds", post(create_build).get(list_builds))
        .route(
            "/builds/{id}/events/conditional",
            post(append_conditional::<Builds>),
        )
        .merge(family_routes::<Builds>("/builds"))
        .merge(super::streams::family_routes::<Builds>("/builds"))
}

/// `createBuild`: `POST /builds`. Unknown top-level keys are ignored.
async fn create_build(State(state): State<SharedState>, body: Body) -> ApiResult<Response> {
    let body = json_body(body, state.limits.max_body_bytes).await?;
    let obj = wire::object(&body, "the request body")?;
    let slug = wire::identifier(obj, "slug")?;
    let mut attrs = Map::new();
    attrs.insert("repo".into(), wire::nonempty_str(obj, "repo")?.into());
    if let Some(origin) = wire::optional_str(obj, "repoOrigin", false)? {
        attrs.insert("repoOrigin".into(), origin.into());
    }
    if let Some(ticket) = obj.get("ticket") {
        attrs.insert("ticket".into(), wire::ticket(ticket)?);
    }
    if let Some(branch) = wire::optional_str(obj, "branch", true)? {
        attrs.insert("branch".into(), branch.into());
    }
    let resource = ResourceRef::new(ResourceKind::Build, slug);
    let record = state
        .store
        .create_build(slug, attrs)
        .await
        .map_err(|e| ApiError::from_store(e, &resource))?;
    Ok(json(StatusCode::CREATED, &record.to_json()))
}

/// `listBuilds`: `GET /builds` (order unspecified; oldest first here).
async fn list_builds(State(state): State<SharedState>) -> ApiResult<Response> {
    let records = state
        .store
        .list_builds()
        .await
        .map_err(ApiError::from_backend)?;
    Ok(json(
        StatusCode::OK,
        &Value::Array(records.iter().map(|r| r.to_json()).collect()),
    ))
}
