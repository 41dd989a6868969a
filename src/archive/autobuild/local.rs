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

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::Read as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow, bail};
use rusqlite::OptionalExtension as _;
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};
use tokio::sync::mpsc;

use super::report::Report;
use super::schema::{self, Shape};
use crate::archive::export::Item;
use crate::archive::format::Val;
use crate::protocol::ident;
use crate::protocol::time::{format_iso, parse_iso};
use crate::store::AssetEntry;

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

    // ---- the plan pass ----

    fn plan(&mut self) -> anyhow::Result<()> {
        for family in self.families() {
            match family {
                Family::Build => self.plan_builds()?,
                Family::Repo => self.plan_repos()?,
                Family::Session => self.plan_sessions()?,
            }
            self.plan_events(family)?;
        }
        if self.has("streams") {
            self.plan_streams()?;
        }
        self.number_children()?;
        Ok(())
    }

    fn note_lease(&mut self, owner: &Owner, holder: Option<&str>, expires: Option<i64>) {
        if let (Some(holder), Some(expires)) = (holder, expires)
            && expires > crate::archive::export::now_ms()
        {
            self.report.note(
                "held leases (copied: they block other holders until they expire)",
                || {
                    format!(
                        "{} {} held by {} until {}",
                        owner.0.noun(),
                        short(&owner.1),
                        short(holder),
                        format_iso(expires)
                    )
                },
            );
        }
    }

    fn plan_builds(&mut self) -> anyhow::Result<()> {
        let mut statement = self.conn().prepare(
            "SELECT slug, created_at, updated_at, lease_holder, lease_expires_at, ticket FROM builds",
        )?;
        let mut rows = statement.query([])?;
        let mut found = Vec::new();
        while let Some(row) = rows.next()? {
            let slug: String = row.get(0)?;
            let (created, updated, holder, expires, ticket) = (
                text(row, 1)?,
                text(row, 2)?,
                text(row, 3)?,
                text(row, 4)?,
                text(row, 5)?,
            );
            let verdict = (|| {
                fit("the slug", &slug)?;
                required_time(created.as_deref(), "created_at")?;
                required_time(updated.as_deref(), "updated_at")?;
                if let Some(holder) = &holder {
                    fit("the lease holder", holder)?;
                }
                let expires = time(expires.as_deref())?;
                if let Some(ticket) = &ticket {
                    serde_json::from_str::<Value>(ticket)
                        .map_err(|err| format!("its ticket is not JSON ({err})"))?;
                }
                Ok::<_, String>(expires)
            })();
            found.push((slug, holder, verdict));
        }
        drop(rows);
        drop(statement);
        for (slug, holder, verdict) in found {
            self.report.read("builds", 1);
            let owner = (Family::Build, slug);
            match verdict {
                Ok(expires) => {
                    self.note_lease(&owner, holder.as_deref(), expires);
                    self.owners.insert(owner, OwnerInfo::default());
                }
                Err(why) => self.skip_owner(&owner, &why),
            }
        }
        Ok(())
    }

    fn plan_repos(&mut self) -> anyhow::Result<()> {
        let mut statement = self.conn().prepare(
            "SELECT repo, created_at, updated_at, lease_holder, lease_expires_at FROM repo_streams",
        )?;
        let mut rows = statement.query([])?;
        let mut found = Vec::new();
        while let Some(row) = rows.next()? {
            let repo: String = row.get(0)?;
            let (created, updated, holder, expires) =
                (text(row, 1)?, text(row, 2)?, text(row, 3)?, text(row, 4)?);
            let verdict = (|| {
                fit("the repository id", &repo)?;
                required_time(created.as_deref(), "created_at")?;
                required_time(updated.as_deref(), "updated_at")?;
                if let Some(holder) = &holder {
                    fit("the lease holder", holder)?;
                }
                time(expires.as_deref())
            })();
            found.push((repo, holder, verdict));
        }
        drop(rows);
        drop(statement);
        for (repo, holder, verdict) in found {
            self.report.read("repo_streams", 1);
            self.report.distinct_repo(&repo);
            let owner = (Family::Repo, repo);
            match verdict {
                Ok(expires) => {
                    self.note_lease(&owner, holder.as_deref(), expires);
                    self.owners.insert(owner, OwnerInfo::default());
                }
                Err(why) => self.skip_owner(&owner, &why),
            }
        }
        Ok(())
    }

    fn plan_sessions(&mut self) -> anyhow::Result<()> {
        let mut statement = self
            .conn()
            .prepare("SELECT id, repo, operator, created_at, updated_at FROM sessions")?;
        let mut rows = statement.query([])?;
        let mut found = Vec::new();
        while let Some(row) = rows.next()? {
            let id: String = row.get(0)?;
            let repo: String = row.get(1)?;
            let operator: String = row.get(2)?;
            let (created, updated) = (text(row, 3)?, text(row, 4)?);
            found.push((id, repo, operator, created, updated));
        }
        drop(rows);
        drop(statement);
        for (id, repo, operator, created, updated) in found {
            self.report.read("sessions", 1);
            let owner = (Family::Session, id);
            let verdict = (|| {
                fit("the session id", &owner.1)?;
                if operator.trim().is_empty() {
                    return Err("its operator is blank".to_owned());
                }
                required_time(created.as_deref(), "created_at")?;
                required_time(updated.as_deref(), "updated_at")?;
                Ok(())
            })();
            if let Err(why) = verdict {
                self.skip_owner(&owner, &why);
            } else if !self.owners.contains_key(&(Family::Repo, repo.clone())) {
                self.skipped.insert(owner.clone());
                self.report.problem(
                    "sessions without an imported repository record (with their events, artifacts and streams)",
                    || format!("session {} of repository {}", short(&owner.1), short(&repo)),
                );
            } else {
                self.owners.insert(owner, OwnerInfo::default());
            }
        }
        Ok(())
    }

    fn skip_owner(&mut self, owner: &Owner, why: &str) {
        self.skipped.insert(owner.clone());
        let what = format!(
            "{}s that cannot be carried (with their events, artifacts and streams)",
            owner.0.noun()
        );
        self.report
            .problem(&what, || format!("{} ({why})", short(&owner.1)));
    }

    /// Checks every event of the family: an event that cannot be carried
    /// exactly takes its resource out (a gap would renumber the rest).
    fn plan_events(&mut self, family: Family) -> anyhow::Result<()> {
        let sql = format!(
            "SELECT {owner}, seq, ts, actor, type, payload FROM {table} \
             ORDER BY {owner} COLLATE BINARY, seq",
            owner = family.owner(),
            table = family.events_table()
        );
        let store = self.store;
        let mut statement = store.conn.prepare(&sql)?;
        let mut rows = statement.query([])?;
        let mut current: Option<String> = None;
        let mut expected = 1;
        let mut bad: Vec<(String, String)> = Vec::new();
        let mut unowned: Vec<String> = Vec::new();
        let mut last: HashMap<String, i64> = HashMap::new();
        let catalog = self.catalog;
        while let Some(row) = rows.next()? {
            let id: String = row.get(0)?;
            let seq: i64 = row.get(1)?;
            if current.as_deref() != Some(id.as_str()) {
                current = Some(id.clone());
                expected = 1;
                if !self.owners.contains_key(&(family, id.clone())) {
                    unowned.push(id.clone());
                }
            }
            self.report.read(family.events_table(), 1);
            let owned = unowned.last() != Some(&id);
            if !owned || bad.last().is_some_and(|(b, _)| *b == id) {
                continue;
            }
            let (ts, actor, ty, payload) =
                (text(row, 2)?, text(row, 3)?, text(row, 4)?, text(row, 5)?);
            let verdict = (|| {
                if seq != expected {
                    return Err(format!("seq {seq} where {expected} was due"));
                }
                let ts = ts.ok_or("an event's ts is NULL")?;
                let ms =
                    parse_iso(&ts).ok_or_else(|| format!("event ts {ts:?} is not ISO-8601"))?;
                let ty = ty.ok_or("an event's type is NULL")?;
                let actor_text = actor.ok_or("an event's actor is NULL")?;
                let payload_text = payload.ok_or("an event's payload is NULL")?;
                let parse = |what: &str, text: &str| {
                    serde_json::from_str::<Value>(text).map_err(|err| {
                        format!("event {seq}'s {what} is JSON abstore cannot read ({err})")
                    })
                };
                let actor = parse("actor", &actor_text)?;
                let payload = parse("payload", &payload_text)?;
                Ok((ts, ms, ty, actor_text, actor, payload_text, payload))
            })();
            match verdict {
                Err(why) => bad.push((id, why)),
                Ok((ts, ms, ty, actor_text, actor, payload_text, payload)) => {
                    expected += 1;
                    last.insert(id.clone(), seq);
                    if format_iso(ms) != ts {
                        self.report.note(
                            "event times not in toISOString's spelling (kept as stored)",
                            || format!("{} {} seq {seq}: {ts}", family.noun(), short(&id)),
                        );
                    }
                    let (actor_again, payload_again) = (actor.to_string(), payload.to_string());
                    if actor_again != actor_text || payload_again != payload_text {
                        self.report.note(
                            "events whose JSON a parse and re-serialisation would change (kept byte for byte)",
                            || format!("{} {} seq {seq}", family.noun(), short(&id)),
                        );
                    }
                    if let Some((identity, catalogs)) = catalog
                        && let Err(err) = catalogs.validate(family.catalog(), &actor, &ty, &payload)
                    {
                        let what = format!(
                            "events abstore's catalog for {identity} would refuse (imported as stored)"
                        );
                        self.report.note(&what, || {
                            format!(
                                "{} {} seq {seq} {ty}: {}",
                                family.noun(),
                                short(&id),
                                err.message
                            )
                        });
                    }
                }
            }
        }
        drop(rows);
        drop(statement);
        for id in unowned {
            if !self.skipped.contains(&(family, id.clone())) {
                let what = format!("{} events without an imported record", family.noun());
                self.report.problem(&what, || short(&id));
            }
        }
        for (id, why) in bad {
            let owner = (family, id);
            self.owners.remove(&owner);
            self.skip_owner(&owner, &why);
        }
        for (id, seq) in last {
            if let Some(info) = self.owners.get_mut(&(family, id)) {
                info.last_seq = seq;
            }
        }
        Ok(())
    }

    fn plan_streams(&mut self) -> anyhow::Result<()> {
        let has_session = self.store.shape.has_column("streams", "session");
        let tiebreak = if self.store.shape.has_column("streams", "creation_seq") {
            "creation_seq"
        } else {
            "rowid"
        };
        let sql = format!(
            "SELECT id, scope_kind, build, repo, {session}, label, format, status, outcome, \
             artifact_kind, artifact_revision, artifact_blob_ref, created_at, closed_at, {tiebreak} \
             FROM streams ORDER BY id COLLATE BINARY",
            session = if has_session { "session" } else { "NULL" },
        );
        let mut chunks: HashMap<String, (i64, i64)> = HashMap::new();
        {
            let mut statement = self.conn().prepare(
                "SELECT stream, COUNT(*), MAX(seq), MIN(seq) FROM stream_chunks GROUP BY stream",
            )?;
            let mut rows = statement.query([])?;
            while let Some(row) = rows.next()? {
                let (count, max, min): (i64, i64, i64) = (row.get(1)?, row.get(2)?, row.get(3)?);
                chunks.insert(row.get(0)?, (if min == 1 { count } else { -1 }, max));
            }
        }
        let mut raw = Vec::new();
        {
            let mut statement = self.conn().prepare(&sql)?;
            let mut rows = statement.query([])?;
            while let Some(row) = rows.next()? {
                let values: Vec<Option<String>> = (0..10)
                    .map(|i| text(row, i))
                    .collect::<rusqlite::Result<_>>()?;
                let revision: Option<i64> = row.get(10)?;
                let blob_ref = text(row, 11)?;
                let created = text(row, 12)?;
                let closed = text(row, 13)?;
                let tie: Option<i64> = row.get(14)?;
                raw.push((
                    values,
                    revision,
                    blob_ref,
                    created,
                    closed,
                    tie.unwrap_or(0),
                ));
            }
        }
        for (values, revision, blob_ref, created, closed, tie) in raw {
            self.report.read("streams", 1);
            let [
                id,
                scope_kind,
                build,
                repo,
                session,
                label,
                format,
                status,
                outcome,
                artifact_kind,
            ] = <[Option<String>; 10]>::try_from(values).map_err(|_| anyhow!("stream columns"))?;
            let id = id.unwrap_or_default();
            let verdict: Result<StreamRow, (&'static str, String)> = (|| {
                let bad = |why: String| ("streams that cannot be carried (with their chunks)", why);
                fit("the stream id", &id).map_err(bad)?;
                let format = format.unwrap_or_default();
                if format != STREAM_FORMAT {
                    return Err((
                        "streams of a format abstore does not serve (with their chunks)",
                        format!("format {format:?}"),
                    ));
                }
                let (family, scope_id) = match (scope_kind.as_deref(), build, repo, session) {
                    (Some("build"), Some(b), None, None) => (Family::Build, b),
                    (Some("repo"), None, Some(r), None) => (Family::Repo, r),
                    (Some("session"), None, None, Some(s)) => (Family::Session, s),
                    (kind, ..) => {
                        return Err(bad(format!(
                            "scope kind {kind:?} does not match its one scope column"
                        )));
                    }
                };
                let scope = (family, scope_id);
                if !self.owners.contains_key(&scope) {
                    return Err((
                        "streams whose scope is not imported (with their chunks)",
                        format!("of {} {}", family.noun(), short(&scope.1)),
                    ));
                }
                let label = label.unwrap_or_default();
                fit("the label", &label).map_err(bad)?;
                let status = status.unwrap_or_default();
                let created_at = required_time(created.as_deref(), "created_at").map_err(bad)?;
                let (count, max) = chunks.get(&id).copied().unwrap_or((0, 0));
                if count != max {
                    return Err(bad(format!("its chunks are not numbered 1 to {max}")));
                }
                let mut row = StreamRow {
                    id: id.clone(),
                    scope,
                    label,
                    status: status.clone(),
                    created_at,
                    creation_tiebreak: tie,
                    last_seq: max,
                    closed_at: None,
                    outcome: None,
                    artifact_kind: None,
                    artifact_revision: None,
                    artifact_blob_ref: None,
                    created_order: 0,
                    closed_order: None,
                };
                match status.as_str() {
                    "open" => {}
                    "closed" => {
                        row.closed_at =
                            Some(required_time(closed.as_deref(), "closed_at").map_err(bad)?);
                        let outcome = outcome.unwrap_or_default();
                        if !matches!(outcome.as_str(), "completed" | "aborted") {
                            return Err(bad(format!("outcome {outcome:?}")));
                        }
                        row.outcome = Some(outcome);
                        let (Some(kind), Some(revision), Some(blob)) =
                            (artifact_kind, revision, blob_ref)
                        else {
                            return Err(bad("closed without its artifact".to_owned()));
                        };
                        fit("the artifact kind", &kind).map_err(bad)?;
                        row.artifact_kind = Some(kind);
                        row.artifact_revision = Some(revision);
                        row.artifact_blob_ref = Some(blob);
                    }
                    other => return Err(bad(format!("status {other:?}"))),
                }
                Ok(row)
            })();
            let mut row = match verdict {
                Ok(row) => row,
                Err((what, why)) => {
                    self.report
                        .problem(what, || format!("{} ({why})", short(&id)));
                    continue;
                }
            };
            if let Some(blob) = row.artifact_blob_ref.clone()
                && let Err(why) = self.blob_verdict(&blob)?
            {
                let what = format!("closed streams {why} (with their chunks)");
                self.report
                    .problem(&what, || format!("{} blob {blob}", short(&id)));
                continue;
            }
            if row.status == "closed" && row.last_seq == 0 {
                // Pruned (§1.5): the count survives in the artifact's metadata.
                match self.chunk_count(&row)? {
                    Some(n) => {
                        row.last_seq = n;
                        self.report.note(
                            "closed streams whose chunks Autobuild had pruned (the count kept from the artifact's chunkCount)",
                            || format!("{} ({n} chunks)", short(&id)),
                        );
                    }
                    None => self.report.note(
                        "closed streams without chunks or a chunkCount (imported with none)",
                        || short(&id),
                    ),
                }
            }
            self.streams.push(row);
        }
        Ok(())
    }

    /// The `chunkCount` of a closed stream's artifact metadata.
    fn chunk_count(&self, row: &StreamRow) -> anyhow::Result<Option<i64>> {
        let family = row.scope.0;
        let sql = format!(
            "SELECT metadata FROM {} WHERE {} = ?1 AND kind = ?2 AND revision = ?3",
            family.artifacts_table(),
            family.owner()
        );
        let metadata: Option<Option<String>> = self
            .conn()
            .query_row(
                &sql,
                rusqlite::params![row.scope.1, row.artifact_kind, row.artifact_revision],
                |r| r.get(0),
            )
            .optional()?;
        Ok(metadata
            .flatten()
            .and_then(|m| serde_json::from_str::<Value>(&m).ok())
            .and_then(|m| m.get("chunkCount").and_then(Value::as_i64)))
    }

    /// Numbers every scope's creations and closes (streams; a repository's
    /// sessions too) in time order, as abstore's counter would have.
    fn number_children(&mut self) -> anyhow::Result<()> {
        let mut by_scope: HashMap<Owner, Vec<Ordered>> = HashMap::new();
        for (i, stream) in self.streams.iter().enumerate() {
            let list = by_scope.entry(stream.scope.clone()).or_default();
            list.push(Ordered {
                at: stream.created_at,
                phase: 0,
                tiebreak: (stream.creation_tiebreak, stream.id.clone()),
                target: Target::StreamCreated(i),
            });
            if let Some(at) = stream.closed_at {
                list.push(Ordered {
                    at,
                    phase: 1,
                    tiebreak: (0, stream.id.clone()),
                    target: Target::StreamClosed(i),
                });
            }
        }
        if self.has("sessions") {
            let tiebreak = if self.store.shape.has_column("sessions", "creation_seq") {
                "creation_seq"
            } else {
                "rowid"
            };
            let sql = format!("SELECT id, repo, created_at, {tiebreak} FROM sessions");
            let store = self.store;
            let mut statement = store.conn.prepare(&sql)?;
            let mut rows = statement.query([])?;
            while let Some(row) = rows.next()? {
                let id: String = row.get(0)?;
                if !self.owners.contains_key(&(Family::Session, id.clone())) {
                    continue;
                }
                let repo: String = row.get(1)?;
                let at = time(text(row, 2)?.as_deref()).ok().flatten().unwrap_or(0);
                let tie: Option<i64> = row.get(3)?;
                by_scope
                    .entry((Family::Repo, repo))
                    .or_default()
                    .push(Ordered {
                        at,
                        phase: 0,
                        tiebreak: (tie.unwrap_or(0), id.clone()),
                        target: Target::SessionCreated(id),
                    });
            }
        }
        for (scope, mut list) in by_scope {
            list.sort_by(|a, b| (a.at, a.phase, &a.tiebreak).cmp(&(b.at, b.phase, &b.tiebreak)));
            if list.windows(2).any(|w| w[0].at == w[1].at) {
                self.report.note(
                    "scopes where creations or closes share a millisecond (ordered by Autobuild's creation order, then id)",
                    || format!("{} {}", scope.0.noun(), short(&scope.1)),
                );
            }
            let n = list.len() as i64;
            for (order, item) in (1..).zip(list) {
                match item.target {
                    Target::StreamCreated(i) => self.streams[i].created_order = order,
                    Target::StreamClosed(i) => self.streams[i].closed_order = Some(order),
                    Target::SessionCreated(id) => {
                        self.session_orders.insert(id, order);
                    }
                }
            }
            if let Some(info) = self.owners.get_mut(&scope) {
                info.stream_counter = n;
            }
        }
        Ok(())
    }

    // ---- the emit pass ----

    fn emit(&mut self, tx: &mpsc::Sender<Item>) -> anyhow::Result<()> {
        let send = |table: usize, row: Vec<Val>| {
            tx.blocking_send(Item::Row(table, row))
                .map_err(|_| anyhow!("the archive writer stopped"))
        };
        let families = self.families();
        for &family in &families {
            self.emit_resources(family, &send)?;
        }
        for &family in &families {
            self.emit_events(family, &send)?;
        }
        for &family in &families {
            self.emit_heads(family, &send)?;
        }
        for &family in &families {
            self.emit_artifacts(family, &send)?;
        }
        if self.has("streams") {
            let streams = std::mem::take(&mut self.streams);
            for s in &streams {
                if let Some(blob) = &s.artifact_blob_ref {
                    self.referenced.insert(blob.clone());
                }
                send(
                    STREAM,
                    vec![
                        Val::Text(s.id.clone()),
                        Val::Text(s.scope.0.kind().to_owned()),
                        Val::Text(s.scope.1.clone()),
                        Val::Text(s.label.clone()),
                        Val::Text(s.status.clone()),
                        Val::Int(s.created_at),
                        Val::Int(s.created_order),
                        Val::Int(s.last_seq),
                        opt_int(s.closed_at),
                        opt_int(s.closed_order),
                        opt(s.outcome.clone()),
                        opt(s.artifact_kind.clone()),
                        opt_int(s.artifact_revision),
                        opt(s.artifact_blob_ref.clone()),
                    ],
                )?;
            }
            let included: HashSet<String> = streams.into_iter().map(|s| s.id).collect();
            self.emit_chunks(&included, &send)?;
        }
        if self.has("ticket_assets") {
            self.emit_ticket_assets(&send)?;
        }
        for (table, row) in std::mem::take(&mut self.extra) {
            send(table, row)?;
        }
        for blob in std::mem::take(&mut self.referenced) {
            tx.blocking_send(Item::Blob(blob))
                .map_err(|_| anyhow!("the archive writer stopped"))?;
        }
        Ok(())
    }

    fn emit_resources(
        &mut self,
        family: Family,
        send: &dyn Fn(usize, Vec<Val>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let (sql, extra) = match family {
            Family::Build => (
                format!(
                    "SELECT slug, created_at, updated_at, lease_holder, lease_expires_at, lease_ttl_ms, \
                     heartbeat_at, repo, {origin}, ticket, branch FROM builds ORDER BY slug COLLATE BINARY",
                    origin = if self.store.shape.has_column("builds", "repo_origin") {
                        "repo_origin"
                    } else {
                        "NULL"
                    }
                ),
                4,
            ),
            Family::Repo => (
                "SELECT repo, created_at, updated_at, lease_holder, lease_expires_at, lease_ttl_ms, \
                 heartbeat_at FROM repo_streams ORDER BY repo COLLATE BINARY"
                    .to_owned(),
                0,
            ),
            Family::Session => (
                "SELECT id, created_at, updated_at, NULL, NULL, NULL, NULL, repo, operator, title \
                 FROM sessions ORDER BY id COLLATE BINARY"
                    .to_owned(),
                3,
            ),
        };
        let store = self.store;
        let mut statement = store.conn.prepare(&sql)?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            let id: String = row.get(0)?;
            let Some(info) = self.owners.get(&(family, id.clone())) else {
                continue;
            };
            let t = |i: usize| -> anyhow::Result<Option<i64>> {
                time(text(row, i)?.as_deref()).map_err(|why| anyhow!(why))
            };
            let extras: Vec<Option<String>> = (7..7 + extra)
                .map(|i| text(row, i))
                .collect::<rusqlite::Result<_>>()?;
            let mut attrs = Map::new();
            let (attrs, parent, created_order) = match family {
                Family::Build => {
                    attrs.insert("repo".into(), extras[0].clone().unwrap_or_default().into());
                    if let Some(origin) = &extras[1] {
                        attrs.insert("repoOrigin".into(), origin.clone().into());
                    }
                    if let Some(ticket) = &extras[2] {
                        attrs.insert("ticket".into(), serde_json::from_str(ticket)?);
                    }
                    if let Some(branch) = &extras[3] {
                        attrs.insert("branch".into(), branch.clone().into());
                    }
                    (
                        Val::Text(Value::Object(attrs).to_string()),
                        Val::Null,
                        Val::Null,
                    )
                }
                Family::Repo => (Val::Null, Val::Null, Val::Null),
                Family::Session => {
                    let repo = extras[0].clone().unwrap_or_default();
                    attrs.insert("repo".into(), repo.clone().into());
                    attrs.insert(
                        "operator".into(),
                        extras[1].clone().unwrap_or_default().trim().into(),
                    );
                    if let Some(title) = &extras[2] {
                        attrs.insert("title".into(), title.clone().into());
                    }
                    (
                        Val::Text(Value::Object(attrs).to_string()),
                        Val::Text(repo),
                        opt_int(self.session_orders.get(&id).copied()),
                    )
                }
            };
            let lease_ttl: Option<i64> = row.get(5)?;
            send(
                RESOURCE,
                vec![
                    Val::Text(family.kind().to_owned()),
                    Val::Text(id.clone()),
                    attrs,
                    opt_int(t(1)?),
                    opt_int(t(2)?),
                    Val::Int(info.last_seq),
                    opt(text(row, 3)?),
                    opt_int(t(4)?),
                    opt_int(lease_ttl),
                    opt_int(t(6)?),
                    Val::Int(info.stream_counter),
                    parent,
                    created_order,
                ],
            )?;
            self.report.imported(family.record_table());
        }
        Ok(())
    }

    fn emit_events(
        &mut self,
        family: Family,
        send: &dyn Fn(usize, Vec<Val>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let sql = format!(
            "SELECT {owner}, seq, ts, actor, type, payload FROM {table} \
             ORDER BY {owner} COLLATE BINARY, seq",
            owner = family.owner(),
            table = family.events_table()
        );
        let store = self.store;
        let mut statement = store.conn.prepare(&sql)?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            let id: String = row.get(0)?;
            if !self.owners.contains_key(&(family, id.clone())) {
                continue;
            }
            let seq: i64 = row.get(1)?;
            let ts: String = row.get(2)?;
            let actor: String = row.get(3)?;
            let ty: String = row.get(4)?;
            let payload: String = row.get(5)?;
            // Spliced, not re-serialised (§4.2): the stored actor and payload
            // are JSON.stringify's output, so this is what Autobuild served.
            let envelope = format!(
                "{{\"{key}\":{id},\"seq\":{seq},\"ts\":{ts},\"actor\":{actor},\"type\":{ty},\"payload\":{payload}}}",
                key = family.owner(),
                id = Value::String(id.clone()),
                ts = Value::String(ts),
                ty = Value::String(ty),
            );
            send(
                EVENT,
                vec![
                    Val::Text(family.kind().to_owned()),
                    Val::Text(id),
                    Val::Int(seq),
                    Val::Text(envelope),
                ],
            )?;
            self.report.imported(family.events_table());
        }
        Ok(())
    }

    fn emit_heads(
        &mut self,
        family: Family,
        send: &dyn Fn(usize, Vec<Val>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        // Every revision counts, carried or not: numbering goes on where
        // Autobuild's would.
        let sql = format!(
            "SELECT {owner}, kind, MAX(revision) + 1 FROM {table} GROUP BY {owner}, kind \
             ORDER BY {owner} COLLATE BINARY, kind COLLATE BINARY",
            owner = family.owner(),
            table = family.artifacts_table()
        );
        let store = self.store;
        let mut statement = store.conn.prepare(&sql)?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            let id: String = row.get(0)?;
            let kind: String = row.get(1)?;
            if !self.owners.contains_key(&(family, id.clone())) || !ident::fits(&kind) {
                continue;
            }
            send(
                ARTIFACT_HEAD,
                vec![
                    Val::Text(family.kind().to_owned()),
                    Val::Text(id),
                    Val::Text(kind),
                    Val::Int(row.get(2)?),
                ],
            )?;
        }
        Ok(())
    }

    fn emit_artifacts(
        &mut self,
        family: Family,
        send: &dyn Fn(usize, Vec<Val>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let sql = format!(
            "SELECT {owner}, kind, revision, blob_ref, metadata, created_at FROM {table} \
             ORDER BY {owner} COLLATE BINARY, kind COLLATE BINARY, revision",
            owner = family.owner(),
            table = family.artifacts_table()
        );
        let store = self.store;
        let mut statement = store.conn.prepare(&sql)?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            let id: String = row.get(0)?;
            let kind: String = row.get(1)?;
            let revision: i64 = row.get(2)?;
            let blob: String = row.get(3)?;
            let metadata: Option<String> = row.get(4)?;
            let created: Option<String> = row.get(5)?;
            self.report.read(family.artifacts_table(), 1);
            if !self.owners.contains_key(&(family, id.clone())) {
                if !self.skipped.contains(&(family, id.clone())) {
                    let what = format!("{} artifacts without an imported record", family.noun());
                    self.report.problem(&what, || short(&id));
                }
                continue;
            }
            let name = || {
                format!(
                    "{} {} {} rev {revision}",
                    family.noun(),
                    short(&id),
                    short(&kind)
                )
            };
            let checked = (|| {
                fit("the kind", &kind)?;
                let metadata = metadata.clone().ok_or("its metadata is NULL")?;
                match serde_json::from_str::<Value>(&metadata) {
                    Ok(Value::Object(_)) => {}
                    _ => return Err("its metadata is not a JSON object".to_owned()),
                }
                let at = required_time(created.as_deref(), "created_at")?;
                Ok((metadata, at))
            })();
            let (metadata, at) = match checked {
                Ok(ok) => ok,
                Err(why) => {
                    self.report.problem("artifacts that cannot be carried", || {
                        format!("{} ({why})", name())
                    });
                    continue;
                }
            };
            let size = match self.blob_verdict(&blob)? {
                Ok(size) => size,
                Err(why) => {
                    let what = format!("artifacts {why}");
                    self.report
                        .problem(&what, || format!("{} blob {blob}", name()));
                    continue;
                }
            };
            self.referenced.insert(blob.clone());
            send(
                ARTIFACT,
                vec![
                    Val::Text(family.kind().to_owned()),
                    Val::Text(id),
                    Val::Text(kind),
                    Val::Int(revision),
                    Val::Text(blob),
                    Val::Int(size as i64),
                    Val::Text(metadata),
                    Val::Int(at),
                ],
            )?;
            self.report.imported(family.artifacts_table());
        }
        Ok(())
    }

    fn emit_chunks(
        &mut self,
        included: &HashSet<String>,
        send: &dyn Fn(usize, Vec<Val>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let store = self.store;
        let mut statement = store.conn.prepare(
            "SELECT stream, seq, ts, parts FROM stream_chunks ORDER BY stream COLLATE BINARY, seq",
        )?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            let id: String = row.get(0)?;
            self.report.read("stream_chunks", 1);
            if !included.contains(&id) {
                continue;
            }
            let seq: i64 = row.get(1)?;
            let ts: String = row.get(2)?;
            let parts: String = row.get(3)?;
            if serde_json::from_str::<Value>(&parts).is_err() {
                bail!("stream {} chunk {seq}: its parts are not JSON", short(&id));
            }
            let chunk = format!(
                "{{\"stream\":{},\"seq\":{seq},\"ts\":{},\"parts\":{parts}}}",
                Value::String(id.clone()),
                Value::String(ts)
            );
            send(
                STREAM_CHUNK,
                vec![Val::Text(id), Val::Int(seq), Val::Text(chunk)],
            )?;
            self.report.imported("stream_chunks");
        }
        Ok(())
    }

    fn emit_ticket_assets(
        &mut self,
        send: &dyn Fn(usize, Vec<Val>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        const SQL: &str = "SELECT repo, ticket_id, kind, name, revision, layout, manifest, size, \
             removed, created_at FROM ticket_assets ORDER BY repo COLLATE BINARY, \
             ticket_id COLLATE BINARY, kind COLLATE BINARY, name COLLATE BINARY, revision";
        type Key = [String; 4];
        // First pass: every asset whose revisions all carry, with its head.
        let mut heads: Vec<(Key, i64, i64)> = Vec::new();
        let store = self.store;
        let rows_of = |reader: &mut Self,
                       visit: &mut dyn FnMut(&mut Self, Key, AssetRow) -> anyhow::Result<()>|
         -> anyhow::Result<()> {
            let mut statement = store.conn.prepare(SQL)?;
            let mut rows = statement.query([])?;
            while let Some(row) = rows.next()? {
                let key: Key = [row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?];
                let asset = AssetRow {
                    revision: row.get(4)?,
                    layout: row.get(5)?,
                    manifest: row.get(6)?,
                    size: row.get(7)?,
                    removed: row.get::<_, Option<i64>>(8)?.unwrap_or(0) != 0,
                    created_at: row.get(9)?,
                };
                visit(reader, key, asset)?;
            }
            Ok(())
        };
        let mut bad: HashSet<Key> = HashSet::new();
        let mut current: Option<(Key, i64, i64)> = None;
        rows_of(self, &mut |reader, key, asset| {
            reader.report.read("ticket_assets", 1);
            if current.as_ref().is_some_and(|(k, ..)| *k != key) {
                heads.extend(current.take());
            }
            if bad.contains(&key) {
                return Ok(());
            }
            match reader.asset_row(&key, &asset)? {
                Ok(row) => {
                    let at = match row[10] {
                        Val::Int(at) => at,
                        _ => 0,
                    };
                    current = Some((key, asset.revision + 1, at));
                }
                Err(why) => {
                    let example = format!(
                        "{} rev {} ({why})",
                        key.iter().map(|k| short(k)).collect::<Vec<_>>().join(" "),
                        asset.revision
                    );
                    reader.report.problem(
                        "ticket assets that cannot be carried (all their revisions)",
                        || example,
                    );
                    current = None;
                    bad.insert(key);
                }
            }
            Ok(())
        })?;
        heads.extend(current.take());
        let heads: Vec<_> = heads
            .into_iter()
            .filter(|(k, ..)| !bad.contains(k))
            .collect();
        for (key, next, at) in &heads {
            let mut row: Vec<Val> = key.iter().cloned().map(Val::Text).collect();
            row.push(Val::Int(*next));
            row.push(Val::Int(*at));
            send(TICKET_ASSET_HEAD, row)?;
        }
        rows_of(self, &mut |reader, key, asset| {
            if bad.contains(&key) {
                return Ok(());
            }
            if let Ok(row) = reader.asset_row(&key, &asset)? {
                for blob in crate::archive::format::ticket_asset_blobs(match &row[9] {
                    Val::Text(t) => Some(t.as_str()),
                    _ => None,
                })
                .map_err(|why| anyhow!(why))?
                {
                    reader.referenced.insert(blob);
                }
                send(TICKET_ASSET, row)?;
                reader.report.imported("ticket_assets");
            }
            Ok(())
        })
    }

    /// A `ticket_asset` archive row, or why the revision cannot be carried.
    fn asset_row(
        &mut self,
        key: &[String; 4],
        asset: &AssetRow,
    ) -> anyhow::Result<Result<Vec<Val>, String>> {
        for part in key {
            if let Err(why) = fit("a key member", part) {
                return Ok(Err(why));
            }
        }
        let Some(at) = asset.created_at.as_deref().and_then(parse_iso) else {
            return Ok(Err("its created_at is not ISO-8601".to_owned()));
        };
        let mut row: Vec<Val> = key.iter().cloned().map(Val::Text).collect();
        row.push(Val::Int(asset.revision));
        if asset.removed {
            // abstore's tombstone has no layout (Autobuild copies the last one).
            row.extend([
                Val::Null,
                Val::Int(0),
                Val::Int(0),
                Val::Int(0),
                Val::Null,
                Val::Int(at),
            ]);
            return Ok(Ok(row));
        }
        let layout = asset.layout.clone().unwrap_or_default();
        if crate::protocol::ticket_assets::Layout::parse(&layout).is_none() {
            return Ok(Err(format!("layout {layout:?}")));
        }
        let entries: Vec<AssetEntry> =
            match serde_json::from_str(asset.manifest.as_deref().unwrap_or("")) {
                Ok(entries) => entries,
                Err(err) => {
                    return Ok(Err(format!(
                        "its manifest does not fit abstore's entries ({err})"
                    )));
                }
            };
        let (mut size, mut files, mut dirs) = (0u64, 0i64, 0i64);
        for entry in &entries {
            match entry {
                AssetEntry::File {
                    size: bytes,
                    blob_ref,
                    ..
                } => {
                    match self.blob_verdict(blob_ref)? {
                        Ok(actual) if actual == *bytes => {}
                        Ok(actual) => {
                            return Ok(Err(format!(
                                "file blob {blob_ref} holds {actual} bytes, its entry says {bytes}"
                            )));
                        }
                        Err(why) => return Ok(Err(format!("a file {why}: {blob_ref}"))),
                    }
                    size += bytes;
                    files += 1;
                }
                AssetEntry::Dir { .. } => dirs += 1,
            }
        }
        if asset.size.is_some_and(|s| s != size as i64) {
            self.report.note(
                "ticket-asset sizes recomputed from their manifests (Autobuild's differed)",
                || format!("{} rev {}", key.join(" "), asset.revision),
            );
        }
        row.extend([
            Val::Text(layout),
            Val::Int(size as i64),
            Val::Int(files),
            Val::Int(dirs),
            Val::Text(serde_json::to_string(&entries)?),
            Val::Int(at),
        ]);
        Ok(Ok(row))
    }

    /// Counts the blob directory's files nothing imported references:
    /// orphans (written before a transaction that never came, §2) and
    /// `*.partial` files of interrupted writes. Neither is imported.
    fn count_blob_files(&mut self) -> anyhow::Result<()> {
        let referenced: HashSet<&String> = self
            .blobs
            .iter()
            .filter(|(_, s)| matches!(s, BlobState::Ok(_)))
            .map(|(a, _)| a)
            .collect();
        let SourceBlobs::Sharded(dir) = &self.store.blobs else {
            // A bucket is not listed: orphans there are the source's business.
            return Ok(());
        };
        let Ok(shards) = std::fs::read_dir(dir) else {
            return Ok(());
        };
        let (mut partial, mut orphans) = (Vec::new(), Vec::new());
        for shard in shards {
            let shard = shard?;
            if !shard.file_type()?.is_dir() {
                continue;
            }
            for file in std::fs::read_dir(shard.path())? {
                let name = file?.file_name().to_string_lossy().into_owned();
                if name.ends_with(".partial") {
                    partial.push(name);
                } else if !referenced.contains(&name) && !self.blobs.contains_key(&name) {
                    // (A referenced file that failed its hash is reported
                    // with what references it.)
                    orphans.push(name);
                }
            }
        }
        for name in partial {
            self.report.note(
                "blob files of interrupted writes (*.partial, skipped)",
                || name,
            );
        }
        for name in orphans {
            self.report
                .note("blob files no imported record references (orphans, or owned by what was left out; skipped)", || name);
        }
        Ok(())
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

struct AssetRow {
    revision: i64,
    layout: Option<String>,
    manifest: Option<String>,
    size: Option<i64>,
    removed: bool,
    created_at: Option<String>,
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
