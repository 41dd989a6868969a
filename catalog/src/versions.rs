//! The catalog index (`catalog/catalogs/versions.json`): which catalog
//! document each family uses in each catalog set, and which set each client
//! identity is served.
//!
//! Catalogs are data, one set per Autobuild release, and a set names the
//! documents it shares with older ones instead of copying them. Clients are
//! identified by a pair, `X-Autobuild-Version` and
//! `X-Autobuild-Protocol-Version`, because one Autobuild version can speak
//! two protocols (a client built from main before a release sends the last
//! release's version with the next protocol); each pair names its set. The
//! index is the only place that says which document belongs to which set and
//! which set to which identity, so adding a release is one set, its
//! identities, and the documents that changed. Loading is strict, like the
//! documents themselves: an unknown member, a missing family, a path that
//! leaves the catalog directory, an identity naming no set or a default that
//! names no set is a [`CatalogError::Index`]. The older format, `versions`
//! (one protocol per Autobuild version), is still read.
//!
//! A document named by several sets is compiled once and shared
//! ([`VersionedCatalogs`]), so serving many clients costs one compiled copy
//! per distinct document.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use serde_json::{Map, Value};

use crate::document::Catalog;
use crate::{CatalogError, Catalogs, Family};

/// The index's file name, inside the embedded catalog directory or a
/// directory given to [`VersionedCatalogs::from_dir`].
pub(crate) const INDEX_FILE: &str = "versions.json";

const EMBEDDED_INDEX: &str = include_str!("../catalogs/versions.json");

/// Every embedded document, by its path relative to `catalog/catalogs/` (the
/// form the index uses). `catalog/tests/versions.rs` checks that this table
/// and the directory hold the same files with the same text.
pub const EMBEDDED_DOCUMENTS: &[(&str, &str)] = &[
    ("build.json", include_str!("../catalogs/build.json")),
    (
        "repository.json",
        include_str!("../catalogs/repository.json"),
    ),
    ("session.json", include_str!("../catalogs/session.json")),
    (
        "0.9.0/build.json",
        include_str!("../catalogs/0.9.0/build.json"),
    ),
    (
        "0.9.0/repository.json",
        include_str!("../catalogs/0.9.0/repository.json"),
    ),
];

/// Members the index's top level may have. `versions` is the format before
/// identities (one protocol per Autobuild version), still read.
const INDEX_MEMBERS: &[&str] = &["$comment", "default", "catalogs", "identities", "versions"];
/// Members one catalog set may have.
const SET_MEMBERS: &[&str] = &["$comment", "build", "repository", "session"];
/// Members one entry of the older `versions` format may have.
const VERSION_MEMBERS: &[&str] = &["$comment", "protocol", "build", "repository", "session"];

/// One catalog set: its name (the Autobuild release whose catalogs these
/// are) and one document path per family, in [`Family::ALL`] order.
#[derive(Debug)]
struct SetEntry {
    name: String,
    documents: [String; 3],
}

/// One client identity — the exact `X-Autobuild-Version` and
/// `X-Autobuild-Protocol-Version` pair its clients send — and the catalog
/// set it is served (an index into [`Index::sets`]).
#[derive(Debug)]
struct IdentityEntry {
    version: String,
    protocol: String,
    set: usize,
}

#[derive(Debug)]
struct Index {
    default: String,
    sets: Vec<SetEntry>,
    identities: Vec<IdentityEntry>,
}

