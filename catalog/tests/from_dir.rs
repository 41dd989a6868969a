//! `Catalogs::from_dir` (the `--catalog DIR` flag): the shipped documents load
//! from disk, and each kind of broken document fails with a message naming the
//! file, the event type and the rule it breaks.

use std::path::{Path, PathBuf};

use abstore_catalog::{CatalogError, Catalogs, Family};
use serde_json::{Value, json};

fn shipped_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("catalogs")
}

fn shipped(family: Family) -> Value {
    let text =
        std::fs::read_to_string(shipped_dir().join(family.file_name())).expect("shipped catalog");
    serde_json::from_str(&text).expect("shipped catalog is JSON")
}

/// A fresh directory holding the shipped documents, with `build.json` replaced
/// by `build` (written verbatim when it is a string).
fn catalog_dir(test: &str, build: Option<Value>) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("abstore-catalog-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    for family in Family::ALL {
        let document = match (&build, family) {
            (Some(replacement), Family::Build) => replacement.clone(),
            _ => shipped(family),
        };
        let text = match document {
            Value::String(raw) => raw,
            other => serde_json::to_string_pretty(&other).expect("serialize"),
        };
        std::fs::write(dir.join(family.file_name()), text).expect("write catalog");
    }
    dir
}

fn build_with(edit: impl FnOnce(&mut Value)) -> Value {
    let mut document = shipped(Family::Build);
    edit(&mut document);
    document
}

fn load_error(test: &str, build: Value) -> CatalogError {
    let dir = catalog_dir(test, Some(build));
    let result = Catalogs::from_dir(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Ok(_) => panic!("{test}: broken catalog loaded"),
        Err(error) => error,
    }
}

#[test]
fn shipped_documents_load_from_disk_like_the_embedded_ones() {
    let from_disk = Catalogs::from_dir(&shipped_dir()).expect("shipped catalogs load");
    let embedded = Catalogs::embedded().expect("embedded catalogs load");
    for family in Family::ALL {
        assert_eq!(from_disk.event_types(family), embedded.event_types(family));
    }
    assert_eq!(embedded.event_types(Family::Build).len(), 54);
    assert_eq!(embedded.event_types(Family::Repository).len(), 33);
    assert_eq!(embedded.event_types(Family::Session).len(), 11);
    // Nothing the default set serves is provisional any more (the session
    // catalog is Autobuild's public one); 0.9.0's inferred sandbox types are.
    assert_eq!(
        embedded.is_provisional(Family::Session, "turn.started"),
        Some(false)
    );
    assert_eq!(
        embedded.is_provisional(Family::Build, "plan.completed"),
        Some(false)
    );
    let next = Catalogs::embedded_for("0.9.0").expect("0.9.0 catalogs load");
    assert_eq!(
        next.is_provisional(Family::Repository, "orchestrator.sandbox.stopped"),
        Some(true)
    );
}

#[test]
fn a_schema_that_does_not_compile_is_rejected() {
    let error = load_error(
        "bad-schema",
        build_with(|doc| doc["events"]["pr.merged"]["payload"] = json!({"type": "strng"})),
    );
    assert!(matches!(error, CatalogError::Schema { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains("build.json") && message.contains("\"pr.merged\""),
        "{message}"
    );
    assert!(
        message.contains("payload schema does not compile"),
        "{message}"
    );

    let error = load_error(
        "bad-pattern",
        build_with(|doc| {
            doc["events"]["pr.merged"]["payload"] = json!({"type": "string", "pattern": "("})
        }),
    );
    assert!(matches!(error, CatalogError::Schema { .. }), "{error:?}");

    let error = load_error(
        "dangling-ref",
        build_with(|doc| {
            doc["events"]["pr.merged"]["payload"] = json!({"$ref": "#/$defs/nothing"})
        }),
    );
    assert!(matches!(error, CatalogError::Schema { .. }), "{error:?}");
}

#[test]
fn an_unknown_rule_name_is_rejected() {
    let error = load_error(
        "unknown-rule",
        build_with(|doc| doc["events"]["pr.merged"]["rules"] = json!(["sha-is-hex"])),
    );
    let message = error.to_string();
    assert!(
        matches!(error, CatalogError::UnknownRule { .. }),
        "{error:?}"
    );
    assert!(message.contains("unknown rule \"sha-is-hex\""), "{message}");
    assert!(
        message.contains("\"pr.merged\"")
            && message.contains("known rules: escalation-policy-cause"),
        "{message}"
    );

    let error = load_error(
        "bad-rule-pointer",
        build_with(|doc| {
            doc["events"]["pr.merged"]["rules"] = json!([{"rule": "https-url", "at": "sha"}]);
        }),
    );
    assert!(error.to_string().contains("JSON pointer"), "{error}");
}

#[test]
fn an_unknown_actor_kind_is_rejected() {
    let error = load_error(
        "unknown-actor",
        build_with(|doc| doc["events"]["pr.merged"]["actors"] = json!(["dispatcher", "robot"])),
    );
    assert!(
        matches!(error, CatalogError::UnknownActorKind { .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("unknown actor kind \"robot\""),
        "{error}"
    );
}

#[test]
fn malformed_documents_are_rejected_with_the_file_named() {
    let error = load_error("not-json", Value::String("{ \"family\": ".to_owned()));
    assert!(matches!(error, CatalogError::Json { .. }), "{error:?}");
    assert!(error.to_string().contains("build.json"), "{error}");

    let error = load_error(
        "wrong-family",
        build_with(|doc| doc["family"] = json!("repository")),
    );
    assert!(matches!(error, CatalogError::Document { .. }), "{error:?}");

    let error = load_error(
        "extra-member",
        build_with(|doc| doc["events"]["pr.merged"]["actor"] = json!(["dispatcher"])),
    );
    assert!(
        error.to_string().contains("unrecognized member \"actor\""),
        "{error}"
    );

    let error = load_error(
        "no-actors",
        build_with(|doc| doc["events"]["pr.merged"]["actors"] = json!([])),
    );
    assert!(matches!(error, CatalogError::Entry { .. }), "{error:?}");
}

#[test]
fn a_missing_file_is_an_io_error() {
    let dir = catalog_dir("missing-file", None);
    std::fs::remove_file(dir.join("session.json")).expect("remove");
    let result = Catalogs::from_dir(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Err(error @ CatalogError::Io { .. }) => {
            assert!(error.to_string().contains("session.json"), "{error}")
        }
        other => panic!("expected an I/O error, got {other:?}"),
    }
}

#[test]
fn a_replaced_catalog_changes_validation() {
    // An operator narrowing `pr.merged` to the kernel must take effect.
    let dir = catalog_dir(
        "narrowed",
        Some(build_with(|doc| {
            doc["events"]["pr.merged"]["actors"] = json!(["kernel"])
        })),
    );
    let catalogs = Catalogs::from_dir(&dir).expect("edited catalog loads");
    let _ = std::fs::remove_dir_all(&dir);
    let error = catalogs
        .validate(
            Family::Build,
            &json!({"kind": "dispatcher"}),
            "pr.merged",
            &json!({"sha": "abc"}),
        )
        .expect_err("dispatcher no longer allowed");
    assert_eq!(
        error.message,
        r#"actor kind "dispatcher" may not emit "pr.merged" (allowed: kernel)"#
    );
}
