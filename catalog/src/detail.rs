//! Turns the first schema failure into the detail of an
//! `invalid payload for "<type>": <detail>` message.
//!
//! A detail reads `<JSON pointer>: <what is accepted>, received <what was
//! found>`, with `/` for the payload root — close to the issue messages
//! Autobuild's zod schemas produce, but naming the path as a pointer. It must
//! be deterministic: the first error the compiled schema yields is used (the
//! engine evaluates keywords in a fixed order), and for a union the branch
//! chosen is fixed by [`pick_branch`], never by hash order.

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{ValidationError, Validator};
use serde_json::Value;

/// Longest rendering of a found value before it is elided; a payload string
/// can be large and the message is returned to the client.
const MAX_SHOWN: usize = 80;

/// A short description of a found value: its JSON type, and the value itself
/// when it is a scalar.
pub(crate) fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(flag) => format!("boolean {flag}"),
        Value::Number(number) => format!("number {number}"),
        Value::String(text) => {
            let shown = Value::from(text.as_str()).to_string();
            if shown.len() <= MAX_SHOWN {
                format!("string {shown}")
            } else {
                let cut: String = text.chars().take(MAX_SHOWN / 2).collect();
                format!(
                    "string {}… ({} characters)",
                    Value::from(cut),
                    text.chars().count()
                )
            }
        }
        Value::Array(items) => format!("array of {} item{}", items.len(), plural(items.len())),
        Value::Object(_) => "object".to_owned(),
    }
}

fn plural(count: usize) -> &'static str {
    if count == 1 { "" } else { "s" }
}

/// The detail for a payload `validator` rejects. Only called after
/// `is_valid` returned false, so the slow path never runs for valid writes.
pub(crate) fn payload_detail(validator: &Validator, payload: &Value) -> String {
    match validator.iter_errors(payload).next() {
        Some(error) => describe_error(&error),
        // `is_valid` and `iter_errors` disagreeing would be an engine bug; the
        // write is still rejected, with an honest message.
        None => "/: rejected by the payload schema".to_owned(),
    }
}

fn pointer(error: &ValidationError<'_>) -> String {
    let path = error.instance_path().as_str();
    if path.is_empty() {
        "/".to_owned()
    } else {
        path.to_owned()
    }
}

fn describe_error(error: &ValidationError<'_>) -> String {
    let path = pointer(error);
    match error.kind() {
        ValidationErrorKind::AnyOf { context } | ValidationErrorKind::OneOfNotValid { context } => {
            describe_union(error, context)
        }
        ValidationErrorKind::AdditionalProperties { unexpected }
        | ValidationErrorKind::UnevaluatedProperties { unexpected } => {
            let keys: Vec<String> = unexpected
                .iter()
                .map(|key| Value::from(key.as_str()).to_string())
                .collect();
            format!(
                "{path}: unrecognized key{} {}",
                plural(keys.len()),
                keys.join(", ")
            )
        }
        ValidationErrorKind::Required { property } => {
            format!("{path}: missing required key {property}")
        }
        ValidationErrorKind::FalseSchema => format!("{path}: no value is allowed here"),
        _ => match expectation(error) {
            Some(expected) => format!("{path}: expected {expected}, received {}", found(error)),
            None => format!("{path}: {error}"),
        },
    }
}

fn found(error: &ValidationError<'_>) -> String {
    let instance = error.instance();
    match (error.kind(), instance.as_ref()) {
        (
            ValidationErrorKind::MaxLength { .. } | ValidationErrorKind::MinLength { .. },
            Value::String(text),
        ) if !text.is_empty() => {
            let count = text.chars().count();
            format!(
                "{} ({count} character{})",
                describe(instance),
                plural(count)
            )
        }
        _ => describe(instance),
    }
}

/// What a scalar-level failure accepts, phrased to follow `expected`.
fn expectation(error: &ValidationError<'_>) -> Option<String> {
    Some(match error.kind() {
        ValidationErrorKind::Type { kind } => match kind {
            TypeKind::Single(single) => single.to_string(),
            TypeKind::Multiple(set) => set
                .iter()
                .map(|one| one.to_string())
                .collect::<Vec<_>>()
                .join(" or "),
        },
        ValidationErrorKind::Enum { options } => match options.as_ref() {
            Value::Array(options) => format!(
                "one of {}",
                options
                    .iter()
                    .map(Value::to_string)
                    .collect::<Vec<_>>()
                    .join("|")
            ),
            other => format!("one of {other}"),
        },
        ValidationErrorKind::Constant { expected_value } => expected_value.to_string(),
        ValidationErrorKind::Minimum { limit } => format!("number >= {limit}"),
        ValidationErrorKind::ExclusiveMinimum { limit } => format!("number > {limit}"),
        ValidationErrorKind::Maximum { limit } => format!("number <= {limit}"),
        ValidationErrorKind::ExclusiveMaximum { limit } => format!("number < {limit}"),
        ValidationErrorKind::MinLength { limit } => {
            format!("string of at least {limit} character{}", plural_u64(*limit))
        }
        ValidationErrorKind::MaxLength { limit } => {
            format!("string of at most {limit} character{}", plural_u64(*limit))
        }
        ValidationErrorKind::MinItems { limit } => {
            format!("array of at least {limit} item{}", plural_u64(*limit))
        }
        ValidationErrorKind::MaxItems { limit } => {
            format!("array of at most {limit} item{}", plural_u64(*limit))
        }
        ValidationErrorKind::Pattern { pattern } => format!("string matching /{pattern}/"),
        ValidationErrorKind::Format { format } => format!("a valid {format}"),
        ValidationErrorKind::UniqueItems => "array of unique items".to_owned(),
        _ => return None,
    })
}

