//! Answers kept whole in memory (`crate::history`'s state-events and
//! short-log caches) and how they are sent; and the whole-log read that
//! fills the short-log cache.

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use bytes::Bytes;

use super::error::ApiResult;
use super::response::{json_response_bytes, zstd_response};
use super::rows::{counted_rows_response, fixed_suffix};
use super::state::AppState;
use crate::history::{ShortLogCache, collect};
use crate::protocol::ResourceRef;
use crate::store::{Listing, Rows, StoreError};

/// `200` with a kept answer: its zstd form when the client's
/// `Accept-Encoding` selects zstd and the answer is as large as the
/// compression layer would compress; its text otherwise (which the layer
/// compresses for a gzip or brotli client, as any answer).
pub(super) fn kept_response(
    state: &AppState,
    headers: &HeaderMap,
    text: &Bytes,
    zstd: impl FnOnce() -> Result<Option<Bytes>, StoreError>,
) -> ApiResult<Response> {
    let compress = state
        .limits
        .compress_min_bytes
        .is_some_and(|min| text.len() >= usize::from(min));
    if compress
        && super::accept::prefers_zstd(headers)
        && let Some(frame) = zstd()?
    {
        return Ok(zstd_response(frame));
    }
    Ok(json_response_bytes(StatusCode::OK, text.clone()))
}

/// A whole-log read (`since` ≤ 0, no `wait`) with the short-log cache on:
/// from the cache, or read and kept when its answer is complete in one
/// piece; a longer log is streamed as ever.
pub(super) async fn whole_log(
    state: &AppState,
    logs: &ShortLogCache,
    headers: &HeaderMap,
    r: ResourceRef,
    listing: Listing,
) -> ApiResult<Response> {
    if let Some(kept) = logs.get(&r) {
        metrics::counter!("abstore_short_log_answers_total", "source" => "cache").increment(1);
        return kept_response(state, headers, kept.text(), || logs.zstd(&kept).map(Some));
    }
    let ticket = logs.begin(&r);
    let whole = match read_whole(state, listing).await {
        Ok(whole) => whole,
        Err(err) => {
            logs.abandon(&r, ticket);
            return Err(err.into());
        }
    };
    match whole {
        Whole::Complete { text, rows } => {
            if let Some(history) = &state.history {
                history.learn(&r, 0, rows);
            }
            let kept = logs.finish(&r, ticket, text);
            metrics::counter!("abstore_short_log_answers_total", "source" => "database")
                .increment(1);
            kept_response(state, headers, kept.text(), || logs.zstd(&kept).map(Some))
        }
        Whole::Streamed(rows) => {
            // Longer than one piece: not kept, streamed as without the cache.
            logs.abandon(&r, ticket);
            let history = state.history.clone();
            let learn = move |count| {
                if let Some(history) = history {
                    history.learn(&r, 0, count);
                }
            };
            Ok(counted_rows_response(rows, "[", fixed_suffix("]"), learn).await?)
        }
    }
}

/// A whole log's read: complete in its first piece, or to be streamed.
enum Whole {
    Complete { text: Bytes, rows: u64 },
    Streamed(Rows),
}

async fn read_whole(state: &AppState, listing: Listing) -> Result<Whole, StoreError> {
    let mut rows = state.store.read(listing).await?;
    if rows.is_streamed() {
        return Ok(Whole::Streamed(rows));
    }
    let text = collect(&mut rows, usize::MAX).await?.unwrap_or_default();
    let count = rows.count().unwrap_or(0);
    Ok(Whole::Complete { text, rows: count })
}
