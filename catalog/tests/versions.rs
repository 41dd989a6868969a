//! The versioned catalogs (`catalog/catalogs/versions.json`): every version's
//! documents load, embedded and from disk alike; the embedded table is exactly
//! the directory; and a document two versions name is one compiled document,
//! shared, while different documents are not.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use abstore_catalog::{CatalogError, Catalogs, EMBEDDED_DOCUMENTS, Family, VersionedCatalogs};
use serde_json::Value;

fn shipped_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("catalogs")
}

fn index() -> Value {
    let text = std::fs::read_to_string(shipped_dir().join("versions.json")).expect("index");
    serde_json::from_str(&text).expect("index is JSON")
}

/// The document path the shipped index names for `version` and `family`.
fn indexed_path(index: &Value, version: &str, family: Family) -> String {
    index["versions"][version][family.as_str()]
        .as_str()
        .unwrap_or_else(|| panic!("{version} names a {family} document"))
        .to_owned()
}

/// Every `*.json` under `dir` except the index, as `/`-separated relative paths.
fn documents_on_disk(dir: &Path, prefix: &str, out: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).expect("catalog dir") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("UTF-8 file name")
            .to_owned();
        if path.is_dir() {
            documents_on_disk(&path, &format!("{prefix}{name}/"), out);
        } else if name.ends_with(".json") && !(prefix.is_empty() && name == "versions.json") {
            out.insert(format!("{prefix}{name}"));
        }
    }
}

#[test]
fn every_version_loads_with_its_event_types() {
    // Counts per family, as docs/catalog.md states them.
    let expected = [("0.8.0", [54, 33, 11]), ("0.9.0", [62, 44, 11])];
    assert_eq!(
        Catalogs::embedded_versions(),
        expected.iter().map(|(v, _)| *v).collect::<Vec<_>>()
    );
    let all = VersionedCatalogs::embedded().expect("every embedded version compiles");
    for (version, counts) in expected {
        let alone = Catalogs::embedded_for(version).expect("compiles");
        let shared = all.get(version).expect("version present");
        for (family, count) in Family::ALL.into_iter().zip(counts) {
            assert_eq!(alone.event_types(family).len(), count, "{version} {family}");
            assert_eq!(alone.event_types(family), shared.event_types(family));
        }
    }
    assert_eq!(all.protocol("0.8.0"), Some("2"));
    assert_eq!(all.protocol("0.9.0"), Some("3"));
    assert_eq!(all.default_version(), "0.8.0");
    assert_eq!(all.versions().collect::<Vec<_>>(), ["0.8.0", "0.9.0"]);
}

#[test]
fn the_default_is_what_embedded_has_always_served() {
    let default = Catalogs::embedded().expect("compiles");
    let explicit = Catalogs::embedded_for("0.8.0").expect("compiles");
    for family in Family::ALL {
        assert_eq!(default.event_types(family), explicit.event_types(family));
        assert_eq!(default.document(family), explicit.document(family));
    }
    assert_eq!(default.document(Family::Build), "embedded build.json");
    // `from_dir` keeps reading DIR/build.json etc.: the shipped directory is
    // still a `--catalog` directory for the default version.
    let from_disk = Catalogs::from_dir(&shipped_dir()).expect("loads");
    for family in Family::ALL {
        assert_eq!(default.event_types(family), from_disk.event_types(family));
    }
}

#[test]
fn an_unknown_version_names_the_known_ones() {
    let error = Catalogs::embedded_for("0.7.0").expect_err("no 0.7.0 catalogs");
    assert!(matches!(error, CatalogError::UnknownVersion { .. }));
    assert_eq!(
        error.to_string(),
        r#"no event catalogs for Autobuild version "0.7.0" (known versions: 0.8.0, 0.9.0)"#
    );
    let all = VersionedCatalogs::embedded().expect("compiles");
    assert!(all.get("0.7.0").is_none());
    assert!(all.get("").is_none());
    assert_eq!(all.protocol("0.7.0"), None);
}

#[test]
fn the_embedded_table_is_exactly_the_directory() {
    let mut on_disk = BTreeSet::new();
    documents_on_disk(&shipped_dir(), "", &mut on_disk);
    let embedded: BTreeSet<String> = EMBEDDED_DOCUMENTS
        .iter()
        .map(|(name, _)| (*name).to_owned())
        .collect();
    assert_eq!(on_disk, embedded, "catalog/catalogs/ vs EMBEDDED_DOCUMENTS");
    for (name, text) in EMBEDDED_DOCUMENTS {
        let disk = std::fs::read_to_string(shipped_dir().join(name)).expect("readable");
        assert_eq!(&disk, text, "{name}");
    }
    // Every document belongs to some version: no orphans.
    let index = index();
    let named: BTreeSet<String> = index["versions"]
        .as_object()
        .expect("versions")
        .keys()
        .flat_map(|version| {
            let index = &index;
            Family::ALL
                .into_iter()
                .map(move |family| indexed_path(index, version, family))
        })
        .collect();
    assert_eq!(named, embedded, "documents no version names");
}