impl Index {
    fn set(&self, name: &str) -> Result<&SetEntry, CatalogError> {
        self.sets
            .iter()
            .find(|entry| entry.name == name)
            .ok_or_else(|| CatalogError::UnknownVersion {
                version: name.to_owned(),
                known: self
                    .sets
                    .iter()
                    .map(|entry| entry.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

fn family_index(family: Family) -> usize {
    match family {
        Family::Build => 0,
        Family::Repository => 1,
        Family::Session => 2,
    }
}

/// A document path must stay inside the catalog directory: relative,
/// `/`-separated, no empty, `.` or `..` segment, ending in `.json`.
fn valid_document_path(path: &str) -> bool {
    path.ends_with(".json")
        && !path.contains('\\')
        && path
            .split('/')
            .all(|segment| !segment.is_empty() && segment != "." && segment != "..")
}

fn parse_index(text: &str, file: &str) -> Result<Index, CatalogError> {
    let index_error = |message: String| CatalogError::Index {
        file: file.to_owned(),
        message,
    };
    let value: Value = serde_json::from_str(text).map_err(|source| CatalogError::Json {
        file: file.to_owned(),
        source,
    })?;
    let Value::Object(top) = value else {
        return Err(index_error(
            "expected a JSON object at the top level".to_owned(),
        ));
    };
    if let Some(key) = top
        .keys()
        .find(|key| !INDEX_MEMBERS.contains(&key.as_str()))
    {
        return Err(index_error(format!(
            "unrecognized top-level member \"{key}\" (allowed: {})",
            INDEX_MEMBERS.join(", ")
        )));
    }
    let (sets, identities) = match top.get("versions") {
        Some(versions) => {
            if top.contains_key("catalogs") || top.contains_key("identities") {
                return Err(index_error(
                    "\"versions\" (the older format: one protocol per version) cannot be combined with \"catalogs\" and \"identities\"; use the latter"
                        .to_owned(),
                ));
            }
            parse_versions(versions, &index_error)?
        }
        None => {
            let sets = parse_sets(top.get("catalogs"), &index_error)?;
            let identities = parse_identities(top.get("identities"), &sets, &index_error)?;
            (sets, identities)
        }
    };
    let default = match top.get("default") {
        Some(Value::String(default)) if sets.iter().any(|set| set.name == *default) => {
            default.clone()
        }
        Some(Value::String(default)) => {
            return Err(index_error(format!(
                "\"default\" names \"{default}\", which is not a catalog set"
            )));
        }
        _ => {
            return Err(index_error(
                "\"default\" must name the catalog set served when none is selected".to_owned(),
            ));
        }
    };
    Ok(Index {
        default,
        sets,
        identities,
    })
}

/// `"catalogs"`: catalog set name → its three documents.
fn parse_sets(
    sets: Option<&Value>,
    index_error: &impl Fn(String) -> CatalogError,
) -> Result<Vec<SetEntry>, CatalogError> {
    let Some(Value::Object(sets)) = sets else {
        return Err(index_error(
            "\"catalogs\" must be an object of catalog set → documents, beside \"identities\" \
             (client identity VERSION/PROTOCOL → catalog set); see docs/catalog.md"
                .to_owned(),
        ));
    };
    if sets.is_empty() {
        return Err(index_error(
            "\"catalogs\" must name at least one catalog set".to_owned(),
        ));
    }
    let mut entries = Vec::with_capacity(sets.len());
    for (name, set) in sets {
        let set_error = |message: String| index_error(format!("catalog set \"{name}\": {message}"));
        if name.is_empty() {
            return Err(index_error(
                "a catalog set's name must be a nonempty string".to_owned(),
            ));
        }
        let Value::Object(members) = set else {
            return Err(set_error(
                "expected an object naming each family's document".to_owned(),
            ));
        };
        entries.push(SetEntry {
            name: name.clone(),
            documents: parse_documents(members, SET_MEMBERS, &set_error)?,
        });
    }
    Ok(entries)
}

/// `"identities"`: `"VERSION/PROTOCOL"` → the name of a catalog set.
fn parse_identities(
    identities: Option<&Value>,
    sets: &[SetEntry],
    index_error: &impl Fn(String) -> CatalogError,
) -> Result<Vec<IdentityEntry>, CatalogError> {
    let Some(Value::Object(identities)) = identities else {
        return Err(index_error(
            "\"identities\" must be an object of client identity VERSION/PROTOCOL → catalog set"
                .to_owned(),
        ));
    };
    if identities.is_empty() {
        return Err(index_error(
            "\"identities\" must name at least one client identity".to_owned(),
        ));
    }
    let mut entries = Vec::with_capacity(identities.len());
    for (identity, set) in identities {
        let identity_error =
            |message: String| index_error(format!("identity \"{identity}\": {message}"));
        let (version, protocol) = match identity.split_once('/') {
            Some((version, protocol))
                if !version.is_empty() && !protocol.is_empty() && !protocol.contains('/') =>
            {
                (version, protocol)
            }
            _ => {
                return Err(identity_error(
                    "expected VERSION/PROTOCOL, the X-Autobuild-Version and \
                     X-Autobuild-Protocol-Version its clients send (e.g. 0.8.0/2)"
                        .to_owned(),
                ));
            }
        };
        let set = match set {
            Value::String(name) => sets
                .iter()
                .position(|entry| entry.name == *name)
                .ok_or_else(|| {
                    identity_error(format!("names \"{name}\", which is not in \"catalogs\""))
                })?,
            _ => {
                return Err(identity_error(
                    "must name a catalog set of \"catalogs\"".to_owned(),
                ));
            }
        };
        entries.push(IdentityEntry {
            version: version.to_owned(),
            protocol: protocol.to_owned(),
            set,
        });
    }
    Ok(entries)
}

/// The older format, `"versions"`: Autobuild version → its protocol and
/// documents. Each version is a catalog set of that name and the one
/// identity `VERSION/PROTOCOL`.
fn parse_versions(
    versions: &Value,
    index_error: &impl Fn(String) -> CatalogError,
) -> Result<(Vec<SetEntry>, Vec<IdentityEntry>), CatalogError> {
    let Value::Object(versions) = versions else {
        return Err(index_error(
            "\"versions\" must be an object of Autobuild version → documents".to_owned(),
        ));
    };
    if versions.is_empty() {
        return Err(index_error(
            "\"versions\" must name at least one version".to_owned(),
        ));
    }
    let (mut sets, mut identities) = (Vec::new(), Vec::new());
    for (version, entry) in versions {
        let entry_error =
            |message: String| index_error(format!("version \"{version}\": {message}"));
        if version.is_empty() {
            return Err(index_error(
                "a version must be a nonempty string".to_owned(),
            ));
        }
        let Value::Object(members) = entry else {
            return Err(entry_error(
                "expected an object naming the protocol and each family's document".to_owned(),
            ));
        };
        let documents = parse_documents(members, VERSION_MEMBERS, &entry_error)?;
        let protocol = nonempty_string(members, "protocol", &entry_error)?;
        identities.push(IdentityEntry {
            version: version.clone(),
            protocol,
            set: sets.len(),
        });
        sets.push(SetEntry {
            name: version.clone(),
            documents,
        });
    }
    Ok((sets, identities))
}

fn nonempty_string(
    members: &Map<String, Value>,
    name: &str,
    entry_error: &impl Fn(String) -> CatalogError,
) -> Result<String, CatalogError> {
    match members.get(name) {
        Some(Value::String(value)) if !value.is_empty() => Ok(value.clone()),
        _ => Err(entry_error(format!("\"{name}\" must be a nonempty string"))),
    }
}

/// One document path per family, from an entry whose members may be only
/// `allowed`.
fn parse_documents(
    members: &Map<String, Value>,
    allowed: &[&str],
    entry_error: &impl Fn(String) -> CatalogError,
) -> Result<[String; 3], CatalogError> {
    if let Some(key) = members.keys().find(|key| !allowed.contains(&key.as_str())) {
        return Err(entry_error(format!(
            "unrecognized member \"{key}\" (allowed: {})",
            allowed.join(", ")
        )));
    }
    let mut documents: [String; 3] = Default::default();
    for family in Family::ALL {
        let path = nonempty_string(members, family.as_str(), entry_error)?;
        if !valid_document_path(&path) {
            return Err(entry_error(format!(
                "document \"{path}\" for {family} must be a relative path inside the catalog directory ending in .json"
            )));
        }
        documents[family_index(family)] = path;
    }
    Ok(documents)
}

/// The embedded index, parsed once. The error is kept as text because
/// [`CatalogError`] is not `Clone`; `catalog/tests/versions.rs` proves the
/// embedded index parses.
fn embedded_index() -> Result<&'static Index, CatalogError> {
    static INDEX: OnceLock<Result<Index, String>> = OnceLock::new();
    INDEX
        .get_or_init(|| {
            parse_index(EMBEDDED_INDEX, "embedded versions.json").map_err(|error| error.to_string())
        })
        .as_ref()
        .map_err(|message| CatalogError::Index {
            file: "embedded versions.json".to_owned(),
            message: message.clone(),
        })
}

fn embedded_document(path: &str) -> Result<&'static str, CatalogError> {
    EMBEDDED_DOCUMENTS
        .iter()
        .find(|(name, _)| *name == path)
        .map(|(_, text)| *text)
        .ok_or_else(|| CatalogError::Index {
            file: "embedded versions.json".to_owned(),
            message: format!("document \"{path}\" is not embedded"),
        })
}

pub(crate) fn embedded_default_set() -> &'static str {
    // An unparsable index makes `embedded_for` report the index error.
    embedded_index().map_or("", |index| index.default.as_str())
}

pub(crate) fn embedded_sets() -> Vec<&'static str> {
    embedded_index().map_or_else(
        |_| Vec::new(),
        |index| index.sets.iter().map(|entry| entry.name.as_str()).collect(),
    )
}

pub(crate) fn embedded_catalogs_for(set: &str) -> Result<Catalogs, CatalogError> {
    let entry = embedded_index()?.set(set)?;
    let compile = |family: Family| -> Result<Arc<Catalog>, CatalogError> {
        let path = &entry.documents[family_index(family)];
        let text = embedded_document(path)?;
        Catalog::compile(family, text, &format!("embedded {path}")).map(Arc::new)
    };
    Ok(Catalogs {
        build: compile(Family::Build)?,
        repository: compile(Family::Repository)?,
        session: compile(Family::Session)?,
    })
}

/// Every catalog set of an index and the client identities it serves, each
/// distinct document compiled once and shared by the sets that name it.
///
/// A catalog set is named after the Autobuild release whose catalogs it
/// holds; a client identity (the exact `X-Autobuild-Version` /
/// `X-Autobuild-Protocol-Version` pair) names the set it is served, so two
/// identities can share one set (`0.8.0/3` and `0.9.0/3`). The server
/// selects a client's catalogs by its pair ([`VersionedCatalogs::for_identity`]);
/// see `docs/catalog.md` for the layout and `docs/protocol-versions.md` for
/// which clients send which pair.
#[derive(Debug, Clone)]
pub struct VersionedCatalogs {
    default: String,
    /// `(name, catalogs)` in index order.
    sets: Vec<(String, Catalogs)>,
    /// `(version, protocol, index into sets)` in index order.
    identities: Vec<(String, String, usize)>,
}

impl VersionedCatalogs {
    /// Every embedded set and identity (`catalog/catalogs/versions.json`).
    pub fn embedded() -> Result<VersionedCatalogs, CatalogError> {
        VersionedCatalogs::build(embedded_index()?, |path| {
            Ok((
                embedded_document(path)?.to_owned(),
                format!("embedded {path}"),
            ))
        })
    }

