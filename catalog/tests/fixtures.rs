//! Walks `fixtures/catalog/<family>/<type>/*.json` through the embedded
//! catalogs. `valid-*.json` must be accepted; `invalid-*.json` must be rejected
//! with a message containing its `expect` fragment. A valid fixture's
//! validated (normalised) payload must equal its `normalized` member, or the
//! payload as sent when it has none. Every catalog type must
//! have at least one valid and two invalid fixtures (`_any/` holds
//! cross-cutting cases: unknown types, actor rules).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use abstore_catalog::{Catalogs, Family};
use serde_json::Value;

fn fixtures_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/catalog")
}

fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("read {}: {error}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .collect();
    entries.sort();
    entries
}

#[test]
fn every_fixture_has_the_expected_outcome() {
    let catalogs = Catalogs::embedded().expect("embedded catalogs compile");
    let mut failures = Vec::new();
    let mut checked = 0;
    for family in Family::ALL {
        let family_dir = fixtures_root().join(family.as_str());
        let mut counts: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for type_dir in sorted_entries(&family_dir) {
            let dir_name = type_dir
                .file_name()
                .and_then(|name| name.to_str())
                .unwrap_or_default()
                .to_owned();
            for file in sorted_entries(&type_dir) {
                let text = std::fs::read_to_string(&file).expect("fixture readable");
                let fixture: Value = serde_json::from_str(&text)
                    .unwrap_or_else(|error| panic!("{}: {error}", file.display()));
                let name = file
                    .file_name()
                    .and_then(|name| name.to_str())
                    .unwrap_or_default();
                let event_type = fixture["type"].as_str().expect("fixture has a type");
                if dir_name != "_any" {
                    assert_eq!(
                        event_type,
                        dir_name,
                        "{} lives in the wrong directory",
                        file.display()
                    );
                }
                let outcome =
                    catalogs.validate(family, &fixture["actor"], event_type, &fixture["payload"]);
                if std::env::var_os("CATALOG_FIXTURES_PRINT").is_some() {
                    eprintln!(
                        "{name:40} {:?}",
                        outcome.as_ref().map_err(|error| &error.message)
                    );
                }
                let count = counts.entry(dir_name.clone()).or_default();
                checked += 1;
                if name.starts_with("valid-") {
                    count.0 += 1;
                    match outcome {
                        Err(error) => {
                            failures.push(format!("{}: rejected: {error}", file.display()));
                        }
                        // The validated payload is the fixture's `normalized`
                        // member when it has one, else the payload as sent.
                        Ok(validated) => {
                            let expected = fixture.get("normalized").unwrap_or(&fixture["payload"]);
                            if *validated != *expected {
                                failures.push(format!(
                                    "{}: validated payload\n    got:    {validated}\n    expect: {expected}",
                                    file.display()
                                ));
                            }
                        }
                    }
                } else if name.starts_with("invalid-") {
                    count.1 += 1;
                    let expect = fixture["expect"]
                        .as_str()
                        .expect("invalid fixture has expect");
                    match outcome {
                        Ok(_) => failures.push(format!("{}: accepted", file.display())),
                        Err(error) if !error.message.contains(expect) => failures.push(format!(
                            "{}:\n    got:    {}\n    expect: {expect}",
                            file.display(),
                            error.message
                        )),
                        Err(_) => {}
                    }
                } else {
                    failures.push(format!(
                        "{}: name must start with valid- or invalid-",
                        file.display()
                    ));
                }
            }
        }
        for event_type in catalogs.event_types(family) {
            match counts.get(event_type) {
                Some(&(valid, invalid)) if valid >= 1 && invalid >= 2 => {}
                other => failures.push(format!(
                    "{family}/{event_type}: needs >= 1 valid and >= 2 invalid fixtures, has {other:?}"
                )),
            }
        }
    }
    assert!(
        checked > 0,
        "no fixtures found under {}",
        fixtures_root().display()
    );
    assert!(
        failures.is_empty(),
        "{} of {checked} fixtures failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
