//! Reads an Autobuild local store (docs/autobuild-stores.md §1, §2) and
//! yields abstore's archive records in archive order (§4.1's mapping).
//!
//! Two passes. The plan pass decides what can be imported: which
//! resources (a resource whose events cannot be carried exactly is left
//! out whole, with everything it owns, because abstore's sequences have no
//! gaps), which streams (with their chunks), and the per-scope counters
//! Autobuild never had (§4.3 item 4). The emit pass reads the tables again
//! in key order and sends rows; only artifacts and ticket assets are judged
//! there, one by one, since nothing before them depends on them. Memory
//! holds ids, stream rows (not chunks) and the blob verdicts, never a
//! table's data.
//!
//! Every row is someone else's (docs/security.md, "Files we import"): each
//! column is read as whatever SQLite holds there (`cell_text`,
//! `cell_int`), so a BLOB where text belongs or text in an integer column
//! is that row's problem, reported, not the import's end; and every row
//! sent passes its write route's checks (`archive::checks`) and, for
//! events, the catalogs of a client abstore serves.
//!
//! - `local/plan.rs`: the plan pass; `local/emit.rs`: the emit pass;
//!   `local/rows.rs`: building archive rows from source rows (both passes).
//! - Here: opening the store (a private copy), the reader's state and
//!   helpers.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use rusqlite::types::ValueRef;
use tokio::sync::mpsc;

use super::catalogs::EventCatalogs;
use super::report::Report;
use super::schema::{self, Shape};
use super::source_blobs::SourceBlobs;
use crate::archive::export::Item;
use crate::archive::format::{MAX_BLOB_BYTES, Val};
use crate::archive::source_files::{Hashed, Links};
use crate::archive::temp::{self, TempDir};
use crate::protocol::ident;
use crate::protocol::time::{format_iso, parse_iso};
use crate::store::AssetEntry;

mod emit;
mod plan;
mod rows;

/// The only stream format Autobuild writes and abstore serves.
const STREAM_FORMAT: &str = "ai-ui-message-stream/v1";

/// Archive table indices (`format::TABLES`).
const RESOURCE: usize = 0;
const EVENT: usize = 1;
const ARTIFACT_HEAD: usize = 2;
const ARTIFACT: usize = 3;
const STREAM: usize = 4;
const STREAM_CHUNK: usize = 5;
const TICKET_ASSET_HEAD: usize = 6;
const TICKET_ASSET: usize = 7;

/// The resource families, in archive key order (`build` < `repo` < `session`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    Build,
    Repo,
    Session,
}

impl Family {
    const ALL: [Family; 3] = [Family::Build, Family::Repo, Family::Session];

    fn kind(self) -> &'static str {
        match self {
            Family::Build => "build",
            Family::Repo => "repo",
            Family::Session => "session",
        }
    }

    fn record_table(self) -> &'static str {
        match self {
            Family::Build => "builds",
            Family::Repo => "repo_streams",
            Family::Session => "sessions",
        }
    }

    fn events_table(self) -> &'static str {
        match self {
            Family::Build => "events",
            Family::Repo => "repo_events",
            Family::Session => "session_events",
        }
    }

    fn artifacts_table(self) -> &'static str {
        match self {
            Family::Build => "artifacts",
            Family::Repo => "repo_artifacts",
            Family::Session => "session_artifacts",
        }
    }

    /// The owner column of the family's events and artifacts, which is
    /// also the envelope's resource member.
    fn owner(self) -> &'static str {
        self.kind()
    }

    fn catalog(self) -> abstore_catalog::Family {
        match self {
            Family::Build => abstore_catalog::Family::Build,
            Family::Repo => abstore_catalog::Family::Repository,
            Family::Session => abstore_catalog::Family::Session,
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Family::Build => "build",
            Family::Repo => "repository",
            Family::Session => "session",
        }
    }
}

type Owner = (Family, String);

