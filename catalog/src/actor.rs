//! The actor of an event write (protocol §2): exactly seven variants, checked
//! in code because they are protocol vocabulary shared by every catalog, not
//! per-type catalog data. Catalog documents only choose which kinds may emit
//! each type.
//!
//! Check order inside an actor: shape (object) → `kind` → the `via` rule →
//! each variant field in declaration order → unrecognized keys. The `via` rule
//! comes before field checks so that a delegate marker on the wrong actor is
//! reported as the rule it breaks, not as a stray key.

use serde_json::{Map, Value};

use crate::Family;
use crate::detail::describe;

/// The rule message for a `via` member where the protocol forbids one.
pub(crate) const VIA_RULE: &str =
    "via is only valid on human actors of build and repository events";

/// The actor kinds the protocol defines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ActorKind {
    Kernel,
    Agent,
    Human,
    Dispatcher,
    Ingester,
}

impl ActorKind {
    pub(crate) const ALL: [ActorKind; 5] = [
        ActorKind::Kernel,
        ActorKind::Agent,
        ActorKind::Human,
        ActorKind::Dispatcher,
        ActorKind::Ingester,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ActorKind::Kernel => "kernel",
            ActorKind::Agent => "agent",
            ActorKind::Human => "human",
            ActorKind::Dispatcher => "dispatcher",
            ActorKind::Ingester => "ingester",
        }
    }

    pub(crate) fn parse(name: &str) -> Option<ActorKind> {
        ActorKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == name)
    }

    /// The variant's required nonempty string members, in declaration order.
    fn fields(self) -> &'static [&'static str] {
        match self {
            ActorKind::Kernel | ActorKind::Dispatcher => &[],
            ActorKind::Agent => &["role", "session"],
            ActorKind::Human => &["user"],
            ActorKind::Ingester => &["source"],
        }
    }
}

const KIND_CHOICES: &str = r#""kernel"|"agent"|"human"|"dispatcher"|"ingester""#;

/// Check an actor's shape for an event of `family`. Returns its kind, or the
/// detail that follows `invalid actor for "<type>": `.
pub(crate) fn check(actor: &Value, family: Family) -> Result<ActorKind, String> {
    let Value::Object(object) = actor else {
        return Err(format!("/: expected object, received {}", describe(actor)));
    };
    let kind = match object.get("kind") {
        None => {
            return Err(format!(
                "/kind: expected one of {KIND_CHOICES}, received nothing"
            ));
        }
        Some(value) => value.as_str().and_then(ActorKind::parse).ok_or_else(|| {
            format!(
                "/kind: expected one of {KIND_CHOICES}, received {}",
                describe(value)
            )
        })?,
    };
    if object.contains_key("via") && (kind != ActorKind::Human || !family.allows_via()) {
        return Err(VIA_RULE.to_owned());
    }
    for field in kind.fields() {
        nonempty_string(object, field, "")?;
    }
    if let Some(via) = object.get("via") {
        check_via(via)?;
    }
    let allowed = |key: &str| {
        key == "kind" || kind.fields().contains(&key) || (kind == ActorKind::Human && key == "via")
    };
    reject_unrecognized(object, "/", allowed)?;
    Ok(kind)
}

/// `via` on a human actor: `{kind: "session", id}` or `{kind: "mcp", client}`.
fn check_via(via: &Value) -> Result<(), String> {
    let Value::Object(object) = via else {
        return Err(format!("/via: expected object, received {}", describe(via)));
    };
    let field = match object.get("kind").and_then(Value::as_str) {
        Some("session") => "id",
        Some("mcp") => "client",
        Some(_) | None => {
            let found = object
                .get("kind")
                .map_or_else(|| "nothing".to_owned(), describe);
            return Err(format!(
                r#"/via/kind: expected one of "session"|"mcp", received {found}"#
            ));
        }
    };
    nonempty_string(object, field, "/via")?;
    reject_unrecognized(object, "/via", |key| key == "kind" || key == field)
}

fn nonempty_string(object: &Map<String, Value>, field: &str, parent: &str) -> Result<(), String> {
    match object.get(field) {
        None => Err(format!(
            "{}: missing required key \"{field}\"",
            if parent.is_empty() { "/" } else { parent }
        )),
        Some(Value::String(text)) if !text.is_empty() => Ok(()),
        Some(Value::String(_)) => Err(format!(
            "{parent}/{field}: expected string of at least 1 character, received string \"\""
        )),
        Some(other) => Err(format!(
            "{parent}/{field}: expected string, received {}",
            describe(other)
        )),
    }
}

