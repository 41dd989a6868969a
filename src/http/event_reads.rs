//! `getEvents` / `getRepoEvents`: `GET …/events?since=&wait=`, with the
//! bounded wait of section 3. A [`Prepared`] handler: the path and the
//! query are read before anything waits, so a held read's future keeps
//! only the resource, `since` and `wait` (`super::prepared` says why).

use std::time::Duration;

use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::error::ApiResult;
use super::extract::read_params;
use super::lookup::lookup_on_failure;
use super::path::ResourcePath;
use super::prepared::{Answer, Prepared};
use super::response::json_response;
use super::state::SharedState;
use crate::held::PROBE_ROWS;
use crate::history::reader::{HistoryReader, Reply};
use crate::protocol::ResourceRef;

/// The events route's handler (`super::routes`).
pub const READ_EVENTS: Prepared = Prepared(read_events);

fn read_events(parts: Parts, state: SharedState) -> Answer {
    let resource = match ResourcePath::of_parts(&parts).and_then(|path| path.resource()) {
        Ok(resource) => resource,
        Err(refused) => return Box::pin(std::future::ready(refused.into_response())),
    };
    match read_params(&parts.uri, state.limits.max_wait) {
        Ok((since, wait)) if !wait.is_zero() => {
            Box::pin(async move { held(state, resource, since, wait).await.into_response() })
        }
        Ok((since, _)) => Box::pin(async move {
            // The reply becomes a response through `IntoResponse`
            // (`super::rows`).
            at_once(&state.history, resource, since, parts.headers)
                .await
                .into_response()
        }),
        // The query's failure, or `404` when the resource is absent.
        Err(refused) => Box::pin(async move {
            let failed = std::future::ready(Err::<Response, _>(refused));
            lookup_on_failure(&state, &resource, failed)
                .await
                .into_response()
        }),
    }
}

/// A held read: wait on a probe of the first rows, which is the whole
/// answer whenever it is short (a woken tail read: one new event).
async fn held(
    state: SharedState,
    resource: ResourceRef,
    since: i64,
    wait: Duration,
) -> ApiResult<Response> {
    let page = state.held.events(&resource, since, wait).await?;
    if (page.len() as i64) < PROBE_ROWS {
        return Ok(json_response(
            StatusCode::OK,
            format!("[{}]", page.join(",")),
        ));
    }
    // A long answer: streamed whole from a snapshot at least as new as the
    // probe's (events are only ever appended).
    Ok(state
        .history
        .from_store(resource, since)
        .await?
        .into_response())
}

/// A read that does not wait: `crate::history` chooses where its answer
/// comes from and keeps the caches; here, only how the client takes it.
async fn at_once(
    reader: &HistoryReader,
    resource: ResourceRef,
    since: i64,
    headers: HeaderMap,
) -> ApiResult<Reply> {
    let encoding = super::accept::encoding(&headers);
    Ok(reader.whole_history(resource, since, encoding).await?)
}