    /// Every set and identity of the index `DIR/versions.json`, with document
    /// paths relative to `DIR` (the layout of `catalog/catalogs/`).
    pub fn from_dir(dir: &Path) -> Result<VersionedCatalogs, CatalogError> {
        let index_path = dir.join(INDEX_FILE);
        let read = |path: &Path| {
            std::fs::read_to_string(path).map_err(|source| CatalogError::Io {
                path: path.display().to_string(),
                source,
            })
        };
        let index = parse_index(&read(&index_path)?, &index_path.display().to_string())?;
        VersionedCatalogs::build(&index, |path| {
            let full = dir.join(path);
            Ok((read(&full)?, full.display().to_string()))
        })
    }

    fn build(
        index: &Index,
        mut load: impl FnMut(&str) -> Result<(String, String), CatalogError>,
    ) -> Result<VersionedCatalogs, CatalogError> {
        let mut compiled: HashMap<(usize, &str), Arc<Catalog>> = HashMap::new();
        let mut sets = Vec::with_capacity(index.sets.len());
        for entry in &index.sets {
            let mut get = |family: Family| -> Result<Arc<Catalog>, CatalogError> {
                let path = entry.documents[family_index(family)].as_str();
                let key = (family_index(family), path);
                if let Some(catalog) = compiled.get(&key) {
                    return Ok(Arc::clone(catalog));
                }
                let (text, name) = load(path)?;
                let catalog = Arc::new(Catalog::compile(family, &text, &name)?);
                compiled.insert(key, Arc::clone(&catalog));
                Ok(catalog)
            };
            let catalogs = Catalogs {
                build: get(Family::Build)?,
                repository: get(Family::Repository)?,
                session: get(Family::Session)?,
            };
            sets.push((entry.name.clone(), catalogs));
        }
        let identities = index
            .identities
            .iter()
            .map(|entry| (entry.version.clone(), entry.protocol.clone(), entry.set))
            .collect();
        Ok(VersionedCatalogs {
            default: index.default.clone(),
            sets,
            identities,
        })
    }

