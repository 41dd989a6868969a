//! Authenticated mode (spec section 7) in the request pipeline: after the
//! identity check and before any body is read or resource looked up, a
//! machine route needs a bearer token that verifies (401) and whose scope
//! covers the addressed resource (403). The verified scope rides along in
//! the request extensions for event attribution, and is written into the
//! request's log line (`scope=build:b1`, `admin`, …; `open` in open mode).
//! Open mode skips all of it.
//!
//! A token verifies when a secret in force signed it, it has not expired,
//! its `exp` lies within `--max-token-lifetime` of now, and it is not
//! revoked; every failure is the same opaque `401 invalid or expired token`
//! but the lifetime's, which says why (its token verified: see
//! `MaxLifetime::refusal`). Each reason is counted
//! (`abstore_auth_failures_total`) and logged with the request
//! (`refused=…`).
//!
//! What the token must cover is the route's [`AuthRule`], declared with the
//! route (`super::routes`). `POST /_test/clock` (only with `--test-clock`)
//! moves the clock that judges every expiry, so in authenticated mode it
//! needs an admin or deployment token too; reading the clock stays open.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;

use super::error::{ApiError, ApiResult};
use super::path::ResourcePath;
use super::state::SharedState;
use crate::auth::{self, Failure, Scope, Target};
use crate::protocol::ResourceKind;

/// The verified scope of an authenticated request.
#[derive(Clone)]
pub struct Caller(pub Arc<Scope>);

/// What a route's token must cover in authenticated mode (spec section 7);
/// open mode checks no token. The resource comes from the path's `{id}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthRule {
    /// No token: `/health`, `/readyz`, reading the test clock.
    None,
    /// Admin or deployment: `/builds`.
    BuildCollection,
    /// `/builds/{id}…`.
    Build,
    /// Admin or deployment: `POST /repos`.
    RepoCollection,
    /// `/repos/{id}…`.
    Repo,
    /// `/repos/{id}/sessions`.
    RepoSessions,
    /// `/sessions/{id}…`.
    Session,
    /// `/streams/{sid}…`: the stream's own scope, looked up first (an
    /// unknown stream is 404 before scope is judged).
    StreamOwner,
    /// Admin or deployment: moving the test clock.
    TestClock,
    /// Deployment only: Autobuild's hosted ticket operations (its hosted
    /// service accepts no other token).
    Tickets,
    /// What an unrouted path resembles (`/builds/x/nope` as a build route).
    Resembled,
    /// The web console (`crate::http::console`): a browser's session cookie,
    /// checked by the console itself against the same token rules.
    Console,
}

impl AuthRule {
    /// Whose token the rule accepts in authenticated mode, as `abstore
    /// routes` prints it (admin and deployment tokens pass every rule).
    pub fn describe(self) -> &'static str {
        match self {
            AuthRule::None => "no token",
            AuthRule::BuildCollection | AuthRule::RepoCollection | AuthRule::TestClock => {
                "admin or deployment"
            }
            AuthRule::Build => "the build's",
            AuthRule::Repo | AuthRule::RepoSessions => "the repository's",
            AuthRule::Session => "the session's",
            AuthRule::Tickets => "deployment only",
            AuthRule::StreamOwner => "the stream owner's",
            AuthRule::Resembled => "as the path it resembles",
            AuthRule::Console => "a console session's",
        }
    }
}

/// What `rule` asks the token of a request to `path` to cover; `None` for
/// a top-level stream route, whose scope is the stream's own (looked up by
/// [`OwnerLookup`]).
fn target<'a>(rule: AuthRule, path: &'a ResourcePath) -> ApiResult<Option<Target<'a>>> {
    if let Some(target) = fixed_target(rule) {
        return Ok(Some(target));
    }
    Ok(Some(match rule {
        AuthRule::None
        | AuthRule::Console
        | AuthRule::BuildCollection
        | AuthRule::RepoCollection
        | AuthRule::TestClock
        | AuthRule::Tickets => return Err(ApiError::Internal("no token to check".into())),
        AuthRule::Build => Target::Build(path.id()?),
        AuthRule::Repo => Target::Repo(path.id()?),
        AuthRule::RepoSessions => Target::RepoSessions(path.id()?),
        AuthRule::Session => Target::Session(path.id()?),
        AuthRule::StreamOwner => return Ok(None),
        AuthRule::Resembled => return Ok(path.resembled_target()),
    }))
}

