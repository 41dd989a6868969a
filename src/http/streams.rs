//! Streams (spec section 6): create and list under a resource family, and
//! the four addressed operations (get, append, read, close) both under the
//! family (`/builds/{slug}/streams/{id}/…`) and top-level (`/streams/{id}/…`).
//!
//! A stream that does not exist and one scoped to another resource are the
//! same `404 unknown stream "<id>"`. Append evaluates, in order: stream
//! resolution (and, in the auth layer, scope authorization) → body schema
//! (400) → batch ceiling (413) → closed (409) → the stream's bounds on
//! chunks and bytes (413, in the store); nothing is written on failure.

use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::error::{ApiError, ApiResult};
use super::extract::read_params;
use super::lookup::lookup_on_failure;
use super::path::{ResourcePath, unknown_stream};
use super::prepared::{Answer, Prepared};
use super::response::{json, json_response};
use super::rows::{Suffix, fixed_suffix, rows_response};
use super::state::SharedState;
use crate::held::PROBE_ROWS;
use crate::protocol::{ResourceKind, ResourceRef, wire};
use crate::store::{CloseOutcome, Listing, NewArtifact, StoreError, StreamRecord};
use crate::streams::assemble::Assembling;
use bytes::Bytes;

/// How many times a close re-assembles when chunks keep arriving.
const CLOSE_ATTEMPTS: usize = 8;

fn stream_ref(id: &str) -> ResourceRef {
    ResourceRef::new(ResourceKind::Stream, id)
}

/// Find the addressed stream, treating one of another scope as absent. On a
/// family route whose resource does not exist, that resource is what is unknown.
async fn resolve(state: &SharedState, path: &ResourcePath) -> ApiResult<StreamRecord> {
    let scope = path.stream_scope()?;
    let id = path.stream_id()?;
    let found = state.store.get_stream(&id).await?;
    match (found, scope) {
        (Some(stream), None) => Ok(stream),
        (Some(stream), Some(scope)) if stream.scope == scope => Ok(stream),
        (_, Some(scope)) if state.store.get_record(&scope).await?.is_none() => {
            Err(ApiError::unknown(&scope))
        }
        _ => Err(unknown_stream(&id)),
    }
}

/// A new, unguessable stream id: `st_` and 128 random bits.
fn new_stream_id() -> String {
    format!("st_{:032x}", rand::random::<u128>())
}

/// `createStream`: `POST …/streams` with `{"label": nonempty}`.
pub(super) async fn create_stream(
    State(state): State<SharedState>,
    path: ResourcePath,
    body: Body,
) -> ApiResult<Response> {
    let scope = path.resource()?;
    let label = lookup_on_failure(&state, &scope, async {
        let body = state.json_body(body).await?;
        let obj = wire::object(&body, "the request body")?;
        Ok(wire::identifier(obj, "label")?.to_owned())
    })
    .await?;
    let stream = state
        .store
        .create_stream(&scope, &new_stream_id(), &label)
        .await?;
    Ok(json(StatusCode::CREATED, &stream.to_json()))
}

/// `listStreams`: creation order.
pub(super) async fn list_streams(
    State(state): State<SharedState>,
    path: ResourcePath,
) -> ApiResult<Response> {
    let scope = path.resource()?;
    let rows = state.store.read(Listing::Streams { scope }).await?;
    Ok(rows_response(rows, "[", fixed_suffix("]")).await?)
}

/// `getStream`.
pub(super) async fn get_stream(
    State(state): State<SharedState>,
    path: ResourcePath,
) -> ApiResult<Response> {
    let stream = resolve(&state, &path).await?;
    Ok(json(StatusCode::OK, &stream.to_json()))
}

/// Check a batch: a nonempty array of objects with a nonempty string `type`.
/// Returns its serialised form (unknown keys kept) and enforces the ceiling.
fn batch_json(body: &Value, ceiling: usize) -> ApiResult<String> {
    let obj = wire::object(body, "the request body")?;
    let parts = wire::stream_parts(obj)?;
    let text = Value::Array(parts.clone()).to_string();
    if text.len() > ceiling {
        return Err(ApiError::TooLarge(format!(
            "stream batch of {} bytes exceeds the {ceiling}-byte ceiling",
            text.len()
        )));
    }
    Ok(text)
}