/// Fails on the first key (in document order) the variant does not declare.
fn reject_unrecognized(
    object: &Map<String, Value>,
    path: &str,
    allowed: impl Fn(&str) -> bool,
) -> Result<(), String> {
    match object.keys().find(|key| !allowed(key)) {
        Some(key) => Err(format!(
            "{path}: unrecognized key {}",
            Value::from(key.as_str())
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ok(actor: Value, family: Family) -> ActorKind {
        check(&actor, family).unwrap_or_else(|detail| panic!("{actor} rejected: {detail}"))
    }

    fn err(actor: Value, family: Family) -> String {
        match check(&actor, family) {
            Ok(kind) => panic!("{actor} accepted as {kind:?}"),
            Err(detail) => detail,
        }
    }

    #[test]
    fn all_seven_variants_are_valid_on_build_and_repository_events() {
        for family in [Family::Build, Family::Repository] {
            assert_eq!(ok(json!({"kind": "kernel"}), family), ActorKind::Kernel);
            assert_eq!(
                ok(
                    json!({"kind": "agent", "role": "implement", "session": "s_1"}),
                    family
                ),
                ActorKind::Agent
            );
            assert_eq!(
                ok(json!({"kind": "human", "user": "alice"}), family),
                ActorKind::Human
            );
            assert_eq!(
                ok(
                    json!({"kind": "human", "user": "alice", "via": {"kind": "session", "id": "os_1"}}),
                    family
                ),
                ActorKind::Human
            );
            assert_eq!(
                ok(
                    json!({"kind": "human", "user": "alice", "via": {"kind": "mcp", "client": "claude-code"}}),
                    family
                ),
                ActorKind::Human
            );
            assert_eq!(
                ok(json!({"kind": "dispatcher"}), family),
                ActorKind::Dispatcher
            );
            assert_eq!(
                ok(json!({"kind": "ingester", "source": "sentry"}), family),
                ActorKind::Ingester
            );
        }
    }

    #[test]
    fn extra_key_is_rejected() {
        assert_eq!(
            err(json!({"kind": "kernel", "user": "x"}), Family::Build),
            r#"/: unrecognized key "user""#
        );
        assert_eq!(
            err(
                json!({"kind": "human", "user": "a", "via": {"kind": "mcp", "client": "c", "id": "x"}}),
                Family::Build
            ),
            r#"/via: unrecognized key "id""#
        );
    }

    #[test]
    fn unknown_or_missing_kind_is_rejected() {
        assert!(err(json!({"kind": "robot"}), Family::Build).starts_with("/kind: expected one of"));
        assert!(err(json!({}), Family::Build).ends_with("received nothing"));
        assert!(err(json!("kernel"), Family::Build).starts_with("/: expected object"));
        assert!(
            err(
                json!({"kind": "human", "user": "a", "via": {"kind": "cli", "id": "x"}}),
                Family::Build
            )
            .starts_with("/via/kind: expected one of \"session\"|\"mcp\"")
        );
    }

    #[test]
    fn empty_and_missing_strings_are_rejected() {
        assert_eq!(
            err(
                json!({"kind": "agent", "role": "", "session": "s"}),
                Family::Build
            ),
            r#"/role: expected string of at least 1 character, received string """#
        );
        assert_eq!(
            err(json!({"kind": "agent", "role": "plan"}), Family::Build),
            r#"/: missing required key "session""#
        );
        assert_eq!(
            err(json!({"kind": "ingester", "source": 3}), Family::Build),
            "/source: expected string, received number 3"
        );
        assert_eq!(
            err(
                json!({"kind": "human", "user": "a", "via": {"kind": "session", "id": ""}}),
                Family::Build
            ),
            r#"/via/id: expected string of at least 1 character, received string """#
        );
    }

    #[test]
    fn via_on_a_non_human_actor_breaks_the_via_rule() {
        for actor in [
            json!({"kind": "agent", "role": "r", "session": "s", "via": {"kind": "mcp", "client": "c"}}),
            json!({"kind": "kernel", "via": {"kind": "session", "id": "os_1"}}),
            json!({"kind": "dispatcher", "via": null}),
            json!({"kind": "ingester", "source": "s", "via": {}}),
        ] {
            assert_eq!(err(actor, Family::Build), VIA_RULE);
        }
    }

    #[test]
    fn via_on_a_session_event_breaks_the_via_rule() {
        assert_eq!(
            err(
                json!({"kind": "human", "user": "alice", "via": {"kind": "session", "id": "os_1"}}),
                Family::Session
            ),
            VIA_RULE
        );
        assert_eq!(
            ok(json!({"kind": "human", "user": "alice"}), Family::Session),
            ActorKind::Human
        );
    }
}
