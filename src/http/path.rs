//! [`ResourcePath`]: what a machine route addresses, read once from the
//! matched route template (`/builds/{id}/streams/{sid}/chunks`) and used
//! alike by the authorization target and the handlers.
//! No code reads path segments by position: each `{id}` / `{sid}` /
//! `{ticket}` capture is found by aligning the template with the request
//! path segment by segment (a capture never spans a `/`). The ticket-asset
//! routes name their second capture `{ticket}`, so `{id}` stays the
//! repository that authorization reads.
//!
//! Ids are percent-decoded strictly, as JavaScript's `decodeURIComponent`
//! does (400 on a malformed escape). The stream id is decoded only when a
//! handler asks for it, after the resource's own checks, which keeps the
//! spec's order on family stream routes: resource id (400) → resource
//! unknown (404) → stream id (400) → stream unknown (404).

use axum::extract::{FromRequestParts, MatchedPath};
use axum::http::request::Parts;
use axum::http::{Extensions, Uri};

use super::error::{ApiError, ApiResult};
use super::extract::{decode_segment, lookup_id};
use crate::auth::Target;
use crate::protocol::{ResourceKind, ResourceRef, ident};

/// The resource capture in a route template.
const ID: &str = "{id}";
/// The stream capture in a route template.
const SID: &str = "{sid}";
/// The ticket capture of the ticket-asset routes.
const TICKET: &str = "{ticket}";

/// The addressed resource of a machine route (`/builds…`, `/repos…`,
/// `/sessions…`, `/streams…`).
#[derive(Clone, Debug)]
pub struct ResourcePath {
    /// The route's family: its first segment. `Stream` for the top-level
    /// `/streams/{sid}…` routes, whose scope comes from the store.
    pub kind: ResourceKind,
    /// `{id}`, strictly decoded; `None` on a collection route (`/builds`).
    id: Option<String>,
    /// `{sid}` as sent; decoded by [`ResourcePath::stream_id`].
    raw_stream: Option<String>,
    /// `{ticket}` as sent; decoded by [`ResourcePath::ticket_id`].
    raw_ticket: Option<String>,
}

impl ResourcePath {
    /// The family a request path belongs to, when it is a machine route.
    pub fn family(path: &str) -> Option<ResourceKind> {
        ResourceKind::from_segment(path.strip_prefix('/')?.split('/').next()?)
    }

    /// The addressed resource of a request to `uri` that matched `template`;
    /// `None` when it is no machine route. A request that matched no route
    /// (answered `404 no route` after the checks) is read as the family's
    /// generic `/{family}/{id}` template, so it is identified and authorized
    /// like the routes it resembles.
    pub fn parse(template: Option<&str>, uri: &Uri) -> Option<Result<Self, ApiError>> {
        let path = uri.path();
        let kind = Self::family(template.unwrap_or(path))?;
        let generic;
        let template = match template {
            Some(template) => template,
            None => {
                let capture = if kind == ResourceKind::Stream {
                    SID
                } else {
                    ID
                };
                generic = format!("/{}/{capture}", kind.segment());
                &generic
            }
        };
        let mut id = None;
        let mut raw_stream = None;
        let mut raw_ticket = None;
        for (pattern, raw) in template.split('/').zip(path.split('/')) {
            match pattern {
                ID => match decode_segment(raw) {
                    Ok(decoded) => id = Some(decoded),
                    Err(err) => return Some(Err(err)),
                },
                SID => raw_stream = Some(raw.to_owned()),
                TICKET => raw_ticket = Some(raw.to_owned()),
                _ => {}
            }
        }
        Some(Ok(ResourcePath {
            kind,
            id,
            raw_stream,
            raw_ticket,
        }))
    }

    /// The route's resource (`/builds/{id}…`); an id that could never be
    /// stored is unknown (404) without asking the store.
    pub fn resource(&self) -> Result<ResourceRef, ApiError> {
        let Some(id) = &self.id else {
            return Err(ApiError::Internal(format!(
                "a {} route without {ID}",
                self.kind.segment()
            )));
        };
        let kind = self.kind;
        let id = lookup_id(id.clone(), |id| {
            ApiError::unknown(&ResourceRef::new(kind, id))
        })?;
        Ok(ResourceRef::new(kind, id))
    }

    /// `{id}` as decoded, whether or not it could name a stored resource:
    /// the ticket-asset routes have no existence gate.
    pub fn id(&self) -> Result<&str, ApiError> {
        self.id.as_deref().ok_or_else(|| {
            ApiError::Internal(format!("a {} route without {ID}", self.kind.segment()))
        })
    }

    /// `{ticket}`, strictly decoded (400).
    pub fn ticket_id(&self) -> Result<String, ApiError> {
        match &self.raw_ticket {
            Some(raw) => decode_segment(raw),
            None => Err(ApiError::Internal(format!("a route without {TICKET}"))),
        }
    }

    /// The family resource a stream must belong to: `None` on the top-level
    /// `/streams/{sid}` routes.
    pub fn stream_scope(&self) -> Result<Option<ResourceRef>, ApiError> {
        match self.kind {
            ResourceKind::Stream => Ok(None),
            _ => self.resource().map(Some),
        }
    }

    /// `{sid}`, strictly decoded (400); an id that could never be stored is
    /// an unknown stream (404).
    pub fn stream_id(&self) -> Result<String, ApiError> {
        let raw = self.raw_stream.as_deref().unwrap_or_default();
        lookup_id(decode_segment(raw)?, unknown_stream)
    }

