//! `getEvents` / `getRepoEvents`: `GET …/events?since=&wait=`, with the
//! bounded wait of section 3. A [`Prepared`] handler: the path and the
//! query are read before anything waits, so a held read's future keeps
//! only the resource, `since` and `wait` (`super::prepared` says why).

use std::time::Duration;

use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::accept::Coding;
use super::error::ApiResult;
use super::path::ResourcePath;
use super::prepared::{Answer, Prepared};
use super::resources::{lookup_on_failure, read_params};
use super::response::json_response;
use super::rows::{counted_rows_response, fixed_suffix, history_response, rows_response};
use super::state::SharedState;
use crate::held::PROBE_ROWS;
use crate::history::Form;
use crate::protocol::ResourceRef;
use crate::store::Listing;

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
            at_once(state, resource, since, parts.headers)
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
    from_store(&state, resource, since).await
}

/// A read that does not wait: a short whole log from memory where one is
/// kept, an answer from the history cache where it has one (zstd frames
/// or deflated chunks copied, or as text for any other client), else the
/// store's rows.
async fn at_once(
    state: SharedState,
    resource: ResourceRef,
    since: i64,
    headers: HeaderMap,
) -> ApiResult<Response> {
    if since <= 0
        && let Some(logs) = &state.short_logs
        && !state
            .history
            .as_ref()
            .is_some_and(|h| h.known_long(&resource))
    {
        let listing = everything_since(&resource, since);
        return super::kept::whole_log(&state, logs, &headers, resource, listing).await;
    }
    if let Some(history) = &state.history {
        let form = match super::accept::chosen(&headers) {
            Some(Coding::Zstd) if super::accept::takes_zstd_frames(&headers) => Form::Zstd,
            // Text, which the compression layer sends as one frame.
            Some(Coding::Zstd) => Form::Text,
            Some(Coding::Gzip) => Form::Gzip,
            Some(Coding::Brotli) => Form::Brotli,
            Some(Coding::Identity) | None => Form::Text,
        };
        if let Some(answer) = crate::history::answer(&state.store, history, &resource, since, form)
        {
            return Ok(history_response(answer, form));
        }
    }
    from_store(&state, resource, since).await
}

/// Every event of `resource` past `since`, streamed from the store.
async fn from_store(state: &SharedState, resource: ResourceRef, since: i64) -> ApiResult<Response> {
    let rows = state.store.read(everything_since(&resource, since)).await?;
    let Some(history) = state.history.clone() else {
        return Ok(rows_response(rows, "[", fixed_suffix("]")).await?);
    };
    // Every whole answer shows how far the log has grown: what lets the
    // next zstd read of it come from the history cache.
    let learn = move |count| history.learn(&resource, since, count);
    Ok(counted_rows_response(rows, "[", fixed_suffix("]"), learn).await?)
}

/// Every event of `resource` past `since`.
fn everything_since(resource: &ResourceRef, since: i64) -> Listing {
    Listing::Events {
        resource: resource.clone(),
        since,
        until: None,
    }
}
