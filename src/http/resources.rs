//! Operations shared by every resource family (spec sections 3, 4 and 8):
//! events, conditional append, deposits, artifacts and leases. Handlers are
//! generic over a [`Family`] marker so builds and repositories share one
//! implementation and sessions can join by adding a marker.
//!
//! Order inside a handler (identity and token scope were checked by the
//! middleware): resource id (400 on bad encoding) → body (400/413) → event
//! attribution (403) → catalog (422) → store (404 when the resource is
//! absent). A failure before the store on a resource that does not exist
//! answers 404, as if the lookup had come first (`reject`), without costing
//! a lookup on success.

use std::marker::PhantomData;
use std::time::Duration;

use axum::Extension;
use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use serde_json::{Map, Value};

use super::auth::{Caller, attribute};
use super::extract::{json_body, lookup_id, query_param, resource_id};
use super::{ApiError, ApiResult, SharedState, json, json_response};
use crate::blobs::blob_ref;
use crate::protocol::base64::{self, DecodeError};
use crate::protocol::numbers::{js_integer, wait_seconds};
use crate::protocol::placeholders::{self, Assigned};
use crate::protocol::wire::{self, EventWrite};
use crate::protocol::{ResourceKind, ResourceRef, ident};
use crate::store::{NewArtifact, NewEvent, StoreError};

/// A resource family: which kind of resource, which event catalog.
pub trait Family: Send + Sync + 'static {
    const KIND: ResourceKind;
    const CATALOG: abstore_catalog::Family;
    /// Whether human actors may carry `via` (build and repository events only).
    const ALLOWS_VIA: bool;
    /// Whether the family has the lease routes (sessions do not).
    const HAS_LEASES: bool = true;
}

pub struct Builds;
pub struct Repos;
pub struct Sessions;

impl Family for Builds {
    const KIND: ResourceKind = ResourceKind::Build;
    const CATALOG: abstore_catalog::Family = abstore_catalog::Family::Build;
    const ALLOWS_VIA: bool = true;
}

impl Family for Repos {
    const KIND: ResourceKind = ResourceKind::Repo;
    const CATALOG: abstore_catalog::Family = abstore_catalog::Family::Repository;
    const ALLOWS_VIA: bool = true;
}

impl Family for Sessions {
    const KIND: ResourceKind = ResourceKind::Session;
    const CATALOG: abstore_catalog::Family = abstore_catalog::Family::Session;
    /// Session events are the delegate's own log (spec section 5).
    const ALLOWS_VIA: bool = false;
    const HAS_LEASES: bool = false;
}

/// The addressed resource of family `F`, decoded from the path.
pub struct Addressed<F: Family> {
    pub resource: ResourceRef,
    _family: PhantomData<F>,
}

impl<F: Family> Addressed<F> {
    /// The path's resource; an id that could never be stored is unknown (404).
    pub fn from_uri(uri: &Uri) -> ApiResult<Self> {
        let id = lookup_id(resource_id(uri)?, |id| {
            ApiError::unknown(&ResourceRef::new(F::KIND, id))
        })?;
        Ok(Addressed {
            resource: ResourceRef::new(F::KIND, id),
            _family: PhantomData,
        })
    }
}

/// A request failed before reaching the store: answer 404 if the resource
/// does not exist (lookup precedes body evaluation), else the failure itself.
pub(super) async fn reject(state: &SharedState, resource: &ResourceRef, err: ApiError) -> ApiError {
    match state.store.get_record(resource).await {
        Ok(Some(_)) => err,
        Ok(None) => ApiError::unknown(resource),
        Err(store) => ApiError::from_store(store, resource),
    }
}

/// Run the pre-store part of a handler, mapping its failure through `reject`.
pub(super) async fn prepare<T>(
    state: &SharedState,
    resource: &ResourceRef,
    result: ApiResult<T>,
) -> ApiResult<T> {
    match result {
        Ok(value) => Ok(value),
        Err(err) => Err(reject(state, resource, err).await),
    }
}

/// Check an event write against family `F`'s catalog and serialise it with
/// the *validated* payload: the catalog's normalisation (defaults, trims) is
/// what the envelope carries (spec section 3), as in Autobuild.
fn validated_event<F: Family>(state: &SharedState, write: &EventWrite) -> Result<NewEvent, String> {
    let payload = state
        .catalogs
        .validate(F::CATALOG, &write.actor, &write.event_type, &write.payload)
        .map_err(|err| err.message)?;
    Ok(NewEvent {
        actor_json: write.actor.to_string(),
        type_json: Value::String(write.event_type.clone()).to_string(),
        payload_json: payload.to_string(),
    })
}

