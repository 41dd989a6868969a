//! Token scopes (spec section 7, "Token encoding"): strict parsing of the
//! signed JSON scope and its canonical serialization for minting.
//!
//! Parsing is deliberately strict: a scope must match exactly one of the four
//! shapes below; unknown keys, missing keys, wrong JSON types, empty strings and
//! non-integer `exp` values are all invalid (an integral `exp` is an integer
//! however JSON writes it, as for JavaScript). Strictness matters here because the
//! scope *is* the credential: a lenient parser would let a differently-shaped
//! payload (minted by some other tool with the same secret) mean something the
//! minter did not intend.
//!
//! Serialization writes members in the order the shapes are listed in the spec
//! (and in which Autobuild's `JSON.stringify` emits them), independently of
//! `serde_json`'s `preserve_order` feature, so a token minted here looks like one
//! minted by Autobuild's runner.

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

/// A verified token's authority. The variants are the spec's scope shapes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// `{"build": slug | "*", "session": s, "exp": ms}`. `build: "*"` is the
    /// admin scope — the only spelling that grants admin.
    Legacy {
        build: String,
        session: String,
        exp: i64,
    },
    /// `{"resource": {"kind": "build"|"repo"|"session", "id": id}, "session": s,
    /// "exp": ms, "via"?: Via}`. An `id` of `"*"` is an ordinary id, not admin.
    Resource {
        kind: ScopeKind,
        id: String,
        session: String,
        via: Option<Via>,
        exp: i64,
    },
    /// `{"operator": true, "session": "*", "exp": ms, "via"?: Via}`: the
    /// deployment scope. Covers raw store routes like admin. Only
    /// `session: "*"` parses, so `session` is always `"*"` on a verified token.
    Deployment {
        session: String,
        via: Option<Via>,
        exp: i64,
    },
    /// `{"operator": {"user": nonblank}, "exp": ms, "via"?: Via}`: an attributed
    /// human operator. Accepted only by the operator API, refused on every raw
    /// store route. The spec lets "a resource or operator scope" carry `via`, so
    /// it parses here too (a signed token of this shape is then a 403, not a 401).
    Operator {
        user: String,
        via: Option<Via>,
        exp: i64,
    },
}

/// The resource kinds of an explicit resource scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScopeKind {
    Build,
    Repo,
    Session,
}

/// A delegate marker, the same shape as a human actor's `via` (spec section 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Via {
    /// `{"kind": "session", "id": nonempty}`: an operator's orchestrator session.
    Session { id: String },
    /// `{"kind": "mcp", "client": nonempty}`: an MCP client.
    Mcp { client: String },
}

/// Why a scope did not parse. For diagnostics (CLI, logs) only: a token whose
/// scope fails to parse is answered with the same opaque 401 as any other.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid token scope: {0}")]
pub struct InvalidScope(pub &'static str);

/// The admin spelling of the legacy scope, and the "any session" wildcard.
pub const WILDCARD: &str = "*";

impl ScopeKind {
    /// The wire spelling, also used in 403 messages.
    pub fn as_str(self) -> &'static str {
        match self {
            ScopeKind::Build => "build",
            ScopeKind::Repo => "repo",
            ScopeKind::Session => "session",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "build" => Some(ScopeKind::Build),
            "repo" => Some(ScopeKind::Repo),
            "session" => Some(ScopeKind::Session),
            _ => None,
        }
    }
}

impl Via {
    /// Strictly parse a `via` marker: exactly `kind` plus its one id member.
    pub fn from_json(value: &Value) -> Result<Via, InvalidScope> {
        let object = value
            .as_object()
            .ok_or(InvalidScope("via must be an object"))?;
        match object.get("kind").and_then(Value::as_str) {
            Some("session") => {
                only_keys(object, &["kind", "id"])?;
                Ok(Via::Session {
                    id: nonempty(object, "id")?,
                })
            }
            Some("mcp") => {
                only_keys(object, &["kind", "client"])?;
                Ok(Via::Mcp {
                    client: nonempty(object, "client")?,
                })
            }
            _ => Err(InvalidScope("via kind must be \"session\" or \"mcp\"")),
        }
    }