/// `appendStreamParts`: `POST …/chunks` with `{"parts": [...]}`.
pub(super) async fn append_chunk(
    State(state): State<SharedState>,
    path: ResourcePath,
    body: Body,
) -> ApiResult<Response> {
    let stream = resolve(&state, &path).await?;
    let ceiling = state.limits.max_stream_batch_bytes;
    let body = state.json_body(body).await.map_err(|err| match err {
        // The route's body limit sits above the batch ceiling, so a body
        // over it holds a batch over the ceiling: the spec's 413 says so.
        ApiError::TooLarge(limit) => ApiError::TooLarge(format!(
            "stream batch exceeds the {ceiling}-byte ceiling ({limit})"
        )),
        other => other,
    })?;
    let parts = batch_json(&body, ceiling)?;
    let chunk = state.store.append_chunk(&stream.id, &parts).await?;
    metrics::counter!("abstore_stream_chunks_total").increment(1);
    Ok(json_response(StatusCode::CREATED, chunk))
}

/// What follows a chunk read's chunks: `],"status":…}` with the outcome and
/// artifact of a closed stream.
fn chunks_suffix(stream: &StreamRecord) -> String {
    let mut suffix = format!("],\"status\":\"{}\"", stream.status());
    if let Some(outcome) = &stream.outcome {
        suffix.push_str(&format!(",\"outcome\":{}", Value::String(outcome.clone())));
    }
    if let Some(artifact) = stream.artifact_json() {
        suffix.push_str(&format!(",\"artifact\":{artifact}"));
    }
    suffix.push('}');
    suffix
}

/// What precedes a chunk read's chunks.
const CHUNKS_PREFIX: &str = "{\"chunks\":[";

/// `readStream`: `GET …/chunks?since=&wait=`; holds while the stream is open
/// and has nothing new, never on a closed stream. A [`Prepared`] handler,
/// so a held read keeps only the path and the parsed query while it waits.
pub(super) const READ_CHUNKS: Prepared = Prepared(read_chunks);

fn read_chunks(parts: Parts, state: SharedState) -> Answer {
    let path = ResourcePath::of_parts(&parts);
    let query = read_params(&parts.uri, state.limits.max_wait);
    Box::pin(async move { chunks(state, path, query).await.into_response() })
}

async fn chunks(
    state: SharedState,
    path: ApiResult<ResourcePath>,
    query: ApiResult<(i64, Duration)>,
) -> ApiResult<Response> {
    let stream = resolve(&state, &path?).await?;
    let (since, wait) = query?;
    if !wait.is_zero() {
        // Held: wait on a probe of the first chunks, which is the whole
        // answer whenever it is short.
        let (stream, chunks) = state.held.chunks(&stream.id, since, wait).await?;
        if (chunks.len() as i64) < PROBE_ROWS {
            return Ok(json_response(
                StatusCode::OK,
                format!(
                    "{CHUNKS_PREFIX}{}{}",
                    chunks.join(","),
                    chunks_suffix(&stream)
                ),
            ));
        }
    }
    // Streamed; the record is read after the last chunk, so a close landing
    // meanwhile is reported with every chunk already sent.
    let rows = state
        .store
        .read(Listing::Chunks {
            id: stream.id.clone(),
            since,
        })
        .await?;
    let (store, id) = (state.store.clone(), stream.id.clone());
    let suffix: Suffix = Box::pin(async move {
        let stream = store
            .get_stream(&id)
            .await?
            .ok_or_else(|| StoreError::NotFound(stream_ref(&id)))?;
        Ok(Bytes::from(chunks_suffix(&stream)))
    });
    Ok(rows_response(rows, CHUNKS_PREFIX, suffix).await?)
}