/// `append` / `appendRepo`: `POST …/events`.
pub async fn append_event<F: Family>(
    State(state): State<SharedState>,
    caller: Option<Extension<Caller>>,
    uri: Uri,
    body: Body,
) -> ApiResult<Response> {
    let r = Addressed::<F>::from_uri(&uri)?.resource;
    let event = prepare(
        &state,
        &r,
        async {
            let body = json_body(body, state.limits.max_body_bytes).await?;
            let mut write = wire::event_write(&body, "the request body")?;
            attribute(caller.as_deref(), &mut write.actor, F::ALLOWS_VIA)?;
            validated_event::<F>(&state, &write).map_err(ApiError::Unprocessable)
        }
        .await,
    )
    .await?;
    match state.store.append(&r, event, None).await {
        Ok(Some(envelope)) => {
            metrics::counter!("abstore_appends_total", "family" => F::KIND.tag()).increment(1);
            Ok(json_response(StatusCode::CREATED, envelope))
        }
        Ok(None) => Err(ApiError::Internal(
            "unconditional append reported stale".into(),
        )),
        Err(err) => Err(ApiError::from_store(err, &r)),
    }
}

/// `appendIfCurrent`: `POST /builds/{slug}/events/conditional`. A stale
/// sequence answers `200 null`, but only after the candidate validated.
pub async fn append_conditional<F: Family>(
    State(state): State<SharedState>,
    caller: Option<Extension<Caller>>,
    uri: Uri,
    body: Body,
) -> ApiResult<Response> {
    let r = Addressed::<F>::from_uri(&uri)?.resource;
    let (expected, event) = prepare(
        &state,
        &r,
        async {
            let body = json_body(body, state.limits.max_body_bytes).await?;
            let obj = wire::object(&body, "the request body")?;
            let expected = wire::nonnegative_int(obj, "expectedSeq")?;
            let mut write =
                wire::event_write(obj.get("event").unwrap_or(&Value::Null), "\"event\"")?;
            attribute(caller.as_deref(), &mut write.actor, F::ALLOWS_VIA)?;
            let event = validated_event::<F>(&state, &write).map_err(ApiError::Unprocessable)?;
            Ok((expected, event))
        }
        .await,
    )
    .await?;
    match state.store.append(&r, event, Some(expected)).await {
        Ok(Some(envelope)) => {
            metrics::counter!("abstore_appends_total", "family" => F::KIND.tag()).increment(1);
            Ok(json_response(StatusCode::CREATED, envelope))
        }
        Ok(None) => Ok(json_response(StatusCode::OK, "null".into())),
        Err(err) => Err(ApiError::from_store(err, &r)),
    }
}

/// `getEvents` / `getRepoEvents`: `GET …/events?since=&wait=`, with the
/// bounded wait of section 3.
pub async fn read_events<F: Family>(
    State(state): State<SharedState>,
    uri: Uri,
) -> ApiResult<Response> {
    let r = Addressed::<F>::from_uri(&uri)?.resource;
    let (since, wait) = prepare(&state, &r, read_params(&uri, state.limits.max_wait)).await?;
    let events = super::hold::hold(
        &state,
        &state.event_flights,
        &r,
        since,
        wait,
        || state.store.events_since(&r, since),
        |events: &Vec<String>| !events.is_empty(),
    )
    .await
    .map_err(|err| ApiError::from_store(err, &r))?;
    Ok(json_response(
        StatusCode::OK,
        format!("[{}]", events.join(",")),
    ))
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
                    "query parameter \"wait\" must be one or more ASCII digits, got \"{raw}\""
                )));
            }
        },
    };
    Ok((since, wait))
}

/// `since`/`rev`: JavaScript `Number()` accepted when an integer (section 3).
fn lenient_int(uri: &Uri, name: &str) -> ApiResult<Option<i64>> {
    match query_param(uri, name) {
        None => Ok(None),
        Some(raw) => js_integer(&raw).map(Some).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "query parameter \"{name}\" must be an integer, got \"{raw}\""
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

/// Write blobs before any metadata (DESIGN decision 5).
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
            .map_err(|err| ApiError::Internal(format!("blob write failed: {err}")))?;
        artifacts.push(p.artifact);
    }
    Ok(artifacts)
}