    /// The marker as JSON, in wire member order.
    pub fn to_json(&self) -> Value {
        let mut object = Map::new();
        match self {
            Via::Session { id } => {
                object.insert("kind".into(), "session".into());
                object.insert("id".into(), id.as_str().into());
            }
            Via::Mcp { client } => {
                object.insert("kind".into(), "mcp".into());
                object.insert("client".into(), client.as_str().into());
            }
        }
        Value::Object(object)
    }
}

impl Serialize for Via {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        match self {
            Via::Session { id } => {
                map.serialize_entry("kind", "session")?;
                map.serialize_entry("id", id)?;
            }
            Via::Mcp { client } => {
                map.serialize_entry("kind", "mcp")?;
                map.serialize_entry("client", client)?;
            }
        }
        map.end()
    }
}

impl Scope {
    /// Strictly parse a decoded scope document.
    pub fn from_json(value: &Value) -> Result<Scope, InvalidScope> {
        let object = value
            .as_object()
            .ok_or(InvalidScope("scope must be a JSON object"))?;
        // The discriminating member decides the shape; each shape then checks
        // its exact key set, so a document can never match two shapes.
        if object.contains_key("build") {
            only_keys(object, &["build", "session", "exp"])?;
            return Ok(Scope::Legacy {
                build: nonempty(object, "build")?,
                session: nonempty(object, "session")?,
                exp: exp(object)?,
            });
        }
        if let Some(resource) = object.get("resource") {
            only_keys(object, &["resource", "session", "exp", "via"])?;
            let resource = resource
                .as_object()
                .ok_or(InvalidScope("resource must be an object"))?;
            only_keys(resource, &["kind", "id"])?;
            let kind = resource
                .get("kind")
                .and_then(Value::as_str)
                .and_then(ScopeKind::parse)
                .ok_or(InvalidScope(
                    "resource kind must be \"build\", \"repo\" or \"session\"",
                ))?;
            return Ok(Scope::Resource {
                kind,
                id: nonempty(resource, "id")?,
                session: nonempty(object, "session")?,
                via: via(object)?,
                exp: exp(object)?,
            });
        }
        match object.get("operator") {
            Some(Value::Bool(true)) => {
                only_keys(object, &["operator", "session", "exp", "via"])?;
                let session = nonempty(object, "session")?;
                if session != WILDCARD {
                    return Err(InvalidScope("a deployment scope's session must be \"*\""));
                }
                Ok(Scope::Deployment {
                    session,
                    via: via(object)?,
                    exp: exp(object)?,
                })
            }
            Some(Value::Object(operator)) => {
                only_keys(object, &["operator", "exp", "via"])?;
                only_keys(operator, &["user"])?;
                let user = nonempty(operator, "user")?;
                if user.trim().is_empty() {
                    return Err(InvalidScope("operator user must be nonblank"));
                }
                Ok(Scope::Operator {
                    user,
                    via: via(object)?,
                    exp: exp(object)?,
                })
            }
            Some(_) => Err(InvalidScope("operator must be true or {\"user\": …}")),
            None => Err(InvalidScope("scope must have build, resource or operator")),
        }
    }

