//! One catalog document: parsing, compiling and validating against it.
//!
//! Loading is strict — an unknown member, actor kind or rule name is a
//! [`CatalogError`] — because a typo in a catalog would otherwise silently
//! widen what the server accepts. Everything a validation needs (compiled
//! schemas, the precomputed "allowed" and "known types" lists) is built here
//! once, so [`Catalog::validate`] only formats strings on the failure path.

use std::borrow::Cow;
use std::collections::HashMap;

use jsonschema::{Draft, PatternOptions, Validator};
use serde_json::{Map, Value};

use crate::actor::{self, ActorKind};
use crate::detail::payload_detail;
use crate::normalize::{self, Normalizer};
use crate::rules::{Rule, RuleFailure, RuleInput};
use crate::{CatalogError, EventValidationError, Family};

/// Members a document's top level may have.
const DOCUMENT_MEMBERS: &[&str] = &[
    "$schema",
    "$comment",
    "family",
    "autobuild",
    "$defs",
    "events",
];
/// Members an event entry may have.
const ENTRY_MEMBERS: &[&str] = &[
    "actors",
    "payload",
    "rules",
    "provisional",
    "description",
    "$comment",
];

/// A rule cited by an entry, bound to a location in the payload.
#[derive(Debug)]
struct BoundRule {
    rule: Rule,
    /// JSON pointer into the payload; `""` is the payload itself.
    at: String,
}

struct Entry {
    name: String,
    actors: Vec<ActorKind>,
    /// `k1, k2` as it appears in the actor-kind message.
    allowed: String,
    validator: Validator,
    /// Defaults and trims the schema declares (`None`: the payload is kept as sent).
    normalizer: Option<Normalizer>,
    rules: Vec<BoundRule>,
    provisional: bool,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("name", &self.name)
            .field("actors", &self.actors)
            .field("normalizer", &self.normalizer)
            .field("rules", &self.rules)
            .field("provisional", &self.provisional)
            .finish_non_exhaustive()
    }
}

/// One family's compiled catalog.
#[derive(Debug)]
pub(crate) struct Catalog {
    family: Family,
    /// The document's name as errors give it.
    file: String,
    entries: Vec<Entry>,
    index: HashMap<String, usize>,
    /// `a, b, c` in catalog order, for the unknown-type message.
    known: String,
}

