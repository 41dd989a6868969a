//! Session attribution and delegated-write (`via`) attribution for
//! event-bearing writes (spec section 7): `POST …/events`,
//! `POST …/events/conditional` and `POST …/deposits` on builds, repositories
//! and sessions.
//!
//! Runs after [`super::authorize()`] and before catalog validation, on the raw
//! actor JSON, because its answers are authority answers (403), not validation
//! answers (422): a caller must be able to tell "not yours" from "malformed".
//! Anything that is *not* an authority question — an unknown actor shape, a
//! `via` on a non-human actor, a `via` the token does carry on a session
//! event — is left for the catalog to judge.

use serde_json::Value;

use super::authorize::Denied;
use super::scope::{Scope, Via, WILDCARD};

/// Check `actor` against the token's session dimension and apply the token's
/// `via`.
///
/// - Token session `"*"`: any actor passes here.
/// - Any other session: only `{"kind": "agent", "session": <that session>, …}`.
/// - Every family (spec section 7 names build, repository and session
///   resources): a human actor claiming a `via` the token does not carry is
///   refused (403).
/// - `family_allows_via` (build and repository events): when the token carries
///   a `via`, it is stamped onto the human actor (added, or replacing an equal
///   claim). Session events (`family_allows_via = false`) are never stamped:
///   `via` is never valid there, so the catalog rejects a claimed one (422)
///   and an unclaimed write stays the operator's own.
///
/// Attributed operator scopes have no session dimension and never reach a raw
/// store write (authorization refuses them first); they are refused here too.
pub fn attribute(scope: &Scope, actor: &mut Value, family_allows_via: bool) -> Result<(), Denied> {
    let Some(session) = scope.session() else {
        return Err(forbidden(format!(
            "token scoped to {} may not write store events",
            scope.describe()
        )));
    };
    if session != WILDCARD {
        check_agent(session, actor)?;
    }

    // Only a human actor can carry `via`; anything else is the catalog's call.
    let Some(object) = actor.as_object_mut() else {
        return Ok(());
    };
    if object.get("kind").and_then(Value::as_str) != Some("human") {
        return Ok(());
    }
    // (A human actor got here only with a `"*"` token session.)
    let token_via = scope.via();
    if let Some(claim) = object.get("via") {
        // A malformed claim is never the token's via, so it is refused too.
        let carried = token_via.is_some_and(|via| Via::from_json(claim).ok().as_ref() == Some(via));
        if !carried {
            return Err(forbidden(format!(
                "token scoped to {} may not write events attributed via a delegate the token does not carry",
                scope.describe()
            )));
        }
    }
    if let Some(via) = token_via.filter(|_| family_allows_via) {
        // `insert` keeps an existing member's position, appends a new one.
        object.insert("via".to_owned(), via.to_json());
    }
    Ok(())
}

/// A non-wildcard token session admits only its own agent.
fn check_agent(session: &str, actor: &Value) -> Result<(), Denied> {
    let prefix =
        format!("token scoped to session \"{session}\" may not write events attributed to");
    if actor.get("kind").and_then(Value::as_str) != Some("agent") {
        return Err(forbidden(format!("{prefix} a non-agent actor")));
    }
    match actor.get("session") {
        Some(Value::String(other)) if other == session => Ok(()),
        Some(Value::String(other)) => Err(forbidden(format!("{prefix} session \"{other}\""))),
        _ => Err(forbidden(format!("{prefix} an agent without a session"))),
    }
}

