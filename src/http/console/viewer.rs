//! Who is looking at a console page, and what they may see: exactly what
//! their token may reach on the protocol routes (`crate::auth::authorize`),
//! with two additions the protocol has no route for: a person's operator
//! scope (`{"operator": {"user": NAME}}`, refused on every protocol route)
//! sees what a deployment token sees but the operator page, acting under
//! their own name; and the repository list and operator page, which are
//! the collections' (admin or deployment). Open mode sees everything.

use axum::http::HeaderMap;

use super::Console;
use super::session;
use crate::auth::{Scope, Target};
use crate::http::SharedState;
use crate::tickets::Actor;

/// A page's subject, for the scope check.
#[derive(Clone, Copy, Debug)]
pub enum Sight<'a> {
    /// The list of every repository (the overview).
    AllRepos,
    Repo(&'a str),
    Build(&'a str),
    Session(&'a str),
    /// A team's tickets.
    Tickets,
    /// Revocations, metrics, settings.
    Operator,
}

/// The signed-in person (or open mode).
#[derive(Debug)]
pub struct Viewer {
    /// `None`: open mode, no token.
    pub signed_in: Option<SignedIn>,
    /// The CSRF token every form of the page carries.
    pub csrf: String,
}

/// A session's verified token.
pub struct SignedIn {
    pub scope: Scope,
    token: String,
    /// The session cookie's value.
    pub session_id: String,
}

impl std::fmt::Debug for SignedIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SignedIn({})", self.scope.log_label())
    }
}

/// Why a request has no viewer.
#[derive(Debug, PartialEq, Eq)]
pub enum NoViewer {
    /// No session cookie, or a session that ended: sign in.
    SignIn,
    /// The session's token no longer verifies (revoked, expired, or its
    /// secret retired): the session has ended; sign in again.
    Ended,
}

/// The viewer of a request: open mode, or a live session whose token still
/// verifies exactly as a bearer token would (a session whose token does not
/// is ended here).
pub fn resolve(
    state: &SharedState,
    console: &Console,
    headers: &HeaderMap,
) -> Result<Viewer, NoViewer> {
    let Some(secret) = &state.access.secret else {
        return Ok(Viewer {
            signed_in: None,
            csrf: console.open_csrf.clone(),
        });
    };
    let id = session::cookie_value(headers).ok_or(NoViewer::SignIn)?;
    let found = console.sessions.find(id).ok_or(NoViewer::SignIn)?;
    match crate::http::verify_token(state, secret, &found.token) {
        Ok(scope) => {
            tracing::Span::current().record("scope", tracing::field::display(scope.log_label()));
            Ok(Viewer {
                signed_in: Some(SignedIn {
                    scope,
                    token: found.token,
                    session_id: id.to_owned(),
                }),
                csrf: found.csrf,
            })
        }
        Err(_) => {
            console.sessions.end(id);
            Err(NoViewer::Ended)
        }
    }
}

impl Viewer {
    /// Whether this viewer may see `sight`; a page refused is `404`, so
    /// nothing tells another repository from a missing one.
    pub fn may(&self, sight: Sight<'_>) -> bool {
        let Some(signed_in) = &self.signed_in else {
            return true;
        };
        let scope = &signed_in.scope;
        let deployment_like = matches!(scope, Scope::Deployment { .. }) || scope.is_admin();
        let target = match sight {
            Sight::Operator => return deployment_like,
            _ if matches!(scope, Scope::Operator { .. }) => return true,
            Sight::AllRepos => Target::RepoCollection,
            Sight::Repo(repo) => Target::Repo(repo),
            Sight::Build(build) => Target::Build(build),
            Sight::Session(session) => Target::Session(session),
            Sight::Tickets => Target::Tickets,
        };
        crate::auth::authorize(scope, &target).is_ok()
    }

    /// Who a ticket write is recorded under: the token's scope (a person's
    /// operator scope names them) and digest, or `open`.
    pub fn actor(&self) -> Actor {
        match &self.signed_in {
            Some(s) => Actor::of_token(&s.scope, &s.token),
            None => Actor::open(),
        }
    }

    /// The viewer as the page header names them (never the token).
    pub fn label(&self) -> String {
        match &self.signed_in {
            Some(s) => s.scope.describe(),
            None => "open mode".to_owned(),
        }
    }

    /// The one resource a resource-scoped token may reach, for the
    /// overview of a viewer who may not list the repositories.
    pub fn own_resource(&self) -> Option<(crate::auth::ScopeKind, &str)> {
        match &self.signed_in.as_ref()?.scope {
            Scope::Resource { kind, id, .. } => Some((*kind, id)),
            Scope::Legacy { build, .. } if !self.signed_in.as_ref()?.scope.is_admin() => {
                Some((crate::auth::ScopeKind::Build, build))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::ScopeKind;

    fn viewer(scope: Scope) -> Viewer {
        Viewer {
            signed_in: Some(SignedIn {
                scope,
                token: "t".into(),
                session_id: "s".into(),
            }),
            csrf: "c".into(),
        }
    }

    fn resource(kind: ScopeKind, id: &str) -> Scope {
        Scope::Resource {
            kind,
            id: id.into(),
            session: "*".into(),
            via: None,
            exp: i64::MAX,
        }
    }

    #[test]
    fn a_scope_sees_what_it_reaches_on_the_protocol_routes() {
        let repo = viewer(resource(ScopeKind::Repo, "r1"));
        assert!(repo.may(Sight::Repo("r1")));
        assert!(!repo.may(Sight::Repo("r2")));
        assert!(!repo.may(Sight::AllRepos));
        assert!(!repo.may(Sight::Tickets));
        assert!(!repo.may(Sight::Operator));
        let build = viewer(resource(ScopeKind::Build, "b1"));
        assert!(build.may(Sight::Build("b1")) && !build.may(Sight::Build("b2")));
        assert!(
            !build.may(Sight::Tickets),
            "a build token cannot open the board"
        );
        assert_eq!(build.own_resource(), Some((ScopeKind::Build, "b1")));
        let deployment = viewer(Scope::Deployment {
            session: "*".into(),
            via: None,
            exp: i64::MAX,
        });
        for sight in [
            Sight::AllRepos,
            Sight::Tickets,
            Sight::Operator,
            Sight::Build("x"),
        ] {
            assert!(deployment.may(sight), "{sight:?}");
        }
        let person = viewer(Scope::Operator {
            user: "ada".into(),
            via: None,
            exp: i64::MAX,
        });
        assert!(person.may(Sight::Tickets) && person.may(Sight::Repo("any")));
        assert!(!person.may(Sight::Operator));
        assert_eq!(person.actor().label, "operator:ada");
        let open = Viewer {
            signed_in: None,
            csrf: "c".into(),
        };
        assert!(open.may(Sight::Operator));
        assert_eq!(open.actor(), Actor::open());
    }
}