/// What a blob file turned out to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BlobState {
    Ok(u64),
    Missing,
    Corrupt,
    /// The reference is not 64 lowercase hex digits.
    Malformed,
    /// Not a regular file (a FIFO, a device, a link…): never read.
    Special(&'static str),
    /// Larger than an archive carries, or than its entry says: not read.
    TooLarge(u64),
}

/// A `streams` row, kept between the passes.
struct StreamRow {
    id: String,
    scope: Owner,
    label: String,
    status: String,
    created_at: i64,
    creation_tiebreak: i64,
    last_seq: i64,
    closed_at: Option<i64>,
    outcome: Option<String>,
    artifact_kind: Option<String>,
    artifact_revision: Option<i64>,
    artifact_blob_ref: Option<String>,
    created_order: i64,
    closed_order: Option<i64>,
}

/// One creation or close inside a scope, to be numbered (§4.3 item 4).
struct Ordered {
    at: i64,
    /// 0 for a creation, 1 for a close: a stream created and closed in the
    /// same millisecond was created first.
    phase: u8,
    tiebreak: (i64, String),
    target: Target,
}

enum Target {
    StreamCreated(usize),
    StreamClosed(usize),
    SessionCreated(String),
}

/// The local store, opened on a private copy of its database.
pub struct LocalStore {
    conn: rusqlite::Connection,
    shape: Shape,
    blobs: SourceBlobs,
    /// What the source's opening already found, for the report.
    pub seed: Report,
    /// Records the source's opening made itself (PostgreSQL's tickets), in
    /// archive order, all after the ticket assets.
    pub extra: Vec<(usize, Vec<Val>)>,
    /// Deleted when dropped.
    _copy: TempDir,
}

impl LocalStore {
    /// Opens the store at `path`: the state directory (`autobuild.sqlite`
    /// and `blobs/` inside) or the database file itself (blobs beside it).
    /// The database is copied with its `-wal` and `-shm` sidecars first
    /// (§1.0), into a private directory under `temp_base`: the copy is one
    /// consistent state even if Autobuild writes meanwhile, and the original
    /// is never opened by SQLite, so never changed. Each file must be a
    /// regular file (a sidecar not even a link), copied as long as it was
    /// when opened: a FIFO or a device is refused, not waited on.
    pub fn open(path: &Path, temp_base: &Path) -> anyhow::Result<LocalStore> {
        let (db, root) = if path.is_dir() {
            (path.join("autobuild.sqlite"), path.to_path_buf())
        } else {
            let root = path
                .parent()
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
            (path.to_path_buf(), root)
        };
        let copy = TempDir::new_in(temp_base, &format!("{}local-", super::TEMP_PREFIX))?;
        let target = copy.path().join("autobuild.sqlite");
        let refused = |err: anyhow::Error| {
            err.context(format!(
                "{} cannot be read as an Autobuild local store; nothing was read",
                path.display()
            ))
        };
        if !temp::copy(&db, &target, Links::Follow).map_err(refused)? {
            bail!(
                "{} is not an Autobuild local store: {} does not exist",
                path.display(),
                db.display()
            );
        }
        for suffix in ["-wal", "-shm"] {
            let mut side = db.clone().into_os_string();
            side.push(suffix);
            let mut to = target.clone().into_os_string();
            to.push(suffix);
            temp::copy(Path::new(&side), Path::new(&to), Links::Refuse).map_err(refused)?;
        }
        let conn = rusqlite::Connection::open_with_flags(
            &target,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .with_context(|| format!("opening the copy of {}", db.display()))?;
        let shape = schema::detect(&conn)
            .with_context(|| format!("{} was refused; nothing was read", db.display()))?;
        Ok(LocalStore {
            conn,
            shape,
            blobs: SourceBlobs::Sharded(root.join("blobs")),
            seed: Report::default(),
            extra: Vec::new(),
            _copy: copy,
        })
    }

    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// A store whose database is already a local-store-shaped copy (the
    /// PostgreSQL source's transcoding), with its blobs elsewhere.
    pub fn from_parts(
        conn: rusqlite::Connection,
        shape: Shape,
        blobs: SourceBlobs,
        copy: TempDir,
    ) -> LocalStore {
        LocalStore {
            conn,
            shape,
            blobs,
            seed: Report::default(),
            extra: Vec::new(),
            _copy: copy,
        }
    }

    pub fn blobs(&self) -> &SourceBlobs {
        &self.blobs
    }

    /// Reads everything, sending archive items in archive order and noting
    /// in `report` what cannot be imported and why.
    pub fn read(
        &self,
        catalogs: &EventCatalogs,
        extra: Vec<(usize, Vec<Val>)>,
        tx: &mpsc::Sender<Item>,
        report: &mut Report,
    ) -> anyhow::Result<()> {
        if report.version.is_empty() {
            report.version = format!("local store version {}", self.shape.version);
        }
        let mut reader = Reader {
            store: self,
            catalogs,
            report,
            blobs: HashMap::new(),
            owners: HashMap::new(),
            streams: Vec::new(),
            referenced: BTreeSet::new(),
            session_orders: HashMap::new(),
            skipped: HashSet::new(),
            extra,
        };
        reader.plan()?;
        reader.emit(tx)?;
        reader.count_blob_files()?;
        Ok(())
    }
}

/// What is known about an imported resource.
#[derive(Default)]
struct OwnerInfo {
    last_seq: i64,
    stream_counter: i64,
}

struct Reader<'a> {
    store: &'a LocalStore,
    catalogs: &'a EventCatalogs,
    report: &'a mut Report,
    blobs: HashMap<String, BlobState>,
    /// The resources that will be imported.
    owners: HashMap<Owner, OwnerInfo>,
    /// The streams that will be imported, by id.
    streams: Vec<StreamRow>,
    referenced: BTreeSet<String>,
    session_orders: HashMap<String, i64>,
    /// Resources left out, whose rows are then skipped without a word more.
    skipped: HashSet<Owner>,
    /// [`LocalStore::extra`], sent before the blobs.
    extra: Vec<(usize, Vec<Val>)>,
}

