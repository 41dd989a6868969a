//! The resource authorization matrix (spec section 7) as one table.
//!
//! A verified scope is reduced to a *holder* (what it is) and an optional id;
//! a route is reduced to a *target* column and an optional id. One table cell
//! says whether that holder may reach that column: always, only when the ids
//! are equal, or never. Handlers call [`authorize`] after token verification
//! and before reading the body or looking anything up, so a caller with the
//! wrong scope learns nothing about other resources.

use super::scope::{Scope, ScopeKind, WILDCARD};

/// What a request addresses, as far as authorization is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target<'a> {
    /// `POST /builds` (create) and `GET /builds` (list).
    BuildCollection,
    /// Anything under `/builds/{slug}`: events, artifacts, leases, streams.
    Build(&'a str),
    /// `POST /repos` (ensure).
    RepoCollection,
    /// Anything under `/repos/{repo}` except its session collection.
    Repo(&'a str),
    /// `POST /repos/{repo}/sessions` (create) and `GET …/sessions` (list).
    RepoSessions(&'a str),
    /// Anything under `/sessions/{id}`.
    Session(&'a str),
    /// `POST /_test/clock` (only with `--test-clock`): moving the clock
    /// decides which tokens and leases are expired, so it is an admin
    /// operation, like the collections.
    TestClock,
    /// `POST /tickets/{operation}` (Autobuild's hosted ticket protocol):
    /// deployment tokens only, as Autobuild's hosted service has it.
    Tickets,
}

/// A valid token used for the wrong resource or attribution: `403 auth`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// Carries the exact 403 message.
    #[error("{0}")]
    Forbidden(String),
}

impl Denied {
    pub fn message(&self) -> &str {
        match self {
            Denied::Forbidden(message) => message,
        }
    }
}

/// Which scope family holds the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holder {
    /// Legacy `build: "*"`.
    Admin,
    /// `operator: true, session: "*"`.
    Deployment,
    /// Legacy `build: slug` or `resource.kind: build`.
    Build,
    Repo,
    Session,
    /// `operator: {user}`: accepted only by the operator API.
    Operator,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cell {
    /// Allowed whatever the ids.
    Any,
    /// Allowed when the target id equals the token id.
    Exact,
    /// Never allowed.
    No,
}

use Cell::{Any, Exact, No};

/// Rows: holders. Columns, in order: build collection, one build, repo
/// collection, one repo, a repo's session collection, one session, the
/// hosted ticket operations.
const MATRIX: [(Holder, [Cell; 7]); 6] = [
    (Holder::Admin, [Any, Any, Any, Any, Any, Any, No]),
    (Holder::Deployment, [Any, Any, Any, Any, Any, Any, Any]),
    (Holder::Build, [No, Exact, No, No, No, No, No]),
    (Holder::Repo, [No, No, No, Exact, Exact, No, No]),
    (Holder::Session, [No, No, No, No, No, Exact, No]),
    (Holder::Operator, [No, No, No, No, No, No, No]),
];

fn holder(scope: &Scope) -> (Holder, &str) {
    match scope {
        Scope::Legacy { build, .. } if build == WILDCARD => (Holder::Admin, build),
        Scope::Legacy { build, .. } => (Holder::Build, build),
        Scope::Resource {
            kind: ScopeKind::Build,
            id,
            ..
        } => (Holder::Build, id),
        Scope::Resource {
            kind: ScopeKind::Repo,
            id,
            ..
        } => (Holder::Repo, id),
        Scope::Resource {
            kind: ScopeKind::Session,
            id,
            ..
        } => (Holder::Session, id),
        Scope::Deployment { session, .. } => (Holder::Deployment, session),
        Scope::Operator { user, .. } => (Holder::Operator, user),
    }
}

/// Column index, target id (if any) and the target's spelling in 403 messages.
fn column<'a>(target: &Target<'a>) -> (usize, Option<&'a str>, String) {
    match *target {
        Target::BuildCollection => (0, None, "admin operations".into()),
        Target::Build(slug) => (1, Some(slug), format!("build \"{slug}\"")),
        Target::RepoCollection => (2, None, "admin operations".into()),
        Target::Repo(repo) => (3, Some(repo), format!("repo \"{repo}\"")),
        Target::RepoSessions(repo) => (4, Some(repo), format!("repo \"{repo}\"")),
        Target::Session(id) => (5, Some(id), format!("session \"{id}\"")),
        // The collections' column: admin and deployment tokens only.
        Target::TestClock => (0, None, "the test clock".into()),
        Target::Tickets => (6, None, "ticket operations".into()),
    }
}

/// Whether `scope` may address `target`; the error carries the 403 message
/// `token scoped to <kind> "<id>" may not access <target>`.
pub fn authorize(scope: &Scope, target: &Target<'_>) -> Result<(), Denied> {
    let (holder, token_id) = holder(scope);
    let (index, target_id, target_text) = column(target);
    let cell = MATRIX
        .iter()
        .find(|(row, _)| *row == holder)
        .map_or(No, |(_, cells)| cells[index]);
    let allowed = match cell {
        Any => true,
        Exact => target_id == Some(token_id),
        No => false,
    };
    if allowed {
        Ok(())
    } else {
        Err(Denied::Forbidden(format!(
            "token scoped to {} may not access {target_text}",
            scope.describe()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::scope::Via;

    fn legacy(build: &str) -> Scope {
        Scope::Legacy {
            build: build.into(),
            session: "*".into(),
            exp: 1,
        }
    }
    fn resource(kind: ScopeKind, id: &str) -> Scope {
        Scope::Resource {
            kind,
            id: id.into(),
            session: "s_1".into(),
            via: None,
            exp: 1,
        }
    }

    /// Every target with the id `x`, then with `y`, then ids that are another
    /// kind's token id (`*`).
    fn targets() -> Vec<Target<'static>> {
        let mut all = vec![
            Target::BuildCollection,
            Target::RepoCollection,
            Target::TestClock,
            Target::Tickets,
        ];
        for id in ["x", "y", "*"] {
            all.extend([
                Target::Build(id),
                Target::Repo(id),
                Target::RepoSessions(id),
                Target::Session(id),
            ]);
        }
        all
    }

    /// The expected outcome of every (scope, target) cell, written out from
    /// the spec's table rather than derived from `MATRIX`.
    fn expected(scope: &str, target: &Target<'_>) -> bool {
        use Target::*;
        match (scope, target) {
            // Autobuild's hosted ticket protocol: deployment tokens only.
            (_, Tickets) => matches!(scope, "deployment" | "deployment+via"),
            ("admin" | "deployment" | "deployment+via", _) => true,
            _ => matches!(
                (scope, target),
                ("legacy build x" | "build x", Build("x"))
                    | ("build *", Build("*"))
                    | ("repo x", Repo("x") | RepoSessions("x"))
                    | ("repo *", Repo("*") | RepoSessions("*"))
                    | ("session x", Session("x"))
                    | ("session *", Session("*"))
            ),
        }
    }

    #[test]
    fn matrix_every_cell() {
        let scopes = [
            ("admin", legacy("*")),
            (
                "deployment",
                Scope::Deployment {
                    session: "*".into(),
                    via: None,
                    exp: 1,
                },
            ),
            (
                "deployment+via",
                Scope::Deployment {
                    session: "*".into(),
                    via: Some(Via::Mcp { client: "c".into() }),
                    exp: 1,
                },
            ),
            ("legacy build x", legacy("x")),
            ("build x", resource(ScopeKind::Build, "x")),
            ("build *", resource(ScopeKind::Build, "*")),
            ("repo x", resource(ScopeKind::Repo, "x")),
            ("repo *", resource(ScopeKind::Repo, "*")),
            ("session x", resource(ScopeKind::Session, "x")),
            ("session *", resource(ScopeKind::Session, "*")),
            (
                "operator",
                Scope::Operator {
                    user: "x".into(),
                    via: None,
                    exp: 1,
                },
            ),
            (
                "operator+via",
                Scope::Operator {
                    user: "*".into(),
                    via: Some(Via::Session { id: "x".into() }),
                    exp: 1,
                },
            ),
        ];
        let mut cells = 0;
        for (name, scope) in &scopes {
            for target in targets() {
                let outcome = authorize(scope, &target);
                assert_eq!(
                    outcome.is_ok(),
                    expected(name, &target),
                    "{name} → {target:?}: {outcome:?}"
                );
                cells += 1;
            }
        }
        assert_eq!(cells, scopes.len() * 16);
    }

    #[test]
    fn resource_star_is_not_admin_and_kinds_never_cross() {
        let star = resource(ScopeKind::Build, "*");
        for target in [
            Target::BuildCollection,
            Target::RepoCollection,
            Target::Build("a"),
            Target::Repo("*"),
        ] {
            assert!(authorize(&star, &target).is_err(), "{target:?}");
        }
        // Same id string, different kinds.
        let build = resource(ScopeKind::Build, "acme");
        let repo = resource(ScopeKind::Repo, "acme");
        let session = resource(ScopeKind::Session, "acme");
        assert!(authorize(&build, &Target::Repo("acme")).is_err());
        assert!(authorize(&build, &Target::RepoSessions("acme")).is_err());
        assert!(authorize(&build, &Target::Session("acme")).is_err());
        assert!(authorize(&repo, &Target::Build("acme")).is_err());
        assert!(authorize(&repo, &Target::Session("acme")).is_err());
        assert!(authorize(&session, &Target::Build("acme")).is_err());
        assert!(authorize(&session, &Target::Repo("acme")).is_err());
        assert!(authorize(&session, &Target::RepoSessions("acme")).is_err());
        // Ids are case-sensitive.
        assert!(authorize(&build, &Target::Build("Acme")).is_err());
    }

    #[test]
    fn denial_messages() {
        let cases = [
            (
                legacy("b"),
                Target::Build("c"),
                r#"token scoped to build "b" may not access build "c""#,
            ),
            (
                legacy("b"),
                Target::BuildCollection,
                r#"token scoped to build "b" may not access admin operations"#,
            ),
            (
                resource(ScopeKind::Repo, "acme/w"),
                Target::RepoCollection,
                r#"token scoped to repo "acme/w" may not access admin operations"#,
            ),
            (
                resource(ScopeKind::Repo, "acme/w"),
                Target::RepoSessions("acme/x"),
                r#"token scoped to repo "acme/w" may not access repo "acme/x""#,
            ),
            (
                resource(ScopeKind::Repo, "acme/w"),
                Target::Session("os_1"),
                r#"token scoped to repo "acme/w" may not access session "os_1""#,
            ),
            (
                resource(ScopeKind::Session, "os_1"),
                Target::RepoSessions("acme/w"),
                r#"token scoped to session "os_1" may not access repo "acme/w""#,
            ),
            (
                resource(ScopeKind::Build, "*"),
                Target::Build("b"),
                r#"token scoped to build "*" may not access build "b""#,
            ),
            (
                resource(ScopeKind::Session, "os_1"),
                Target::TestClock,
                r#"token scoped to session "os_1" may not access the test clock"#,
            ),
            (
                legacy("*"),
                Target::Tickets,
                r#"token scoped to build "*" may not access ticket operations"#,
            ),
            (
                resource(ScopeKind::Repo, "acme/w"),
                Target::Tickets,
                r#"token scoped to repo "acme/w" may not access ticket operations"#,
            ),
            (
                Scope::Operator {
                    user: "alice".into(),
                    via: None,
                    exp: 1,
                },
                Target::Build("b"),
                r#"token scoped to operator "alice" may not access build "b""#,
            ),
        ];
        for (scope, target, message) in cases {
            assert_eq!(
                authorize(&scope, &target),
                Err(Denied::Forbidden(message.into()))
            );
            assert_eq!(authorize(&scope, &target).unwrap_err().to_string(), message);
        }
    }
}
