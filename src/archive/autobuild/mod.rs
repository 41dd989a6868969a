//! Importing Autobuild's own stores (issue 37; the formats and their
//! mapping are docs/autobuild-stores.md). A source adapter reads the
//! Autobuild store and writes abstore's portable archive, so the archive's
//! checks do the rest: `export --from autobuild-local` keeps the archive,
//! `import --from autobuild-local` writes it to a temporary file and runs
//! the archive import on it (every blob re-hashed, one transaction, a dry
//! run unless `--apply`).
//!
//! - [`schema`]: which local version a database is, or why it is refused.
//! - [`local`]: the local store's reader (SQLite copy plus blob directory).
//! - [`source_blobs`]: where a source's blobs are, read as hostile files.
//! - [`catalogs`]: the catalogs an imported event must pass.
//! - [`postgres`]: the PostgreSQL store, transcoded into a local-store-shaped
//!   SQLite copy that [`local`] then reads; [`js`] writes its JSON as
//!   Autobuild's server (Bun's `JSON.stringify`) served it.
//! - [`report`]: what was read, carried, left out and noticed.

pub mod catalogs;
pub mod js;
pub mod local;
pub mod postgres;
pub mod report;
pub mod schema;
pub mod source_blobs;

use std::path::{Path, PathBuf};

use anyhow::anyhow;
use tokio::sync::mpsc;

use self::catalogs::EventCatalogs;
use self::local::LocalStore;
use self::report::Report;
use super::export::{BlobSource, CHANNEL_ROWS, write_archive};
use super::format::Counts;
use super::import::{ImportOptions, ImportReport};
use super::output::AtomicOutput;
use super::temp::{self, TempDir};
use crate::store::DatabaseUrl;

/// The archive header's `source` for a local store.
pub const LOCAL_SOURCE: &str = "autobuild-local";

/// The kinds of Autobuild store abstore reads.
pub enum SourceKind {
    /// The local store: `path` is its state directory or database file.
    Local,
    /// The PostgreSQL store: `path` is its database URL; its blobs are at
    /// `source_blobs` (an object-store URL with the deployment's prefix, or
    /// a directory), one flat `<sha256>` object each.
    Postgres { url: String, source_blobs: String },
}

impl SourceKind {
    /// The archive header's `source`.
    pub fn name(&self) -> &'static str {
        match self {
            SourceKind::Local => LOCAL_SOURCE,
            SourceKind::Postgres { .. } => POSTGRES_SOURCE,
        }
    }
}

/// The archive header's `source` for a PostgreSQL store.
pub const POSTGRES_SOURCE: &str = "autobuild-postgres";

/// Which Autobuild store to read.
pub struct SourceOptions {
    pub kind: SourceKind,
    /// The state directory (`autobuild.sqlite`, `blobs/`) or the database
    /// file; for PostgreSQL, the database URL.
    pub path: PathBuf,
    /// `VERSION/PROTOCOL`: the client whose catalogs judge the events
    /// (without it, any client abstore's embedded catalogs know).
    pub catalog_for: Option<String>,
    /// Where the private temporary copies go (`--temp-dir`; the system's
    /// temporary directory without it).
    pub temp_dir: Option<PathBuf>,
    pub quiet: bool,
}

/// The prefix of every temporary directory an Autobuild import makes.
const TEMP_PREFIX: &str = "abstore-autobuild-";

/// Removes what killed imports left in the temporary directory, for the
/// report.
fn sweep(source: &SourceOptions) -> u64 {
    temp::sweep(&source.temp_base(), TEMP_PREFIX) as u64
}

impl SourceOptions {
    fn temp_base(&self) -> PathBuf {
        temp::base(self.temp_dir.as_deref())
    }

    /// The source for messages: the local path, or the PostgreSQL URL
    /// without its password.
    pub fn describe(&self) -> String {
        match &self.kind {
            SourceKind::Local => format!("{} {}", LOCAL_SOURCE, self.path.display()),
            SourceKind::Postgres { url, .. } => {
                let shown = url::Url::parse(url).map_or_else(
                    |_| "(an unparsable URL)".to_owned(),
                    |mut url| {
                        if url.password().is_some() {
                            let _ = url.set_password(Some("***"));
                        }
                        url.to_string()
                    },
                );
                format!("{POSTGRES_SOURCE} {shown}")
            }
        }
    }
}

/// `export --from autobuild-local PATH --out FILE`.
pub async fn export(
    source: &SourceOptions,
    out: &Path,
    force: bool,
) -> anyhow::Result<(Counts, Report)> {
    let swept = sweep(source);
    let output = AtomicOutput::new(out, force)?;
    let (counts, mut report) = write_local(source, output.tmp_path()).await?;
    output.commit()?;
    note_swept(&mut report, source, swept);
    Ok((counts, report))
}

/// `import --from autobuild-local PATH`: the archive of the store, written
/// to a temporary file (removed afterwards) and imported.
pub async fn import(
    source: &SourceOptions,
    database: DatabaseUrl,
    blobs: String,
    apply: bool,
) -> anyhow::Result<(ImportReport, Report)> {
    let swept = sweep(source);
    let tmp = TempDir::new_in(&source.temp_base(), &format!("{TEMP_PREFIX}import-"))?;
    let file = tmp.path().join("store.archive");
    let (_, mut report) = write_local(source, &file).await?;
    note_swept(&mut report, source, swept);
    let options = ImportOptions {
        file,
        database,
        blobs,
        apply,
        quiet: source.quiet,
    };
    let imported = super::import::import(&options).await?;
    Ok((imported, report))
}

fn note_swept(report: &mut Report, source: &SourceOptions, swept: u64) {
    report.notes(
        "temporary directories killed imports had left (removed)",
        swept,
        || source.temp_base().display().to_string(),
    );
}

async fn write_local(source: &SourceOptions, path: &Path) -> anyhow::Result<(Counts, Report)> {
    let catalogs = EventCatalogs::embedded(source.catalog_for.as_deref())?;
    let base = source.temp_base();
    let mut store = match &source.kind {
        SourceKind::Local => LocalStore::open(&source.path, &base)?,
        SourceKind::Postgres { url, source_blobs } => {
            postgres::open(url, source_blobs, &base).await?
        }
    };
    let blobs = BlobSource::Source(store.blobs().clone());
    let (tx, rx) = mpsc::channel(CHANNEL_ROWS);
    let mut report = std::mem::take(&mut store.seed);
    report.catalogs = catalogs.name.clone();
    let extra = std::mem::take(&mut store.extra);
    let reader = tokio::task::spawn_blocking(move || {
        store
            .read(&catalogs, extra, &tx, &mut report)
            .map(|()| report)
    });
    let written = write_archive(path, source.kind.name(), rx, &blobs, source.quiet).await;
    let read = reader
        .await
        .map_err(|err| anyhow!("the store reader failed: {err}"))?;
    // A writer error first (the reader then only saw the channel close).
    let counts = written?;
    let report = read.map_err(|err| err.context(format!("reading {}", source.describe())))?;
    Ok((counts, report))
}
