//! The normalisations Autobuild's validators perform, expressed in the
//! catalog documents and applied before the schema check.
//!
//! Autobuild's payload validators are zod schemas, and zod returns a
//! *normalised* payload: `.default(v)` fills a member that is absent, and
//! `.trim()` trims a string before the checks after it (`.min(1)`) run. The
//! reference server stores that output, and protocol §3 puts the *validated*
//! payload in the envelope, so abstore stores it too.
//!
//! A document expresses both in its JSON Schemas:
//! - `"default": <value>` on a property schema (the standard annotation): the
//!   member is added, with that value, when the object lacks it. Like zod, a
//!   member present with `null` is left alone (and the schema judges it).
//! - `"trim": true` on a string schema (an abstore keyword, ignored by the
//!   schema engine): the string loses leading and trailing whitespace as
//!   JavaScript's `String.prototype.trim` defines it, so the schema's
//!   `minLength` and the entry's rules see the trimmed value, as zod's do.
//!
//! Everything else stays as sent: member order (a default is appended after
//! the members sent), numbers and unknown data. A union (`anyOf`/`oneOf`)
//! normalises like zod's: the first branch that accepts the value *after its
//! own normalisation* wins; if none does, the value is left as sent and the
//! schema check reports why.
//!
//! The normaliser is compiled once per entry and is absent for the (many)
//! entries with nothing to normalise, so their writes cost nothing here.

use jsonschema::Validator;
use serde_json::{Map, Value};

use crate::rules::js_trim;

/// Compiled normalisation for one schema position; only positions that can
/// change something are kept.
#[derive(Debug)]
pub(crate) enum Normalizer {
    /// `"trim": true`: trim a string value.
    Trim,
    /// An object's members: defaults for absent ones, nested normalisation
    /// for present ones.
    Object(Vec<Member>),
    /// Every element of an array (`items`).
    Items(Box<Normalizer>),
    /// `anyOf`/`oneOf`: the first branch that accepts its own output.
    FirstAccepting(Vec<Branch>),
    /// Several normalisations of the same position (`$ref` with siblings, `allOf`).
    All(Vec<Normalizer>),
}

#[derive(Debug)]
pub(crate) struct Member {
    key: String,
    default: Option<Value>,
    nested: Option<Normalizer>,
}

pub(crate) struct Branch {
    accepts: Validator,
    normalizer: Option<Normalizer>,
}

impl std::fmt::Debug for Branch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Branch")
            .field("normalizer", &self.normalizer)
            .finish_non_exhaustive()
    }
}

/// How a branch of a union is compiled into a validator of its own (the
/// document's schema compiler, with the shared `$defs` in scope).
pub(crate) type CompileBranch<'a> = dyn Fn(&Value) -> Result<Validator, String> + 'a;

/// Compiles the normaliser of `schema`; `defs` resolves `#/$defs/<name>`
/// references. `Ok(None)` when the schema normalises nothing.
pub(crate) fn compile(
    schema: &Value,
    defs: &Map<String, Value>,
    compile_branch: &CompileBranch<'_>,
) -> Result<Option<Normalizer>, String> {
    Compiler {
        defs,
        compile_branch,
        resolving: Vec::new(),
    }
    .schema(schema)
}

struct Compiler<'a> {
    defs: &'a Map<String, Value>,
    compile_branch: &'a CompileBranch<'a>,
    /// `$ref`s being expanded: a recursive definition normalises its outer
    /// level only (no Autobuild payload is recursive).
    resolving: Vec<String>,
}