    /// The catalogs served to the client identity `version`/`protocol`
    /// (`X-Autobuild-Version` and `X-Autobuild-Protocol-Version`, exactly as
    /// sent); `None` for a pair the index does not name.
    pub fn for_identity(&self, version: &str, protocol: &str) -> Option<&Catalogs> {
        self.set_of(version, protocol)
            .and_then(|name| self.set(name))
    }

    /// The name of the catalog set the identity `version`/`protocol` is
    /// served, e.g. `0.9.0` for `0.8.0`/`3`.
    pub fn set_of(&self, version: &str, protocol: &str) -> Option<&str> {
        self.identities
            .iter()
            .find(|(v, p, _)| v == version && p == protocol)
            .map(|&(_, _, set)| self.sets[set].0.as_str())
    }

    /// The identities the index names, as `(version, protocol)`, in index
    /// order.
    pub fn identities(&self) -> impl Iterator<Item = (&str, &str)> {
        self.identities
            .iter()
            .map(|(version, protocol, _)| (version.as_str(), protocol.as_str()))
    }

    /// One catalog set by name (an Autobuild release, e.g. `0.9.0`).
    pub fn set(&self, name: &str) -> Option<&Catalogs> {
        self.sets
            .iter()
            .find(|(set, _)| set == name)
            .map(|(_, catalogs)| catalogs)
    }

