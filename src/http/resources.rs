//! What every resource family shares (`store`'s `resources`): its record,
//! `GET /{family}/{id}`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::error::{ApiError, ApiResult};
use super::path::ResourcePath;
use super::response::json;
use super::state::SharedState;

/// `getBuild` / `getRepo`.
pub async fn get_record(
    State(state): State<SharedState>,
    path: ResourcePath,
) -> ApiResult<Response> {
    let r = path.resource()?;
    match state.store.get_record(&r).await? {
        Some(record) => Ok(json(StatusCode::OK, &record.to_json())),
        None => Err(ApiError::unknown(&r)),
    }
}
