//! The event family's writes (spec sections 3, 4 and 8), for every
//! resource family: append and conditional append (`store`'s `events`).
//! The reads are `super::event_reads`.
//!
//! Order inside a handler (identity and token scope were checked by the
//! gate): resource id (400 on bad encoding) → body (400/413) → event
//! attribution (403) → catalog (422) → store (404 when the resource is
//! absent; `super::lookup`).

use std::sync::Arc;

use axum::Extension;
use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;

use super::auth::{Caller, attribute};
use super::error::{ApiError, ApiResult};
use super::lookup::lookup_on_failure;
use super::path::ResourcePath;
use super::response::json_response;
use super::state::SharedState;
use crate::protocol::wire::{self, EventWrite};
use crate::protocol::{Client, ResourceKind};
use crate::store::NewEvent;

/// Check an event write against its family's catalog — the catalogs of the
/// client's identity ([`Client`]) — and serialise it with the *validated*
/// payload: the catalog's normalisation (defaults, trims) is what the
/// envelope carries (spec section 3), as in Autobuild.
pub(super) fn validated_event(
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
