//! Autobuild's hosted ticket protocol (docs/tickets.md): `POST
//! /tickets/{operation}` with `{context, input}`, for a repository whose
//! `[tickets]` say `source = "hosted"`.
//!
//! Order of checks, as Autobuild's hosted service has it: another method,
//! or a path outside `/tickets/`, is an unknown route (`404`) at once; the
//! identity headers (`409`) and the token (`401`; a deployment token only,
//! else `403`) are checked by the route's gate (`super::routes`), for every
//! `POST` under `/tickets/`; then an unknown operation is `404`, then the
//! body must be JSON (`400`) of the operation's strict schema (`400`), then
//! the store runs it.

use axum::Extension;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::Response;

use super::auth::Caller;
use super::error::{ApiError, ApiResult};
use super::response::json_response;
use super::state::SharedState;
use crate::tickets::{Actor, Operation, Refusal, TicketAnswer, TicketCall, wire};

/// One hosted ticket operation: the operation the path names (exactly as
/// sent: the hosted service compares the raw segment), its body, its answer.
pub(super) async fn ticket_operation(
    State(state): State<SharedState>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
    uri: Uri,
    body: Body,
) -> ApiResult<Response> {
    let name = uri.path().strip_prefix("/tickets/").unwrap_or_default();
    let Some(operation) = Operation::from_name(name) else {
        return Err(super::gate::unknown_route(&Method::POST, &uri));
    };
    let body = state.json_body(body).await?;
    let (context, op) = wire::parse(operation, &body)?;
    drop(body);
    let call = TicketCall {
        settings: state.tickets.clone(),
        context,
        op,
        actor: actor(caller, &headers),
    };
    match state.store.tickets(call).await? {
        Ok(answer) => Ok(answered(answer)),
        Err(refusal) => Err(refused(refusal)),
    }
}

/// Who asks, for the ticket's history: the verified token's scope and
/// digest (the gate verified the bearer token and left its scope), or
/// `open` on a server without a secret.
fn actor(caller: Option<Extension<Caller>>, headers: &HeaderMap) -> Actor {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok());
    match (caller, crate::auth::bearer(token)) {
        (Some(Extension(Caller(scope))), Ok(token)) => Actor::of_token(&scope, token),
        _ => Actor::open(),
    }
}

fn answered(answer: TicketAnswer) -> Response {
    match answer {
        TicketAnswer::Listing(json)
        | TicketAnswer::Ticket(Some(json))
        | TicketAnswer::DependencyStates(json) => json_response(StatusCode::OK, json),
        TicketAnswer::Ticket(None) => json_response(StatusCode::OK, "null".into()),
        TicketAnswer::Claimed(claimed) => {
            json_response(StatusCode::OK, format!("{{\"claimed\":{claimed}}}"))
        }
        TicketAnswer::Done => json_response(StatusCode::OK, "{\"ok\":true}".into()),
        TicketAnswer::Created(json) => json_response(StatusCode::CREATED, json),
    }
}

fn refused(refusal: Refusal) -> ApiError {
    match refusal {
        Refusal::Invalid(message) => ApiError::BadRequest(message),
        Refusal::Unknown(message) => ApiError::NotFound(message),
        Refusal::TooLarge(message) => ApiError::TooLarge(message),
    }
}
