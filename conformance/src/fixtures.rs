//! Sample event writes from `fixtures/conformance/`, embedded at compile time so
//! the runner binary is self-contained.
//!
//! The events follow the facts of Autobuild's public build and repository
//! catalogs (type names, payload fields, allowed actor kinds). Invalid cases
//! carry the message form the catalog validator must produce.

use serde_json::Value;
use std::sync::OnceLock;

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

// ── catalog fixtures (`fixtures/catalog/<family>/<type>/*.json`) ────────────

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/catalog_fixtures.rs"));
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
/// instead of the embedded copy. Call before [`crate::all_checks`].
pub fn set_catalog_dir(dir: std::path::PathBuf) -> Result<(), String> {
    let n = load_dir(&dir)?.len();
    if n == 0 {
        return Err(format!(
            "{} holds no build/, repository/ or session/ fixtures",
            dir.display()
        ));
    }
    CATALOG_DIR
        .set(dir)
        .map_err(|_| "the catalog fixture directory is already set".to_string())
}

fn load_dir(root: &std::path::Path) -> Result<Vec<(String, String, String, String)>, String> {
    let mut rows = Vec::new();
    for family in ["build", "repository", "session"] {
        let Ok(types) = std::fs::read_dir(root.join(family)) else {
            continue;
        };
        for ty in types.flatten().filter(|t| t.path().is_dir()) {
            let files = std::fs::read_dir(ty.path())
                .map_err(|e| format!("{}: {e}", ty.path().display()))?;
            for f in files.flatten() {
                let name = f.file_name().to_string_lossy().into_owned();
                if name.ends_with(".json")
                    && (name.starts_with("valid-") || name.starts_with("invalid-"))
                {
                    let text = std::fs::read_to_string(f.path())
                        .map_err(|e| format!("{}: {e}", f.path().display()))?;
                    rows.push((
                        family.to_string(),
                        ty.file_name().to_string_lossy().into_owned(),
                        name,
                        text,
                    ));
                }
            }
        }
    }
    rows.sort();
    Ok(rows)
}

/// Every build and repository catalog fixture, sorted by family, type
/// directory and file name. A fixture that is not a JSON object is returned
/// with `event: null` so its check fails visibly.
pub fn catalog_fixtures() -> Vec<CatalogFixture> {
    let rows: Vec<(String, String, String, String)> = match CATALOG_DIR.get() {
        Some(dir) => load_dir(dir).unwrap_or_default(),
        None => embedded::EMBEDDED
            .iter()
            .map(|(a, b, c, d)| (a.to_string(), b.to_string(), c.to_string(), d.to_string()))
            .collect(),
    };
    rows.into_iter()
        .map(|(family, dir, file, text)| {
            let mut event: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            let expect = event
                .as_object_mut()
                .and_then(|o| o.remove("expect"))
                .and_then(|v| v.as_str().map(str::to_string));
            let normalized = event.as_object_mut().and_then(|o| o.remove("normalized"));
            CatalogFixture {
                valid: file.starts_with("valid-"),
                family,
                dir,
                file,
                event,
                expect,
                normalized,
            }
        })
        .collect()
}

/// The event write of one valid catalog fixture (`family`: `build`,
/// `repository` or `session`; `ty`: its type directory; `file`: e.g.
/// `valid-kernel.json`), without its test annotations. Panics when absent:
/// a programming error in a check.
pub fn catalog_event(family: &str, ty: &str, file: &str) -> Value {
    catalog_fixtures()
        .into_iter()
        .find(|f| f.family == family && f.dir == ty && f.file == file)
        .map(|f| f.event)
        .unwrap_or_else(|| panic!("no catalog fixture {family}/{ty}/{file}"))
}
