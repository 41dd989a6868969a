//! Which Autobuild local store a database is (docs/autobuild-stores.md §1.1):
//! Autobuild never versions its SQLite file, so the version is read from
//! the tables and columns it holds. Anything the map does not know (a
//! table, a column, half a family) is refused, naming what was found:
//! importing a shape nobody has read would guess at its meaning.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::bail;

/// A table Autobuild's local store has at some version: its columns that
/// every version has, then those a later version added (guarded `ALTER
/// TABLE … ADD COLUMN`, so an upgraded file has them at the end).
struct KnownTable {
    name: &'static str,
    required: &'static [&'static str],
    optional: &'static [&'static str],
}

macro_rules! cols {
    ($($c:expr),* $(,)?) => { &[$($c),*] };
}

static KNOWN: [KnownTable; 12] = [
    KnownTable {
        name: "builds",
        required: cols!(
            "slug",
            "repo",
            "ticket",
            "branch",
            "created_at",
            "updated_at",
            "lease_holder",
            "lease_expires_at",
            "lease_ttl_ms",
            "heartbeat_at"
        ),
        optional: cols!("repo_origin"),
    },
    KnownTable {
        name: "events",
        required: cols!("build", "seq", "ts", "actor", "type", "payload"),
        optional: cols!(),
    },
    KnownTable {
        name: "artifacts",
        required: cols!(
            "build",
            "kind",
            "revision",
            "blob_ref",
            "metadata",
            "created_at"
        ),
        optional: cols!(),
    },
    KnownTable {
        name: "repo_streams",
        required: cols!(
            "repo",
            "created_at",
            "updated_at",
            "lease_holder",
            "lease_expires_at",
            "lease_ttl_ms",
            "heartbeat_at"
        ),
        optional: cols!(),
    },
    KnownTable {
        name: "repo_events",
        required: cols!("repo", "seq", "ts", "actor", "type", "payload"),
        optional: cols!(),
    },
    KnownTable {
        name: "repo_artifacts",
        required: cols!(
            "repo",
            "kind",
            "revision",
            "blob_ref",
            "metadata",
            "created_at"
        ),
        optional: cols!(),
    },
    KnownTable {
        name: "sessions",
        required: cols!(
            "id",
            "repo",
            "operator",
            "title",
            "created_at",
            "updated_at"
        ),
        optional: cols!("creation_seq"),
    },
    KnownTable {
        name: "session_events",
        required: cols!("session", "seq", "ts", "actor", "type", "payload"),
        optional: cols!(),
    },
    KnownTable {
        name: "session_artifacts",
        required: cols!(
            "session",
            "kind",
            "revision",
            "blob_ref",
            "metadata",
            "created_at"
        ),
        optional: cols!(),
    },
    KnownTable {
        name: "streams",
        required: cols!(
            "id",
            "scope_kind",
            "build",
            "repo",
            "label",
            "format",
            "status",
            "outcome",
            "artifact_kind",
            "artifact_revision",
            "artifact_blob_ref",
            "created_at",
            "closed_at"
        ),
        optional: cols!("session", "creation_seq"),
    },
    KnownTable {
        name: "stream_chunks",
        required: cols!("stream", "seq", "ts", "parts"),
        optional: cols!(),
    },
    KnownTable {
        name: "ticket_assets",
        required: cols!(
            "repo",
            "ticket_id",
            "kind",
            "name",
            "revision",
            "layout",
            "manifest",
            "size",
            "removed",
            "created_at"
        ),
        optional: cols!(),
    },
];

/// Tables that come and go together (a family is all there or absent).
const FAMILIES: [(&str, &[&str]); 5] = [
    ("builds", &["builds", "events", "artifacts"]),
    (
        "repository journals",
        &["repo_streams", "repo_events", "repo_artifacts"],
    ),
    ("streams", &["streams", "stream_chunks"]),
    (
        "sessions",
        &["sessions", "session_events", "session_artifacts"],
    ),
    ("ticket assets", &["ticket_assets"]),
];

/// The local store's shape: its version name and the columns each table has.
#[derive(Debug, Clone)]
pub struct Shape {
    /// `L1` … `L6` (docs/autobuild-stores.md §1.2).
    pub version: &'static str,
    pub tables: BTreeMap<String, BTreeSet<String>>,
}

impl Shape {
    pub fn has_table(&self, table: &str) -> bool {
        self.tables.contains_key(table)
    }

    pub fn has_column(&self, table: &str, column: &str) -> bool {
        self.tables.get(table).is_some_and(|c| c.contains(column))
    }

    /// `tables: builds(slug, …), …` for messages.
    pub fn describe(&self) -> String {
        describe(&self.tables)
    }
}