fn plural_u64(count: u64) -> &'static str {
    if count == 1 { "" } else { "s" }
}

/// A union (`anyOf`/`oneOf`) that no branch accepted.
///
/// Three cases, in order:
/// 1. Some branch agrees with the value on every discriminator (`const`
///    member): report that branch's own first failure — the writer clearly
///    meant it.
/// 2. Every branch fails only at the union's own location (alternatives of a
///    scalar, e.g. a core phase or `verify:<step>`): combine their expectations.
/// 3. Every branch disagrees on a discriminator: list the accepted values.
fn describe_union(
    union: &ValidationError<'_>,
    branches: &[Vec<ValidationError<'static>>],
) -> String {
    let path = pointer(union);
    let union_path = union.instance_path().as_str();

    if let Some(first) = pick_branch(union_path, branches).and_then(|branch| branch.first()) {
        return describe_error(first);
    }

    let scalar_alternatives: Option<Vec<String>> = branches
        .iter()
        .map(|branch| match branch.as_slice() {
            [only] if only.instance_path().as_str() == union_path => expectation(only),
            _ => None,
        })
        .collect();
    if let Some(mut alternatives) = scalar_alternatives.filter(|list| !list.is_empty()) {
        alternatives.dedup();
        return format!(
            "{path}: expected {}, received {}",
            alternatives.join(" or "),
            describe(union.instance())
        );
    }

    let mut discriminator: Option<(String, String)> = None;
    let mut accepted: Vec<String> = Vec::new();
    for error in branches.iter().flatten() {
        if let ValidationErrorKind::Constant { expected_value } = error.kind()
            && is_direct_child(error.instance_path().as_str(), union_path)
        {
            let shown = expected_value.to_string();
            if !accepted.contains(&shown) {
                accepted.push(shown);
            }
            discriminator.get_or_insert_with(|| (pointer(error), describe(error.instance())));
        }
    }
    match discriminator {
        Some((at, received)) => {
            format!(
                "{at}: expected one of {}, received {received}",
                accepted.join("|")
            )
        }
        None => format!("{path}: matches none of the accepted shapes"),
    }
}

/// The branch to report for a failed union: among branches whose every
/// discriminator matched, the one with the fewest errors (first on a tie).
/// A branch that does not know a discriminator other branches use (it rejects
/// that key as unrecognized) is not a candidate either: the writer was aiming
/// at the discriminated branches.
fn pick_branch<'b>(
    union_path: &str,
    branches: &'b [Vec<ValidationError<'static>>],
) -> Option<&'b Vec<ValidationError<'static>>> {
    let discriminators: Vec<&str> = branches
        .iter()
        .flatten()
        .filter(|error| discriminator_mismatch(error, union_path))
        .filter_map(|error| error.instance_path().as_str().rsplit('/').next())
        .collect();
    branches
        .iter()
        .filter(|branch| {
            !branch
                .iter()
                .any(|error| discriminator_mismatch(error, union_path))
        })
        .filter(|branch| {
            !branch
                .iter()
                .any(|error| rejects_any_key(error, union_path, &discriminators))
        })
        // A branch failing only on the value itself (wrong type, not in an enum)
        // is one scalar alternative among several; [`describe_union`] combines those.
        .filter(|branch| {
            !branch
                .iter()
                .all(|error| fails_on_value_itself(error, union_path))
        })
        .min_by_key(|branch| branch.len())
}

fn rejects_any_key(error: &ValidationError<'_>, union_path: &str, keys: &[&str]) -> bool {
    match error.kind() {
        ValidationErrorKind::AdditionalProperties { unexpected } => {
            error.instance_path().as_str() == union_path
                && unexpected.iter().any(|key| keys.contains(&key.as_str()))
        }
        _ => false,
    }
}

fn fails_on_value_itself(error: &ValidationError<'_>, union_path: &str) -> bool {
    error.instance_path().as_str() == union_path
        && !matches!(
            error.kind(),
            ValidationErrorKind::AdditionalProperties { .. } | ValidationErrorKind::Required { .. }
        )
}

fn discriminator_mismatch(error: &ValidationError<'_>, union_path: &str) -> bool {
    matches!(error.kind(), ValidationErrorKind::Constant { .. })
        && is_direct_child(error.instance_path().as_str(), union_path)
}

fn is_direct_child(path: &str, parent: &str) -> bool {
    path.strip_prefix(parent)
        .and_then(|rest| rest.strip_prefix('/'))
        .is_some_and(|segment| !segment.contains('/'))
}
