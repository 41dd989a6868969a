//! Operations shared by every resource family (spec sections 3, 4 and 8):
//! events, conditional append, deposits, artifacts and leases. One handler
//! serves every family: the [`ResourcePath`] says which resource, and its
//! [`ResourceKind`] what the family allows (catalog, `via`, leases).
//!
//! Order inside a handler (identity and token scope were checked by the
//! middleware): resource id (400 on bad encoding) → body (400/413) → event
//! attribution (403) → catalog (422) → store (404 when the resource is
//! absent). A failure before the store on a resource that does not exist
//! answers 404, as if the lookup had come first ([`lookup_on_failure`]), without
//! costing a lookup on success.

use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use serde_json::{Map, Value};

use super::auth::{Caller, attribute};
use super::error::{ApiError, ApiResult};
use super::extract::query_param;
use super::path::ResourcePath;
use super::response::{json, json_response};
use super::rows::{fixed_suffix, rows_response};
use super::state::SharedState;
use crate::blobs::blob_ref;
use crate::protocol::base64::{self, DecodeError};
use crate::protocol::numbers::{js_integer, wait_seconds};
use crate::protocol::placeholders::{self, Assigned};
use crate::protocol::wire::{self, EventWrite};
use crate::protocol::{Client, ResourceKind, ResourceRef, ident};
use crate::store::{Listing, NewArtifact, NewEvent, StoreError};

/// The spec's order: a resource's lookup precedes its body. `work` (body,
/// query or attribution checks) runs first and costs no lookup when it
/// succeeds; only when it fails is the resource looked up, and the answer
/// is `404` if it does not exist, else `work`'s own failure.
pub(super) async fn lookup_on_failure<T>(
    state: &SharedState,
    resource: &ResourceRef,
    work: impl Future<Output = ApiResult<T>>,
) -> ApiResult<T> {
    match work.await {
        Ok(value) => Ok(value),
        Err(err) => match state.store.get_record(resource).await? {
            Some(_) => Err(err),
            None => Err(ApiError::unknown(resource)),
        },
    }
}

/// The resource must exist (before blobs are written for it).
async fn existing(state: &SharedState, resource: &ResourceRef) -> ApiResult<()> {
    match state.store.get_record(resource).await? {
        Some(_) => Ok(()),
        None => Err(ApiError::unknown(resource)),
    }
}

/// Check an event write against its family's catalog — the catalogs of the
/// client's identity ([`Client`]) — and serialise it with the *validated*
/// payload: the catalog's normalisation (defaults, trims) is what the
/// envelope carries (spec section 3), as in Autobuild.
fn validated_event(
    client: &Client,
    kind: ResourceKind,
    write: &EventWrite,
) -> Result<NewEvent, String> {
    let Some(catalog) = kind.catalog() else {
        return Err(format!("{} events have no catalog", kind.noun()));
    };
    let payload = client
        .catalogs
        .validate(catalog, &write.actor, &write.event_type, &write.payload)
        .map_err(|err| err.message)?;
    Ok(NewEvent {
        actor_json: write.actor.to_string(),
        type_json: Value::String(write.event_type.clone()).to_string(),
        payload_json: payload.to_string(),
    })
}

/// `append` / `appendRepo`: `POST …/events`.
pub async fn append_event(
    State(state): State<SharedState>,
    caller: Option<Extension<Caller>>,
    Extension(client): Extension<Arc<Client>>,
    path: ResourcePath,
    body: Body,
) -> ApiResult<Response> {
    let r = path.resource()?;
    let event = lookup_on_failure(&state, &r, async {
        let body = state.json_body(body).await?;
        let mut write = wire::event_write(&body, "the request body")?;
        attribute(caller.as_deref(), &mut write.actor, r.kind.allows_via())?;
        validated_event(&client, r.kind, &write).map_err(ApiError::Unprocessable)
    })
    .await?;
    match state.store.append(&r, event, None).await {
        Ok(Some(envelope)) => {
            metrics::counter!("abstore_appends_total", "family" => r.kind.tag()).increment(1);
            Ok(json_response(StatusCode::CREATED, envelope))
        }
        Ok(None) => Err(ApiError::Internal(
            "unconditional append reported stale".into(),
        )),
        Err(err) => Err(err.into()),
    }
}

