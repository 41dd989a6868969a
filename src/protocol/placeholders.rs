//! Deposit placeholder substitution (spec section 8).
//!
//! Request artifact `i` is referred to in the event payload as
//! `{"kind": …, "rev": -(i + 1)}`. Only objects with exactly the two keys
//! `kind` (a string) and `rev` (a negative integer) are replaced, by the
//! deposited artifact's real `{kind, rev}`; out-of-range placeholders stay
//! as they are so the catalog rejects the negative revision.

use serde_json::{Map, Value};

/// The real kind and revision assigned to one deposited artifact.
pub struct Assigned<'a> {
    pub kind: &'a str,
    pub revision: i64,
}

/// Replace every placeholder in `payload` (walked recursively through arrays
/// and object values) using `assigned`, indexed by request order.
pub fn substitute(payload: &mut Value, assigned: &[Assigned<'_>]) {
    if let Some(index) = placeholder_index(payload) {
        if let Some(meta) = assigned.get(index) {
            let mut real = Map::new();
            real.insert("kind".into(), Value::String(meta.kind.to_owned()));
            real.insert("rev".into(), Value::from(meta.revision));
            *payload = Value::Object(real);
        }
        return;
    }
    match payload {
        Value::Array(items) => items.iter_mut().for_each(|item| substitute(item, assigned)),
        Value::Object(map) => map.values_mut().for_each(|item| substitute(item, assigned)),
        _ => {}
    }
}

/// `Some(i)` when `value` is an exact placeholder `{kind: string, rev: -(i+1)}`.
fn placeholder_index(value: &Value) -> Option<usize> {
    let map = value.as_object()?;
    if map.len() != 2 || !map.get("kind")?.is_string() {
        return None;
    }
    let rev = map.get("rev")?;
    // JSON numbers such as -1.0 are integers to JavaScript too.
    let rev = rev.as_i64().or_else(|| {
        rev.as_f64()
            .filter(|f| f.trunc() == *f && f.abs() < 9.0e15)
            .map(|f| f as i64)
    })?;
    if rev >= 0 {
        return None;
    }
    usize::try_from(-(rev + 1)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn assigned() -> Vec<Assigned<'static>> {
        vec![
            Assigned {
                kind: "plan",
                revision: 3,
            },
            Assigned {
                kind: "notes",
                revision: 0,
            },
        ]
    }

    #[test]
    fn replaces_exact_placeholders_recursively() {
        let mut payload = json!({
            "artifact": {"kind": "plan", "rev": -1},
            "list": [{"kind": "x", "rev": -2}, {"deep": [{"kind": "plan", "rev": -1.0}]}],
        });
        substitute(&mut payload, &assigned());
        assert_eq!(
            payload,
            json!({
                "artifact": {"kind": "plan", "rev": 3},
                "list": [{"kind": "notes", "rev": 0}, {"deep": [{"kind": "plan", "rev": 3}]}],
            })
        );
    }

    #[test]
    fn leaves_everything_else_alone() {
        let original = json!({
            "extra": {"kind": "plan", "rev": -1, "note": 1},
            "positive": {"kind": "plan", "rev": 0},
            "fraction": {"kind": "plan", "rev": -1.5},
            "nonstring": {"kind": 5, "rev": -1},
            "out_of_range": {"kind": "plan", "rev": -3},
            "string_rev": {"kind": "plan", "rev": "-1"},
        });
        let mut payload = original.clone();
        substitute(&mut payload, &assigned());
        assert_eq!(payload, original);
    }

    #[test]
    fn a_top_level_placeholder_is_replaced_too() {
        let mut payload = json!({"kind": "whatever", "rev": -2});
        substitute(&mut payload, &assigned());
        assert_eq!(payload, json!({"kind": "notes", "rev": 0}));
    }
}