/// The target of a rule that names no resource: the same whatever the path.
fn fixed_target(rule: AuthRule) -> Option<Target<'static>> {
    Some(match rule {
        AuthRule::BuildCollection => Target::BuildCollection,
        AuthRule::RepoCollection => Target::RepoCollection,
        AuthRule::TestClock => Target::TestClock,
        AuthRule::Tickets => Target::Tickets,
        _ => return None,
    })
}

/// A token check waiting on one lookup: a top-level stream route
/// authorizes against the stream's own scope (spec section 6), so an
/// unknown stream is 404 before scope is judged.
pub struct OwnerLookup {
    scope: Scope,
    path: ResourcePath,
}

impl OwnerLookup {
    /// Look the stream up, judge the token's scope against its owner's, and
    /// let the scope ride along in the request's extensions.
    pub async fn finish(self, state: &SharedState, request: &mut Request) -> ApiResult<()> {
        let OwnerLookup { scope, path } = self;
        let id = path.stream_id()?;
        let stream = state
            .store
            .get_stream(&id)
            .await?
            .ok_or_else(|| super::path::unknown_stream(&id))?;
        let owner = stream.scope;
        let target = match owner.kind {
            ResourceKind::Build => Target::Build(&owner.id),
            ResourceKind::Repo => Target::Repo(&owner.id),
            ResourceKind::Session => Target::Session(&owner.id),
            ResourceKind::Stream => {
                return Err(ApiError::Internal("a stream scoped to a stream".into()));
            }
        };
        permit(&scope, &target)?;
        request.extensions_mut().insert(Caller(Arc::new(scope)));
        Ok(())
    }
}

/// `403` (counted) unless `scope` may address `target`.
fn permit(scope: &Scope, target: &Target<'_>) -> ApiResult<()> {
    auth::authorize(scope, target).map_err(|denied| {
        refused(Failure::Forbidden);
        ApiError::Forbidden(denied.message().to_owned())
    })
}

/// What the token check decided without waiting.
pub enum Checked {
    /// Admitted: open mode, a rule that takes no token, or a token whose
    /// scope covers the target (the scope then rides along in the request's
    /// extensions).
    Admitted,
    /// The 401 or 403 (or the path's own 400/404).
    Refused(ApiError),
    /// A top-level stream route: the stream's owner must be looked up.
    Pending(OwnerLookup),
}

/// 401 unless the request carries a verifying bearer token, 403 unless its
/// scope covers what `rule` names; the scope then rides along in the
/// request's extensions. Open mode, or a rule needing no token: nothing to
/// check. Synchronous but for a top-level stream route's owner
/// ([`Checked::Pending`]), so the gate's future holds no request while
/// any other route runs (a held read waits in it).
pub fn check_at_once(state: &SharedState, rule: AuthRule, request: &mut Request) -> Checked {
    match decide(state, rule, request) {
        Ok(checked) => checked,
        Err(refused) => Checked::Refused(refused),
    }
}

/// [`check_at_once`], then the owner's lookup where one is needed.
pub async fn check(state: &SharedState, rule: AuthRule, request: &mut Request) -> ApiResult<()> {
    match check_at_once(state, rule, request) {
        Checked::Admitted => Ok(()),
        Checked::Refused(refused) => Err(refused),
        Checked::Pending(lookup) => lookup.finish(state, request).await,
    }
}

