//! What an Autobuild import read, carried, could not carry and noticed:
//! counts with a few examples each, printed after the archive's own report.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// Examples kept per finding.
const EXAMPLES: usize = 3;
/// An example's length at most, in characters (catalog messages list every
/// known type).
const EXAMPLE_CHARS: usize = 200;

#[derive(Debug, Default)]
pub struct Finding {
    pub count: u64,
    pub examples: Vec<String>,
}

#[derive(Debug, Default)]
pub struct Report {
    /// `L1` … `L6`, or the PostgreSQL store's build-family version.
    pub version: String,
    /// Whose catalogs judged the events (`0.8.0/2`, or every known client).
    pub catalogs: String,
    /// Source rows read, by Autobuild table.
    pub read: BTreeMap<&'static str, u64>,
    /// Source rows carried into the archive, by Autobuild table.
    pub imported: BTreeMap<&'static str, u64>,
    /// What cannot be imported, by kind.
    pub problems: BTreeMap<String, Finding>,
    /// Imported, but worth knowing.
    pub notes: BTreeMap<String, Finding>,
    repos: BTreeSet<String>,
}

fn add(map: &mut BTreeMap<String, Finding>, what: &str, example: impl FnOnce() -> String) {
    let finding = map.entry(what.to_owned()).or_default();
    finding.count += 1;
    if finding.examples.len() < EXAMPLES {
        let mut example = example();
        if let Some((cut, _)) = example.char_indices().nth(EXAMPLE_CHARS) {
            example.truncate(cut);
            example.push('…');
        }
        finding.examples.push(example);
    }
}

impl Report {
    pub fn read(&mut self, table: &'static str, n: u64) {
        *self.read.entry(table).or_default() += n;
    }

    pub fn imported(&mut self, table: &'static str) {
        *self.imported.entry(table).or_default() += 1;
    }

    pub fn problem(&mut self, what: &str, example: impl FnOnce() -> String) {
        add(&mut self.problems, what, example);
    }

    pub fn note(&mut self, what: &str, example: impl FnOnce() -> String) {
        add(&mut self.notes, what, example);
    }

    /// `n` findings of kind `what` at once (one example).
    pub fn problems(&mut self, what: &str, n: u64, example: impl FnOnce() -> String) {
        if n > 0 {
            add(&mut self.problems, what, example);
            if let Some(finding) = self.problems.get_mut(what) {
                finding.count += n - 1;
            }
        }
    }

    /// `n` notes of kind `what` at once (one example).
    pub fn notes(&mut self, what: &str, n: u64, example: impl FnOnce() -> String) {
        if n > 0 {
            add(&mut self.notes, what, example);
            if let Some(finding) = self.notes.get_mut(what) {
                finding.count += n - 1;
            }
        }
    }

    pub fn distinct_repo(&mut self, repo: &str) {
        self.repos.insert(repo.to_owned());
    }

    /// The number of findings of kind `what` (tests and callers).
    pub fn problem_count(&self, what: &str) -> u64 {
        self.problems.get(what).map_or(0, |f| f.count)
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = String::new();
        let _ = write!(out, "Autobuild {}; read", self.version);
        for (i, (table, n)) in self.read.iter().enumerate() {
            let carried = self.imported.get(table).copied().unwrap_or(0);
            let sep = if i == 0 { " " } else { ", " };
            let _ = write!(out, "{sep}{table} {n} ({carried} carried)");
        }
        if self.read.is_empty() {
            out.push_str(" nothing");
        }
        if !self.catalogs.is_empty() {
            let _ = write!(
                out,
                "\nevents checked against the catalogs of {}",
                self.catalogs
            );
        }
        if !self.repos.is_empty() {
            let repos: Vec<&str> = self.repos.iter().map(String::as_str).take(5).collect();
            let more = if self.repos.len() > 5 { ", …" } else { "" };
            let _ = write!(
                out,
                "\nrepository ids (kept as they are; clients must use the same): {}{more}",
                repos.join(", ")
            );
        }
        for (label, map) in [("cannot import", &self.problems), ("note", &self.notes)] {
            for (what, finding) in map {
                let _ = write!(
                    out,
                    "\n{label}: {} {what} (e.g. {})",
                    finding.count,
                    finding.examples.join("; ")
                );
            }
        }
        if self.problems.is_empty() {
            out.push_str("\neverything read can be imported");
        }
        f.write_str(&out)
    }
}
