//! The repository family (spec section 4): `ensureRepo` and protocol 3's
//! derived reads here; the operations every resource family shares are
//! declared once for every family in `super::routes`. There is
//! deliberately no `GET /repos`.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse as _, Response};

use super::error::{ApiError, ApiResult};
use super::path::ResourcePath;
use super::response::{json, json_response};
use super::state::SharedState;
use crate::history::reader::Reply;
use crate::protocol::wire;

/// `ensureRepo`: `POST /repos`, idempotent, `200` either way.
pub(super) async fn ensure_repo(
    State(state): State<SharedState>,
    body: Body,
) -> ApiResult<Response> {
    let body = state.json_body(body).await?;
    let obj = wire::object(&body, "the request body")?;
    let repo = wire::identifier(obj, "repo")?;
    let record = state.store.ensure_repo(repo).await?;
    Ok(json(StatusCode::OK, &record.to_json()))
}

/// `listBuildDigests` (protocol 3): `GET /repos/{repo}/build-digests`, one
/// digest per build of the repository, by slug. Answered before any
/// existence check: an unknown repository (even one whose id could never be
/// stored) has no builds, `200 []`.
pub(super) async fn build_digests(
    State(state): State<SharedState>,
    headers: HeaderMap,
    path: ResourcePath,
) -> ApiResult<Response> {
    let repo = match path.resource() {
        Ok(repo) => repo,
        Err(ApiError::NotFound(_)) => return Ok(json_response(StatusCode::OK, "[]".into())),
        Err(err) => return Err(err),
    };
    let encoding = super::accept::encoding(&headers);
    Ok(state
        .history
        .build_digests(&repo.id, encoding)
        .await?
        .into_response())
}

/// `getRepoStateEvents` (protocol 3): `GET /repos/{repo}/state-events`, the
/// durable events and the tail from the latest `dispatcher.run-started`, as
/// stored envelopes in sequence order, from one statement
/// (`crate::history::reader::HistoryReader::state_events`, which keeps them). An unknown
/// repository is `404`, as for its events.
pub(super) async fn state_events(
    State(state): State<SharedState>,
    headers: HeaderMap,
    path: ResourcePath,
) -> ApiResult<Reply> {
    let repo = path.resource()?;
    let encoding = super::accept::encoding(&headers);
    Ok(state.history.state_events(repo, encoding).await?)
}
