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
