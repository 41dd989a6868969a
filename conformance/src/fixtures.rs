//! Sample event writes from `fixtures/conformance/` and the catalog fixtures
//! of `fixtures/catalog/`, embedded at compile time so the runner binary is
//! self-contained. The catalog fixtures are those of the catalog set the
//! server serves the run's client identity ([`catalog_set`]).
//!
//! The events follow the facts of Autobuild's public build and repository
//! catalogs (type names, payload fields, allowed actor kinds). Invalid cases
//! carry the message form the catalog validator must produce.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::Value;

const BUILD_EVENTS: &str = include_str!("../../fixtures/conformance/build-events.json");
const REPO_EVENTS: &str = include_str!("../../fixtures/conformance/repository-events.json");
const INVALID_BUILD: &str = include_str!("../../fixtures/conformance/invalid-build-events.json");
const INVALID_REPO: &str =
    include_str!("../../fixtures/conformance/invalid-repository-events.json");
const SESSION_EVENTS: &str = include_str!("../../fixtures/conformance/session-events.json");

fn parsed(cell: &'static OnceLock<Value>, text: &str) -> &'static Value {
    cell.get_or_init(|| serde_json::from_str(text).expect("fixture files are valid JSON"))
}

/// A valid build event write by fixture name (panics on an unknown name: a
/// programming error in a check).
pub fn build_event(name: &str) -> Value {
    static CELL: OnceLock<Value> = OnceLock::new();
    parsed(&CELL, BUILD_EVENTS)
        .get(name)
        .unwrap_or_else(|| panic!("no build event fixture {name:?}"))
        .clone()
}

/// A valid repository event write by fixture name.
pub fn repo_event(name: &str) -> Value {
    static CELL: OnceLock<Value> = OnceLock::new();
    parsed(&CELL, REPO_EVENTS)
        .get(name)
        .unwrap_or_else(|| panic!("no repository event fixture {name:?}"))
        .clone()
}

/// A valid operator-session event write by fixture name (section 5).
pub fn session_event(name: &str) -> Value {
    static CELL: OnceLock<Value> = OnceLock::new();
    parsed(&CELL, SESSION_EVENTS)
        .get(name)
        .unwrap_or_else(|| panic!("no session event fixture {name:?}"))
        .clone()
}

/// One invalid event write and what its 422 message must look like.
#[derive(Debug, Clone)]
pub struct InvalidCase {
    pub name: String,
    pub event: Value,
    /// The message must equal this exactly.
    pub exact: Option<String>,
    /// The message must start with this.
    pub prefix: Option<String>,
    /// The message must contain this.
    pub contains: Option<String>,
}

fn invalid(text: &str, name: &str) -> InvalidCase {
    let list: Vec<Value> = serde_json::from_str(text).expect("fixture files are valid JSON");
    let v = list
        .into_iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("no invalid event fixture {name:?}"));
    let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    InvalidCase {
        name: name.to_string(),
        event: v["event"].clone(),
        exact: s("exact"),
        prefix: s("prefix"),
        contains: s("contains"),
    }
}

/// An invalid build event case by name.
pub fn invalid_build(name: &str) -> InvalidCase {
    invalid(INVALID_BUILD, name)
}

/// An invalid repository event case by name.
pub fn invalid_repo(name: &str) -> InvalidCase {
    invalid(INVALID_REPO, name)
}

/// Names of all invalid build cases, in file order.
pub fn invalid_build_names() -> Vec<String> {
    names(INVALID_BUILD)
}

/// Names of all invalid repository cases, in file order.
pub fn invalid_repo_names() -> Vec<String> {
    names(INVALID_REPO)
}

fn names(text: &str) -> Vec<String> {
    let list: Vec<Value> = serde_json::from_str(text).expect("fixture files are valid JSON");
    list.iter()
        .filter_map(|v| v["name"].as_str().map(str::to_string))
        .collect()
}

// ── catalog fixtures (`fixtures/catalog/`) ──────────────────────────────────

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/catalog_fixtures.rs"));
}

