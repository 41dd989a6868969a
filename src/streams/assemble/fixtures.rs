//! Differential fixtures: every `fixtures/streams/NAME.parts.json` assembles to
//! `NAME.expected.json` (`{"messages": [...], "dropped": N}`), compared as
//! parsed JSON with numbers read as doubles, the way JavaScript reads them.
//! Expectations come from `conformance/streams/generate.mjs` (the real
//! `ai@7.0.173`), or are written by hand for fixtures that declare
//! `abstoreDiffers`. Set `ABSTORE_STREAM_FIXTURES` at build time to point the
//! test at another checkout's fixture directory.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::assemble;

fn fixture_dir() -> PathBuf {
    let dir = option_env!("ABSTORE_STREAM_FIXTURES")
        .unwrap_or(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/streams"));
    PathBuf::from(dir)
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Numbers as `f64` (JavaScript has no integer/float distinction).
fn normalize(value: &Value) -> Value {
    match value {
        Value::Number(n) => n
            .as_f64()
            .and_then(serde_json::Number::from_f64)
            .map_or(Value::Null, Value::Number),
        Value::Array(items) => Value::Array(items.iter().map(normalize).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), normalize(v))).collect())
        }
        other => other.clone(),
    }
}

#[test]
fn fixtures_match_expectations() {
    let dir = fixture_dir();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".parts.json").map(str::to_owned)
        })
        .collect();
    names.sort();
    assert!(
        names.len() >= 40,
        "expected at least 40 fixtures in {}",
        dir.display()
    );

    let mut failures = Vec::new();
    for name in &names {
        let fixture = read_json(&dir.join(format!("{name}.parts.json")));
        let parts = match &fixture {
            Value::Array(parts) => parts.clone(),
            Value::Object(map) => map
                .get("parts")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_else(|| panic!("{name}: no parts array")),
            _ => panic!("{name}: neither an array nor an object"),
        };
        let expected = read_json(&dir.join(format!("{name}.expected.json")));
        let assembly = assemble(&parts);
        let messages_ok =
            Some(normalize(&assembly.messages)) == expected.get("messages").map(normalize);
        let dropped_ok =
            expected.get("dropped").and_then(Value::as_u64) == Some(assembly.dropped as u64);
        if !(messages_ok && dropped_ok) {
            failures.push(format!(
                "{name}: dropped {} (expected {}), messages\n{}\nexpected\n{}",
                assembly.dropped,
                expected.get("dropped").unwrap_or(&Value::Null),
                serde_json::to_string_pretty(&assembly.messages).unwrap_or_default(),
                serde_json::to_string_pretty(expected.get("messages").unwrap_or(&Value::Null))
                    .unwrap_or_default(),
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} fixtures differ:\n{}",
        failures.len(),
        names.len(),
        failures.join("\n\n")
    );
}