impl Compiler<'_> {
    fn schema(&mut self, schema: &Value) -> Result<Option<Normalizer>, String> {
        let Value::Object(members) = schema else {
            return Ok(None);
        };
        let mut parts = Vec::new();
        match members.get("trim") {
            None => {}
            Some(Value::Bool(true)) => parts.push(Normalizer::Trim),
            Some(other) => return Err(format!("\"trim\" must be true, found {other}")),
        }
        if let Some(reference) = members.get("$ref").and_then(Value::as_str) {
            parts.extend(self.reference(reference)?);
        }
        if let Some(Value::Object(properties)) = members.get("properties") {
            let mut kept = Vec::new();
            for (key, property) in properties {
                let default = property.get("default").cloned();
                let nested = self.schema(property)?;
                if default.is_some() || nested.is_some() {
                    kept.push(Member {
                        key: key.clone(),
                        default,
                        nested,
                    });
                }
            }
            if !kept.is_empty() {
                parts.push(Normalizer::Object(kept));
            }
        }
        if let Some(items) = members.get("items")
            && let Some(nested) = self.schema(items)?
        {
            parts.push(Normalizer::Items(Box::new(nested)));
        }
        for keyword in ["anyOf", "oneOf"] {
            if let Some(Value::Array(branches)) = members.get(keyword) {
                parts.extend(self.union(branches)?);
            }
        }
        if let Some(Value::Array(all)) = members.get("allOf") {
            for schema in all {
                parts.extend(self.schema(schema)?);
            }
        }
        Ok(match parts.len() {
            0 => None,
            1 => parts.pop(),
            _ => Some(Normalizer::All(parts)),
        })
    }

    fn reference(&mut self, reference: &str) -> Result<Option<Normalizer>, String> {
        let Some(name) = reference.strip_prefix("#/$defs/") else {
            return Ok(None);
        };
        if self.resolving.iter().any(|open| open == name) {
            return Ok(None);
        }
        let Some(target) = self.defs.get(name) else {
            // The schema compiler reports the dangling reference.
            return Ok(None);
        };
        self.resolving.push(name.to_owned());
        let compiled = self.schema(target);
        self.resolving.pop();
        compiled
    }

    fn union(&mut self, branches: &[Value]) -> Result<Option<Normalizer>, String> {
        let normalizers = branches
            .iter()
            .map(|branch| self.schema(branch))
            .collect::<Result<Vec<_>, _>>()?;
        if normalizers.iter().all(Option::is_none) {
            return Ok(None);
        }
        let compiled = branches
            .iter()
            .zip(normalizers)
            .map(|(branch, normalizer)| {
                Ok(Branch {
                    accepts: (self.compile_branch)(branch)?,
                    normalizer,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Some(Normalizer::FirstAccepting(compiled)))
    }
}

impl Normalizer {
    /// Normalise `value` in place. Values of an unexpected shape are left as
    /// they are: the schema check that follows rejects them.
    pub(crate) fn apply(&self, value: &mut Value) {
        match self {
            Normalizer::Trim => {
                if let Value::String(text) = value {
                    let trimmed = js_trim(text);
                    if trimmed.len() != text.len() {
                        *text = trimmed.to_owned();
                    }
                }
            }
            Normalizer::Object(members) => {
                let Value::Object(object) = value else {
                    return;
                };
                for member in members {
                    match object.get_mut(&member.key) {
                        Some(present) => {
                            if let Some(nested) = &member.nested {
                                nested.apply(present);
                            }
                        }
                        None => {
                            if let Some(default) = &member.default {
                                object.insert(member.key.clone(), default.clone());
                            }
                        }
                    }
                }
            }
            Normalizer::Items(nested) => {
                if let Value::Array(items) = value {
                    items.iter_mut().for_each(|item| nested.apply(item));
                }
            }
            Normalizer::FirstAccepting(branches) => {
                for branch in branches {
                    let Some(normalizer) = &branch.normalizer else {
                        if branch.accepts.is_valid(value) {
                            return;
                        }
                        continue;
                    };
                    let mut candidate = value.clone();
                    normalizer.apply(&mut candidate);
                    if branch.accepts.is_valid(&candidate) {
                        *value = candidate;
                        return;
                    }
                }
            }
            Normalizer::All(parts) => parts.iter().for_each(|part| part.apply(value)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn normalizer(schema: Value) -> Normalizer {
        let defs = Map::new();
        let compile_branch =
            |branch: &Value| jsonschema::validator_for(branch).map_err(|error| error.to_string());
        compile(&schema, &defs, &compile_branch)
            .expect("compiles")
            .expect("normalises something")
    }

    fn normalized(schema: Value, mut value: Value) -> Value {
        normalizer(schema).apply(&mut value);
        value
    }

    #[test]
    fn a_default_fills_only_an_absent_member_and_goes_last() {
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "string"}, "persists": {"type": "array", "default": []}}});
        let out = normalized(schema.clone(), json!({"b": 1.0, "a": "x"}));
        assert_eq!(
            serde_json::to_string(&out).expect("serialises"),
            r#"{"b":1.0,"a":"x","persists":[]}"#
        );
        assert_eq!(
            normalized(schema.clone(), json!({"persists": null})),
            json!({"persists": null})
        );
        assert_eq!(
            normalized(schema, json!({"persists": ["f1"]})),
            json!({"persists": ["f1"]})
        );
    }

    #[test]
    fn trim_uses_javascript_whitespace() {
        let schema = json!({"type": "string", "trim": true});
        assert_eq!(
            normalized(schema.clone(), json!("\u{feff}\u{a0} ab c\t\n")),
            json!("ab c")
        );
        // U+0085 is White_Space in Unicode but not in JavaScript.
        assert_eq!(
            normalized(schema.clone(), json!("\u{85}x\u{85}")),
            json!("\u{85}x\u{85}")
        );
        assert_eq!(normalized(schema, json!(5)), json!(5));
    }

    #[test]
    fn a_union_takes_the_first_branch_that_accepts_its_own_output() {
        let schema = json!({"anyOf": [
            {"type": "object", "properties": {"ok": {"const": false}}, "required": ["ok"]},
            {"type": "object", "properties": {"ok": {"const": true},
                "head": {"type": "string", "trim": true, "minLength": 1}}, "required": ["ok"]},
        ]});
        assert_eq!(
            normalized(schema.clone(), json!({"ok": true, "head": " abc "})),
            json!({"ok": true, "head": "abc"})
        );
        // The second branch rejects its trimmed output: nothing changes.
        assert_eq!(
            normalized(schema.clone(), json!({"ok": true, "head": "  "})),
            json!({"ok": true, "head": "  "})
        );
        // The first branch accepts as sent: its (empty) normalisation wins.
        assert_eq!(
            normalized(schema, json!({"ok": false, "head": " x "})),
            json!({"ok": false, "head": " x "})
        );
    }

    #[test]
    fn defaults_and_trims_reach_through_items_and_refs() {
        let mut defs = Map::new();
        defs.insert(
            "finding".into(),
            json!({"type": "object", "properties": {"persists": {"default": []},
                "note": {"type": "string", "trim": true}}}),
        );
        let schema = json!({"type": "object", "properties": {
            "findings": {"type": "array", "items": {"$ref": "#/$defs/finding"}}}});
        let compile_branch =
            |branch: &Value| jsonschema::validator_for(branch).map_err(|error| error.to_string());
        let normalizer = compile(&schema, &defs, &compile_branch)
            .expect("compiles")
            .expect("normalises");
        let mut value = json!({"findings": [{"note": " n "}, {"persists": ["a"]}]});
        normalizer.apply(&mut value);
        assert_eq!(
            value,
            json!({"findings": [{"note": "n", "persists": []}, {"persists": ["a"]}]})
        );
    }

    #[test]
    fn trim_must_be_true() {
        let defs = Map::new();
        let compile_branch =
            |branch: &Value| jsonschema::validator_for(branch).map_err(|error| error.to_string());
        let error = compile(&json!({"trim": "yes"}), &defs, &compile_branch).expect_err("rejected");
        assert!(error.contains("\"trim\" must be true"));
    }
}
