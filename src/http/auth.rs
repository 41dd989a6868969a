//! Authenticated mode (spec section 7) in the request pipeline: after the
//! identity check and before any body is read or resource looked up, a
//! machine route needs a bearer token that verifies (401) and whose scope
//! covers the addressed resource (403). The verified scope rides along in
//! the request extensions for event attribution. Open mode skips all of it.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::header::AUTHORIZATION;

use super::extract::{decode_segment, lookup_id};
use super::{ApiError, ApiResult, SharedState};
use crate::auth::{self, Scope, Target};
use crate::protocol::ident;

/// The verified scope of an authenticated request.
#[derive(Clone)]
pub struct Caller(pub Arc<Scope>);

/// The resource a machine route addresses, decoded from its path.
enum Addressed {
    BuildCollection,
    Build(String),
    RepoCollection,
    Repo(String),
    RepoSessions(String),
    Session(String),
    /// A top-level `/streams/{id}` route: its scope comes from the store.
    Stream(String),
}

impl Addressed {
    fn of(path: &str) -> ApiResult<Addressed> {
        let segments: Vec<&str> = path.split('/').skip(1).collect();
        Ok(match segments.as_slice() {
            ["builds"] => Addressed::BuildCollection,
            ["builds", slug, ..] => Addressed::Build(decode_segment(slug)?),
            ["repos"] => Addressed::RepoCollection,
            ["repos", repo, "sessions"] => Addressed::RepoSessions(decode_segment(repo)?),
            ["repos", repo, ..] => Addressed::Repo(decode_segment(repo)?),
            ["sessions", id, ..] => Addressed::Session(decode_segment(id)?),
            ["streams", id, ..] => Addressed::Stream(decode_segment(id)?),
            // `/sessions` itself is no route; only admin may learn that.
            _ => Addressed::BuildCollection,
        })
    }

    /// A top-level stream route authorizes against the stream's own scope
    /// (spec section 6), so an unknown stream is 404 before scope is judged.
    async fn resolve(self, state: &SharedState) -> ApiResult<Addressed> {
        let Addressed::Stream(id) = self else {
            return Ok(self);
        };
        let unknown =
            |id: &str| ApiError::NotFound(format!("unknown stream \"{}\"", ident::shown(id)));
        let id = lookup_id(id, unknown)?;
        let stream = state
            .store
            .get_stream(&id)
            .await
            .map_err(ApiError::from_backend)?
            .ok_or_else(|| unknown(&id))?;
        Ok(match stream.scope.kind {
            crate::protocol::ResourceKind::Build => Addressed::Build(stream.scope.id),
            crate::protocol::ResourceKind::Repo => Addressed::Repo(stream.scope.id),
            crate::protocol::ResourceKind::Session => Addressed::Session(stream.scope.id),
            crate::protocol::ResourceKind::Stream => {
                return Err(ApiError::Internal("a stream scoped to a stream".into()));
            }
        })
    }

    fn target(&self) -> Target<'_> {
        match self {
            Addressed::BuildCollection => Target::BuildCollection,
            Addressed::Build(slug) => Target::Build(slug),
            Addressed::RepoCollection => Target::RepoCollection,
            Addressed::Repo(repo) => Target::Repo(repo),
            Addressed::RepoSessions(repo) => Target::RepoSessions(repo),
            Addressed::Session(id) => Target::Session(id),
            // Resolved before authorization; never reaches the matrix.
            Addressed::Stream(_) => Target::BuildCollection,
        }
    }
}

/// 401 unless a machine route carries a verifying bearer token, 403 unless
/// its scope covers the addressed resource; the scope then rides along in
/// the request's extensions. Open mode: nothing to check.
pub async fn check(state: &SharedState, request: &mut Request) -> ApiResult<()> {
    let Some(secret) = &state.secret else {
        return Ok(());
    };
    if !super::identity::is_machine_route(request.uri().path()) {
        return Ok(());
    }
    let header = request
        .headers()
        .get(AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or_default());
    let Ok(token) = auth::bearer(header) else {
        return Err(ApiError::Unauthenticated("missing bearer token".into()));
    };
    let Ok(scope) = secret.verify(token, state.clock.now_ms()) else {
        return Err(ApiError::Unauthenticated("invalid or expired token".into()));
    };
    let addressed = Addressed::of(request.uri().path())?.resolve(state).await?;
    if let Err(denied) = auth::authorize(&scope, &addressed.target()) {
        return Err(ApiError::Forbidden(denied.message().to_owned()));
    }
    request.extensions_mut().insert(Caller(Arc::new(scope)));
    Ok(())
}

/// Session and `via` attribution of an event-bearing write (section 7):
/// after authorization, before catalog validation. Open mode: unchanged.
pub fn attribute(
    caller: Option<&Caller>,
    actor: &mut serde_json::Value,
    family_allows_via: bool,
) -> ApiResult<()> {
    match caller {
        Some(Caller(scope)) => auth::attribute(scope, actor, family_allows_via)
            .map_err(|d| ApiError::Forbidden(d.message().to_owned())),
        None => Ok(()),
    }
}
