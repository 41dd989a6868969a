//! Authenticated mode (spec section 7) in the request pipeline: after the
//! identity check and before any body is read or resource looked up, a
//! machine route needs a bearer token that verifies (401) and whose scope
//! covers the addressed resource (403). The verified scope rides along in
//! the request extensions for event attribution. Open mode skips all of it.

use std::sync::Arc;

use axum::extract::{MatchedPath, Request};
use axum::http::header::AUTHORIZATION;

use super::path::ResourcePath;
use super::{ApiError, ApiResult, SharedState};
use crate::auth::{self, Scope, Target};
use crate::protocol::ResourceKind;

/// The verified scope of an authenticated request.
#[derive(Clone)]
pub struct Caller(pub Arc<Scope>);

/// Authorize `scope` for what `path` addresses. A top-level stream route
/// authorizes against the stream's own scope (spec section 6), so an
/// unknown stream is 404 before scope is judged.
async fn authorize(state: &SharedState, scope: &Scope, path: &ResourcePath) -> ApiResult<()> {
    let owner;
    let target = match path.target() {
        Some(target) => target,
        None => {
            let id = path.stream_id()?;
            let stream = state
                .store
                .get_stream(&id)
                .await?
                .ok_or_else(|| super::path::unknown_stream(&id))?;
            owner = stream.scope;
            match owner.kind {
                ResourceKind::Build => Target::Build(&owner.id),
                ResourceKind::Repo => Target::Repo(&owner.id),
                ResourceKind::Session => Target::Session(&owner.id),
                ResourceKind::Stream => {
                    return Err(ApiError::Internal("a stream scoped to a stream".into()));
                }
            }
        }
    };
    auth::authorize(scope, &target)
        .map_err(|denied| ApiError::Forbidden(denied.message().to_owned()))
}

/// 401 unless a machine route carries a verifying bearer token, 403 unless
/// its scope covers the addressed resource; the scope then rides along in
/// the request's extensions. Open mode: nothing to check.
pub async fn check(state: &SharedState, request: &mut Request) -> ApiResult<()> {
    let Some(secret) = &state.access.secret else {
        return Ok(());
    };
    let template = request
        .extensions()
        .get::<MatchedPath>()
        .map(MatchedPath::as_str);
    let Some(path) = ResourcePath::parse(template, request.uri()) else {
        return Ok(());
    };
    let header = request
        .headers()
        .get(AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or_default());
    let Ok(token) = auth::bearer(header) else {
        return Err(ApiError::Unauthenticated("missing bearer token".into()));
    };
    let Ok(scope) = secret.verify(token, state.access.clock.now_ms()) else {
        return Err(ApiError::Unauthenticated("invalid or expired token".into()));
    };
    authorize(state, &scope, &path?).await?;
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