    /// The scope as a JSON document (wire member order when `serde_json`
    /// preserves order; use [`Scope::to_json_string`] for the canonical text).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The canonical compact JSON text that [`crate::auth::mint`] signs.
    pub fn to_json_string(&self) -> String {
        // Serializing this Serialize impl to a String cannot fail: every key is a
        // string and every value a string, integer, bool or nested such map.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Expiry, integer Unix epoch milliseconds.
    pub fn exp(&self) -> i64 {
        match self {
            Scope::Legacy { exp, .. }
            | Scope::Resource { exp, .. }
            | Scope::Deployment { exp, .. }
            | Scope::Operator { exp, .. } => *exp,
        }
    }

    /// The token's session dimension (`"*"` = any actor). Attributed operator
    /// scopes have none.
    pub fn session(&self) -> Option<&str> {
        match self {
            Scope::Legacy { session, .. }
            | Scope::Resource { session, .. }
            | Scope::Deployment { session, .. } => Some(session),
            Scope::Operator { .. } => None,
        }
    }

    /// The token's delegate claim, if any.
    pub fn via(&self) -> Option<&Via> {
        match self {
            Scope::Legacy { .. } => None,
            Scope::Resource { via, .. }
            | Scope::Deployment { via, .. }
            | Scope::Operator { via, .. } => via.as_ref(),
        }
    }

    /// True for the legacy `build: "*"` admin scope (and only that spelling).
    pub fn is_admin(&self) -> bool {
        matches!(self, Scope::Legacy { build, .. } if build == WILDCARD)
    }

    /// What a request's log line says it acted as (`scope=…`): `admin`,
    /// `deployment`, `build:<slug>`, `repo:<id>`, `session:<id>` or
    /// `operator:<user>`. The scope, never the token.
    pub fn log_label(&self) -> String {
        match self {
            Scope::Legacy { build, .. } if build == WILDCARD => "admin".to_owned(),
            Scope::Legacy { build, .. } => format!("build:{build}"),
            Scope::Resource { kind, id, .. } => format!("{}:{id}", kind.as_str()),
            Scope::Deployment { .. } => "deployment".to_owned(),
            Scope::Operator { user, .. } => format!("operator:{user}"),
        }
    }

    /// `<kind> "<id>"` naming what the token is scoped to, as used in 403
    /// messages: `build "x"` (legacy or resource), `repo "x"`, `session "x"`,
    /// `build "*"` (admin), `deployment "*"`, `operator "alice"`.
    pub fn describe(&self) -> String {
        match self {
            Scope::Legacy { build, .. } => format!("build \"{build}\""),
            Scope::Resource { kind, id, .. } => format!("{} \"{id}\"", kind.as_str()),
            Scope::Deployment { session, .. } => format!("deployment \"{session}\""),
            Scope::Operator { user, .. } => format!("operator \"{user}\""),
        }
    }
}

impl Serialize for Scope {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        struct Resource<'a>(ScopeKind, &'a str);
        impl Serialize for Resource<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut map = serializer.serialize_map(Some(2))?;
                map.serialize_entry("kind", self.0.as_str())?;
                map.serialize_entry("id", self.1)?;
                map.end()
            }
        }
        struct User<'a>(&'a str);
        impl Serialize for User<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("user", self.0)?;
                map.end()
            }
        }

        let mut map = serializer.serialize_map(None)?;
        match self {
            Scope::Legacy {
                build,
                session,
                exp,
            } => {
                map.serialize_entry("build", build)?;
                map.serialize_entry("session", session)?;
                map.serialize_entry("exp", exp)?;
            }
            Scope::Resource {
                kind,
                id,
                session,
                via,
                exp,
            } => {
                map.serialize_entry("resource", &Resource(*kind, id))?;
                map.serialize_entry("session", session)?;
                map.serialize_entry("exp", exp)?;
                if let Some(via) = via {
                    map.serialize_entry("via", via)?;
                }
            }
            Scope::Deployment { session, via, exp } => {
                map.serialize_entry("operator", &true)?;
                map.serialize_entry("session", session)?;
                map.serialize_entry("exp", exp)?;
                if let Some(via) = via {
                    map.serialize_entry("via", via)?;
                }
            }
            Scope::Operator { user, via, exp } => {
                map.serialize_entry("operator", &User(user))?;
                map.serialize_entry("exp", exp)?;
                if let Some(via) = via {
                    map.serialize_entry("via", via)?;
                }
            }
        }
        map.end()
    }
}

fn only_keys(object: &Map<String, Value>, allowed: &[&str]) -> Result<(), InvalidScope> {
    if object.keys().all(|key| allowed.contains(&key.as_str())) {
        Ok(())
    } else {
        Err(InvalidScope("unknown key"))
    }
}

