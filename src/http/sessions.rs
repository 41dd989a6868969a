//! Operator sessions (spec section 5): created and listed under their
//! repository (`/repos/{repo}/sessions`), addressed as `/sessions/{id}` with
//! events, deposits, artifacts and streams like any resource, and no leases.

use std::sync::Arc;

use axum::Extension;
use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};

use super::error::ApiResult;
use super::lookup::lookup_on_failure;
use super::path::ResourcePath;
use super::state::SharedState;
use crate::protocol::{Client, wire};
use crate::store::{Listing, NewEvent, StoreError};

/// A new, unguessable session id: `os_` and 128 random bits.
fn new_session_id() -> String {
    format!("os_{:032x}", rand::random::<u128>())
}

/// `createSession`: `POST /repos/{repo}/sessions` with
/// `{"repo", "operator", "title"?}`. The record and `session.created`
/// (sequence 1, the operator as a human actor) commit together.
pub(super) async fn create_session(
    State(state): State<SharedState>,
    Extension(client): Extension<Arc<Client>>,
    path: ResourcePath,
    body: Body,
) -> ApiResult<Response> {
    let repo = path.resource()?;
    let attrs = lookup_on_failure(&state, &repo, async {
        let body = state.json_body(body).await?;
        let obj = wire::object(&body, "the request body")?;
        Ok(wire::session_attrs(obj, &repo.id)?)
    })
    .await?;
    let actor = json!({ "kind": "human", "user": attrs["operator"] });
    let payload = created_payload(&attrs);
    // Owned: the store may run it after this handler is gone (docs/decisions.md, 14).
    let make_event = move || {
        let validated = client
            .catalogs
            .validate(
                abstore_catalog::Family::Session,
                &actor,
                "session.created",
                &payload,
            )
            .map_err(|err| StoreError::Rejected(err.message))?;
        Ok(NewEvent {
            actor_json: actor.to_string(),
            type_json: "\"session.created\"".into(),
            payload_json: validated.to_string(),
        })
    };
    let record = state
        .store
        .create_session(
            &repo.id,
            &new_session_id(),
            attrs.clone(),
            Box::new(make_event),
        )
        .await?;
    metrics::counter!("abstore_sessions_created_total").increment(1);
    Ok(super::response::json(
        StatusCode::CREATED,
        &record.to_json(),
    ))
}

/// `session.created`'s payload: `{title?}`, for every client. Autobuild's
/// public session catalog (shared by 0.8.0 and 0.9.0) has no `repo` or
/// `operator` member, and its own stores write exactly this; the record
/// carries `repo` and `operator` (docs/decisions.md, 22).
fn created_payload(attrs: &Map<String, Value>) -> Value {
    let mut payload = Map::new();
    if let Some(title) = attrs.get("title") {
        payload.insert("title".into(), title.clone());
    }
    Value::Object(payload)
}

/// `listSessions`: creation order.
pub(super) async fn list_sessions(
    State(state): State<SharedState>,
    path: ResourcePath,
) -> ApiResult<Response> {
    let repo = path.resource()?;
    let rows = state
        .store
        .read(Listing::Sessions { repo: repo.id })
        .await?;
    Ok(super::rows::rows_response(rows, "[", super::rows::fixed_suffix("]")).await?)
}