/// `putArtifact` / `putRepoArtifact`: `POST …/artifacts`.
pub async fn put_artifact<F: Family>(
    State(state): State<SharedState>,
    uri: Uri,
    body: Body,
) -> ApiResult<Response> {
    let r = Addressed::<F>::from_uri(&uri)?.resource;
    let prepared = prepare(
        &state,
        &r,
        async {
            let body = json_body(body, state.limits.max_body_bytes).await?;
            prepare_artifact(&state, &body, "the artifact")
        }
        .await,
    )
    .await?;
    // Refuse before writing a blob for a resource that does not exist.
    if state
        .store
        .get_record(&r)
        .await
        .map_err(|e| ApiError::from_store(e, &r))?
        .is_none()
    {
        return Err(ApiError::unknown(&r));
    }
    let mut artifacts = write_blobs(&state, vec![prepared]).await?;
    let artifact = artifacts
        .pop()
        .ok_or_else(|| ApiError::Internal("no artifact prepared".into()))?;
    let meta = state
        .store
        .put_artifact(&r, artifact)
        .await
        .map_err(|e| ApiError::from_store(e, &r))?;
    Ok(json(StatusCode::CREATED, &meta.to_json()))
}

/// `appendWithArtifacts` / `appendRepoWithArtifacts`: `POST …/deposits`
/// (section 8). Every artifact is decoded and checked before anything is
/// written; substitution and validation run inside the store transaction.
pub async fn deposit<F: Family>(
    State(state): State<SharedState>,
    caller: Option<Extension<Caller>>,
    uri: Uri,
    body: Body,
) -> ApiResult<Response> {
    let r = Addressed::<F>::from_uri(&uri)?.resource;
    let (prepared, write) = prepare(
        &state,
        &r,
        async {
            let body = json_body(body, state.limits.max_body_bytes).await?;
            let obj = wire::object(&body, "the request body")?;
            let items = match obj.get("artifacts") {
                Some(Value::Array(items)) => items,
                Some(_) => {
                    return Err(wire::SchemaError("\"artifacts\" must be an array".into()).into());
                }
                None => return Err(wire::SchemaError("\"artifacts\" is required".into()).into()),
            };
            let mut write =
                wire::event_write(obj.get("event").unwrap_or(&Value::Null), "\"event\"")?;
            attribute(caller.as_deref(), &mut write.actor, F::ALLOWS_VIA)?;
            let prepared = items
                .iter()
                .enumerate()
                .map(|(i, item)| prepare_artifact(&state, item, &format!("artifact {i}")))
                .collect::<ApiResult<Vec<_>>>()?;
            Ok((prepared, write))
        }
        .await,
    )
    .await?;
    if state
        .store
        .get_record(&r)
        .await
        .map_err(|e| ApiError::from_store(e, &r))?
        .is_none()
    {
        return Err(ApiError::unknown(&r));
    }
    let artifacts = write_blobs(&state, prepared).await?;
    // Owned: the store may run it after this handler is gone (DESIGN 14).
    let event_state = state.clone();
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
        validated_event::<F>(&event_state, &substituted).map_err(StoreError::Rejected)
    };
    let (envelope, metas) = state
        .store
        .deposit(&r, artifacts, Box::new(make_event))
        .await
        .map_err(|e| ApiError::from_store(e, &r))?;
    metrics::counter!("abstore_deposits_total", "family" => F::KIND.tag()).increment(1);
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
pub async fn get_artifact<F: Family>(
    State(state): State<SharedState>,
    uri: Uri,
) -> ApiResult<Response> {
    let r = Addressed::<F>::from_uri(&uri)?.resource;
    let kind = query_param(&uri, "kind").filter(|k| !k.is_empty());
    let Some(kind) = kind else {
        return Err(reject(
            &state,
            &r,
            ApiError::BadRequest("query parameter \"kind\" is required".into()),
        )
        .await);
    };
    prepare(&state, &r, kind_param(&kind)).await?;
    let rev = prepare(&state, &r, lenient_int(&uri, "rev")).await?;
    let meta = state
        .store
        .get_artifact(&r, &kind, rev)
        .await
        .map_err(|e| ApiError::from_store(e, &r))?;
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
pub async fn list_artifacts<F: Family>(
    State(state): State<SharedState>,
    uri: Uri,
) -> ApiResult<Response> {
    let r = Addressed::<F>::from_uri(&uri)?.resource;
    let kind = query_param(&uri, "kind").filter(|k| !k.is_empty());
    if let Some(kind) = &kind {
        prepare(&state, &r, kind_param(kind)).await?;
    }
    let metas = state
        .store
        .list_artifacts(&r, kind.as_deref())
        .await
        .map_err(|e| ApiError::from_store(e, &r))?;
    Ok(json(
        StatusCode::OK,
        &Value::Array(metas.iter().map(|m| m.to_json()).collect()),
    ))
}

fn ok(value: bool) -> Response {
    json(StatusCode::OK, &serde_json::json!({ "ok": value }))
}

/// `claimLease` / `claimRepoLease` (section 10).
pub async fn claim_lease<F: Family>(
    State(state): State<SharedState>,
    uri: Uri,
    body: Body,
) -> ApiResult<Response> {
    let r = Addressed::<F>::from_uri(&uri)?.resource;
    let (holder, ttl) = prepare(
        &state,
        &r,
        async {
            let body = json_body(body, state.limits.max_body_bytes).await?;
            let obj = wire::object(&body, "the request body")?;
            Ok((
                wire::identifier(obj, "holder")?.to_owned(),
                wire::nonnegative_int(obj, "ttlMs")?,
            ))
        }
        .await,
    )
    .await?;
    let claimed = state
        .store
        .claim_lease(&r, &holder, ttl)
        .await
        .map_err(|e| ApiError::from_store(e, &r))?;
    Ok(ok(claimed))
}

async fn holder_body(state: &SharedState, r: &ResourceRef, body: Body) -> ApiResult<String> {
    prepare(
        state,
        r,
        async {
            let body = json_body(body, state.limits.max_body_bytes).await?;
            let obj = wire::object(&body, "the request body")?;
            Ok(wire::identifier(obj, "holder")?.to_owned())
        }
        .await,
    )
    .await
}

/// `heartbeat` / `heartbeatRepo`.
pub async fn heartbeat<F: Family>(
    State(state): State<SharedState>,
    uri: Uri,
    body: Body,
) -> ApiResult<Response> {
    let r = Addressed::<F>::from_uri(&uri)?.resource;
    let holder = holder_body(&state, &r, body).await?;
    Ok(ok(state
        .store
        .heartbeat(&r, &holder)
        .await
        .map_err(|e| ApiError::from_store(e, &r))?))
}

/// `releaseLease` / `releaseRepoLease`: a wrong holder is a successful no-op.
pub async fn release_lease<F: Family>(
    State(state): State<SharedState>,
    uri: Uri,
    body: Body,
) -> ApiResult<Response> {
    let r = Addressed::<F>::from_uri(&uri)?.resource;
    let holder = holder_body(&state, &r, body).await?;
    state
        .store
        .release_lease(&r, &holder)
        .await
        .map_err(|e| ApiError::from_store(e, &r))?;
    Ok(ok(true))
}

/// `getBuild` / `getRepo`.
pub async fn get_record<F: Family>(
    State(state): State<SharedState>,
    uri: Uri,
) -> ApiResult<Response> {
    let r = Addressed::<F>::from_uri(&uri)?.resource;
    match state
        .store
        .get_record(&r)
        .await
        .map_err(|e| ApiError::from_store(e, &r))?
    {
        Some(record) => Ok(json(StatusCode::OK, &record.to_json())),
        None => Err(ApiError::unknown(&r)),
    }
}

/// The routes every family has under its `/{id}` segment.
pub fn family_routes<F: Family>(prefix: &str) -> axum::Router<SharedState> {
    use axum::routing::{get, post};
    let routes = axum::Router::new()
        .route(&format!("{prefix}/{{id}}"), get(get_record::<F>))
        .route(
            &format!("{prefix}/{{id}}/events"),
            post(append_event::<F>).get(read_events::<F>),
        )
        .route(&format!("{prefix}/{{id}}/deposits"), post(deposit::<F>))
        .route(
            &format!("{prefix}/{{id}}/artifacts"),
            post(put_artifact::<F>).get(get_artifact::<F>),
        )
        .route(
            &format!("{prefix}/{{id}}/artifact-list"),
            get(list_artifacts::<F>),
        );
    if !F::HAS_LEASES {
        return routes;
    }
    routes
        .route(
            &format!("{prefix}/{{id}}/lease/claim"),
            post(claim_lease::<F>),
        )
        .route(
            &format!("{prefix}/{{id}}/lease/heartbeat"),
            post(heartbeat::<F>),
        )
        .route(
            &format!("{prefix}/{{id}}/lease/release"),
            post(release_lease::<F>),
        )
}