/// `appendIfCurrent`: `POST /builds/{slug}/events/conditional`, and the
/// session family's `POST /sessions/{id}/events/conditional` (protocol 3).
/// A stale sequence answers `200 null`, but only after the candidate
/// validated.
pub async fn append_conditional(
    State(state): State<SharedState>,
    caller: Option<Extension<Caller>>,
    Extension(client): Extension<Arc<Client>>,
    path: ResourcePath,
    body: Body,
) -> ApiResult<Response> {
    let r = path.resource()?;
    let (expected, event) = lookup_on_failure(&state, &r, async {
        let body = state.json_body(body).await?;
        let obj = wire::object(&body, "the request body")?;
        let expected = wire::nonnegative_int(obj, "expectedSeq")?;
        let mut write = wire::event_write(obj.get("event").unwrap_or(&Value::Null), "\"event\"")?;
        attribute(caller.as_deref(), &mut write.actor, r.kind.allows_via())?;
        let event = validated_event(&client, r.kind, &write).map_err(ApiError::Unprocessable)?;
        Ok((expected, event))
    })
    .await?;
    match state.store.append(&r, event, Some(expected)).await {
        Ok(Some(envelope)) => {
            metrics::counter!("abstore_appends_total", "family" => r.kind.tag()).increment(1);
            Ok(json_response(StatusCode::CREATED, envelope))
        }
        Ok(None) => Ok(json_response(StatusCode::OK, "null".into())),
        Err(err) => Err(err.into()),
    }
}

/// Parse `since` (lenient) and `wait` (digits only, clamped to `ceiling`).
pub(super) fn read_params(uri: &Uri, ceiling: Duration) -> ApiResult<(i64, Duration)> {
    let since = lenient_int(uri, "since")?.unwrap_or(0);
    let wait = match query_param(uri, "wait") {
        None => Duration::ZERO,
        Some(raw) => match wait_seconds(&raw) {
            Some(secs) => Duration::from_secs(secs).min(ceiling),
            None => {
                return Err(ApiError::BadRequest(format!(
                    "query parameter \"wait\" must be one or more ASCII digits, got \"{}\"",
                    ident::shown(&raw)
                )));
            }
        },
    };
    Ok((since, wait))
}

/// `since`/`rev`: JavaScript `Number()` accepted when an integer (section 3).
pub(super) fn lenient_int(uri: &Uri, name: &str) -> ApiResult<Option<i64>> {
    match query_param(uri, name) {
        None => Ok(None),
        Some(raw) => js_integer(&raw).map(Some).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "query parameter \"{name}\" must be an integer, got \"{}\"",
                ident::shown(&raw)
            ))
        }),
    }
}

/// A `kind` query value must obey the identifier rule like the stored kinds
/// it is compared with (a 400 naming the parameter, as for `rev`).
fn kind_param(kind: &str) -> ApiResult<()> {
    match ident::field_problem("kind", kind) {
        None => Ok(()),
        Some(problem) => Err(ApiError::BadRequest(format!("query parameter {problem}"))),
    }
}

/// A decoded, hashed artifact ready for the blob store and the metadata row.
pub(super) struct Prepared {
    pub artifact: NewArtifact,
    pub bytes: Vec<u8>,
}

/// Validate and decode one artifact input (400 for schema or base64, 413
/// above the ceiling). No I/O.
fn prepare_artifact(state: &SharedState, value: &Value, what: &str) -> ApiResult<Prepared> {
    let input = wire::artifact_input(value, what)?;
    let bytes = base64::decode(input.content_base64, state.limits.max_artifact_bytes).map_err(|err| match err {
        DecodeError::Malformed => ApiError::BadRequest(format!(
            "invalid request body: \"contentBase64\" of {what} is not strict padded standard base64"
        )),
        DecodeError::TooLarge { ceiling } => {
            ApiError::TooLarge(format!("artifact \"{}\" exceeds the {ceiling}-byte decoded size ceiling", input.kind))
        }
    })?;
    Ok(Prepared {
        artifact: NewArtifact {
            kind: input.kind.to_owned(),
            blob_ref: blob_ref(&bytes),
            size: i64::try_from(bytes.len()).unwrap_or(i64::MAX),
            metadata: input.metadata.cloned().unwrap_or_default(),
        },
        bytes,
    })
}

