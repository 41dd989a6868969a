//! Autobuild's event catalogs as data, and the validator every event write
//! passes before any mutation (protocol §2 "Actors, event writes, and
//! envelopes", §9's `422` row).
//!
//! A catalog is one JSON document per [`Family`]: event type → allowed actor
//! kinds, a JSON Schema (2020-12) for the payload, and named cross-field rules
//! for what JSON Schema cannot say. The documents for the Autobuild version this
//! server targets are embedded in the binary ([`Catalogs::embedded`]); an
//! operator may replace them with a directory ([`Catalogs::from_dir`]) when the
//! catalog evolves faster than the server. `docs/catalog.md` describes the format.
//!
//! Validation runs in a fixed order so that the first failure wins and the
//! message matches the one Autobuild's own validator would give: type known →
//! actor shape → actor kind allowed for the type → payload schema → rules.
//! Schemas are compiled once when the catalogs load; a valid write costs one
//! schema pass and no allocation beyond what the schema engine needs.
//!
//! Catalogs are versioned with Autobuild: `catalog/catalogs/versions.json`
//! names catalog sets, one per Autobuild release, each naming the document
//! every family uses (so sets share the documents that did not change), and
//! the client identities (version/protocol pairs) each set is served to
//! ([`VersionedCatalogs`], [`Catalogs::embedded_for`]). A shared document is
//! compiled once and its compiled form shared between sets.
//!
//! # Layout
//! - `actor`: the seven actor variants and the `via` rule, in code (they are
//!   protocol, not catalog data).
//! - `document`: parsing and compiling one catalog document.
//! - `detail`: turning a schema failure into a deterministic, path-naming message.
//! - `rules`: the fixed set of named cross-field rules a document may cite.
//! - `error`: [`EventValidationError`] and [`CatalogError`].
//! - `versions`: the catalog index (`versions.json`) and [`VersionedCatalogs`].

mod actor;
mod detail;
mod document;
mod error;
mod normalize;
mod rules;
mod versions;

use std::borrow::Cow;
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

pub use error::{CatalogError, EventValidationError};
pub use versions::{EMBEDDED_DOCUMENTS, VersionedCatalogs};

use document::Catalog;

/// The three independent event catalogs (protocol §2, §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// Build streams: `/builds/{slug}/events`.
    Build,
    /// Repository journals: `/repos/{repo}/events`.
    Repository,
    /// Operator sessions: `/sessions/{id}/events`.
    Session,
}

impl Family {
    /// All families, in the order their documents are loaded.
    pub const ALL: [Family; 3] = [Family::Build, Family::Repository, Family::Session];

    /// The family's name as written in a catalog document's `family` member.
    pub fn as_str(self) -> &'static str {
        match self {
            Family::Build => "build",
            Family::Repository => "repository",
            Family::Session => "session",
        }
    }

    /// The document's file name inside a `--catalog` directory.
    pub fn file_name(self) -> &'static str {
        match self {
            Family::Build => "build.json",
            Family::Repository => "repository.json",
            Family::Session => "session.json",
        }
    }

    /// How the unknown-type message names this family's types. Autobuild
    /// words the build and repository messages differently
    /// (`unknown event type` vs `unknown repository event type`) and clients
    /// match on those words.
    fn unknown_type_label(self) -> &'static str {
        match self {
            Family::Build => "event type",
            Family::Repository => "repository event type",
            Family::Session => "session event type",
        }
    }

    /// Whether a human actor may carry `via` on this family's events. Session
    /// events are the delegate's own log, so a `via` there would attribute the
    /// delegate to itself (protocol §5).
    pub fn allows_via(self) -> bool {
        !matches!(self, Family::Session)
    }
}

impl std::fmt::Display for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The compiled build, repository and session catalogs.
///
/// Immutable after loading, so one instance is shared by every request
/// (`Arc<Catalogs>` in server state). Each family's compiled document is held
/// behind an `Arc`, so catalog sets of two Autobuild versions that use the
/// same document share one compiled copy ([`Catalogs::shares_document`]).
#[derive(Debug, Clone)]
pub struct Catalogs {
    build: Arc<Catalog>,
    repository: Arc<Catalog>,
    session: Arc<Catalog>,
}

impl Catalogs {
    /// The default catalogs embedded in the binary: the default catalog set
    /// named by `catalog/catalogs/versions.json` (0.8.0's, what a server
    /// serves by default). Call this once at startup and share the result.
    pub fn embedded() -> Result<Catalogs, CatalogError> {
        Catalogs::embedded_for(versions::embedded_default_set())
    }

    /// One embedded catalog set, named after the Autobuild release whose
    /// catalogs it holds, e.g. `"0.9.0"` (which client identities are served
    /// it is the index's business: [`VersionedCatalogs::set_of`]). A name the
    /// index does not have is [`CatalogError::UnknownVersion`]. Compiles only
    /// that set's three documents; to hold every set at once, with shared
    /// documents compiled once, use [`VersionedCatalogs::embedded`].
    pub fn embedded_for(set: &str) -> Result<Catalogs, CatalogError> {
        versions::embedded_catalogs_for(set)
    }

