//! Protocol vocabulary with no I/O: protocol versions and client identities,
//! resource kinds, times, the query grammars, strict base64, deposit
//! placeholders, request-body field checks, random UUIDs and the
//! ticket-asset limits and validation.
//!
//! Everything here is pure and unit-tested; handlers and stores build on it.

pub mod base64;
pub mod clients;
pub mod ident;
pub mod numbers;
pub mod placeholders;
pub mod ticket_assets;
pub mod time;
pub mod uuid;
pub mod wire;

pub use clients::{Client, ClientIdentity, Clients, Protocol, Protocols};

/// The resource families that own events, artifacts and (for builds and
/// repositories) leases. Stored as a short tag so one set of tables serves all.
/// What each family allows (its routes' segment, its event catalog, `via`)
/// is read from here; which routes it has, from the route table
/// (`crate::http::routes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResourceKind {
    Build,
    Repo,
    /// An operator session (`os_…`), child of a repository.
    Session,
    /// Not a `resources` row: streams key held reads on their chunks.
    Stream,
}

impl ResourceKind {
    /// The tag stored in the database `kind` columns.
    pub fn tag(self) -> &'static str {
        match self {
            ResourceKind::Build => "build",
            ResourceKind::Repo => "repo",
            ResourceKind::Session => "session",
            ResourceKind::Stream => "stream",
        }
    }

    /// The kind a stored tag names.
    pub fn from_tag(tag: &str) -> Option<Self> {
        match tag {
            "build" => Some(ResourceKind::Build),
            "repo" => Some(ResourceKind::Repo),
            "session" => Some(ResourceKind::Session),
            "stream" => Some(ResourceKind::Stream),
            _ => None,
        }
    }

    /// The member naming the resource in envelopes and artifact metadata
    /// (`"build"` or `"repo"`, spec section 2).
    pub fn wire_key(self) -> &'static str {
        self.tag()
    }

    /// The noun used in `unknown build "x"` / `unknown repo "x"` messages.
    pub fn noun(self) -> &'static str {
        self.tag()
    }

    /// The first segment of the family's routes (`/builds/{id}…`); streams
    /// also have top-level routes (`/streams/{sid}…`).
    pub fn segment(self) -> &'static str {
        match self {
            ResourceKind::Build => "builds",
            ResourceKind::Repo => "repos",
            ResourceKind::Session => "sessions",
            ResourceKind::Stream => "streams",
        }
    }

    /// The family whose routes start with `segment`.
    pub fn from_segment(segment: &str) -> Option<Self> {
        [
            ResourceKind::Build,
            ResourceKind::Repo,
            ResourceKind::Session,
            ResourceKind::Stream,
        ]
        .into_iter()
        .find(|kind| kind.segment() == segment)
    }

    /// The event catalog of the family's events (streams have none).
    pub fn catalog(self) -> Option<abstore_catalog::Family> {
        match self {
            ResourceKind::Build => Some(abstore_catalog::Family::Build),
            ResourceKind::Repo => Some(abstore_catalog::Family::Repository),
            ResourceKind::Session => Some(abstore_catalog::Family::Session),
            ResourceKind::Stream => None,
        }
    }

    /// Whether a human actor on the family's events may carry `via`: the
    /// catalog's rule (build and repository events only, spec section 5).
    pub fn allows_via(self) -> bool {
        self.catalog()
            .is_some_and(abstore_catalog::Family::allows_via)
    }
}

/// One addressed resource: its family and its (decoded) id.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ResourceRef {
    pub kind: ResourceKind,
    pub id: String,
}

impl ResourceRef {
    pub fn new(kind: ResourceKind, id: impl Into<String>) -> Self {
        ResourceRef {
            kind,
            id: id.into(),
        }
    }
}