/// Write blobs before any metadata (docs/decisions.md, 5).
pub(super) async fn write_blobs(
    state: &SharedState,
    prepared: Vec<Prepared>,
) -> ApiResult<Vec<NewArtifact>> {
    let mut artifacts = Vec::with_capacity(prepared.len());
    for p in prepared {
        metrics::counter!("abstore_blob_bytes_written_total").increment(p.bytes.len() as u64);
        state
            .blobs
            .put(&p.artifact.blob_ref, p.bytes)
            .await
            .map_err(ApiError::blob_write_failed)?;
        artifacts.push(p.artifact);
    }
    Ok(artifacts)
}

/// `putArtifact` / `putRepoArtifact`: `POST …/artifacts`.
pub async fn put_artifact(
    State(state): State<SharedState>,
    path: ResourcePath,
    body: Body,
) -> ApiResult<Response> {
    let r = path.resource()?;
    let prepared = lookup_on_failure(&state, &r, async {
        let body = state.artifact_body(body).await?;
        prepare_artifact(&state, &body, "the artifact")
    })
    .await?;
    // Refuse before writing a blob for a resource that does not exist.
    existing(&state, &r).await?;
    let mut artifacts = write_blobs(&state, vec![prepared]).await?;
    let artifact = artifacts
        .pop()
        .ok_or_else(|| ApiError::Internal("no artifact prepared".into()))?;
    let meta = state.store.put_artifact(&r, artifact).await?;
    Ok(json(StatusCode::CREATED, &meta.to_json()))
}

/// `appendWithArtifacts` / `appendRepoWithArtifacts`: `POST …/deposits`
/// (section 8). Every artifact is decoded and checked before anything is
/// written; substitution and validation run inside the store transaction.
pub async fn deposit(
    State(state): State<SharedState>,
    caller: Option<Extension<Caller>>,
    Extension(client): Extension<Arc<Client>>,
    path: ResourcePath,
    body: Body,
) -> ApiResult<Response> {
    let r = path.resource()?;
    let (prepared, write) = lookup_on_failure(&state, &r, async {
        let body = state.artifact_body(body).await?;
        let obj = wire::object(&body, "the request body")?;
        let items = match obj.get("artifacts") {
            Some(Value::Array(items)) => items,
            Some(_) => {
                return Err(wire::SchemaError("\"artifacts\" must be an array".into()).into());
            }
            None => return Err(wire::SchemaError("\"artifacts\" is required".into()).into()),
        };
        let mut write = wire::event_write(obj.get("event").unwrap_or(&Value::Null), "\"event\"")?;
        attribute(caller.as_deref(), &mut write.actor, r.kind.allows_via())?;
        let prepared = items
            .iter()
            .enumerate()
            .map(|(i, item)| prepare_artifact(&state, item, &format!("artifact {i}")))
            .collect::<ApiResult<Vec<_>>>()?;
        Ok((prepared, write))
    })
    .await?;
    existing(&state, &r).await?;
    let artifacts = write_blobs(&state, prepared).await?;
    // Owned: the store may run it after this handler is gone (docs/decisions.md, 14).
    let kind = r.kind;
    let make_event = move |metas: &[crate::store::ArtifactMeta]| {
        let assigned: Vec<Assigned<'_>> = metas
            .iter()
            .map(|m| Assigned {
                kind: &m.kind,
                revision: m.revision,
            })
            .collect();
        let mut substituted = EventWrite {
            actor: write.actor.clone(),
            event_type: write.event_type.clone(),
            payload: write.payload.clone(),
        };
        placeholders::substitute(&mut substituted.payload, &assigned);
        validated_event(&client, kind, &substituted).map_err(StoreError::Rejected)
    };
    let (envelope, metas) = state
        .store
        .deposit(&r, artifacts, Box::new(make_event))
        .await?;
    metrics::counter!("abstore_deposits_total", "family" => r.kind.tag()).increment(1);
    let metas: Vec<String> = metas.iter().map(|m| m.to_json().to_string()).collect();
    Ok(json_response(
        StatusCode::CREATED,
        format!(
            "{{\"event\":{envelope},\"artifacts\":[{}]}}",
            metas.join(",")
        ),
    ))
}

