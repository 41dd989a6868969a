//! The build family (spec section 3): the collection routes here; the
//! operations every resource family shares (events, artifacts, leases,
//! streams) are declared once for every family in `super::routes`.

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::error::ApiResult;
use super::response::json;
use super::rows::{fixed_suffix, rows_response};
use super::state::SharedState;
use crate::protocol::wire;
use crate::store::Listing;

/// `createBuild`: `POST /builds`. Unknown top-level keys are ignored.
pub(super) async fn create_build(
    State(state): State<SharedState>,
    body: Body,
) -> ApiResult<Response> {
    let body = state.json_body(body).await?;
    let obj = wire::object(&body, "the request body")?;
    let slug = wire::identifier(obj, "slug")?;
    let attrs = wire::build_attrs(obj)?;
    let record = state.store.create_build(slug, attrs).await?;
    Ok(json(StatusCode::CREATED, &record.to_json()))
}

/// `listBuilds`: `GET /builds` (order unspecified; oldest first here).
pub(super) async fn list_builds(State(state): State<SharedState>) -> ApiResult<Response> {
    let rows = state.store.read(Listing::Builds).await?;
    Ok(rows_response(rows, "[", fixed_suffix("]")).await?)
}
