//! Reads an Autobuild local store (docs/autobuild-stores.md §1, §2) and
//! yields abstore's archive records in archive order (§4.1's mapping).
//!
//! Two passes. The plan pass decides what can be imported: which
//! resources (a resource whose events cannot be carried exactly is left
//! out whole, with everything it owns, because abstore's sequences have no
//! gaps), which streams, and the per-scope counters Autobuild never had
//! (§4.3 item 4). The emit pass reads the tables again in key order and
//! sends rows; only artifacts and ticket assets are judged there, one by
//! one, since nothing before them depends on them. Memory holds ids,
//! stream rows (not chunks) and the blob verdicts, never a table's data.
//!
//! - `local/plan.rs`: the plan pass; `local/emit.rs`: the emit pass.
//! - Here: opening the store (a private copy), the reader's state and
//!   helpers, and where the blobs are ([`SourceBlobs`]).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::Read as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use sha2::{Digest as _, Sha256};
use tokio::sync::mpsc;

use super::report::Report;
use super::schema::{self, Shape};
use crate::archive::export::Item;
use crate::archive::format::Val;
use crate::protocol::ident;
use crate::protocol::time::{format_iso, parse_iso};
use crate::store::AssetEntry;

mod emit;
mod plan;

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
    /// (§1.0): the copy is one consistent state even if Autobuild writes
    /// meanwhile, and the original is never opened, so never changed.
    pub fn open(path: &Path) -> anyhow::Result<LocalStore> {
        let (db, root) = if path.is_dir() {
            (path.join("autobuild.sqlite"), path.to_path_buf())
        } else {
            let root = path
                .parent()
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
            (path.to_path_buf(), root)
        };
        if !db.is_file() {
            bail!(
                "{} is not an Autobuild local store: {} does not exist",
                path.display(),
                db.display()
            );
        }
        let copy = TempDir::new("abstore-autobuild")?;
        let target = copy.path.join("autobuild.sqlite");
        std::fs::copy(&db, &target).with_context(|| format!("copying {}", db.display()))?;
        for suffix in ["-wal", "-shm"] {
            let mut side = db.clone().into_os_string();
            side.push(suffix);
            let side = PathBuf::from(side);
            if side.exists() {
                let mut to = target.clone().into_os_string();
                to.push(suffix);
                std::fs::copy(&side, &to).with_context(|| format!("copying {}", side.display()))?;
            }
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
        catalog: Option<&(String, abstore_catalog::Catalogs)>,
        extra: Vec<(usize, Vec<Val>)>,
        tx: &mpsc::Sender<Item>,
        report: &mut Report,
    ) -> anyhow::Result<()> {
        if report.version.is_empty() {
            report.version = format!("local store version {}", self.shape.version);
        }
        let mut reader = Reader {
            store: self,
            catalog,
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
    catalog: Option<&'a (String, abstore_catalog::Catalogs)>,
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

fn text(row: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<Option<String>> {
    row.get(i)
}

fn time(value: Option<&str>) -> Result<Option<i64>, String> {
    match value {
        None => Ok(None),
        Some(t) => parse_iso(t)
            .map(Some)
            .ok_or_else(|| format!("time {t:?} is not ISO-8601")),
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

fn fit(what: &str, value: &str) -> Result<(), String> {
    match ident::check(value) {
        Ok(()) => Ok(()),
        Err(ident::Unfit::Nul) => Err(format!("{what} contains NUL")),
        Err(ident::Unfit::TooLong { bytes }) => Err(format!(
            "{what} is {bytes} bytes (abstore's limit is {})",
            ident::MAX_ID_BYTES
        )),
    }
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

    fn blob(&mut self, address: &str) -> anyhow::Result<BlobState> {
        if let Some(state) = self.blobs.get(address) {
            return Ok(*state);
        }
        let state = if address.len() != 64
            || !address
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            BlobState::Malformed
        } else {
            match self.store.blobs.hash(address)? {
                None => BlobState::Missing,
                Some((digest, size)) if digest == address => BlobState::Ok(size),
                Some(_) => BlobState::Corrupt,
            }
        };
        self.blobs.insert(address.to_owned(), state);
        Ok(state)
    }

    /// Why a blob cannot be carried, or its size.
    fn blob_verdict(&mut self, address: &str) -> anyhow::Result<Result<u64, &'static str>> {
        Ok(match self.blob(address)? {
            BlobState::Ok(size) => Ok(size),
            BlobState::Missing => Err("whose blob is missing"),
            BlobState::Corrupt => Err("whose blob's bytes do not hash to its name"),
            BlobState::Malformed => Err("whose blob reference is not a SHA-256 hex digest"),
        })
    }
}

/// Where a source's blobs are.
pub enum SourceBlobs {
    /// Autobuild's local layout: `<dir>/<first two hex digits>/<sha256>`.
    Sharded(PathBuf),
    /// Autobuild's PostgreSQL deployments: `<prefix>/<sha256>` in an object
    /// store (or a directory), read from a blocking thread through `runtime`.
    Flat {
        store: std::sync::Arc<dyn object_store::ObjectStore>,
        runtime: tokio::runtime::Handle,
    },
}

impl SourceBlobs {
    /// The SHA-256 (hex) and size of a blob, `None` when absent.
    fn hash(&self, address: &str) -> anyhow::Result<Option<(String, u64)>> {
        let mut digest = Sha256::new();
        let mut size = 0u64;
        match self {
            SourceBlobs::Sharded(dir) => {
                let path = dir.join(&address[..2]).join(address);
                let mut file = match std::fs::File::open(&path) {
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                    Err(err) => {
                        return Err(err).with_context(|| format!("opening {}", path.display()));
                    }
                    Ok(file) => file,
                };
                let mut buf = vec![0; 1 << 16];
                loop {
                    let n = file
                        .read(&mut buf)
                        .with_context(|| format!("reading {}", path.display()))?;
                    if n == 0 {
                        break;
                    }
                    digest.update(&buf[..n]);
                    size += n as u64;
                }
            }
            SourceBlobs::Flat { store, runtime } => {
                let Some(bytes) = runtime.block_on(flat_get(store.as_ref(), address))? else {
                    return Ok(None);
                };
                digest.update(&bytes);
                size = bytes.len() as u64;
            }
        }
        Ok(Some((hex::encode(digest.finalize()), size)))
    }
}

/// A flat-layout blob's bytes, `None` when absent.
pub async fn flat_get(
    store: &dyn object_store::ObjectStore,
    address: &str,
) -> anyhow::Result<Option<bytes::Bytes>> {
    use object_store::ObjectStoreExt as _;
    match store.get(&object_store::path::Path::from(address)).await {
        Ok(found) => Ok(Some(found.bytes().await?)),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(err) => Err(anyhow::Error::new(err).context(format!("reading source blob {address}"))),
    }
}

/// A directory under the system's temporary directory, removed with its
/// contents when dropped.
pub struct TempDir {
    pub path: PathBuf,
}

impl TempDir {
    pub fn new(prefix: &str) -> anyhow::Result<TempDir> {
        let path = std::env::temp_dir().join(format!("{prefix}-{:016x}", rand::random::<u64>()));
        std::fs::create_dir(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(TempDir { path })
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.path).ok();
    }
}