    /// The catalog sets' names, in index order (oldest first).
    pub fn sets(&self) -> impl Iterator<Item = &str> {
        self.sets.iter().map(|(name, _)| name.as_str())
    }

    /// The set served when none is selected (the index's `default`).
    pub fn default_set(&self) -> &str {
        &self.default
    }

    /// The default set's catalogs.
    pub fn default_catalogs(&self) -> &Catalogs {
        self.set(&self.default)
            .expect("the index's default names one of its sets")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index_error(text: &str) -> String {
        match parse_index(text, "versions.json") {
            Ok(index) => panic!("{text} parsed: {index:?}"),
            Err(error) => error.to_string(),
        }
    }

    const SET: &str =
        r#"{"build":"build.json","repository":"repository.json","session":"session.json"}"#;

    /// An index with the set `0.8.0` and the given identities.
    fn with_identities(identities: &str) -> String {
        format!(r#"{{"default":"0.8.0","catalogs":{{"0.8.0":{SET}}},"identities":{identities}}}"#)
    }

    #[test]
    fn a_well_formed_index_parses_in_order() {
        let text = format!(
            r#"{{"default":"0.8.0",
                "catalogs":{{"0.8.0":{SET},"0.9.0":{{"build":"0.9.0/build.json","repository":"repository.json","session":"session.json"}}}},
                "identities":{{"0.8.0/2":"0.8.0","0.8.0/3":"0.9.0","0.9.0/3":"0.9.0"}}}}"#
        );
        let index = parse_index(&text, "versions.json").expect("parses");
        assert_eq!(index.default, "0.8.0");
        assert_eq!(index.sets[1].name, "0.9.0");
        assert_eq!(index.sets[1].documents[0], "0.9.0/build.json");
        assert_eq!(index.sets[1].documents[1], "repository.json");
        let identities: Vec<(&str, &str, usize)> = index
            .identities
            .iter()
            .map(|i| (i.version.as_str(), i.protocol.as_str(), i.set))
            .collect();
        assert_eq!(
            identities,
            [("0.8.0", "2", 0), ("0.8.0", "3", 1), ("0.9.0", "3", 1)]
        );
    }

