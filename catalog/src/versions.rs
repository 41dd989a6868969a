//! The version index: which catalog document each family uses for each
//! Autobuild version (`catalog/catalogs/versions.json`).
//!
//! Catalogs are data, one set per Autobuild version, and a version names the
//! documents it shares with older ones instead of copying them. The index is
//! the only place that says which document belongs to which version, so adding
//! a version is one index entry plus the documents that changed. Loading is
//! strict, like the documents themselves: an unknown member, a missing family,
//! a path that leaves the catalog directory or a default that names no version
//! is a [`CatalogError::Index`].
//!
//! A document named by several versions is compiled once and shared
//! ([`VersionedCatalogs`]), so serving many client versions costs one compiled
//! copy per distinct document.

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

/// Members the index's top level may have.
const INDEX_MEMBERS: &[&str] = &["$comment", "default", "versions"];
/// Members one version entry may have.
const VERSION_MEMBERS: &[&str] = &["$comment", "protocol", "build", "repository", "session"];

/// One version's entry: its protocol and one document path per family, in
/// [`Family::ALL`] order.
#[derive(Debug)]
struct VersionEntry {
    version: String,
    protocol: String,
    documents: [String; 3],
}

#[derive(Debug)]
struct Index {
    default: String,
    versions: Vec<VersionEntry>,
}