fn forbidden(message: String) -> Denied {
    Denied::Forbidden(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::scope::ScopeKind;
    use serde_json::json;

    fn scope(session: &str, via: Option<Via>) -> Scope {
        Scope::Resource {
            kind: ScopeKind::Build,
            id: "b".into(),
            session: session.into(),
            via,
            exp: 1,
        }
    }
    fn mcp() -> Via {
        Via::Mcp {
            client: "claude-code".into(),
        }
    }
    fn os(id: &str) -> Via {
        Via::Session { id: id.into() }
    }
    fn message(result: Result<(), Denied>) -> String {
        result.unwrap_err().to_string()
    }

    #[test]
    fn wildcard_session_admits_any_actor_unchanged() {
        let admin = Scope::Legacy {
            build: "*".into(),
            session: "*".into(),
            exp: 1,
        };
        let deployment = Scope::Deployment {
            session: "*".into(),
            via: None,
            exp: 1,
        };
        for token in [admin, deployment, scope("*", None)] {
            for actor in [
                json!({"kind": "kernel"}),
                json!({"kind": "agent", "role": "implement", "session": "s_9"}),
                json!({"kind": "human", "user": "alice"}),
                json!({"kind": "dispatcher"}),
                json!({"kind": "ingester", "source": "sentry"}),
                json!({"kind": "martian"}),
                json!("not an object"),
                json!(null),
            ] {
                let mut written = actor.clone();
                assert_eq!(attribute(&token, &mut written, true), Ok(()), "{actor}");
                assert_eq!(written, actor);
            }
        }
    }

    #[test]
    fn specific_session_admits_only_its_agent() {
        let token = Scope::Legacy {
            build: "b".into(),
            session: "s_1".into(),
            exp: 1,
        };
        let mut own = json!({"kind": "agent", "role": "implement", "session": "s_1"});
        assert_eq!(attribute(&token, &mut own, true), Ok(()));
        assert_eq!(
            own,
            json!({"kind": "agent", "role": "implement", "session": "s_1"})
        );

        let non_agent =
            r#"token scoped to session "s_1" may not write events attributed to a non-agent actor"#;
        for actor in [
            json!({"kind": "kernel"}),
            json!({"kind": "human", "user": "alice"}),
            json!({"kind": "human", "user": "alice", "session": "s_1"}),
            json!({"kind": "dispatcher"}),
            json!({"kind": "ingester", "source": "s_1"}),
            json!({"session": "s_1"}),
            json!("agent"),
        ] {
            assert_eq!(
                message(attribute(&token, &mut actor.clone(), true)),
                non_agent,
                "{actor}"
            );
        }
        assert_eq!(
            message(attribute(
                &token,
                &mut json!({"kind": "agent", "role": "r", "session": "s_2"}),
                true
            )),
            r#"token scoped to session "s_1" may not write events attributed to session "s_2""#
        );
        assert_eq!(
            message(attribute(
                &token,
                &mut json!({"kind": "agent", "role": "r", "session": "S_1"}),
                true
            )),
            r#"token scoped to session "s_1" may not write events attributed to session "S_1""#
        );
        assert_eq!(
            message(attribute(
                &token,
                &mut json!({"kind": "agent", "role": "r"}),
                false
            )),
            r#"token scoped to session "s_1" may not write events attributed to an agent without a session"#
        );
    }

    #[test]
    fn via_stamping_and_refusal() {
        let human = json!({"kind": "human", "user": "alice"});
        let with = |via: Value| json!({"kind": "human", "user": "alice", "via": via});

        // Token carries via: no claim → stamped; equal claim → kept as the token's.
        let token = scope("*", Some(mcp()));
        let mut actor = human.clone();
        attribute(&token, &mut actor, true).unwrap();
        assert_eq!(actor, with(json!({"kind": "mcp", "client": "claude-code"})));
        assert_eq!(
            serde_json::to_string(&actor).unwrap(),
            r#"{"kind":"human","user":"alice","via":{"kind":"mcp","client":"claude-code"}}"#
        );
        let mut actor = json!({"kind": "human", "via": {"client": "claude-code", "kind": "mcp"}, "user": "alice"});
        attribute(&token, &mut actor, true).unwrap();
        assert_eq!(
            serde_json::to_string(&actor).unwrap(),
            r#"{"kind":"human","via":{"kind":"mcp","client":"claude-code"},"user":"alice"}"#
        );

        // Claims the token does not carry: other delegate, other kind, malformed.
        let refused = r#"token scoped to build "b" may not write events attributed via a delegate the token does not carry"#;
        for claim in [
            json!({"kind": "mcp", "client": "cursor"}),
            json!({"kind": "session", "id": "os_1"}),
            json!({"kind": "mcp", "client": "claude-code", "extra": 1}),
            json!({"kind": "mcp"}),
            json!("mcp"),
            json!(null),
        ] {
            assert_eq!(
                message(attribute(&token, &mut with(claim.clone()), true)),
                refused,
                "{claim}"
            );
        }

        // Token carries no via: any claim is refused, no claim passes unchanged.
        for token in [
            scope("*", None),
            Scope::Legacy {
                build: "*".into(),
                session: "*".into(),
                exp: 1,
            },
        ] {
            let mut actor = human.clone();
            attribute(&token, &mut actor, true).unwrap();
            assert_eq!(actor, human);
            assert!(
                attribute(
                    &token,
                    &mut with(json!({"kind": "session", "id": "os_1"})),
                    true
                )
                .is_err()
            );
        }
        let admin = Scope::Legacy {
            build: "*".into(),
            session: "*".into(),
            exp: 1,
        };
        assert_eq!(
            message(attribute(
                &admin,
                &mut with(json!({"kind": "mcp", "client": "c"})),
                true
            )),
            r#"token scoped to build "*" may not write events attributed via a delegate the token does not carry"#
        );

        // Deployment via stamps a session delegate.
        let deployment = Scope::Deployment {
            session: "*".into(),
            via: Some(os("os_7")),
            exp: 1,
        };
        let mut actor = human.clone();
        attribute(&deployment, &mut actor, true).unwrap();
        assert_eq!(actor, with(json!({"kind": "session", "id": "os_7"})));
        assert!(
            attribute(
                &deployment,
                &mut with(json!({"kind": "session", "id": "os_8"})),
                true
            )
            .is_err()
        );
    }

    #[test]
    fn non_human_via_is_left_for_the_catalog() {
        for token in [scope("*", Some(mcp())), scope("*", None)] {
            for actor in [
                json!({"kind": "kernel", "via": {"kind": "mcp", "client": "x"}}),
                json!({"kind": "dispatcher", "via": {"kind": "session", "id": "os_1"}}),
                json!({"kind": "agent", "role": "r", "session": "s", "via": "junk"}),
            ] {
                let mut written = actor.clone();
                assert_eq!(attribute(&token, &mut written, true), Ok(()), "{actor}");
                assert_eq!(written, actor);
            }
        }
        // With a specific session the agent passes the session gate; its via is
        // still the catalog's business, never stamped or refused here.
        let token = scope("s_1", Some(mcp()));
        let actor = json!({"kind": "agent", "role": "r", "session": "s_1", "via": {"kind": "mcp", "client": "x"}});
        let mut written = actor.clone();
        assert_eq!(attribute(&token, &mut written, true), Ok(()));
        assert_eq!(written, actor);
    }

    #[test]
    fn session_family_never_stamps() {
        let token = Scope::Resource {
            kind: ScopeKind::Session,
            id: "os_1".into(),
            session: "*".into(),
            via: Some(mcp()),
            exp: 1,
        };
        let human = json!({"kind": "human", "user": "alice"});
        let mut actor = human.clone();
        assert_eq!(attribute(&token, &mut actor, false), Ok(()));
        assert_eq!(actor, human);
        // The token's own via on a session event passes here, unstamped: the
        // catalog rejects it (via is never valid on session events).
        let actor = json!({"kind": "human", "user": "alice", "via": {"kind": "mcp", "client": "claude-code"}});
        let mut written = actor.clone();
        assert_eq!(attribute(&token, &mut written, false), Ok(()));
        assert_eq!(written, actor);
        // A via the token does not carry is refused on every family (section 7).
        let other =
            json!({"kind": "human", "user": "alice", "via": {"kind": "mcp", "client": "other"}});
        assert!(attribute(&token, &mut other.clone(), false).is_err());
        let no_via = scope("*", None);
        let actor =
            json!({"kind": "human", "user": "alice", "via": {"kind": "session", "id": "os_1"}});
        assert!(attribute(&no_via, &mut actor.clone(), false).is_err());
    }

    #[test]
    fn operator_scopes_cannot_write() {
        let operator = Scope::Operator {
            user: "alice".into(),
            via: Some(mcp()),
            exp: 1,
        };
        let mut actor = json!({"kind": "human", "user": "alice"});
        assert_eq!(
            message(attribute(&operator, &mut actor, true)),
            r#"token scoped to operator "alice" may not write store events"#
        );
        assert_eq!(actor, json!({"kind": "human", "user": "alice"}));
    }
}
