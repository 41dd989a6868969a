//! The repository family (spec section 4): `ensureRepo` here, the
//! per-repository operations from [`resources`](super::resources). There is
//! deliberately no `GET /repos`.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::error::{ApiError, ApiResult};
use super::path::ResourcePath;
use super::response::{json, json_response};
use super::rows::{fixed_suffix, rows_response};
use super::state::SharedState;
use crate::protocol::wire;
use crate::store::{Listing, StoreError};

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
    path: ResourcePath,
) -> ApiResult<Response> {
    let repo = match path.resource() {
        Ok(repo) => repo,
        Err(ApiError::NotFound(_)) => return Ok(json_response(StatusCode::OK, "[]".into())),
        Err(err) => return Err(err),
    };
    let digests = state.store.build_digests(&repo.id).await?;
    Ok(json(StatusCode::OK, &digests))
}

/// `getRepoStateEvents` (protocol 3): `GET /repos/{repo}/state-events`, the
/// durable events and the tail from the latest `dispatcher.run-started`, as
/// stored envelopes in sequence order, from one statement. An unknown
/// repository is `404`, as for its events. With the state-events cache on
/// (`crate::history::StateEventsCache`), the journal's tail is read first and
/// the answer as of that tail comes from the cache when it holds it.
pub(super) async fn state_events(
    State(state): State<SharedState>,
    headers: HeaderMap,
    path: ResourcePath,
) -> ApiResult<Response> {
    let repo = path.resource()?;
    let Some(cache) = &state.state_events else {
        let listing = Listing::StateEvents {
            repo: repo.id,
            until: None,
        };
        let rows = state.store.read(listing).await?;
        return Ok(rows_response(rows, "[", fixed_suffix("]")).await?);
    };
    let Some(&(_, tail)) = state
        .store
        .tails(std::slice::from_ref(&repo))
        .await?
        .first()
    else {
        return Err(StoreError::NotFound(repo).into());
    };
    let listing = Listing::StateEvents {
        repo: repo.id.clone(),
        until: Some(tail),
    };
    let (answer, source) = match cache.get(&repo.id, tail) {
        Some(answer) => (answer, "cache"),
        None => {
            let mut rows = state.store.read(listing.clone()).await?;
            let text = crate::history::collect(&mut rows, cache.max_answer_bytes()).await?;
            (cache.insert(&repo.id, tail, text), "database")
        }
    };
    let Some(kept) = &answer.kept else {
        // Too large to keep: streamed as without the cache.
        metrics::counter!("abstore_state_events_answers_total", "source" => "streamed")
            .increment(1);
        let rows = state.store.read(listing).await?;
        return Ok(rows_response(rows, "[", fixed_suffix("]")).await?);
    };
    metrics::counter!("abstore_state_events_answers_total", "source" => source).increment(1);
    super::kept::kept_response(&state, &headers, kept.text(), || {
        answer.zstd(cache, &repo.id)
    })
}