fn nonempty(object: &Map<String, Value>, key: &str) -> Result<String, InvalidScope> {
    match object.get(key) {
        Some(Value::String(text)) if !text.is_empty() => Ok(text.clone()),
        _ => Err(InvalidScope(
            "a required member is missing, not a string, or empty",
        )),
    }
}

/// `exp` must be a JSON integer that fits `i64`: `1.0`, `1e3`, strings and
/// out-of-range integers are invalid (Autobuild never emits them).
/// `exp` is an integer as JavaScript reads JSON (Autobuild checks it with
/// zod's `.int()`): `1784116800000`, `1784116800000.0` and `1.7841168e12` are
/// the same number. A written fraction is only accepted within the safe-integer
/// range, where the float is exact.
fn exp(object: &Map<String, Value>) -> Result<i64, InvalidScope> {
    const MAX_SAFE: f64 = 9_007_199_254_740_991.0;
    let invalid = || InvalidScope("exp must be an integer of epoch milliseconds");
    let value = object.get("exp").ok_or_else(invalid)?;
    if let Some(int) = value.as_i64() {
        return Ok(int);
    }
    match value.as_f64() {
        Some(float) if float.trunc() == float && float.abs() <= MAX_SAFE => Ok(float as i64),
        _ => Err(invalid()),
    }
}