impl Index {
    fn entry(&self, version: &str) -> Result<&VersionEntry, CatalogError> {
        self.versions
            .iter()
            .find(|entry| entry.version == version)
            .ok_or_else(|| CatalogError::UnknownVersion {
                version: version.to_owned(),
                known: self
                    .versions
                    .iter()
                    .map(|entry| entry.version.as_str())
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
    let Some(Value::Object(versions)) = top.get("versions") else {
        return Err(index_error(
            "\"versions\" must be an object of Autobuild version → documents".to_owned(),
        ));
    };
    if versions.is_empty() {
        return Err(index_error(
            "\"versions\" must name at least one version".to_owned(),
        ));
    }
    let mut entries = Vec::with_capacity(versions.len());
    for (version, entry) in versions {
        entries.push(parse_entry(version, entry, &index_error)?);
    }
    let default = match top.get("default") {
        Some(Value::String(default)) if versions.contains_key(default) => default.clone(),
        Some(Value::String(default)) => {
            return Err(index_error(format!(
                "\"default\" names \"{default}\", which is not in \"versions\""
            )));
        }
        _ => {
            return Err(index_error(
                "\"default\" must be the version served when none is selected".to_owned(),
            ));
        }
    };
    Ok(Index {
        default,
        versions: entries,
    })
}

fn parse_entry(
    version: &str,
    entry: &Value,
    index_error: &impl Fn(String) -> CatalogError,
) -> Result<VersionEntry, CatalogError> {
    let entry_error = |message: String| index_error(format!("version \"{version}\": {message}"));
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
    if let Some(key) = members
        .keys()
        .find(|key| !VERSION_MEMBERS.contains(&key.as_str()))
    {
        return Err(entry_error(format!(
            "unrecognized member \"{key}\" (allowed: {})",
            VERSION_MEMBERS.join(", ")
        )));
    }
    let string = |members: &Map<String, Value>, name: &str| -> Result<String, CatalogError> {
        match members.get(name) {
            Some(Value::String(value)) if !value.is_empty() => Ok(value.clone()),
            _ => Err(entry_error(format!("\"{name}\" must be a nonempty string"))),
        }
    };
    let protocol = string(members, "protocol")?;
    let mut documents: [String; 3] = Default::default();
    for family in Family::ALL {
        let path = string(members, family.as_str())?;
        if !valid_document_path(&path) {
            return Err(entry_error(format!(
                "document \"{path}\" for {family} must be a relative path inside the catalog directory ending in .json"
            )));
        }
        documents[family_index(family)] = path;
    }
    Ok(VersionEntry {
        version: version.to_owned(),
        protocol,
        documents,
    })
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

pub(crate) fn embedded_default_version() -> &'static str {
    // An unparsable index makes `embedded_for` report the index error.
    embedded_index().map_or("", |index| index.default.as_str())
}

pub(crate) fn embedded_versions() -> Vec<&'static str> {
    embedded_index().map_or_else(
        |_| Vec::new(),
        |index| {
            index
                .versions
                .iter()
                .map(|entry| entry.version.as_str())
                .collect()
        },
    )
}

pub(crate) fn embedded_catalogs_for(version: &str) -> Result<Catalogs, CatalogError> {
    let entry = embedded_index()?.entry(version)?;
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

/// The catalogs of every Autobuild version in an index, each distinct
/// document compiled once and shared by the versions that name it.
///
/// The server selects a client's catalogs by its Autobuild version
/// ([`VersionedCatalogs::get`]); see `docs/catalog.md` for the layout and
/// `docs/protocol-versions.md` for how versions map to protocols.
#[derive(Debug, Clone)]
pub struct VersionedCatalogs {
    default: String,
    /// `(version, protocol, catalogs)` in index order.
    versions: Vec<(String, String, Catalogs)>,
}

impl VersionedCatalogs {
    /// Every embedded version (`catalog/catalogs/versions.json`).
    pub fn embedded() -> Result<VersionedCatalogs, CatalogError> {
        VersionedCatalogs::build(embedded_index()?, |path| {
            Ok((
                embedded_document(path)?.to_owned(),
                format!("embedded {path}"),
            ))
        })
    }

    /// Every version of the index `DIR/versions.json`, with document paths
    /// relative to `DIR` (the layout of `catalog/catalogs/`).
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
        let mut versions = Vec::with_capacity(index.versions.len());
        for entry in &index.versions {
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
            versions.push((entry.version.clone(), entry.protocol.clone(), catalogs));
        }
        Ok(VersionedCatalogs {
            default: index.default.clone(),
            versions,
        })
    }

    /// The catalogs for an Autobuild version, exactly as the client sends it
    /// in `X-Autobuild-Version`; `None` for a version the index does not name.
    pub fn get(&self, version: &str) -> Option<&Catalogs> {
        self.versions
            .iter()
            .find(|(name, _, _)| name == version)
            .map(|(_, _, catalogs)| catalogs)
    }

    /// The remote-store protocol version the index records for an Autobuild
    /// version (`"2"`, `"3"`): what that version's clients send in
    /// `X-Autobuild-Protocol-Version`.
    pub fn protocol(&self, version: &str) -> Option<&str> {
        self.versions
            .iter()
            .find(|(name, _, _)| name == version)
            .map(|(_, protocol, _)| protocol.as_str())
    }

    /// The known versions, in index order (oldest first).
    pub fn versions(&self) -> impl Iterator<Item = &str> {
        self.versions.iter().map(|(name, _, _)| name.as_str())
    }

    /// The version served when none is selected (the index's `default`).
    pub fn default_version(&self) -> &str {
        &self.default
    }

    /// The default version's catalogs.
    pub fn default_catalogs(&self) -> &Catalogs {
        self.get(&self.default)
            .expect("the index's default names one of its versions")
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

    const ENTRY: &str = r#"{"protocol":"2","build":"build.json","repository":"repository.json","session":"session.json"}"#;

    #[test]
    fn a_well_formed_index_parses_in_order() {
        let text = format!(
            r#"{{"default":"0.8.0","versions":{{"0.8.0":{ENTRY},"0.9.0":{{"protocol":"3","build":"0.9.0/build.json","repository":"repository.json","session":"session.json"}}}}}}"#
        );
        let index = parse_index(&text, "versions.json").expect("parses");
        assert_eq!(index.default, "0.8.0");
        assert_eq!(index.versions[1].version, "0.9.0");
        assert_eq!(index.versions[1].protocol, "3");
        assert_eq!(index.versions[1].documents[0], "0.9.0/build.json");
        assert_eq!(index.versions[1].documents[1], "repository.json");
    }

    #[test]
    fn broken_indexes_name_the_problem() {
        assert!(
            index_error(&format!(
                r#"{{"default":"0.8.0","versions":{{"0.8.0":{ENTRY}}},"x":1}}"#
            ))
            .contains("unrecognized top-level member \"x\"")
        );
        assert!(
            index_error(&format!(
                r#"{{"default":"9","versions":{{"0.8.0":{ENTRY}}}}}"#
            ))
            .contains("\"default\" names \"9\", which is not in \"versions\"")
        );
        assert!(
            index_error(r#"{"default":"0.8.0","versions":{"0.8.0":{"protocol":"2","build":"build.json","repository":"repository.json"}}}"#)
                .contains("version \"0.8.0\": \"session\" must be a nonempty string")
        );
        assert!(
            index_error(r#"{"default":"0.8.0","versions":{"0.8.0":{"protocol":"2","build":"../build.json","repository":"repository.json","session":"session.json"}}}"#)
                .contains("must be a relative path inside the catalog directory")
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