/// A text column of a source row, whatever SQLite holds there: `None` for
/// NULL, the reason for anything but UTF-8 text (a BLOB where a slug
/// belongs is that row's problem, not the import's).
fn cell_text(row: &rusqlite::Row<'_>, i: usize, column: &str) -> Result<Option<String>, String> {
    match row.get_ref(i).map_err(|err| err.to_string())? {
        ValueRef::Null => Ok(None),
        ValueRef::Text(bytes) => String::from_utf8(bytes.to_vec())
            .map(Some)
            .map_err(|_| format!("its {column} is not UTF-8")),
        ValueRef::Integer(n) => Err(format!("its {column} is the number {n}, not text")),
        ValueRef::Real(f) => Err(format!("its {column} is the number {f}, not text")),
        ValueRef::Blob(bytes) => Err(format!(
            "its {column} is a BLOB ({:?}), not text",
            short(&String::from_utf8_lossy(bytes))
        )),
    }
}

/// A required text column ([`cell_text`]).
fn required_text(row: &rusqlite::Row<'_>, i: usize, column: &str) -> Result<String, String> {
    cell_text(row, i, column)?.ok_or_else(|| format!("its {column} is NULL"))
}

/// An integer column of a source row, whatever SQLite holds there (text in
/// an integer column, a REAL from an overflowing sum).
fn cell_int(row: &rusqlite::Row<'_>, i: usize, column: &str) -> Result<Option<i64>, String> {
    match row.get_ref(i).map_err(|err| err.to_string())? {
        ValueRef::Null => Ok(None),
        ValueRef::Integer(n) => Ok(Some(n)),
        ValueRef::Real(f) => Err(format!("its {column} is the number {f}, not an integer")),
        ValueRef::Text(bytes) => Err(format!(
            "its {column} is the text {:?}, not an integer",
            short(&String::from_utf8_lossy(bytes))
        )),
        ValueRef::Blob(bytes) => Err(format!(
            "its {column} is a BLOB of {} bytes, not an integer",
            bytes.len()
        )),
    }
}