/// abstore's catalog index: which catalog set each client identity is
/// served (`identities`) and the default set. The runner reads it to pick the
/// fixtures of the catalogs a server serves to the identity the run sends.
const CATALOG_INDEX: &str = include_str!("../../catalog/catalogs/versions.json");

fn catalog_index() -> &'static Value {
    static CELL: OnceLock<Value> = OnceLock::new();
    parsed(&CELL, CATALOG_INDEX)
}

/// One catalog fixture: an event write `{actor, type, payload}` that the
/// family's catalog accepts (`valid-*.json`) or rejects (`invalid-*.json`,
/// whose 422 message contains `expect`).
#[derive(Debug, Clone)]
pub struct CatalogFixture {
    /// `build`, `repository` or `session`.
    pub family: String,
    /// The type directory (an event type, or `_any`).
    pub dir: String,
    pub file: String,
    pub valid: bool,
    /// The event write (`expect` removed).
    pub event: Value,
    pub expect: Option<String>,
    /// The validated payload the server must store when it differs from the
    /// one sent (the catalog's defaults and trims; `normalized` removed from
    /// `event`).
    pub normalized: Option<Value>,
}

static CATALOG_DIR: OnceLock<std::path::PathBuf> = OnceLock::new();

/// Reads the catalog fixtures from `dir` (laid out like `fixtures/catalog`)
/// instead of the embedded copy. Call before building the checks.
pub fn set_catalog_dir(dir: std::path::PathBuf) -> Result<(), String> {
    let rows = load_dir(&dir)?;
    if !rows
        .iter()
        .any(|(path, _)| FAMILIES.iter().any(|f| path.starts_with(&format!("{f}/"))))
    {
        return Err(format!(
            "{} holds no build/, repository/ or session/ fixtures",
            dir.display()
        ));
    }
    CATALOG_DIR
        .set(dir)
        .map_err(|_| "the catalog fixture directory is already set".to_string())
}

const FAMILIES: [&str; 3] = ["build", "repository", "session"];

/// Every fixture file under `root` as `(relative path, text)`, sorted: what
/// `build.rs` embeds, read at runtime.
fn load_dir(root: &std::path::Path) -> Result<Vec<(String, String)>, String> {
    fn walk(
        root: &std::path::Path,
        dir: &std::path::Path,
        rows: &mut Vec<(String, String)>,
    ) -> Result<(), String> {
        let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(root, &path, rows)?;
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            if !(name.ends_with(".json")
                && (name.starts_with("valid-")
                    || name.starts_with("invalid-")
                    || name == "inherit.json"))
            {
                continue;
            }
            let relative = path
                .strip_prefix(root)
                .map_err(|e| format!("{}: {e}", path.display()))?
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            rows.push((relative, text));
        }
        Ok(())
    }
    let mut rows = Vec::new();
    walk(root, root, &mut rows)?;
    rows.sort();
    Ok(rows)
}

/// The catalog set a server serves to the client identity `version`/
/// `protocol`, by abstore's index (`0.8.0/3` → `0.9.0`); the default set for
/// an identity the index does not name (a server of another version scheme,
/// or `--autobuild-version` with any version, is served the default set).
pub fn catalog_set(version: &str, protocol: &str) -> String {
    let index = catalog_index();
    index["identities"][format!("{version}/{protocol}")]
        .as_str()
        .unwrap_or_else(|| default_set(index))
        .to_owned()
}

/// Whether abstore's index names the identity (else [`catalog_set`] falls
/// back to the default set).
pub fn names_identity(version: &str, protocol: &str) -> bool {
    let index = catalog_index();
    index["identities"][format!("{version}/{protocol}")].is_string()
}

fn default_set(index: &Value) -> &str {
    index["default"]
        .as_str()
        .expect("the catalog index names its default set")
}

