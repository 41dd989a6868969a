//! Request-body schemas (spec sections 2–4), checked by hand so every
//! rejection names the field and what it must be.
//!
//! Like Autobuild's wire schemas, unknown top-level keys are ignored and never
//! stored (docs/decisions.md, 12); nested shapes the spec fixes (ticket) are
//! strict. An event write's `actor` and `payload` are left to the catalog.

use serde_json::{Map, Value};

/// A body-schema violation; becomes `400 validation` with
/// `invalid request body: <message>`.
#[derive(Debug, PartialEq, Eq)]
pub struct SchemaError(pub String);

pub type SchemaResult<T> = Result<T, SchemaError>;

fn fail<T>(msg: impl Into<String>) -> SchemaResult<T> {
    Err(SchemaError(msg.into()))
}

/// The body as an object, or an error naming `what`.
pub fn object<'a>(value: &'a Value, what: &str) -> SchemaResult<&'a Map<String, Value>> {
    value
        .as_object()
        .map_or_else(|| fail(format!("{what} must be an object")), Ok)
}

/// A required nonempty string member.
pub fn nonempty_str<'a>(obj: &'a Map<String, Value>, key: &str) -> SchemaResult<&'a str> {
    match obj.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        Some(Value::String(_)) => fail(format!("\"{key}\" must be a nonempty string")),
        None => fail(format!("\"{key}\" is required")),
        Some(_) => fail(format!("\"{key}\" must be a string")),
    }
}

/// A required nonempty string member kept in a column of its own (an id,
/// artifact kind, lease holder or stream label): also bounded and NUL-free
/// ([`ident`](super::ident)).
pub fn identifier<'a>(obj: &'a Map<String, Value>, key: &str) -> SchemaResult<&'a str> {
    let value = nonempty_str(obj, key)?;
    match super::ident::field_problem(key, value) {
        None => Ok(value),
        Some(problem) => fail(problem),
    }
}

/// An optional string member; when `nonempty`, a present value must not be empty.
/// `null` is not "absent" (Autobuild's schemas reject it).
pub fn optional_str<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    nonempty: bool,
) -> SchemaResult<Option<&'a str>> {
    match obj.get(key) {
        None => Ok(None),
        Some(Value::String(s)) if nonempty && s.is_empty() => {
            fail(format!("\"{key}\" must be a nonempty string"))
        }
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => fail(format!("\"{key}\" must be a string")),
    }
}

/// A required integer ≥ 0 (JSON `3` and `3.0` alike, as for JavaScript);
/// at most 2^53 − 1 so that it means the same number to every client.
pub fn nonnegative_int(obj: &Map<String, Value>, key: &str) -> SchemaResult<i64> {
    const MAX_SAFE: f64 = 9_007_199_254_740_991.0;
    let Some(value) = obj.get(key) else {
        return fail(format!("\"{key}\" is required"));
    };
    let Some(number) = value.as_f64() else {
        return fail(format!("\"{key}\" must be a number"));
    };
    if let Some(int) = value
        .as_i64()
        .filter(|i| *i >= 0 && (*i as f64) <= MAX_SAFE)
    {
        return Ok(int);
    }
    if number.trunc() == number && (0.0..=MAX_SAFE).contains(&number) {
        return Ok(number as i64);
    }
    fail(format!("\"{key}\" must be a nonnegative integer"))
}

/// An optional JSON object member (artifact `metadata`).
pub fn optional_object<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
) -> SchemaResult<Option<&'a Map<String, Value>>> {
    match obj.get(key) {
        None => Ok(None),
        Some(Value::Object(map)) => Ok(Some(map)),
        Some(_) => fail(format!("\"{key}\" must be an object")),
    }
}

/// Reject keys outside `allowed` (for the strict nested shapes).
pub fn only_keys(obj: &Map<String, Value>, what: &str, allowed: &[&str]) -> SchemaResult<()> {
    match obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(extra) => fail(format!("{what} has unknown key \"{extra}\"")),
        None => Ok(()),
    }
}

/// `TicketRef`: strict, `source`/`id` nonempty, `url`/`title` optional strings.
/// Returns the ticket re-serialised in a fixed member order.
pub fn ticket(value: &Value) -> SchemaResult<Value> {
    let obj = object(value, "\"ticket\"")?;
    only_keys(obj, "\"ticket\"", &["source", "id", "url", "title"])?;
    let mut out = Map::new();
    out.insert("source".into(), nonempty_str(obj, "source")?.into());
    out.insert("id".into(), nonempty_str(obj, "id")?.into());
    for key in ["url", "title"] {
        if let Some(s) = optional_str(obj, key, false)? {
            out.insert(key.into(), s.into());
        }
    }
    Ok(Value::Object(out))
}

/// `createBuild`'s members as the build record keeps them: `repo`
/// (nonempty), `repoOrigin` (a string), `ticket` (strict) and `branch`
/// (nonempty), in that order; unknown keys are not kept. The slug is an
/// [`identifier`] of its own. Imports hold a stored record to the same rule
/// (src/archive/checks.rs).
pub fn build_attrs(obj: &Map<String, Value>) -> SchemaResult<Map<String, Value>> {
    let mut attrs = Map::new();
    attrs.insert("repo".into(), nonempty_str(obj, "repo")?.into());
    if let Some(origin) = optional_str(obj, "repoOrigin", false)? {
        attrs.insert("repoOrigin".into(), origin.into());
    }
    if let Some(ticket) = obj.get("ticket") {
        attrs.insert("ticket".into(), self::ticket(ticket)?);
    }
    if let Some(branch) = optional_str(obj, "branch", true)? {
        attrs.insert("branch".into(), branch.into());
    }
    Ok(attrs)
}