    /// What the token's scope must cover on a path no route takes, read as
    /// the route it resembles (`/builds/x/nope` as a build route). A
    /// top-level stream path is authorized against the stream's own scope,
    /// which the caller looks up first (`None` here).
    pub fn resembled_target(&self) -> Option<Target<'_>> {
        let id = self.id.as_deref();
        Some(match (self.kind, id) {
            (ResourceKind::Stream, _) if self.raw_stream.is_some() => return None,
            (ResourceKind::Build, Some(slug)) => Target::Build(slug),
            (ResourceKind::Repo, None) => Target::RepoCollection,
            (ResourceKind::Repo, Some(repo)) => Target::Repo(repo),
            (ResourceKind::Session, Some(id)) => Target::Session(id),
            // `/builds`, and `/sessions` or `/streams` alone, which are no
            // routes: only admin may learn that.
            _ => Target::BuildCollection,
        })
    }
}

/// `unknown stream "<id>"`.
pub fn unknown_stream(id: &str) -> ApiError {
    ApiError::NotFound(format!("unknown stream \"{}\"", ident::shown(id)))
}

impl ResourcePath {
    /// The path of a request a resource route matched (no await needed).
    pub fn of_parts(parts: &Parts) -> ApiResult<ResourcePath> {
        ResourcePath::matched(&parts.extensions, &parts.uri)
    }

    /// The path of a request to a resource route, read from the route
    /// template its `extensions` carry; a route that names no resource is
    /// the server's own mistake (500).
    pub fn matched(extensions: &Extensions, uri: &Uri) -> ApiResult<ResourcePath> {
        let template = extensions.get::<MatchedPath>().map(MatchedPath::as_str);
        ResourcePath::parse(template, uri).unwrap_or_else(|| {
            Err(ApiError::Internal(format!(
                "{} is no resource route",
                uri.path()
            )))
        })
    }
}

impl<S: Send + Sync> FromRequestParts<S> for ResourcePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        ResourcePath::of_parts(parts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(template: Option<&str>, path: &str) -> ResourcePath {
        let uri: Uri = path.parse().unwrap();
        ResourcePath::parse(template, &uri).unwrap().unwrap()
    }

    #[test]
    fn machine_families_only() {
        for path in [
            "/builds",
            "/builds/x",
            "/repos",
            "/repos/a%2Fb/events",
            "/sessions/os_1",
            "/streams/st_1",
        ] {
            assert!(ResourcePath::family(path).is_some(), "{path}");
        }
        for path in ["/health", "/buildsx", "/_test/clock", "/", "/streamsx"] {
            assert!(ResourcePath::family(path).is_none(), "{path}");
        }
    }

    #[test]
    fn captures_follow_the_template() {
        let p = parse(
            Some("/builds/{id}/streams/{sid}/chunks"),
            "/builds/a%2Fb/streams/st%5F1/chunks",
        );
        assert_eq!(
            p.resource().unwrap(),
            ResourceRef::new(ResourceKind::Build, "a/b")
        );
        assert_eq!(p.stream_id().unwrap(), "st_1");
        let p = parse(Some("/streams/{sid}/close"), "/streams/st_2/close");
        assert_eq!(p.stream_scope().unwrap(), None);
        assert_eq!(p.stream_id().unwrap(), "st_2");
        let p = parse(Some("/repos/{id}/sessions"), "/repos/acme/sessions");
        assert_eq!(p.id().unwrap(), "acme");
        // The ticket id is a capture of its own: `{id}` stays the repository.
        let p = parse(
            Some("/repos/{id}/tickets/{ticket}/assets/file"),
            "/repos/acme%2Fw/tickets/AUT%2D1/assets/file",
        );
        assert_eq!(p.id().unwrap(), "acme/w");
        assert_eq!(p.ticket_id().unwrap(), "AUT-1");
        let p = parse(
            Some("/repos/{id}/tickets/{ticket}/assets"),
            "/repos/a/tickets/%ZZ/assets",
        );
        assert!(matches!(p.ticket_id(), Err(ApiError::BadRequest(_))));
    }

    #[test]
    fn unmatched_paths_read_as_the_generic_template() {
        let p = parse(None, "/builds/x/nope/deeper");
        assert_eq!(p.resembled_target(), Some(Target::Build("x")));
        let p = parse(None, "/sessions");
        assert_eq!(p.resembled_target(), Some(Target::BuildCollection));
        let p = parse(None, "/streams/st_1/nope");
        assert!(p.resembled_target().is_none());
        assert_eq!(p.stream_id().unwrap(), "st_1");
        let p = parse(None, "/repos");
        assert_eq!(p.resembled_target(), Some(Target::RepoCollection));
        let p = parse(None, "/repos/acme/nope");
        assert_eq!(p.resembled_target(), Some(Target::Repo("acme")));
    }

    #[test]
    fn malformed_escapes_are_400() {
        let uri: Uri = "/builds/%ZZ/events".parse().unwrap();
        let err = ResourcePath::parse(Some("/builds/{id}/events"), &uri)
            .unwrap()
            .unwrap_err();
        assert_eq!(err.to_string(), "malformed path segment encoding: %ZZ");
        let p = parse(Some("/builds/{id}/streams/{sid}"), "/builds/x/streams/%2");
        assert!(matches!(p.stream_id(), Err(ApiError::BadRequest(_))));
    }
}
