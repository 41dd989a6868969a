//! Autobuild's hosted ticket protocol (docs/tickets.md): `POST
//! /tickets/{operation}` with `{context, input}`, for a repository whose
//! `[tickets]` say `source = "hosted"`.
//!
//! Order of checks, as Autobuild's hosted service has it: another method,
//! or a path outside `/tickets/`, is an unknown route (`404`) at once; the
//! identity headers (`409`) and the token (`401`; a deployment token only,
//! else `403`) are checked by the middleware, for every `POST` under
//! `/tickets/` (`path::is_ticket_route`); then an unknown operation is
//! `404`, then the body must be JSON (`400`) of the operation's strict
//! schema (`400`), then the store runs it.

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use axum::response::Response;
use axum::routing::post;

use super::{ApiError, ApiResult, SharedState, json_response};
use crate::tickets::{Operation, Refusal, TicketAnswer, TicketCall, wire};

pub fn router() -> Router<SharedState> {
    Router::new().route("/tickets/{operation}", post(ticket_operation))
}

/// One hosted ticket operation: the operation the path names (exactly as
/// sent: the hosted service compares the raw segment), its body, its answer.
async fn ticket_operation(
    State(state): State<SharedState>,
    uri: Uri,
    body: Body,
) -> ApiResult<Response> {
    let name = uri.path().strip_prefix("/tickets/").unwrap_or_default();
    let Some(operation) = Operation::from_name(name) else {
        return Err(super::unknown_route(&Method::POST, &uri));
    };
    let body = state.json_body(body).await?;
    let (context, op) = wire::parse(operation, &body)?;
    drop(body);
    let call = TicketCall {
        settings: state.tickets.clone(),
        context,
        op,
    };
    match state.store.tickets(call).await? {
        Ok(answer) => Ok(answered(answer)),
        Err(refusal) => Err(refused(refusal)),
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
