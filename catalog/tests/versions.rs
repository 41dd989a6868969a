//! The catalog index (`catalog/catalogs/versions.json`): every catalog set's
//! documents load, embedded and from disk alike; every identity is served its
//! set; the embedded table is exactly the directory; a document two sets name
//! is one compiled document, shared, while different documents are not; and
//! an index in the older `versions` format still loads.

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

/// The document path the shipped index names for catalog set `set` and
/// `family`.
fn indexed_path(index: &Value, set: &str, family: Family) -> String {
    index["catalogs"][set][family.as_str()]
        .as_str()
        .unwrap_or_else(|| panic!("{set} names a {family} document"))
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
fn every_set_loads_with_its_event_types() {
    // Counts per family, as docs/catalog.md states them.
    let expected = [("0.8.0", [54, 33, 11]), ("0.9.0", [62, 44, 11])];
    assert_eq!(
        Catalogs::embedded_sets(),
        expected.iter().map(|(v, _)| *v).collect::<Vec<_>>()
    );
    let all = VersionedCatalogs::embedded().expect("every embedded set compiles");
    for (set, counts) in expected {
        let alone = Catalogs::embedded_for(set).expect("compiles");
        let shared = all.set(set).expect("set present");
        for (family, count) in Family::ALL.into_iter().zip(counts) {
            assert_eq!(alone.event_types(family).len(), count, "{set} {family}");
            assert_eq!(alone.event_types(family), shared.event_types(family));
        }
    }
    assert_eq!(all.default_set(), "0.8.0");
    assert_eq!(all.sets().collect::<Vec<_>>(), ["0.8.0", "0.9.0"]);
}

/// Identities are pairs: a client built from main before the 0.9.0 release
/// sends 0.8.0 with protocol 3 and is served the 0.9.0 set, the very same
/// compiled set as 0.9.0/3.
#[test]
fn every_identity_is_served_its_set() {
    let all = VersionedCatalogs::embedded().expect("compiles");
    assert_eq!(
        all.identities().collect::<Vec<_>>(),
        [("0.8.0", "2"), ("0.8.0", "3"), ("0.9.0", "3")]
    );
    for ((version, protocol), set) in [
        (("0.8.0", "2"), "0.8.0"),
        (("0.8.0", "3"), "0.9.0"),
        (("0.9.0", "3"), "0.9.0"),
    ] {
        assert_eq!(all.set_of(version, protocol), Some(set));
        let served = all.for_identity(version, protocol).expect("served");
        for family in Family::ALL {
            assert!(served.shares_document(all.set(set).unwrap(), family));
        }
    }
    for (version, protocol) in [("0.9.0", "2"), ("0.7.0", "2"), ("0.8.0", ""), ("", "2")] {
        assert!(all.for_identity(version, protocol).is_none());
        assert_eq!(all.set_of(version, protocol), None);
    }
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
    // still a `--catalog` directory for the default set.
    let from_disk = Catalogs::from_dir(&shipped_dir()).expect("loads");
    for family in Family::ALL {
        assert_eq!(default.event_types(family), from_disk.event_types(family));
    }
}

#[test]
fn an_unknown_set_names_the_known_ones() {
    let error = Catalogs::embedded_for("0.7.0").expect_err("no 0.7.0 catalogs");
    assert!(matches!(error, CatalogError::UnknownVersion { .. }));
    assert_eq!(
        error.to_string(),
        r#"no event catalogs for Autobuild version "0.7.0" (known versions: 0.8.0, 0.9.0)"#
    );
    let all = VersionedCatalogs::embedded().expect("compiles");
    assert!(all.set("0.7.0").is_none());
    assert!(all.set("").is_none());
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
    // Every document belongs to some set: no orphans.
    let index = index();
    let named: BTreeSet<String> = index["catalogs"]
        .as_object()
        .expect("catalogs")
        .keys()
        .flat_map(|set| {
            let index = &index;
            Family::ALL
                .into_iter()
                .map(move |family| indexed_path(index, set, family))
        })
        .collect();
    assert_eq!(named, embedded, "documents no set names");
}

#[test]
fn documents_named_twice_are_compiled_once_and_shared() {
    let index = index();
    let all = VersionedCatalogs::embedded().expect("compiles");
    let sets: Vec<&str> = all.sets().collect();
    for a in &sets {
        for b in &sets {
            for family in Family::ALL {
                let same_path = indexed_path(&index, a, family) == indexed_path(&index, b, family);
                let (ca, cb) = (all.set(a).unwrap(), all.set(b).unwrap());
                assert_eq!(
                    ca.shares_document(cb, family),
                    same_path,
                    "{a} and {b}, {family}: shared iff the index names one document"
                );
                assert_eq!(ca.document(family) == cb.document(family), same_path);
            }
        }
    }
    // The session document is one for both sets (decision 22).
    assert!(
        all.set("0.8.0")
            .unwrap()
            .shares_document(all.set("0.9.0").unwrap(), Family::Session)
    );
    // Loading one set alone compiles its own copy: equal, not shared.
    let alone = Catalogs::embedded_for("0.8.0").expect("compiles");
    assert!(!alone.shares_document(all.set("0.8.0").unwrap(), Family::Build));
}

/// A directory with two catalog sets, the second naming the first's session
/// and repository documents and its own build document.
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
  "catalogs": {
    "1.0.0": {"build": "build.json", "repository": "repository.json", "session": "session.json"},
    "1.1.0": {"build": "next/build.json", "repository": "repository.json", "session": "session.json"}
  },
  "identities": {"1.0.0/2": "1.0.0", "1.0.0/3": "1.1.0", "1.1.0/3": "1.1.0"}
}"#;

