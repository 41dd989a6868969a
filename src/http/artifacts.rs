//! The artifact family (spec sections 3, 4 and 8), for every resource
//! family: put, get and list artifacts, and the deposit, an event with the
//! artifacts it names (`store`'s `artifacts`, which holds the deposit's
//! rule too). Every artifact is decoded and checked before anything is
//! written, and blobs are written before any metadata.

use std::sync::Arc;

use axum::Extension;
use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use serde_json::{Map, Value};

use super::auth::{Caller, attribute};
use super::error::{ApiError, ApiResult};
use super::events::validated_event;
use super::extract::{lenient_int, query_param};
use super::lookup::{existing, lookup_on_failure};
use super::path::ResourcePath;
use super::response::{json, json_response};
use super::rows::{fixed_suffix, rows_response};
use super::state::SharedState;
use crate::blobs::blob_ref;
use crate::protocol::base64::{self, DecodeError};
use crate::protocol::placeholders::{self, Assigned};
use crate::protocol::wire::{self, EventWrite};
use crate::protocol::{Client, ident};
use crate::store::{Listing, NewArtifact, StoreError};

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