fn describe(tables: &BTreeMap<String, BTreeSet<String>>) -> String {
    if tables.is_empty() {
        return "no tables".to_owned();
    }
    tables
        .iter()
        .map(|(t, c)| format!("{t}({})", c.iter().cloned().collect::<Vec<_>>().join(", ")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Reads the tables and columns of `conn` and names the version, or
/// refuses a shape the map does not know.
pub fn detect(conn: &rusqlite::Connection) -> anyhow::Result<Shape> {
    let mut tables: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let names: Vec<String> = conn
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name",
        )?
        .query_map([], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    for name in names {
        let columns: BTreeSet<String> = conn
            .prepare("SELECT name FROM pragma_table_info(?1)")?
            .query_map([&name], |row| row.get(0))?
            .collect::<Result<_, _>>()?;
        tables.insert(name, columns);
    }
    check(tables)
}

fn check(tables: BTreeMap<String, BTreeSet<String>>) -> anyhow::Result<Shape> {
    let found = || describe(&tables);
    if !["builds", "events", "artifacts"]
        .iter()
        .all(|t| tables.contains_key(*t))
    {
        bail!(
            "not an Autobuild local store: it lacks the builds, events and artifacts tables \
             (found {})",
            found()
        );
    }
    for (table, columns) in &tables {
        let Some(known) = KNOWN.iter().find(|k| k.name == table) else {
            bail!(
                "an Autobuild local store of a shape abstore does not know: table {table} is not \
                 one of Autobuild's local tables (found {}); nothing was read",
                found()
            );
        };
        if let Some(missing) = known.required.iter().find(|c| !columns.contains(**c)) {
            bail!(
                "an Autobuild local store of a shape abstore does not know: {table} lacks column \
                 {missing} (found {})",
                found()
            );
        }
        if let Some(unknown) = columns.iter().find(|c| {
            !known.required.contains(&c.as_str()) && !known.optional.contains(&c.as_str())
        }) {
            bail!(
                "an Autobuild local store of a shape abstore does not know: {table} has column \
                 {unknown}, which no known version has (found {})",
                found()
            );
        }
    }
    for (family, members) in FAMILIES {
        let present: Vec<&str> = members
            .iter()
            .copied()
            .filter(|t| tables.contains_key(*t))
            .collect();
        if !present.is_empty() && present.len() != members.len() {
            bail!(
                "an Autobuild local store of a shape abstore does not know: the {family} tables \
                 are incomplete ({} of {}; found {})",
                present.join(", "),
                members.join(", "),
                found()
            );
        }
    }
    let has = |t: &str| tables.contains_key(t);
    let col = |t: &str, c: &str| tables.get(t).is_some_and(|cs| cs.contains(c));
    let version = if has("ticket_assets") {
        "L6"
    } else if col("sessions", "creation_seq") && col("streams", "creation_seq") {
        "L5"
    } else if has("sessions") {
        "L4"
    } else if has("streams") {
        "L3b"
    } else if col("builds", "repo_origin") {
        "L3"
    } else if has("repo_streams") {
        "L2"
    } else {
        "L1"
    };
    Ok(Shape { version, tables })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(ddl: &str) -> anyhow::Result<Shape> {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch(ddl).unwrap();
        detect(&conn)
    }

    const L1: &str = "CREATE TABLE builds (slug TEXT PRIMARY KEY, repo TEXT NOT NULL, ticket TEXT, branch TEXT, created_at TEXT NOT NULL, updated_at TEXT NOT NULL, lease_holder TEXT, lease_expires_at TEXT, lease_ttl_ms INTEGER, heartbeat_at TEXT);
        CREATE TABLE events (build TEXT, seq INTEGER, ts TEXT, actor TEXT, type TEXT, payload TEXT);
        CREATE TABLE artifacts (build TEXT, kind TEXT, revision INTEGER, blob_ref TEXT, metadata TEXT, created_at TEXT);";

    #[test]
    fn versions_are_told_by_their_columns() {
        assert_eq!(shape(L1).unwrap().version, "L1");
        let l2 = format!(
            "{L1} CREATE TABLE repo_streams (repo TEXT, created_at TEXT, updated_at TEXT, lease_holder TEXT, lease_expires_at TEXT, lease_ttl_ms INTEGER, heartbeat_at TEXT);
             CREATE TABLE repo_events (repo TEXT, seq INTEGER, ts TEXT, actor TEXT, type TEXT, payload TEXT);
             CREATE TABLE repo_artifacts (repo TEXT, kind TEXT, revision INTEGER, blob_ref TEXT, metadata TEXT, created_at TEXT);"
        );
        assert_eq!(shape(&l2).unwrap().version, "L2");
        let l3 = format!("{l2} ALTER TABLE builds ADD COLUMN repo_origin TEXT;");
        assert_eq!(shape(&l3).unwrap().version, "L3");
    }

    #[test]
    fn unknown_shapes_are_refused_naming_what_was_found() {
        let err = shape("CREATE TABLE notes (id TEXT);")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("lacks the builds, events and artifacts"),
            "{err}"
        );
        assert!(err.contains("notes(id)"), "{err}");
        let err = shape(&format!("{L1} CREATE TABLE extra (x TEXT);"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("table extra"), "{err}");
        let err = shape(&format!("{L1} ALTER TABLE events ADD COLUMN colour TEXT;"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("events has column colour"), "{err}");
        let err = shape(&format!(
            "{L1} CREATE TABLE repo_events (repo TEXT, seq INTEGER, ts TEXT, actor TEXT, type TEXT, payload TEXT);"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("repository journals tables are incomplete"),
            "{err}"
        );
    }
}
