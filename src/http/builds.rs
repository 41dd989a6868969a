//! The build family (spec section 3): the collection routes here, the
//! per-build operations from [`resources`](super::resources).

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::post;
use serde_json::Map;

use super::resources::{append_conditional, family_routes};
use super::rows::{fixed_suffix, rows_response};
use super::{ApiResult, SharedState, json};
use crate::protocol::ResourceKind;
use crate::protocol::wire;
use crate::store::Listing;

pub fn router() -> Router<SharedState> {
    Router::new()
        .route("/builds", post(create_build).get(list_builds))
        .route("/builds/{id}/events/conditional", post(append_conditional))
        .merge(family_routes(ResourceKind::Build))
        .merge(super::streams::routes(ResourceKind::Build))
}

/// `createBuild`: `POST /builds`. Unknown top-level keys are ignored.
async fn create_build(State(state): State<SharedState>, body: Body) -> ApiResult<Response> {
    let body = state.json_body(body).await?;
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
    let record = state.store.create_build(slug, attrs).await?;
    Ok(json(StatusCode::CREATED, &record.to_json()))
}

/// `listBuilds`: `GET /builds` (order unspecified; oldest first here).
async fn list_builds(State(state): State<SharedState>) -> ApiResult<Response> {
    let rows = state.store.read(Listing::Builds).await?;
    Ok(rows_response(rows, "[", fixed_suffix("]")).await?)
}
