//! Streams (spec section 6): create and list under a resource family, and
//! the four addressed operations (get, append, read, close) both under the
//! family (`/builds/{slug}/streams/{id}/…`) and top-level (`/streams/{id}/…`).
//!
//! A stream that does not exist and one scoped to another resource are the
//! same `404 unknown stream "<id>"`. Append evaluates, in order: stream
//! resolution (and, in the auth layer, scope authorization) → body schema
//! (400) → batch ceiling (413) → closed (409); nothing is written on failure.

use std::marker::PhantomData;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use axum::routing::{get, post};
use serde_json::{Map, Value, json};

use super::extract::{decode_segment, json_body, lookup_id};
use super::resources::{Addressed, Family, prepare, read_params};
use super::{ApiError, ApiResult, SharedState, json, json_response};
use crate::protocol::{ResourceKind, ResourceRef, ident, wire};
use crate::store::{CloseOutcome, NewArtifact, StreamRecord};

/// How many times a close re-assembles when chunks keep arriving.
const CLOSE_ATTEMPTS: usize = 8;

/// Routes under a family: `/builds/{id}/streams…` or `/repos/{id}/streams…`.
pub fn family_routes<F: Family>(prefix: &str) -> Router<SharedState> {
    Router::new()
        .route(
            &format!("{prefix}/{{id}}/streams"),
            post(create_stream::<F>).get(list_streams::<F>),
        )
        .route(
            &format!("{prefix}/{{id}}/streams/{{sid}}"),
            get(get_stream::<Scoped<F>>),
        )
        .route(
            &format!("{prefix}/{{id}}/streams/{{sid}}/chunks"),
            post(append_chunk::<Scoped<F>>).get(read_chunks::<Scoped<F>>),
        )
        .route(
            &format!("{prefix}/{{id}}/streams/{{sid}}/close"),
            post(close_stream::<Scoped<F>>),
        )
}

/// The top-level addressed routes, which resolve the stream's own scope.
pub fn top_level_routes() -> Router<SharedState> {
    Router::new()
        .route("/streams/{sid}", get(get_stream::<TopLevel>))
        .route(
            "/streams/{sid}/chunks",
            post(append_chunk::<TopLevel>).get(read_chunks::<TopLevel>),
        )
        .route("/streams/{sid}/close", post(close_stream::<TopLevel>))
}

/// How an addressed route finds its stream.
pub trait Resolve: Send + Sync + 'static {
    /// The stream id and, for family routes, the scope it must belong to.
    fn address(uri: &Uri) -> ApiResult<(String, Option<ResourceRef>)>;
}

pub struct Scoped<F>(PhantomData<F>);
pub struct TopLevel;

impl<F: Family> Resolve for Scoped<F> {
    fn address(uri: &Uri) -> ApiResult<(String, Option<ResourceRef>)> {
        let scope = Addressed::<F>::from_uri(uri)?.resource;
        let sid = decode_segment(uri.path().split('/').nth(4).unwrap_or_default())?;
        Ok((lookup_id(sid, unknown_stream)?, Some(scope)))
    }
}

impl Resolve for TopLevel {
    fn address(uri: &Uri) -> ApiResult<(String, Option<ResourceRef>)> {
        let sid = decode_segment(uri.path().split('/').nth(2).unwrap_or_default())?;
        Ok((lookup_id(sid, unknown_stream)?, None))
    }
}

fn unknown_stream(id: &str) -> ApiError {
    ApiError::NotFound(format!("unknown stream \"{}\"", ident::shown(id)))
}

fn stream_ref(id: &str) -> ResourceRef {
    ResourceRef::new(ResourceKind::Stream, id)
}