    /// The names of the embedded catalog sets, in index order (oldest
    /// first).
    pub fn embedded_sets() -> Vec<&'static str> {
        versions::embedded_sets()
    }

    /// Load `build.json`, `repository.json` and `session.json` from a directory
    /// (the `--catalog DIR` flag). All three must be present: a partial override
    /// would silently mix catalog versions.
    pub fn from_dir(dir: &Path) -> Result<Catalogs, CatalogError> {
        let load = |family: Family| -> Result<Arc<Catalog>, CatalogError> {
            let path = dir.join(family.file_name());
            let text = std::fs::read_to_string(&path).map_err(|source| CatalogError::Io {
                path: path.display().to_string(),
                source,
            })?;
            Catalog::compile(family, &text, &path.display().to_string()).map(Arc::new)
        };
        Ok(Catalogs {
            build: load(Family::Build)?,
            repository: load(Family::Repository)?,
            session: load(Family::Session)?,
        })
    }

    /// The name of the document a family was compiled from, as errors name it
    /// (e.g. `embedded 0.9.0/build.json`, or a path for [`Catalogs::from_dir`]).
    pub fn document(&self, family: Family) -> &str {
        self.catalog(family).file()
    }

    /// Whether `self` and `other` use the very same compiled document for
    /// `family` (not merely equal text): true between two versions of one
    /// [`VersionedCatalogs`] whose index names the same document.
    pub fn shares_document(&self, other: &Catalogs, family: Family) -> bool {
        Arc::ptr_eq(self.arc(family), other.arc(family))
    }

    /// Validate one event write before any mutation: the *validated payload*
    /// (protocol §3) — the payload after the catalog's normalisations
    /// (defaults, trims; see `docs/catalog.md`), which is what a server stores
    /// — or the exact message the `422` response carries. Borrowed when the
    /// type normalises nothing.
    pub fn validate<'p>(
        &self,
        family: Family,
        actor: &Value,
        event_type: &str,
        payload: &'p Value,
    ) -> Result<Cow<'p, Value>, EventValidationError> {
        self.catalog(family).validate(actor, event_type, payload)
    }

    /// Known event type names of a family, in catalog order.
    pub fn event_types(&self, family: Family) -> Vec<&str> {
        self.catalog(family).event_types()
    }

    /// Whether the family's catalog marks `event_type` as provisional (a
    /// schema inferred rather than transcribed; see `docs/catalog.md`).
    /// `None` for an unknown type.
    pub fn is_provisional(&self, family: Family, event_type: &str) -> Option<bool> {
        self.catalog(family).is_provisional(event_type)
    }

    fn catalog(&self, family: Family) -> &Catalog {
        self.arc(family)
    }

    fn arc(&self, family: Family) -> &Arc<Catalog> {
        match family {
            Family::Build => &self.build,
            Family::Repository => &self.repository,
            Family::Session => &self.session,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn catalogs_are_shareable_across_threads() {
        assert_send_sync::<Catalogs>();
    }

    #[test]
    fn embedded_catalogs_compile() {
        let catalogs = Catalogs::embedded().expect("embedded catalogs compile");
        assert!(
            catalogs
                .event_types(Family::Build)
                .contains(&"build.created")
        );
        assert!(
            catalogs
                .event_types(Family::Repository)
                .contains(&"harvest.started")
        );
        assert_eq!(catalogs.event_types(Family::Session).len(), 11);
    }

    fn message(family: Family, actor: Value, event_type: &str, payload: Value) -> String {
        let catalogs = Catalogs::embedded().expect("embedded catalogs compile");
        match catalogs.validate(family, &actor, event_type, &payload) {
            Ok(_) => panic!("{event_type} {payload} accepted"),
            Err(error) => error.message,
        }
    }

    #[test]
    fn unknown_type_is_reported_before_a_bad_actor() {
        let text = message(Family::Build, json!("nobody"), "plan.exploded", json!(null));
        assert!(
            text.starts_with(
                r#"unknown event type "plan.exploded" — known types: build.created, "#
            )
        );
        assert!(text.ends_with(", escalation.raised, escalation.answered, phase.failed"));
    }

    #[test]
    fn union_details_name_the_accepted_discriminators() {
        let kernel = json!({"kind": "kernel"});
        assert_eq!(
            message(
                Family::Build,
                kernel.clone(),
                "verify.completed",
                json!({"step": "e2e", "attempt": 1, "outcome": "maybe"})
            ),
            r#"invalid payload for "verify.completed": /outcome: expected one of "pass"|"fail"|"skipped", received string "maybe""#
        );
        assert_eq!(
            message(
                Family::Build,
                kernel.clone(),
                "session.ended",
                json!({"session": "s", "outcome": "reclaimed", "reclaimedBy": {"instance": "", "resumedFromSeq": 1}})
            ),
            r#"invalid payload for "session.ended": /reclaimedBy/instance: expected string of at least 1 character, received string """#
        );
        assert_eq!(
            message(
                Family::Build,
                kernel,
                "workspace.released",
                json!("nothing")
            ),
            r#"invalid payload for "workspace.released": /: expected object, received string "nothing""#
        );
    }

    #[test]
    fn numbers_follow_javascript_integer_rules() {
        let kernel = json!({"kind": "kernel"});
        assert_eq!(
            message(
                Family::Build,
                kernel.clone(),
                "plan-review.started",
                json!({"round": 1.5})
            ),
            r#"invalid payload for "plan-review.started": /round: expected integer, received number 1.5"#
        );
        assert!(
            message(
                Family::Build,
                kernel.clone(),
                "plan-review.started",
                json!({"round": 9_007_199_254_740_992_u64})
            )
            .contains("/round: expected number <= 9007199254740991")
        );
        let catalogs = Catalogs::embedded().expect("embedded catalogs compile");
        assert!(
            catalogs
                .validate(
                    Family::Build,
                    &kernel,
                    "plan-review.started",
                    &json!({"round": 2.0})
                )
                .is_ok()
        );
    }
}