/// The same directory in the format before identities: one protocol per
/// version.
const OLDER_INDEX: &str = r#"{
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
    let (old, new) = (all.set("1.0.0").unwrap(), all.set("1.1.0").unwrap());
    assert!(!old.shares_document(new, Family::Build));
    assert!(old.shares_document(new, Family::Repository));
    assert!(old.shares_document(new, Family::Session));
    assert_eq!(old.event_types(Family::Build).len(), 54);
    assert_eq!(new.event_types(Family::Build).len(), 62);
    assert_eq!(all.default_set(), "1.0.0");
    assert_eq!(all.default_catalogs().event_types(Family::Build).len(), 54);
    assert!(new.document(Family::Build).ends_with("next/build.json"));
    let main = all.for_identity("1.0.0", "3").expect("1.0.0/3 is named");
    assert!(main.shares_document(new, Family::Build));
}

#[test]
fn a_directory_in_the_older_format_still_loads() {
    let dir = shared_dir("older", OLDER_INDEX);
    let loaded = VersionedCatalogs::from_dir(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    let all = loaded.expect("the older format loads");
    assert_eq!(
        all.identities().collect::<Vec<_>>(),
        [("1.0.0", "2"), ("1.1.0", "3")]
    );
    assert_eq!(all.set_of("1.1.0", "3"), Some("1.1.0"));
    assert!(all.for_identity("1.0.0", "3").is_none());
    assert_eq!(
        all.for_identity("1.1.0", "3")
            .unwrap()
            .event_types(Family::Build)
            .len(),
        62
    );
    assert!(
        all.set("1.0.0")
            .unwrap()
            .shares_document(all.set("1.1.0").unwrap(), Family::Session)
    );
}

#[test]
fn the_shipped_directory_loads_like_the_embedded_versions() {
    let from_disk = VersionedCatalogs::from_dir(&shipped_dir()).expect("loads");
    let embedded = VersionedCatalogs::embedded().expect("compiles");
    assert_eq!(
        from_disk.sets().collect::<Vec<_>>(),
        embedded.sets().collect::<Vec<_>>()
    );
    assert_eq!(
        from_disk.identities().collect::<Vec<_>>(),
        embedded.identities().collect::<Vec<_>>()
    );
    for set in embedded.sets() {
        for family in Family::ALL {
            assert_eq!(
                from_disk.set(set).unwrap().event_types(family),
                embedded.set(set).unwrap().event_types(family)
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
    let error = VersionedCatalogs::from_dir(&dir).expect_err("the default names no set");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        error
            .to_string()
            .ends_with(r#"versions.json: "default" names "2.0.0", which is not a catalog set"#),
        "{error}"
    );
}

#[test]
fn a_document_under_the_wrong_family_is_refused() {
    let dir = shared_dir(
        "family",
        &SHARED_INDEX.replace(
            r#""session": "session.json"}
  },"#,
            r#""session": "repository.json"}
  },"#,
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
