//! Handlers for held reads, which read their request before they wait.
//!
//! An async fn handler with extractors keeps, for as long as it runs, the
//! request's parts (~240 bytes), each extracted argument and its own
//! copies of them. Most handlers finish in microseconds; a held read runs
//! for up to `--max-wait` seconds, once per waiting client. A
//! [`Prepared`] handler is a plain function of the request's parts that
//! reads what it needs from them and returns a future holding only that.

use std::future::Future;
use std::pin::Pin;

use axum::extract::Request;
use axum::handler::Handler;
use axum::http::request::Parts;
use axum::response::Response;

use super::state::SharedState;

/// A route's answer, started.
pub type Answer = Pin<Box<dyn Future<Output = Response> + Send>>;

/// A handler that reads the request's parts before anything awaits (the
/// module doc says why). The body is dropped unread: held reads are `GET`s.
#[derive(Clone, Copy)]
pub struct Prepared(pub fn(Parts, SharedState) -> Answer);

impl Handler<Prepared, SharedState> for Prepared {
    type Future = Answer;

    fn call(self, request: Request, state: SharedState) -> Answer {
        let (parts, _body) = request.into_parts();
        (self.0)(parts, state)
    }
}