/// The fixture files that apply to catalog set `set`, keyed
/// `<family>/<type>/<file>`: the default set's are `fixtures/catalog/<family>/…`;
/// another set's are its own `<set>/<family>/…` plus the default set's of the
/// families its `<set>/inherit.json` inherits, minus those it excludes (the
/// rule `catalog/tests/fixtures.rs` holds the catalogs to).
fn resolve(rows: &[(String, String)], set: &str) -> Result<Vec<(String, String)>, String> {
    let index = catalog_index();
    let of_family = |path: &str| FAMILIES.iter().any(|f| path.starts_with(&format!("{f}/")));
    let mut chosen: BTreeMap<String, String> = BTreeMap::new();
    if set == default_set(index) {
        for (path, text) in rows.iter().filter(|(path, _)| of_family(path)) {
            chosen.insert(path.clone(), text.clone());
        }
        return Ok(chosen.into_iter().collect());
    }
    let prefix = format!("{set}/");
    let inherit_path = format!("{set}/inherit.json");
    let inherit: Value = rows
        .iter()
        .find(|(path, _)| *path == inherit_path)
        .map(|(_, text)| serde_json::from_str(text).map_err(|e| format!("{inherit_path}: {e}")))
        .transpose()?
        .ok_or_else(|| {
            format!("no {inherit_path}: the fixtures of catalog set {set} are missing")
        })?;
    let inherited: Vec<&str> = inherit["inherit"]
        .as_array()
        .map(|families| families.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (path, text) in rows.iter().filter(|(path, _)| of_family(path)) {
        let family = path.split('/').next().unwrap_or_default();
        if inherited.contains(&family) && inherit["exclude"].get(path.as_str()).is_none() {
            chosen.insert(path.clone(), text.clone());
        }
    }
    for (path, text) in rows {
        if let Some(own) = path.strip_prefix(&prefix)
            && of_family(own)
        {
            chosen.insert(own.to_owned(), text.clone());
        }
    }
    Ok(chosen.into_iter().collect())
}

/// Every catalog fixture of catalog set `set` (see [`catalog_set`]), sorted
/// by family, type directory and file name; parsed once per set. A fixture
/// that is not a JSON object is returned with `event: null` so its check
/// fails visibly.
pub fn catalog_fixtures_of(set: &str) -> Result<Arc<Vec<CatalogFixture>>, String> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<Vec<CatalogFixture>>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(fixtures) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(set) {
        return Ok(fixtures.clone());
    }
    let rows: Vec<(String, String)> = match CATALOG_DIR.get() {
        Some(dir) => load_dir(dir)?,
        None => embedded::EMBEDDED
            .iter()
            .map(|(path, text)| (path.to_string(), text.to_string()))
            .collect(),
    };
    let fixtures: Vec<CatalogFixture> = resolve(&rows, set)?
        .into_iter()
        .filter_map(|(path, text)| {
            let mut parts = path.splitn(3, '/');
            let (family, dir, file) = (parts.next()?, parts.next()?, parts.next()?);
            if file.contains('/') || !(file.starts_with("valid-") || file.starts_with("invalid-")) {
                return None;
            }
            let mut event: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            let expect = event
                .as_object_mut()
                .and_then(|o| o.remove("expect"))
                .and_then(|v| v.as_str().map(str::to_string));
            let normalized = event.as_object_mut().and_then(|o| o.remove("normalized"));
            Some(CatalogFixture {
                valid: file.starts_with("valid-"),
                family: family.to_owned(),
                dir: dir.to_owned(),
                file: file.to_owned(),
                event,
                expect,
                normalized,
            })
        })
        .collect();
    let fixtures = Arc::new(fixtures);
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(set.to_owned(), fixtures.clone());
    Ok(fixtures)
}

/// The event write of one valid catalog fixture of catalog set `set`
/// (`family`: `build`, `repository` or `session`; `ty`: its type directory;
/// `file`: e.g. `valid-kernel.json`), without its test annotations. Panics
/// when absent: a programming error in a check.
pub fn catalog_event(set: &str, family: &str, ty: &str, file: &str) -> Value {
    catalog_fixtures_of(set)
        .unwrap_or_else(|e| panic!("{e}"))
        .iter()
        .find(|f| f.family == family && f.dir == ty && f.file == file)
        .map(|f| f.event.clone())
        .unwrap_or_else(|| panic!("no catalog fixture {family}/{ty}/{file} in set {set}"))
}