fn via(object: &Map<String, Value>) -> Result<Option<Via>, InvalidScope> {
    object.get("via").map(Via::from_json).transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(value: Value) -> Result<Scope, InvalidScope> {
        Scope::from_json(&value)
    }

    #[test]
    fn parses_every_shape() {
        assert_eq!(
            parse(json!({"build": "b", "session": "s", "exp": 5})),
            Ok(Scope::Legacy {
                build: "b".into(),
                session: "s".into(),
                exp: 5
            })
        );
        assert_eq!(
            parse(
                json!({"resource": {"kind": "repo", "id": "acme/w"}, "session": "hs_1", "exp": 5})
            ),
            Ok(Scope::Resource {
                kind: ScopeKind::Repo,
                id: "acme/w".into(),
                session: "hs_1".into(),
                via: None,
                exp: 5
            })
        );
        assert_eq!(
            parse(
                json!({"resource": {"kind": "session", "id": "os_1"}, "session": "*", "exp": 5,
                         "via": {"kind": "mcp", "client": "claude-code"}})
            ),
            Ok(Scope::Resource {
                kind: ScopeKind::Session,
                id: "os_1".into(),
                session: "*".into(),
                via: Some(Via::Mcp {
                    client: "claude-code".into()
                }),
                exp: 5
            })
        );
        assert_eq!(
            parse(
                json!({"operator": true, "session": "*", "exp": 5, "via": {"kind": "session", "id": "os_1"}})
            ),
            Ok(Scope::Deployment {
                session: "*".into(),
                via: Some(Via::Session { id: "os_1".into() }),
                exp: 5
            })
        );
        assert_eq!(
            parse(json!({"operator": {"user": "alice"}, "exp": 5})),
            Ok(Scope::Operator {
                user: "alice".into(),
                via: None,
                exp: 5
            })
        );
        // Key order is irrelevant on input.
        assert_eq!(
            parse(json!({"exp": -1, "session": "s", "build": "*"})),
            Ok(Scope::Legacy {
                build: "*".into(),
                session: "s".into(),
                exp: -1
            })
        );
    }

    #[test]
    fn rejects_malformed_scopes() {
        let bad = [
            json!(null),
            json!([]),
            json!("build"),
            json!(7),
            json!({}),
            json!({"session": "s", "exp": 5}),
            // unknown keys, at each level
            json!({"build": "b", "session": "s", "exp": 5, "x": 1}),
            json!({"build": "b", "session": "s", "exp": 5, "via": {"kind": "mcp", "client": "c"}}),
            json!({"resource": {"kind": "build", "id": "b", "x": 1}, "session": "s", "exp": 5}),
            json!({"resource": {"kind": "build", "id": "b"}, "session": "s", "exp": 5, "build": "b"}),
            json!({"resource": {"kind": "build", "id": "b"}, "session": "s", "exp": 5, "operator": true}),
            json!({"operator": true, "session": "*", "exp": 5, "user": "a"}),
            json!({"operator": {"user": "a"}, "session": "*", "exp": 5}),
            json!({"operator": {"user": "a", "x": 1}, "exp": 5}),
            // missing members
            json!({"build": "b", "exp": 5}),
            json!({"build": "b", "session": "s"}),
            json!({"resource": {"kind": "build"}, "session": "s", "exp": 5}),
            json!({"resource": {"id": "b"}, "session": "s", "exp": 5}),
            json!({"resource": {"kind": "build", "id": "b"}, "exp": 5}),
            json!({"operator": true, "exp": 5}),
            json!({"operator": {}, "exp": 5}),
            json!({"operator": {"user": "a"}}),
            // wrong types
            json!({"build": 1, "session": "s", "exp": 5}),
            json!({"build": "b", "session": null, "exp": 5}),
            json!({"build": "b", "session": "s", "exp": "5"}),
            json!({"build": "b", "session": "s", "exp": true}),
            json!({"resource": "build", "session": "s", "exp": 5}),
            json!({"resource": {"kind": "admin", "id": "b"}, "session": "s", "exp": 5}),
            json!({"resource": {"kind": "Build", "id": "b"}, "session": "s", "exp": 5}),
            json!({"resource": {"kind": "build", "id": 3}, "session": "s", "exp": 5}),
            json!({"operator": false, "session": "*", "exp": 5}),
            json!({"operator": "alice", "exp": 5}),
            json!({"operator": {"user": 1}, "exp": 5}),
            // empty / blank strings
            json!({"build": "", "session": "s", "exp": 5}),
            json!({"build": "b", "session": "", "exp": 5}),
            json!({"resource": {"kind": "repo", "id": ""}, "session": "s", "exp": 5}),
            json!({"operator": {"user": ""}, "exp": 5}),
            json!({"operator": {"user": "  \t"}, "exp": 5}),
            // deployment session must be the wildcard
            json!({"operator": true, "session": "s_1", "exp": 5}),
            // non-integer exp, or a float past the safe-integer range
            json!({"build": "b", "session": "s", "exp": 5.5}),
            json!({"build": "b", "session": "s", "exp": 1e300}),
            json!({"build": "b", "session": "s", "exp": 9_007_199_254_740_992.0}),
            json!({"build": "b", "session": "s", "exp": "5"}),
            json!({"build": "b", "session": "s", "exp": u64::MAX}),
            // malformed via
            json!({"resource": {"kind": "repo", "id": "r"}, "session": "s", "exp": 5, "via": null}),
            json!({"resource": {"kind": "repo", "id": "r"}, "session": "s", "exp": 5, "via": {"kind": "mcp"}}),
            json!({"resource": {"kind": "repo", "id": "r"}, "session": "s", "exp": 5, "via": {"kind": "mcp", "client": ""}}),
            json!({"resource": {"kind": "repo", "id": "r"}, "session": "s", "exp": 5, "via": {"kind": "mcp", "id": "x"}}),
            json!({"resource": {"kind": "repo", "id": "r"}, "session": "s", "exp": 5,
                   "via": {"kind": "session", "id": "os", "client": "c"}}),
            json!({"resource": {"kind": "repo", "id": "r"}, "session": "s", "exp": 5, "via": {"kind": "human", "id": "x"}}),
            json!({"operator": true, "session": "*", "exp": 5, "via": "mcp"}),
        ];
        for value in bad {
            assert!(parse(value.clone()).is_err(), "accepted {value}");
        }
    }

    #[test]
    fn an_integral_float_exp_is_an_integer() {
        for exp in [json!(5.0), json!(1e12), json!(-0.0)] {
            let scope = parse(json!({"build": "b", "session": "s", "exp": exp}))
                .unwrap_or_else(|error| panic!("exp {exp}: {error:?}"));
            assert_eq!(scope.exp() as f64, exp.as_f64().unwrap_or(f64::NAN));
        }
    }

    #[test]
    fn serializes_in_wire_order() {
        let cases = [
            (
                Scope::Legacy {
                    build: "b".into(),
                    session: "s".into(),
                    exp: 7,
                },
                r#"{"build":"b","session":"s","exp":7}"#,
            ),
            (
                Scope::Resource {
                    kind: ScopeKind::Build,
                    id: "b".into(),
                    session: "s".into(),
                    via: None,
                    exp: 7,
                },
                r#"{"resource":{"kind":"build","id":"b"},"session":"s","exp":7}"#,
            ),
            (
                Scope::Resource {
                    kind: ScopeKind::Session,
                    id: "os_1".into(),
                    session: "*".into(),
                    via: Some(Via::Mcp { client: "c".into() }),
                    exp: 7,
                },
                r#"{"resource":{"kind":"session","id":"os_1"},"session":"*","exp":7,"via":{"kind":"mcp","client":"c"}}"#,
            ),
            (
                Scope::Deployment {
                    session: "*".into(),
                    via: Some(Via::Session { id: "os_2".into() }),
                    exp: 7,
                },
                r#"{"operator":true,"session":"*","exp":7,"via":{"kind":"session","id":"os_2"}}"#,
            ),
            (
                Scope::Operator {
                    user: "alice".into(),
                    via: None,
                    exp: 7,
                },
                r#"{"operator":{"user":"alice"},"exp":7}"#,
            ),
        ];
        for (scope, text) in cases {
            assert_eq!(scope.to_json_string(), text);
            let reparsed: Value = serde_json::from_str(text).unwrap();
            assert_eq!(Scope::from_json(&reparsed), Ok(scope.clone()));
            assert_eq!(scope.to_json(), reparsed);
        }
    }

    #[test]
    fn accessors() {
        let admin = Scope::Legacy {
            build: "*".into(),
            session: "*".into(),
            exp: 1,
        };
        assert!(admin.is_admin());
        assert_eq!(admin.describe(), r#"build "*""#);
        let star_resource = Scope::Resource {
            kind: ScopeKind::Build,
            id: "*".into(),
            session: "*".into(),
            via: None,
            exp: 1,
        };
        assert!(!star_resource.is_admin());
        let operator = Scope::Operator {
            user: "alice".into(),
            via: None,
            exp: 3,
        };
        assert_eq!(operator.session(), None);
        assert_eq!(operator.exp(), 3);
        assert_eq!(operator.describe(), r#"operator "alice""#);
        let deployment = Scope::Deployment {
            session: "*".into(),
            via: None,
            exp: 1,
        };
        assert!(!deployment.is_admin());
        assert_eq!(deployment.describe(), r#"deployment "*""#);
        assert_eq!(
            Via::Mcp { client: "c".into() }.to_json(),
            serde_json::json!({"kind": "mcp", "client": "c"})
        );
    }

    #[test]
    fn log_labels_name_the_scope() {
        let cases = [
            (json!({"build": "*", "session": "*", "exp": 1}), "admin"),
            (json!({"build": "b1", "session": "*", "exp": 1}), "build:b1"),
            (
                json!({"resource": {"kind": "repo", "id": "acme/w"}, "session": "s", "exp": 1}),
                "repo:acme/w",
            ),
            (
                json!({"resource": {"kind": "build", "id": "*"}, "session": "s", "exp": 1}),
                "build:*",
            ),
            (
                json!({"operator": true, "session": "*", "exp": 1}),
                "deployment",
            ),
            (
                json!({"operator": {"user": "alice"}, "exp": 1}),
                "operator:alice",
            ),
        ];
        for (json, label) in cases {
            assert_eq!(
                Scope::from_json(&json).unwrap().log_label(),
                label,
                "{json}"
            );
        }
    }
}