/// A required integer column ([`cell_int`]).
fn required_int(row: &rusqlite::Row<'_>, i: usize, column: &str) -> Result<i64, String> {
    cell_int(row, i, column)?.ok_or_else(|| format!("its {column} is NULL"))
}

fn time(value: Option<&str>) -> Result<Option<i64>, String> {
    match value {
        None => Ok(None),
        Some(t) => parse_iso(t)
            .map(Some)
            .ok_or_else(|| format!("time {:?} is not ISO-8601", short(t))),
    }
}

fn required_time(value: Option<&str>, column: &str) -> Result<i64, String> {
    time(value)?.ok_or_else(|| format!("{column} is NULL"))
}

/// `Val::Text` or `Val::Null`.
fn opt(value: Option<String>) -> Val {
    value.map_or(Val::Null, Val::Text)
}

fn opt_int(value: Option<i64>) -> Val {
    value.map_or(Val::Null, Val::Int)
}

fn short(id: &str) -> String {
    ident::shown(id)
}

impl Reader<'_> {
    fn conn(&self) -> &rusqlite::Connection {
        &self.store.conn
    }

    fn has(&self, table: &str) -> bool {
        self.store.shape.has_table(table)
    }

    fn families(&self) -> Vec<Family> {
        Family::ALL
            .into_iter()
            .filter(|f| self.has(f.record_table()))
            .collect()
    }

    /// What the blob at `address` is; `promised` is the size its row says it
    /// has (a manifest entry's), and no more than that is read.
    fn blob(&mut self, address: &str, promised: Option<u64>) -> anyhow::Result<BlobState> {
        if let Some(state) = self.blobs.get(address) {
            return Ok(*state);
        }
        if address.len() != 64
            || !address
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            self.blobs.insert(address.to_owned(), BlobState::Malformed);
            return Ok(BlobState::Malformed);
        }
        let max = promised.unwrap_or(MAX_BLOB_BYTES);
        let state = match self.store.blobs.hash(address, max)? {
            Hashed::Absent => BlobState::Missing,
            Hashed::Special(what) => BlobState::Special(what),
            Hashed::TooLarge(size) => BlobState::TooLarge(size),
            Hashed::Ok(digest, size) if digest == address => BlobState::Ok(size),
            Hashed::Ok(..) => BlobState::Corrupt,
        };
        // Too large for one row's promise is not too large for another's.
        if !matches!(state, BlobState::TooLarge(_)) || max >= MAX_BLOB_BYTES {
            self.blobs.insert(address.to_owned(), state);
        }
        Ok(state)
    }

    /// Its size, or why a blob cannot be carried: the kind of problem (for
    /// the report) and a detail for its example (may be empty).
    fn blob_verdict(
        &mut self,
        address: &str,
        promised: Option<u64>,
    ) -> anyhow::Result<Result<u64, (&'static str, String)>> {
        let none = String::new;
        Ok(match self.blob(address, promised)? {
            BlobState::Ok(size) => Ok(size),
            BlobState::Missing => Err(("whose blob is missing", none())),
            BlobState::Corrupt => Err(("whose blob's bytes do not hash to its name", none())),
            BlobState::Malformed => {
                Err(("whose blob reference is not a SHA-256 hex digest", none()))
            }
            BlobState::Special(what) => Err((
                "whose blob is not a regular file (not read)",
                format!("it is {what}"),
            )),
            BlobState::TooLarge(size) => match promised {
                Some(promised) if size > promised => Err((
                    "whose blob is larger than its manifest entry says (not read)",
                    format!("{size} bytes, the entry says {promised}"),
                )),
                _ => Err((
                    "whose blob is larger than an archive carries (not read)",
                    format!("{size} bytes, over {MAX_BLOB_BYTES}"),
                )),
            },
        })
    }
}
