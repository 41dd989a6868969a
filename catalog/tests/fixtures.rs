//! Walks the catalog fixtures through every embedded catalog set (one per
//! Autobuild release; `versions.json` says which client identities each
//! serves). `valid-*.json` must be accepted; `invalid-*.json` must
//! be rejected with a message containing its `expect` fragment. A valid
//! fixture's validated (normalised) payload must equal its `normalized`
//! member, or the payload as sent when it has none. Every catalog type of
//! every version must have at least one valid and two invalid fixtures
//! (`_any/` holds cross-cutting cases: unknown types, actor rules).
//!
//! Layout (`docs/catalog.md`, "Fixtures and tests"):
//! - `fixtures/catalog/<family>/<type>/` — the default set's fixtures
//!   (the ones the drift check reads);
//! - `fixtures/catalog/<set>/` — another set's: its own
//!   `<family>/<type>/` fixtures, plus `inherit.json` naming the families whose
//!   default-set fixtures still hold for it and the ones that do not
//!   (`exclude`, each with its reason). A version's own fixture replaces an
//!   inherited one with the same `<family>/<type>/<name>`.

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

/// `<type dir>/<file>` → path, for one family directory (absent: empty).
fn family_fixtures(family_dir: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    if !family_dir.is_dir() {
        return out;
    }
    for type_dir in sorted_entries(family_dir) {
        let dir_name = type_dir
            .file_name()
            .and_then(|name| name.to_str())
            .unwrap_or_default()
            .to_owned();
        for file in sorted_entries(&type_dir) {
            let name = file
                .file_name()
                .and_then(|name| name.to_str())
                .unwrap_or_default()
                .to_owned();
            out.insert(format!("{dir_name}/{name}"), file);
        }
    }
    out
}

/// Every fixture that applies to `version`, per family, keyed
/// `<type dir>/<file>`.
fn version_fixtures(
    version: &str,
    default_version: &str,
) -> Vec<(Family, BTreeMap<String, PathBuf>)> {
    let root = fixtures_root();
    let mut out = Vec::new();
    if version == default_version {
        for family in Family::ALL {
            out.push((family, family_fixtures(&root.join(family.as_str()))));
        }
        return out;
    }
    let own = root.join(version);
    let inherit_path = own.join("inherit.json");
    let inherit: Value = serde_json::from_str(
        &std::fs::read_to_string(&inherit_path)
            .unwrap_or_else(|error| panic!("{}: {error}", inherit_path.display())),
    )
    .unwrap_or_else(|error| panic!("{}: {error}", inherit_path.display()));
    let inherited: Vec<&str> = inherit["inherit"]
        .as_array()
        .expect("inherit.json names the inherited families")
        .iter()
        .map(|family| family.as_str().expect("family name"))
        .collect();
    let exclude = inherit["exclude"]
        .as_object()
        .expect("inherit.json has an exclude object (path → reason)");
    for (path, reason) in exclude {
        assert!(
            root.join(path).is_file(),
            "{}: excluded fixture {path} does not exist",
            inherit_path.display()
        );
        assert!(
            reason.as_str().is_some_and(|reason| !reason.is_empty()),
            "{}: {path} needs a reason",
            inherit_path.display()
        );
    }
    for family in Family::ALL {
        let mut fixtures = BTreeMap::new();
        if inherited.contains(&family.as_str()) {
            for (key, path) in family_fixtures(&root.join(family.as_str())) {
                if !exclude.contains_key(&format!("{}/{key}", family.as_str())) {
                    fixtures.insert(key, path);
                }
            }
        }
        fixtures.extend(family_fixtures(&own.join(family.as_str())));
        out.push((family, fixtures));
    }
    out
}

/// Runs one version's fixtures; returns (checked, failures).
fn check_version(version: &str, default_version: &str) -> (usize, Vec<String>) {
    let catalogs = Catalogs::embedded_for(version).expect("embedded catalogs compile");
    let mut failures = Vec::new();
    let mut checked = 0;
    for (family, fixtures) in version_fixtures(version, default_version) {
        let mut counts: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for (key, file) in fixtures {
            let (dir_name, name) = key.split_once('/').expect("<type>/<file>");
            let text = std::fs::read_to_string(&file).expect("fixture readable");
            let fixture: Value = serde_json::from_str(&text)
                .unwrap_or_else(|error| panic!("{}: {error}", file.display()));
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
                    "{version} {name:40} {:?}",
                    outcome.as_ref().map_err(|error| &error.message)
                );
            }
            let count = counts.entry(dir_name.to_owned()).or_default();
            checked += 1;
            let at = format!("{version}: {}", file.display());
            if name.starts_with("valid-") {
                count.0 += 1;
                match outcome {
                    Err(error) => failures.push(format!("{at}: rejected: {error}")),
                    // The validated payload is the fixture's `normalized`
                    // member when it has one, else the payload as sent.
                    Ok(validated) => {
                        let expected = fixture.get("normalized").unwrap_or(&fixture["payload"]);
                        if *validated != *expected {
                            failures.push(format!(
                                "{at}: validated payload\n    got:    {validated}\n    expect: {expected}"
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
                    Ok(_) => failures.push(format!("{at}: accepted")),
                    Err(error) if !error.message.contains(expect) => failures.push(format!(
                        "{at}:\n    got:    {}\n    expect: {expect}",
                        error.message
                    )),
                    Err(_) => {}
                }
            } else {
                failures.push(format!("{at}: name must start with valid- or invalid-"));
            }
        }
        for event_type in catalogs.event_types(family) {
            match counts.get(event_type) {
                Some(&(valid, invalid)) if valid >= 1 && invalid >= 2 => {}
                other => failures.push(format!(
                    "{version} {family}/{event_type}: needs >= 1 valid and >= 2 invalid fixtures, has {other:?}"
                )),
            }
        }
    }
    (checked, failures)
}

#[test]
fn every_fixture_has_the_expected_outcome_in_every_set() {
    let default_version = abstore_catalog::VersionedCatalogs::embedded()
        .expect("embedded catalogs compile")
        .default_set()
        .to_owned();
    let mut failures = Vec::new();
    for version in Catalogs::embedded_sets() {
        let (checked, version_failures) = check_version(version, &default_version);
        assert!(
            checked > 0,
            "no fixtures for {version} under {}",
            fixtures_root().display()
        );
        failures.extend(version_failures);
    }
    assert!(
        failures.is_empty(),
        "{} fixtures failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_set_directory_is_a_known_set() {
    let versions = Catalogs::embedded_sets();
    for entry in sorted_entries(&fixtures_root()) {
        let name = entry
            .file_name()
            .and_then(|name| name.to_str())
            .unwrap_or_default()
            .to_owned();
        if Family::ALL.iter().any(|family| family.as_str() == name) {
            continue;
        }
        assert!(
            versions.contains(&name.as_str()),
            "fixtures/catalog/{name} is neither a family nor a catalog set ({versions:?})"
        );
    }
}