#[test]
fn documents_named_twice_are_compiled_once_and_shared() {
    let index = index();
    let all = VersionedCatalogs::embedded().expect("compiles");
    let versions: Vec<&str> = all.versions().collect();
    for a in &versions {
        for b in &versions {
            for family in Family::ALL {
                let same_path = indexed_path(&index, a, family) == indexed_path(&index, b, family);
                let (ca, cb) = (all.get(a).unwrap(), all.get(b).unwrap());
                assert_eq!(
                    ca.shares_document(cb, family),
                    same_path,
                    "{a} and {b}, {family}: shared iff the index names one document"
                );
                assert_eq!(ca.document(family) == cb.document(family), same_path);
            }
        }
    }
    // Loading one version alone compiles its own copy: equal, not shared.
    let alone = Catalogs::embedded_for("0.8.0").expect("compiles");
    assert!(!alone.shares_document(all.get("0.8.0").unwrap(), Family::Build));
}

/// A directory with two versions, the second naming the first's session and
/// repository documents and its own build document.
fn shared_dir(test: &str, index: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("abstore-versions-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("next")).expect("temp dir");
    for family in Family::ALL {
        std::fs::copy(
            shipped_dir().join(family.file_name()),
            dir.join(family.file_name()),
        )
        .expect("copy");
    }
    std::fs::copy(
        shipped_dir().join("0.9.0/build.json"),
        dir.join("next/build.json"),
    )
    .expect("copy");
    std::fs::write(dir.join("versions.json"), index).expect("index");
    dir
}

const SHARED_INDEX: &str = r#"{
  "default": "1.0.0",
  "versions": {
    "1.0.0": {"protocol": "2", "build": "build.json", "repository": "repository.json", "session": "session.json"},
    "1.1.0": {"protocol": "3", "build": "next/build.json", "repository": "repository.json", "session": "session.json"}
  }
}"#;

#[test]
fn a_directory_index_shares_unchanged_documents() {
    let dir = shared_dir("share", SHARED_INDEX);
    let loaded = VersionedCatalogs::from_dir(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    let all = loaded.expect("the directory loads");
    let (old, new) = (all.get("1.0.0").unwrap(), all.get("1.1.0").unwrap());
    assert!(!old.shares_document(new, Family::Build));
    assert!(old.shares_document(new, Family::Repository));
    assert!(old.shares_document(new, Family::Session));
    assert_eq!(old.event_types(Family::Build).len(), 54);
    assert_eq!(new.event_types(Family::Build).len(), 62);
    assert_eq!(all.default_version(), "1.0.0");
    assert_eq!(all.default_catalogs().event_types(Family::Build).len(), 54);
    assert!(new.document(Family::Build).ends_with("next/build.json"));
}

#[test]
fn the_shipped_directory_loads_like_the_embedded_versions() {
    let from_disk = VersionedCatalogs::from_dir(&shipped_dir()).expect("loads");
    let embedded = VersionedCatalogs::embedded().expect("compiles");
    assert_eq!(
        from_disk.versions().collect::<Vec<_>>(),
        embedded.versions().collect::<Vec<_>>()
    );
    for version in embedded.versions() {
        for family in Family::ALL {
            assert_eq!(
                from_disk.get(version).unwrap().event_types(family),
                embedded.get(version).unwrap().event_types(family)
            );
        }
    }
}

#[test]
fn a_broken_index_or_missing_document_stops_loading() {
    let dir = shared_dir(
        "missing",
        &SHARED_INDEX.replace("next/build.json", "next/gone.json"),
    );
    let error = VersionedCatalogs::from_dir(&dir).expect_err("a document is missing");
    assert!(
        matches!(&error, CatalogError::Io { path, .. } if path.ends_with("next/gone.json")),
        "{error}"
    );
    std::fs::write(
        dir.join("versions.json"),
        SHARED_INDEX.replace("\"default\": \"1.0.0\"", "\"default\": \"2.0.0\""),
    )
    .unwrap();
    let error = VersionedCatalogs::from_dir(&dir).expect_err("the default names no version");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        error
            .to_string()
            .ends_with(r#"versions.json: "default" names "2.0.0", which is not in "versions""#),
        "{error}"
    );
}

#[test]
fn a_document_under_the_wrong_family_is_refused() {
    let dir = shared_dir(
        "family",
        &SHARED_INDEX.replace(
            r#""session": "session.json"}
  }"#,
            r#""session": "repository.json"}
  }"#,
        ),
    );
    let error =
        VersionedCatalogs::from_dir(&dir).expect_err("repository.json is not a session catalog");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        error
            .to_string()
            .contains(r#""family" must be "session", found "repository""#),
        "{error}"
    );
}
