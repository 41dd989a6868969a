//! The gate each route declares where it is registered ([`Rule`],
//! `super::routes`): who may reach it and which token it needs. It runs per
//! route, inside the process-wide middleware (`super::middleware`), in the
//! spec's order: the identity headers (409) → the protocols that reach the
//! route (an older client gets exactly the unknown-route answer) → the token
//! (401) and its scope (403) → the handler, which finds the client's
//! identity and the caller's scope in the request's extensions.
//!
//! Gating fails closed: a route reaches only the protocols its rule names,
//! so a route declared with none is reached by no client, and a route that
//! is not in the table does not exist.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::extract::{MatchedPath, Request};
use axum::http::{Method, Uri};
use axum::response::{IntoResponse as _, Response};
use tower::ServiceExt as _;

use super::auth::{self, AuthRule, Checked};
use super::error::ApiError;
use super::identity;
use super::path::ResourcePath;
use super::state::SharedState;
use crate::protocol::{Protocol, Protocols};

/// A route's gate: who reaches it, and what its token must cover.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    pub reach: Reach,
    pub auth: AuthRule,
}

/// Who reaches a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Anyone, without identity headers: `/health`, `/readyz`, the test clock.
    Anyone,
    /// Clients sending an accepted identity (409 otherwise) of one of these
    /// protocols; any other accepted client gets the unknown-route answer.
    Clients(Protocols),
    /// The fallback of requests no route takes (unknown paths, unsupported
    /// methods): identity headers on the machine families' paths (`/builds…`,
    /// `/repos…`, `/sessions…`, `/streams…`), a token covering what the path
    /// resembles, then `404`.
    Unrouted,
}

impl Rule {
    /// Open to anyone, no identity, no token.
    pub const OPEN: Rule = Rule {
        reach: Reach::Anyone,
        auth: AuthRule::None,
    };

    /// The fallback's rule ([`Reach::Unrouted`]).
    pub const UNROUTED: Rule = Rule {
        reach: Reach::Unrouted,
        auth: AuthRule::Resembled,
    };

    /// Clients of `protocols`, with a token covering `auth`.
    pub const fn clients(protocols: Protocols, auth: AuthRule) -> Rule {
        Rule {
            reach: Reach::Clients(protocols),
            auth,
        }
    }

    /// Anyone, without identity headers, with a token covering `auth`.
    pub const fn anyone(auth: AuthRule) -> Rule {
        Rule {
            reach: Reach::Anyone,
            auth,
        }
    }
}

/// Puts [`Gate`] in front of a route (`MethodRouter::route_layer`) or a
/// fallback handler (`Handler::layer`).
#[derive(Clone)]
pub struct GateLayer {
    rule: Rule,
    state: SharedState,
}

impl GateLayer {
    pub fn new(rule: Rule, state: SharedState) -> GateLayer {
        GateLayer { rule, state }
    }
}

impl<S> tower::Layer<S> for GateLayer {
    type Service = Gate<S>;

    fn layer(&self, inner: S) -> Gate<S> {
        Gate {
            inner,
            rule: self.rule,
            state: self.state.clone(),
        }
    }
}

/// One route (or the fallback) behind its [`Rule`].
#[derive(Clone)]
pub struct Gate<S> {
    inner: S,
    rule: Rule,
    state: SharedState,
}

impl<S> tower::Service<Request> for Gate<S>
where
    S: tower::Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Routes and handlers are always ready; nothing is reserved.
        Poll::Ready(Ok(()))
    }

    /// The identity, protocol and token checks run here, synchronously,
    /// and an admitted route's future is boxed as it is: a held read keeps
    /// no copy of its request in the gate while it waits. Only a top-level
    /// stream route's owner is looked up in the returned future.
    fn call(&mut self, mut request: Request) -> Self::Future {
        let Gate { inner, rule, state } = self.clone();
        match reach(&state, rule, &mut request) {
            Reached::Refused(refused) => Box::pin(std::future::ready(Ok(refused))),
            Reached::Elsewhere => {
                Box::pin(async move { Ok(unrouted_after_identity(&state, request).await) })
            }
            Reached::Route => match auth::check_at_once(&state, rule.auth, &mut request) {
                Checked::Admitted => Box::pin(inner.oneshot(request)),
                Checked::Refused(refused) => {
                    Box::pin(std::future::ready(Ok(refused.into_response())))
                }
                Checked::Pending(lookup) => Box::pin(async move {
                    if let Err(refused) = lookup.finish(&state, &mut request).await {
                        return Ok(refused.into_response());
                    }
                    inner.oneshot(request).await
                }),
            },
        }
    }
}

/// Where the identity and protocol checks send a request.
enum Reached {
    /// On to the token check and the route.
    Route,
    /// Answered as a path no route takes: its client's protocol does not
    /// reach the route.
    Elsewhere,
    /// Refused by the identity check (409).
    Refused(Response),
}

/// The gate's identity and protocol checks in order (see the module doc);
/// an accepted client's identity rides along in the request's extensions.
fn reach(state: &SharedState, rule: Rule, request: &mut Request) -> Reached {
    match rule.reach {
        Reach::Anyone => {}
        Reach::Clients(protocols) => {
            let client = match identity::check(&state.access.clients, request.headers()) {
                Ok(client) => client,
                Err(refused) => return Reached::Refused(refused.into_response()),
            };
            if !protocols.contains(client.protocol) {
                return Reached::Elsewhere;
            }
            request.extensions_mut().insert(client);
        }
        Reach::Unrouted => {
            if ResourcePath::family(request.uri().path()).is_some()
                && let Err(refused) = identity::check(&state.access.clients, request.headers())
            {
                return Reached::Refused(refused.into_response());
            }
        }
    }
    Reached::Route
}

/// A route its client's protocol does not reach: answered exactly as a path
/// no route takes (authorized as what it resembles, then `404`), as from a
/// server without the route.
async fn unrouted_after_identity(state: &SharedState, mut request: Request) -> Response {
    request.extensions_mut().remove::<MatchedPath>();
    if let Err(refused) = auth::check(state, AuthRule::Resembled, &mut request).await {
        return refused.into_response();
    }
    unknown_route(request.method(), request.uri()).into_response()
}

/// Unknown routes and unsupported methods are both `404 not-found`.
pub async fn no_route(method: Method, uri: Uri) -> ApiError {
    unknown_route(&method, &uri)
}

pub(super) fn unknown_route(method: &Method, uri: &Uri) -> ApiError {
    ApiError::NotFound(format!("no route: {method} {}", uri.path()))
}

impl std::fmt::Display for Reach {
    /// As `abstore routes` prints it: `anyone`, `protocols 2, 3`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reach::Anyone => f.write_str("anyone"),
            Reach::Unrouted => f.write_str("no route"),
            Reach::Clients(protocols) => {
                let listed: Vec<&str> = protocols.iter().map(Protocol::as_str).collect();
                match listed.as_slice() {
                    [] => f.write_str("no protocol"),
                    [one] => write!(f, "protocol {one}"),
                    many => write!(f, "protocols {}", many.join(", ")),
                }
            }
        }
    }
}