    #[test]
    fn the_older_versions_format_is_one_identity_per_version() {
        let text = r#"{"default":"0.8.0","versions":{
            "0.8.0":{"protocol":"2","build":"build.json","repository":"repository.json","session":"session.json"},
            "0.9.0":{"protocol":"3","build":"0.9.0/build.json","repository":"repository.json","session":"session.json"}}}"#;
        let index = parse_index(text, "versions.json").expect("parses");
        assert_eq!(index.default, "0.8.0");
        assert_eq!(index.sets[1].name, "0.9.0");
        assert_eq!(index.sets[1].documents[0], "0.9.0/build.json");
        assert_eq!(index.identities[1].version, "0.9.0");
        assert_eq!(index.identities[1].protocol, "3");
        assert_eq!(index.identities[1].set, 1);
        assert!(
            index_error(&format!(
                r#"{{"default":"0.8.0","versions":{{}},"catalogs":{{"0.8.0":{SET}}}}}"#
            ))
            .contains("cannot be combined with \"catalogs\" and \"identities\"")
        );
    }

    #[test]
    fn broken_indexes_name_the_problem() {
        assert!(
            index_error(&with_identities(r#"{"0.8.0/2":"0.8.0"},"x":1"#))
                .contains("unrecognized top-level member \"x\"")
        );
        assert!(
            index_error(
                &with_identities(r#"{"0.8.0/2":"0.8.0"}"#)
                    .replace(r#""default":"0.8.0""#, r#""default":"9""#)
            )
            .contains("\"default\" names \"9\", which is not a catalog set")
        );
        assert!(
            index_error(r#"{"default":"0.8.0","identities":{"0.8.0/2":"0.8.0"}}"#)
                .contains("\"catalogs\" must be an object of catalog set → documents")
        );
        assert!(
            index_error(&format!(
                r#"{{"default":"0.8.0","catalogs":{{"0.8.0":{SET}}}}}"#
            ))
            .contains("\"identities\" must be an object")
        );
        assert!(
            index_error(&with_identities(r#"{"0.8.0/2":"0.9.0"}"#))
                .contains("identity \"0.8.0/2\": names \"0.9.0\", which is not in \"catalogs\"")
        );
        for malformed in ["0.8.0", "/2", "0.8.0/", "a/b/2"] {
            assert!(
                index_error(&with_identities(&format!(r#"{{"{malformed}":"0.8.0"}}"#)))
                    .contains("expected VERSION/PROTOCOL"),
                "{malformed}"
            );
        }
        assert!(
            index_error(&with_identities("{}")).contains("must name at least one client identity")
        );
        assert!(
            index_error(r#"{"default":"0.8.0","catalogs":{"0.8.0":{"build":"build.json","repository":"repository.json"}},"identities":{"0.8.0/2":"0.8.0"}}"#)
                .contains("catalog set \"0.8.0\": \"session\" must be a nonempty string")
        );
        assert!(
            index_error(r#"{"default":"0.8.0","catalogs":{"0.8.0":{"build":"../build.json","repository":"repository.json","session":"session.json"}},"identities":{"0.8.0/2":"0.8.0"}}"#)
                .contains("must be a relative path inside the catalog directory")
        );
        assert!(
            index_error(r#"{"default":"0.8.0","catalogs":{"0.8.0":{"protocol":"2","build":"build.json","repository":"repository.json","session":"session.json"}},"identities":{"0.8.0/2":"0.8.0"}}"#)
                .contains("unrecognized member \"protocol\"")
        );
        assert!(
            index_error(r#"{"default":"0.8.0","versions":{"0.8.0":{"protocol":"2","build":"/build.json","repository":"r.json","session":"s.json","extra":"x"}}}"#)
                .contains("unrecognized member \"extra\"")
        );
        assert!(
            index_error(r#"{"default":"0.8.0","versions":{}}"#)
                .contains("must name at least one version")
        );
    }

    #[test]
    fn document_paths_stay_inside_the_directory() {
        assert!(valid_document_path("build.json"));
        assert!(valid_document_path("0.9.0/build.json"));
        for bad in [
            "/build.json",
            "../build.json",
            "a/../build.json",
            "./build.json",
            "a//b.json",
            "build.txt",
            "a\\b.json",
        ] {
            assert!(!valid_document_path(bad), "{bad}");
        }
    }
}