impl Catalog {
    /// Parse and compile `source`; `file` names it in errors.
    pub(crate) fn compile(
        family: Family,
        source: &str,
        file: &str,
    ) -> Result<Catalog, CatalogError> {
        let document: Value =
            serde_json::from_str(source).map_err(|source| CatalogError::Json {
                file: file.to_owned(),
                source,
            })?;
        let doc_error = |message: String| CatalogError::Document {
            file: file.to_owned(),
            message,
        };
        let Value::Object(top) = document else {
            return Err(doc_error(
                "expected a JSON object at the top level".to_owned(),
            ));
        };
        if let Some(key) = top
            .keys()
            .find(|key| !DOCUMENT_MEMBERS.contains(&key.as_str()))
        {
            return Err(doc_error(format!(
                "unrecognized top-level member \"{key}\" (allowed: {})",
                DOCUMENT_MEMBERS.join(", ")
            )));
        }
        match top.get("family").and_then(Value::as_str) {
            Some(name) if name == family.as_str() => {}
            other => {
                return Err(doc_error(format!(
                    "\"family\" must be \"{}\", found {}",
                    family.as_str(),
                    other.map_or_else(|| "nothing".to_owned(), |name| format!("\"{name}\""))
                )));
            }
        }
        let defs = match top.get("$defs") {
            None => None,
            Some(Value::Object(defs)) => Some(defs),
            Some(_) => return Err(doc_error("\"$defs\" must be an object".to_owned())),
        };
        let Some(Value::Object(events)) = top.get("events") else {
            return Err(doc_error(
                "\"events\" must be an object of event type → entry".to_owned(),
            ));
        };
        if events.is_empty() {
            return Err(doc_error(
                "\"events\" must name at least one event type".to_owned(),
            ));
        }

        let mut entries = Vec::with_capacity(events.len());
        let mut index = HashMap::with_capacity(events.len());
        for (name, entry) in events {
            let compiled = compile_entry(file, name, entry, defs)?;
            index.insert(name.clone(), entries.len());
            entries.push(compiled);
        }
        let known = entries
            .iter()
            .map(|entry| entry.name.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        Ok(Catalog {
            family,
            file: file.to_owned(),
            entries,
            index,
            known,
        })
    }

    pub(crate) fn file(&self) -> &str {
        &self.file
    }

    pub(crate) fn event_types(&self) -> Vec<&str> {
        self.entries
            .iter()
            .map(|entry| entry.name.as_str())
            .collect()
    }

    pub(crate) fn is_provisional(&self, event_type: &str) -> Option<bool> {
        self.index
            .get(event_type)
            .map(|&position| self.entries[position].provisional)
    }

    /// type known → actor shape → actor kind allowed → normalisation →
    /// payload schema → rules, on the normalised payload (zod checks the
    /// output of its transforms). Returns the normalised payload, borrowed
    /// when the entry normalises nothing.
    pub(crate) fn validate<'p>(
        &self,
        actor: &Value,
        event_type: &str,
        payload: &'p Value,
    ) -> Result<Cow<'p, Value>, EventValidationError> {
        let Some(entry) = self
            .index
            .get(event_type)
            .map(|&position| &self.entries[position])
        else {
            return Err(EventValidationError::new(format!(
                "unknown {} \"{event_type}\" — known types: {}",
                self.family.unknown_type_label(),
                self.known
            )));
        };
        let kind = actor::check(actor, self.family).map_err(|detail| {
            EventValidationError::new(format!("invalid actor for \"{event_type}\": {detail}"))
        })?;
        if !entry.actors.contains(&kind) {
            return Err(EventValidationError::new(format!(
                "actor kind \"{}\" may not emit \"{event_type}\" (allowed: {})",
                kind.as_str(),
                entry.allowed
            )));
        }
        let payload = match &entry.normalizer {
            None => Cow::Borrowed(payload),
            Some(normalizer) => {
                let mut owned = payload.clone();
                normalizer.apply(&mut owned);
                Cow::Owned(owned)
            }
        };
        let payload_ref: &Value = &payload;
        if !entry.validator.is_valid(payload_ref) {
            return Err(EventValidationError::new(format!(
                "invalid payload for \"{event_type}\": {}",
                payload_detail(&entry.validator, payload_ref)
            )));
        }
        for bound in &entry.rules {
            let Some(target) = payload_ref.pointer(&bound.at) else {
                continue;
            };
            let input = RuleInput {
                event_type,
                actor_kind: kind,
                target,
                at: &bound.at,
            };
            match bound.rule.check(&input) {
                Ok(()) => {}
                Err(RuleFailure::Detail(detail)) => {
                    return Err(EventValidationError::new(format!(
                        "invalid payload for \"{event_type}\": {detail}"
                    )));
                }
                Err(RuleFailure::Message(message)) => {
                    return Err(EventValidationError::new(message));
                }
            }
        }
        Ok(payload)
    }
}

fn compile_entry(
    file: &str,
    name: &str,
    entry: &Value,
    defs: Option<&Map<String, Value>>,
) -> Result<Entry, CatalogError> {
    let entry_error = |message: String| CatalogError::Entry {
        file: file.to_owned(),
        event: name.to_owned(),
        message,
    };
    if name.is_empty() {
        return Err(entry_error("event type names must be nonempty".to_owned()));
    }
    let Value::Object(members) = entry else {
        return Err(entry_error(
            "entry must be an object with \"actors\" and \"payload\"".to_owned(),
        ));
    };
    if let Some(key) = members
        .keys()
        .find(|key| !ENTRY_MEMBERS.contains(&key.as_str()))
    {
        return Err(entry_error(format!(
            "unrecognized member \"{key}\" (allowed: {})",
            ENTRY_MEMBERS.join(", ")
        )));
    }

    let Some(Value::Array(actor_names)) = members.get("actors") else {
        return Err(entry_error(
            "\"actors\" must be an array of actor kinds".to_owned(),
        ));
    };
    let mut actors = Vec::with_capacity(actor_names.len());
    for actor_name in actor_names {
        let Some(text) = actor_name.as_str() else {
            return Err(entry_error(format!(
                "actor kinds must be strings, found {actor_name}"
            )));
        };
        let kind = ActorKind::parse(text).ok_or_else(|| CatalogError::UnknownActorKind {
            file: file.to_owned(),
            event: name.to_owned(),
            kind: text.to_owned(),
        })?;
        if actors.contains(&kind) {
            return Err(entry_error(format!(
                "actor kind \"{text}\" is listed twice"
            )));
        }
        actors.push(kind);
    }
    if actors.is_empty() {
        return Err(entry_error(
            "\"actors\" must allow at least one actor kind".to_owned(),
        ));
    }
    let allowed = actors
        .iter()
        .map(|kind| kind.as_str())
        .collect::<Vec<_>>()
        .join(", ");

    let Some(payload) = members.get("payload") else {
        return Err(entry_error("missing \"payload\" schema".to_owned()));
    };
    let schema_error = |message: String| CatalogError::Schema {
        file: file.to_owned(),
        event: name.to_owned(),
        message,
    };
    let validator = compile_schema(payload, defs).map_err(schema_error)?;
    let scope = definitions_in_scope(payload, defs);
    let compile_branch = |branch: &Value| compile_schema(branch, Some(&scope));
    let normalizer = normalize::compile(payload, &scope, &compile_branch).map_err(schema_error)?;

    let rules = match members.get("rules") {
        None => Vec::new(),
        Some(Value::Array(bindings)) => bindings
            .iter()
            .map(|binding| bind_rule(file, name, binding))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(entry_error("\"rules\" must be an array".to_owned())),
    };

    let provisional = match members.get("provisional") {
        None => false,
        Some(Value::Bool(flag)) => *flag,
        Some(_) => return Err(entry_error("\"provisional\" must be a boolean".to_owned())),
    };

    Ok(Entry {
        name: name.to_owned(),
        actors,
        allowed,
        validator,
        normalizer,
        rules,
        provisional,
    })
}