/// `createSession`'s members as the session record keeps them: `repo`
/// (equal to `repo`, the repository it is created under), `operator`
/// (trimmed, not blank) and `title` (a string), in that order.
pub fn session_attrs(obj: &Map<String, Value>, repo: &str) -> SchemaResult<Map<String, Value>> {
    let body_repo = nonempty_str(obj, "repo")?;
    if body_repo != repo {
        return fail(format!(
            "\"repo\" ({:?}) must equal the repository in the path ({:?})",
            super::ident::shown(body_repo),
            super::ident::shown(repo)
        ));
    }
    let operator = nonempty_str(obj, "operator")?.trim_matches(char::is_whitespace);
    if operator.is_empty() {
        return fail("\"operator\" must not be blank");
    }
    let mut attrs = Map::new();
    attrs.insert("repo".into(), repo.into());
    attrs.insert("operator".into(), operator.into());
    if let Some(title) = optional_str(obj, "title", false)? {
        attrs.insert("title".into(), title.into());
    }
    Ok(attrs)
}

/// A stream batch's `parts`: a nonempty array of objects, each with a
/// nonempty string `type` (the rest of a part is the client's).
pub fn stream_parts(obj: &Map<String, Value>) -> SchemaResult<&Vec<Value>> {
    let parts = match obj.get("parts") {
        Some(Value::Array(parts)) if !parts.is_empty() => parts,
        Some(Value::Array(_)) => return fail("\"parts\" must be a nonempty array"),
        Some(_) => return fail("\"parts\" must be an array"),
        None => return fail("\"parts\" is required"),
    };
    for (i, part) in parts.iter().enumerate() {
        match part.get("type") {
            Some(Value::String(t)) if part.is_object() && !t.is_empty() => {}
            _ => {
                return fail(format!(
                    "part {i} must be an object with a nonempty string \"type\""
                ));
            }
        }
    }
    Ok(parts)
}

/// An event write at the wire boundary: `type` is a nonempty string; `actor`
/// and `payload` must be present but their shape is the catalog's to judge.
pub struct EventWrite {
    pub actor: Value,
    pub event_type: String,
    pub payload: Value,
}

pub fn event_write(value: &Value, what: &str) -> SchemaResult<EventWrite> {
    let obj = object(value, what)?;
    let event_type = nonempty_str(obj, "type")?.to_owned();
    // A missing actor or payload is left for the catalog, which explains
    // exactly what the actor or payload of this type must look like.
    Ok(EventWrite {
        actor: obj.get("actor").cloned().unwrap_or(Value::Null),
        event_type,
        payload: obj.get("payload").cloned().unwrap_or(Value::Null),
    })
}

/// An artifact input: nonempty `kind`, string `contentBase64`, optional object `metadata`.
pub struct ArtifactInput<'a> {
    pub kind: &'a str,
    pub content_base64: &'a str,
    pub metadata: Option<&'a Map<String, Value>>,
}

pub fn artifact_input<'a>(value: &'a Value, what: &str) -> SchemaResult<ArtifactInput<'a>> {
    let obj = object(value, what)?;
    let kind = identifier(obj, "kind")?;
    let content_base64 = match obj.get("contentBase64") {
        Some(Value::String(s)) => s,
        None => return fail("\"contentBase64\" is required"),
        Some(_) => return fail("\"contentBase64\" must be a string"),
    };
    Ok(ArtifactInput {
        kind,
        content_base64,
        metadata: optional_object(obj, "metadata")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn integers_follow_javascript() {
        let obj = json!({"a": 3, "b": 3.0, "c": -1, "d": 1.5, "e": "3", "f": 1e20});
        let obj = obj.as_object().unwrap();
        assert_eq!(nonnegative_int(obj, "a"), Ok(3));
        assert_eq!(nonnegative_int(obj, "b"), Ok(3));
        for key in ["c", "d", "e", "f", "missing"] {
            assert!(nonnegative_int(obj, key).is_err(), "{key}");
        }
    }

    #[test]
    fn ticket_is_strict() {
        assert!(ticket(&json!({"source": "linear", "id": "A-1"})).is_ok());
        assert!(
            ticket(&json!({"source": "linear", "id": "A-1", "url": "u", "title": "t"})).is_ok()
        );
        assert!(ticket(&json!({"source": "linear", "id": "A-1", "extra": 1})).is_err());
        assert!(ticket(&json!({"source": "", "id": "A-1"})).is_err());
        assert!(ticket(&json!({"source": "linear", "id": "A-1", "url": null})).is_err());
    }

    #[test]
    fn optional_strings_reject_null_and_empty_when_nonempty() {
        let obj = json!({"a": null, "b": "", "c": "x"});
        let obj = obj.as_object().unwrap();
        assert!(optional_str(obj, "a", false).is_err());
        assert!(optional_str(obj, "b", true).is_err());
        assert_eq!(optional_str(obj, "b", false), Ok(Some("")));
        assert_eq!(optional_str(obj, "c", true), Ok(Some("x")));
        assert_eq!(optional_str(obj, "z", true), Ok(None));
    }
}
