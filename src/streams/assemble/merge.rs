//! Message-metadata merging, ported from `ai@7.0.173` (`updateMessageMetadata`
//! in `src/ui/process-ui-message-stream.ts` and `src/util/merge-objects.ts`).
//!
//! The SDK merges with JavaScript object spread and `for…in`, so values that are
//! not plain objects merge in surprising but deterministic ways, reproduced here:
//! a string spreads into its UTF-16 units (`{"0": "x", …}`), an array into its
//! indices, a number or boolean into `{}`; and merging keys into a string,
//! number or boolean base is a `TypeError` in the SDK (`key in base`), which the
//! caller treats as a part the SDK rejects. Two representation limits: a unit
//! that is half of a surrogate pair becomes U+FFFD, and integer-like keys keep
//! insertion order (JavaScript lists them first; documents compare as parsed
//! JSON, so order is not significant).

use serde_json::{Map, Value};

/// The SDK threw while merging; the message was not changed.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct MergeTypeError;

const SKIPPED_KEYS: [&str; 3] = ["__proto__", "constructor", "prototype"];

/// `updateMessageMetadata`: `None` stands for `undefined`. Returns whether the
/// incoming value was given (not `null`/missing), which is when the SDK yields
/// a snapshot. On error `current` is unchanged.
pub(super) fn update_metadata(
    current: &mut Option<Value>,
    incoming: Option<&Value>,
) -> Result<bool, MergeTypeError> {
    let Some(incoming) = incoming.filter(|v| !v.is_null()) else {
        return Ok(false);
    };
    let next = match current {
        None | Some(Value::Null) => incoming.clone(),
        Some(base) => merge_objects(base, incoming)?,
    };
    *current = Some(next);
    Ok(true)
}

fn utf16_units(s: &str) -> impl Iterator<Item = String> + '_ {
    s.chars().flat_map(|c| {
        let units = c.len_utf16();
        let unit = if units == 1 {
            c
        } else {
            char::REPLACEMENT_CHARACTER
        };
        std::iter::repeat_n(unit.to_string(), units)
    })
}

/// `{ ...value }` for a non-null, non-undefined JSON value.
fn spread(value: &Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map.clone(),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| (i.to_string(), v.clone()))
            .collect(),
        Value::String(s) => utf16_units(s)
            .enumerate()
            .map(|(i, unit)| (i.to_string(), Value::String(unit)))
            .collect(),
        Value::Null | Value::Bool(_) | Value::Number(_) => Map::new(),
    }
}

/// The own enumerable keys `for…in` visits, with their values.
fn enumerate(value: &Value) -> Vec<(String, Value)> {
    match value {
        Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| (i.to_string(), v.clone()))
            .collect(),
        Value::String(s) => utf16_units(s)
            .enumerate()
            .map(|(i, unit)| (i.to_string(), Value::String(unit)))
            .collect(),
        Value::Null | Value::Bool(_) | Value::Number(_) => Vec::new(),
    }
}

/// `key in base ? base[key] : undefined`, or the `TypeError` of `in` on a primitive.
fn lookup<'a>(base: &'a Value, key: &str) -> Result<Option<&'a Value>, MergeTypeError> {
    match base {
        Value::Object(map) => Ok(map.get(key)),
        // Other own properties of an array (`length`) are never plain objects,
        // so only indices can lead to a recursive merge.
        Value::Array(items) => Ok(key
            .parse::<usize>()
            .ok()
            .filter(|i| i.to_string() == key)
            .and_then(|i| items.get(i))),
        _ => Err(MergeTypeError),
    }
}

/// `mergeObjects(base, overrides)` for JSON values (neither is undefined).
pub(super) fn merge_objects(base: &Value, overrides: &Value) -> Result<Value, MergeTypeError> {
    let mut result = spread(base);
    for (key, value) in enumerate(overrides) {
        if SKIPPED_KEYS.contains(&key.as_str()) {
            continue;
        }
        let base_value = lookup(base, &key)?;
        let merged = match (base_value, &value) {
            (Some(base_obj @ Value::Object(_)), Value::Object(_)) => {
                merge_objects(base_obj, &value)?
            }
            _ => value,
        };
        result.insert(key, merged);
    }
    Ok(Value::Object(result))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn deep_merges_objects() {
        let merged = merge_objects(
            &json!({"a": 1, "n": {"x": 1, "y": [1, 2]}}),
            &json!({"b": 2, "n": {"y": [3], "z": null}}),
        );
        assert_eq!(
            merged,
            Ok(json!({"a": 1, "n": {"x": 1, "y": [3], "z": null}, "b": 2}))
        );
    }

    #[test]
    fn skips_prototype_keys() {
        let merged = merge_objects(
            &json!({"a": 1}),
            &json!({"__proto__": {"p": 1}, "constructor": 2}),
        );
        assert_eq!(merged, Ok(json!({"a": 1})));
    }

    #[test]
    fn reproduces_spread_of_non_objects() {
        assert_eq!(
            merge_objects(&json!({"a": 1}), &json!("xy")),
            Ok(json!({"a": 1, "0": "x", "1": "y"}))
        );
        assert_eq!(
            merge_objects(&json!([1, 2]), &json!([3])),
            Ok(json!({"0": 3, "1": 2}))
        );
        assert_eq!(merge_objects(&json!(1), &json!(2)), Ok(json!({})));
        assert_eq!(
            merge_objects(&json!("ab"), &json!({"k": 1})),
            Err(MergeTypeError)
        );
        assert_eq!(
            merge_objects(&json!(true), &json!({"__proto__": 1})),
            Ok(json!({}))
        );
    }

    #[test]
    fn update_ignores_null_and_replaces_undefined() {
        let mut current = None;
        assert_eq!(update_metadata(&mut current, Some(&json!(5))), Ok(true));
        assert_eq!(current, Some(json!(5)));
        let mut current = Some(json!({"a": 1}));
        assert_eq!(update_metadata(&mut current, Some(&Value::Null)), Ok(false));
        assert_eq!(update_metadata(&mut current, None), Ok(false));
        assert_eq!(current, Some(json!({"a": 1})));
        let mut current = Some(json!("text"));
        assert_eq!(
            update_metadata(&mut current, Some(&json!({"k": 1}))),
            Err(MergeTypeError)
        );
        assert_eq!(current, Some(json!("text")));
    }
}