/// `getArtifact` / `getRepoArtifact`: `GET …/artifacts?kind=&rev=`.
pub async fn get_artifact(
    State(state): State<SharedState>,
    path: ResourcePath,
    uri: Uri,
) -> ApiResult<Response> {
    let r = path.resource()?;
    let (kind, rev) = lookup_on_failure(&state, &r, async {
        let kind = query_param(&uri, "kind")
            .filter(|k| !k.is_empty())
            .ok_or_else(|| ApiError::BadRequest("query parameter \"kind\" is required".into()))?;
        kind_param(&kind)?;
        Ok((kind, lenient_int(&uri, "rev")?))
    })
    .await?;
    let meta = state.store.get_artifact(&r, &kind, rev).await?;
    let Some(meta) = meta else {
        return Ok(json_response(StatusCode::OK, "null".into()));
    };
    let bytes =
        state.blobs.get(&meta.blob_ref).await.map_err(|err| {
            ApiError::Internal(format!("blob {} unreadable: {err}", meta.blob_ref))
        })?;
    let mut out = Map::new();
    out.insert("meta".into(), meta.to_json());
    out.insert("contentBase64".into(), base64::encode(&bytes).into());
    Ok(json(StatusCode::OK, &Value::Object(out)))
}

/// `listArtifacts` / `listRepoArtifacts`: `GET …/artifact-list?kind=`. An
/// empty `kind` means all kinds, as in Autobuild's server.
pub async fn list_artifacts(
    State(state): State<SharedState>,
    path: ResourcePath,
    uri: Uri,
) -> ApiResult<Response> {
    let r = path.resource()?;
    let kind = query_param(&uri, "kind").filter(|k| !k.is_empty());
    if let Some(kind) = &kind {
        lookup_on_failure(&state, &r, async { kind_param(kind) }).await?;
    }
    let rows = state
        .store
        .read(Listing::Artifacts { resource: r, kind })
        .await?;
    Ok(rows_response(rows, "[", fixed_suffix("]")).await?)
}

fn ok(value: bool) -> Response {
    json(StatusCode::OK, &serde_json::json!({ "ok": value }))
}

/// `claimLease` / `claimRepoLease` (section 10).
pub async fn claim_lease(
    State(state): State<SharedState>,
    path: ResourcePath,
    body: Body,
) -> ApiResult<Response> {
    let r = path.resource()?;
    let (holder, ttl) = lookup_on_failure(&state, &r, async {
        let body = state.json_body(body).await?;
        let obj = wire::object(&body, "the request body")?;
        Ok((
            wire::identifier(obj, "holder")?.to_owned(),
            wire::nonnegative_int(obj, "ttlMs")?,
        ))
    })
    .await?;
    let claimed = state.store.claim_lease(&r, &holder, ttl).await?;
    Ok(ok(claimed))
}

async fn holder_body(state: &SharedState, r: &ResourceRef, body: Body) -> ApiResult<String> {
    lookup_on_failure(state, r, async {
        let body = state.json_body(body).await?;
        let obj = wire::object(&body, "the request body")?;
        Ok(wire::identifier(obj, "holder")?.to_owned())
    })
    .await
}

/// `heartbeat` / `heartbeatRepo`.
pub async fn heartbeat(
    State(state): State<SharedState>,
    path: ResourcePath,
    body: Body,
) -> ApiResult<Response> {
    let r = path.resource()?;
    let holder = holder_body(&state, &r, body).await?;
    Ok(ok(state.store.heartbeat(&r, &holder).await?))
}

/// `releaseLease` / `releaseRepoLease`: a wrong holder is a successful no-op.
pub async fn release_lease(
    State(state): State<SharedState>,
    path: ResourcePath,
    body: Body,
) -> ApiResult<Response> {
    let r = path.resource()?;
    let holder = holder_body(&state, &r, body).await?;
    state.store.release_lease(&r, &holder).await?;
    Ok(ok(true))
}

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