/// A rule binding is a rule name (applies to the payload root) or
/// `{"rule": name, "at": "/json/pointer"}`.
fn bind_rule(file: &str, event: &str, binding: &Value) -> Result<BoundRule, CatalogError> {
    let entry_error = |message: String| CatalogError::Entry {
        file: file.to_owned(),
        event: event.to_owned(),
        message,
    };
    let (rule_name, at) = match binding {
        Value::String(rule_name) => (rule_name.as_str(), ""),
        Value::Object(members) => {
            if let Some(key) = members
                .keys()
                .find(|key| !matches!(key.as_str(), "rule" | "at"))
            {
                return Err(entry_error(format!(
                    "rule binding has unrecognized member \"{key}\" (allowed: rule, at)"
                )));
            }
            let Some(rule_name) = members.get("rule").and_then(Value::as_str) else {
                return Err(entry_error("rule binding needs a \"rule\" name".to_owned()));
            };
            let at = match members.get("at") {
                None => "",
                Some(Value::String(at)) => at.as_str(),
                Some(_) => {
                    return Err(entry_error(format!(
                        "rule \"{rule_name}\": \"at\" must be a JSON pointer string"
                    )));
                }
            };
            (rule_name, at)
        }
        other => {
            return Err(entry_error(format!(
                "rule bindings are names or {{rule, at}} objects, found {other}"
            )));
        }
    };
    if !at.is_empty() && !at.starts_with('/') {
        return Err(entry_error(format!(
            "rule \"{rule_name}\": \"at\" must be a JSON pointer starting with \"/\", found \"{at}\""
        )));
    }
    let rule = Rule::from_name(rule_name).ok_or_else(|| CatalogError::UnknownRule {
        file: file.to_owned(),
        event: event.to_owned(),
        rule: rule_name.to_owned(),
        known: Rule::known_names(),
    })?;
    Ok(BoundRule {
        rule,
        at: at.to_owned(),
    })
}

/// The definitions a payload's `#/$defs/…` references see: the document's
/// shared ones, overridden by the payload's own.
fn definitions_in_scope(payload: &Value, defs: Option<&Map<String, Value>>) -> Map<String, Value> {
    let mut scope = defs.cloned().unwrap_or_default();
    if let Some(Value::Object(own)) = payload.get("$defs") {
        scope.extend(own.iter().map(|(key, value)| (key.clone(), value.clone())));
    }
    scope
}

/// Compile one payload schema with the document's shared `$defs` in scope, so
/// `{"$ref": "#/$defs/artifactRef"}` works in every entry. Definitions the
/// payload declares itself take precedence.
fn compile_schema(payload: &Value, defs: Option<&Map<String, Value>>) -> Result<Validator, String> {
    let schema = match (payload, defs) {
        (Value::Object(members), Some(shared)) => {
            let mut members = members.clone();
            let mut merged = shared.clone();
            if let Some(own) = members.get("$defs") {
                let Value::Object(own) = own else {
                    return Err("\"$defs\" must be an object".to_owned());
                };
                merged.extend(own.iter().map(|(key, value)| (key.clone(), value.clone())));
            }
            members.insert("$defs".to_owned(), Value::Object(merged));
            Value::Object(members)
        }
        (Value::Object(_) | Value::Bool(_), _) => payload.clone(),
        (other, _) => {
            return Err(format!(
                "a schema must be an object or a boolean, found {other}"
            ));
        }
    };
    // Meta-validation catches misspelled keyword values (e.g. `"type": "strng"`)
    // that would otherwise compile into a schema that rejects everything.
    jsonschema::meta::validate(&schema).map_err(|error| error.to_string())?;
    jsonschema::options()
        .with_draft(Draft::Draft202012)
        // Linear-time matching: patterns come from a file an operator may edit,
        // and payloads from clients.
        .with_pattern_options(PatternOptions::regex())
        .build(&schema)
        .map_err(|error| error.to_string())
}