/// `closeStream`: `POST …/close` with `{"outcome": "completed" | "aborted"}`.
/// Assemble the chunks into `UIMessage[]`, write the document's blob, then
/// deposit it and mark the stream closed in one transaction; if a chunk
/// arrived meanwhile, assemble again. Closing a closed stream returns it.
pub(super) async fn close_stream(
    State(state): State<SharedState>,
    path: ResourcePath,
    body: Body,
) -> ApiResult<Response> {
    let stream = resolve(&state, &path).await?;
    let body = state.json_body(body).await?;
    let obj = wire::object(&body, "the request body")?;
    let outcome = match obj.get("outcome") {
        Some(Value::String(o)) if o == "completed" || o == "aborted" => o.clone(),
        _ => {
            return Err(wire::SchemaError(
                "\"outcome\" must be \"completed\" or \"aborted\"".into(),
            )
            .into());
        }
    };
    // Assembly holds the document being built; at most this many closes
    // build theirs at once (the others wait their turn).
    let Ok(_turn) = state.stream_closes.acquire().await else {
        return Err(ApiError::Internal(
            "the stream-close limiter is closed".into(),
        ));
    };
    for _ in 0..CLOSE_ATTEMPTS {
        let (current, first) = state
            .store
            .chunks_page(&stream.id, 0, Some(CLOSE_PAGE_CHUNKS))
            .await?;
        if current.closed {
            return Ok(json(StatusCode::OK, &current.to_json()));
        }
        let artifact = finalize(&state, &current, first, &outcome).await?;
        match state
            .store
            .close_stream(&stream.id, &outcome, current.last_seq, artifact)
            .await
        {
            Ok(CloseOutcome::Closed(closed)) => {
                metrics::counter!("abstore_stream_closes_total", "outcome" => outcome.clone())
                    .increment(1);
                return Ok(json(StatusCode::OK, &closed.to_json()));
            }
            Ok(CloseOutcome::AlreadyClosed(closed)) => {
                return Ok(json(StatusCode::OK, &closed.to_json()));
            }
            Ok(CloseOutcome::Moved) => continue,
            Err(err) => return Err(err.into()),
        }
    }
    Err(ApiError::Conflict(format!(
        "stream \"{}\" kept receiving chunks while closing; retry",
        stream.id
    )))
}

/// Chunks a close reads at a time: its memory is one page of chunk texts
/// (each at most the batch ceiling) and the document assembled so far,
/// never every chunk at once.
const CLOSE_PAGE_CHUNKS: i64 = 16;

/// Assemble the stream's chunks up to `stream.last_seq` (the first page is
/// `first`; the rest are read page by page, each chunk parsed and applied,
/// then dropped) and write the document's blob; the artifact to deposit.
/// Chunks are never removed from an open stream and their sequences have
/// no gaps, so the pages read after the first snapshot hold exactly the
/// chunks it counted; any appended since lie past `last_seq` and are left
/// for the next attempt (the close then finds the stream moved).
async fn finalize(
    state: &SharedState,
    stream: &StreamRecord,
    first: Vec<String>,
    outcome: &str,
) -> ApiResult<NewArtifact> {
    let mut assembly = Assembling::default();
    // The document holds every part's tree: each chunk is parsed against
    // the process's JSON budget, and its charge kept until the close ends.
    let mut charges = Vec::new();
    let mut seen = 0i64;
    let mut page = first;
    loop {
        let read = page.len();
        for chunk in page {
            seen += 1;
            if seen > stream.last_seq {
                break;
            }
            let (mut chunk, charge) = match state.json_budget.parse(chunk.as_bytes()) {
                Ok(parsed) => parsed.into_parts(),
                Err(ApiError::TooLarge(_)) => {
                    return Err(ApiError::TooLarge(format!(
                        "stream {:?} is too large to assemble within the server's parsing budget (--max-json-memory-bytes)",
                        stream.id
                    )));
                }
                Err(ApiError::BadRequest(_)) => {
                    return Err(ApiError::Internal(format!(
                        "stored chunk {seen} of stream {:?} is not JSON",
                        stream.id
                    )));
                }
                Err(other) => return Err(other),
            };
            charges.push(charge);
            if let Some(Value::Array(batch)) = chunk.get_mut("parts").map(Value::take) {
                for part in &batch {
                    assembly.push(part);
                }
            }
        }
        if seen >= stream.last_seq || read == 0 {
            break;
        }
        page = state
            .store
            .chunks_page(&stream.id, seen, Some(CLOSE_PAGE_CHUNKS))
            .await?
            .1;
    }
    if seen < stream.last_seq {
        return Err(ApiError::Internal(format!(
            "stream {:?} counts {} chunks but {seen} were read",
            stream.id, stream.last_seq
        )));
    }
    let chunks = stream.last_seq;
    let assembly = assembly.finish();
    let document = assembly.messages.to_string().into_bytes();
    let blob_ref = crate::blobs::blob_ref(&document);
    let size = i64::try_from(document.len()).unwrap_or(i64::MAX);
    state
        .blobs
        .put(&blob_ref, document)
        .await
        .map_err(ApiError::blob_write_failed)?;
    let mut metadata = Map::new();
    metadata.insert("streamId".into(), stream.id.clone().into());
    metadata.insert("label".into(), stream.label.clone().into());
    metadata.insert("scope".into(), stream.scope_json());
    metadata.insert("outcome".into(), outcome.into());
    metadata.insert("chunkCount".into(), json!(chunks));
    metadata.insert("droppedParts".into(), json!(assembly.dropped));
    Ok(NewArtifact {
        kind: format!("stream:{}", stream.id),
        blob_ref,
        size,
        metadata,
    })
}