fn decide(state: &SharedState, rule: AuthRule, request: &mut Request) -> ApiResult<Checked> {
    let Some(secret) = &state.access.secret else {
        tracing::Span::current().record("scope", tracing::field::display("open"));
        return Ok(Checked::Admitted);
    };
    let path = match rule {
        // The console checks its own session (`crate::http::console::session`).
        AuthRule::None | AuthRule::Console => return Ok(Checked::Admitted),
        // Rules whose target no path names.
        AuthRule::TestClock | AuthRule::Tickets => None,
        AuthRule::Resembled => {
            // Only the machine families' paths need a token to learn that
            // nothing is there.
            let Some(path) = ResourcePath::parse(None, request.uri()) else {
                return Ok(Checked::Admitted);
            };
            Some(path)
        }
        _ => Some(ResourcePath::matched(request.extensions(), request.uri())),
    };
    let scope = authenticate(state, secret, request.headers())?;
    record_scope(&scope);
    match path {
        None => {
            let target = fixed_target(rule)
                .ok_or_else(|| ApiError::Internal(format!("{rule:?} names no target")))?;
            permit(&scope, &target)?;
        }
        Some(path) => {
            let path = path?;
            match target(rule, &path)? {
                Some(target) => permit(&scope, &target)?,
                None => return Ok(Checked::Pending(OwnerLookup { scope, path })),
            }
        }
    }
    request.extensions_mut().insert(Caller(Arc::new(scope)));
    Ok(Checked::Admitted)
}

/// The scope of the request's bearer token, if it verifies (see the module
/// doc); otherwise the 401 the spec gives, whatever the reason.
fn authenticate(
    state: &SharedState,
    secret: &crate::secret::Secret,
    headers: &HeaderMap,
) -> ApiResult<Scope> {
    let header = headers
        .get(AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or_default());
    let Ok(token) = auth::bearer(header) else {
        refused(Failure::Missing);
        return Err(ApiError::Unauthenticated("missing bearer token".into()));
    };
    verify_token(state, secret, token)
}

/// The scope of `token` if it verifies exactly as a bearer token does (see
/// the module doc): the console signs in and re-checks its sessions here.
pub fn verify_token(
    state: &SharedState,
    secret: &crate::secret::Secret,
    token: &str,
) -> ApiResult<Scope> {
    let invalid = |failure: Failure| {
        refused(failure);
        ApiError::Unauthenticated(auth::InvalidToken.to_string())
    };
    let now = state.access.clock.now_ms();
    let scope = secret
        .check(token, now)
        .map_err(|refusal| invalid(refusal.into()))?;
    let lifetime = state.access.max_token_lifetime;
    if !lifetime.admits(scope.exp(), now) {
        refused(Failure::Lifetime);
        return Err(ApiError::Unauthenticated(
            lifetime.refusal(scope.exp(), now),
        ));
    }
    if state
        .access
        .revocations
        .as_ref()
        .is_some_and(|revoked| revoked.contains(token))
    {
        return Err(invalid(Failure::Revoked));
    }
    Ok(scope)
}

/// Count a refusal and name its reason in the request's log line.
fn refused(failure: Failure) {
    crate::metrics::record_auth_failure(failure);
    tracing::Span::current().record("refused", tracing::field::display(failure.label()));
}

/// Name the acting scope in the request's log line (never the token), also
/// when it is then refused (`refused=forbidden`).
fn record_scope(scope: &Scope) {
    tracing::Span::current().record("scope", tracing::field::display(scope.log_label()));
}

/// Session and `via` attribution of an event-bearing write (section 7):
/// after authorization, before catalog validation. Open mode: unchanged.
pub fn attribute(
    caller: Option<&Caller>,
    actor: &mut serde_json::Value,
    family_allows_via: bool,
) -> ApiResult<()> {
    match caller {
        Some(Caller(scope)) => auth::attribute(scope, actor, family_allows_via).map_err(|d| {
            refused(Failure::Forbidden);
            ApiError::Forbidden(d.message().to_owned())
        }),
        None => Ok(()),
    }
}