/// Find the addressed stream, treating one of another scope as absent. On a
/// family route whose resource does not exist, that resource is what is unknown.
async fn resolve<R: Resolve>(state: &SharedState, uri: &Uri) -> ApiResult<StreamRecord> {
    let (id, scope) = R::address(uri)?;
    let found = state
        .store
        .get_stream(&id)
        .await
        .map_err(|e| ApiError::from_store(e, &stream_ref(&id)))?;
    match (found, scope) {
        (Some(stream), None) => Ok(stream),
        (Some(stream), Some(scope)) if stream.scope == scope => Ok(stream),
        (_, Some(scope))
            if state
                .store
                .get_record(&scope)
                .await
                .map_err(|e| ApiError::from_store(e, &scope))?
                .is_none() =>
        {
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
async fn create_stream<F: Family>(
    State(state): State<SharedState>,
    uri: Uri,
    body: Body,
) -> ApiResult<Response> {
    let scope = Addressed::<F>::from_uri(&uri)?.resource;
    let label = prepare(
        &state,
        &scope,
        async {
            let body = json_body(body, state.limits.max_body_bytes).await?;
            let obj = wire::object(&body, "the request body")?;
            Ok(wire::identifier(obj, "label")?.to_owned())
        }
        .await,
    )
    .await?;
    let stream = state
        .store
        .create_stream(&scope, &new_stream_id(), &label)
        .await
        .map_err(|e| ApiError::from_store(e, &scope))?;
    Ok(json(StatusCode::CREATED, &stream.to_json()))
}

/// `listStreams`: creation order.
async fn list_streams<F: Family>(
    State(state): State<SharedState>,
    uri: Uri,
) -> ApiResult<Response> {
    let scope = Addressed::<F>::from_uri(&uri)?.resource;
    let streams = state
        .store
        .list_streams(&scope)
        .await
        .map_err(|e| ApiError::from_store(e, &scope))?;
    Ok(json(
        StatusCode::OK,
        &Value::Array(streams.iter().map(StreamRecord::to_json).collect()),
    ))
}

/// `getStream`.
async fn get_stream<R: Resolve>(State(state): State<SharedState>, uri: Uri) -> ApiResult<Response> {
    let stream = resolve::<R>(&state, &uri).await?;
    Ok(json(StatusCode::OK, &stream.to_json()))
}

/// Check a batch: a nonempty array of objects with a nonempty string `type`.
/// Returns its serialised form (unknown keys kept) and enforces the ceiling.
fn batch_json(body: &Value, ceiling: usize) -> ApiResult<String> {
    let obj = wire::object(body, "the request body")?;
    let parts = match obj.get("parts") {
        Some(Value::Array(parts)) if !parts.is_empty() => parts,
        Some(Value::Array(_)) => {
            return Err(wire::SchemaError("\"parts\" must be a nonempty array".into()).into());
        }
        Some(_) => return Err(wire::SchemaError("\"parts\" must be an array".into()).into()),
        None => return Err(wire::SchemaError("\"parts\" is required".into()).into()),
    };
    for (i, part) in parts.iter().enumerate() {
        match part.get("type") {
            Some(Value::String(t)) if part.is_object() && !t.is_empty() => {}
            _ => {
                return Err(wire::SchemaError(format!(
                    "part {i} must be an object with a nonempty string \"type\""
                ))
                .into());
            }
        }
    }
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
async fn append_chunk<R: Resolve>(
    State(state): State<SharedState>,
    uri: Uri,
    body: Body,
) -> ApiResult<Response> {
    let stream = resolve::<R>(&state, &uri).await?;
    let body = json_body(body, state.limits.max_body_bytes).await?;
    let parts = batch_json(&body, state.limits.max_stream_batch_bytes)?;
    let r = stream_ref(&stream.id);
    let chunk = state
        .store
        .append_chunk(&stream.id, &parts)
        .await
        .map_err(|e| ApiError::from_store(e, &r))?;
    metrics::counter!("abstore_stream_chunks_total").increment(1);
    Ok(json_response(StatusCode::CREATED, chunk))
}

/// The read response: chunks, status, and once closed outcome and artifact.
fn read_response(stream: &StreamRecord, chunks: &[String]) -> String {
    let mut tail = format!(",\"status\":\"{}\"", stream.status());
    if let Some(outcome) = &stream.outcome {
        tail.push_str(&format!(",\"outcome\":{}", Value::String(outcome.clone())));
    }
    if let Some(artifact) = stream.artifact_json() {
        tail.push_str(&format!(",\"artifact\":{artifact}"));
    }
    format!("{{\"chunks\":[{}]{tail}}}", chunks.join(","))
}

/// `readStream`: `GET …/chunks?since=&wait=`; holds while the stream is open
/// and has nothing new, never on a closed stream.
async fn read_chunks<R: Resolve>(
    State(state): State<SharedState>,
    uri: Uri,
) -> ApiResult<Response> {
    let stream = resolve::<R>(&state, &uri).await?;
    let (since, wait) = read_params(&uri, state.limits.max_wait)?;
    let r = stream_ref(&stream.id);
    let (stream, chunks) = super::hold::hold(
        &state,
        &state.chunk_flights,
        &r,
        since,
        wait,
        || state.store.read_chunks(&stream.id, since),
        |(stream, chunks): &(StreamRecord, Vec<String>)| !chunks.is_empty() || stream.closed,
    )
    .await
    .map_err(|e| ApiError::from_store(e, &r))?;
    Ok(json_response(
        StatusCode::OK,
        read_response(&stream, &chunks),
    ))
}

/// `closeStream`: `POST …/close` with `{"outcome": "completed" | "aborted"}`.
/// Assemble the chunks into `UIMessage[]`, write the document's blob, then
/// deposit it and mark the stream closed in one transaction; if a chunk
/// arrived meanwhile, assemble again. Closing a closed stream returns it.
async fn close_stream<R: Resolve>(
    State(state): State<SharedState>,
    uri: Uri,
    body: Body,
) -> ApiResult<Response> {
    let stream = resolve::<R>(&state, &uri).await?;
    let body = json_body(body, state.limits.max_body_bytes).await?;
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
    let r = stream_ref(&stream.id);
    for _ in 0..CLOSE_ATTEMPTS {
        let (current, chunks) = state
            .store
            .read_chunks(&stream.id, 0)
            .await
            .map_err(|e| ApiError::from_store(e, &r))?;
        if current.closed {
            return Ok(json(StatusCode::OK, &current.to_json()));
        }
        let artifact = finalize(&state, &current, &chunks, &outcome).await?;
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
            Err(err) => return Err(ApiError::from_store(err, &r)),
        }
    }
    Err(ApiError::Conflict(format!(
        "stream \"{}\" kept receiving chunks while closing; retry",
        stream.id
    )))
}

/// Assemble `chunks` and write the document's blob; the artifact to deposit.
async fn finalize(
    state: &SharedState,
    stream: &StreamRecord,
    chunks: &[String],
    outcome: &str,
) -> ApiResult<NewArtifact> {
    let mut parts = Vec::new();
    for chunk in chunks {
        let mut chunk: Value = serde_json::from_str(chunk)
            .map_err(|e| ApiError::Internal(format!("stored chunk unreadable: {e}")))?;
        if let Some(Value::Array(batch)) = chunk.get_mut("parts").map(Value::take) {
            parts.extend(batch);
        }
    }
    let assembly = crate::streams::assemble::assemble(&parts);
    metrics::counter!("abstore_stream_dropped_parts_total").increment(assembly.dropped as u64);
    let document = assembly.messages.to_string().into_bytes();
    let blob_ref = crate::blobs::blob_ref(&document);
    let size = i64::try_from(document.len()).unwrap_or(i64::MAX);
    state
        .blobs
        .put(&blob_ref, document)
        .await
        .map_err(|e| ApiError::Internal(format!("blob write failed: {e}")))?;
    let mut metadata = Map::new();
    metadata.insert("streamId".into(), stream.id.clone().into());
    metadata.insert("label".into(), stream.label.clone().into());
    metadata.insert("scope".into(), stream.scope_json());
    metadata.insert("outcome".into(), outcome.into());
    metadata.insert("chunkCount".into(), json!(chunks.len()));
    metadata.insert("droppedParts".into(), json!(assembly.dropped));
    Ok(NewArtifact {
        kind: format!("stream:{}", stream.id),
        blob_ref,
        size,
        metadata,
    })
}
