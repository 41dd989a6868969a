//! `abstore backup`: an online copy of the embedded SQLite store while it
//! serves (`VACUUM INTO`, a transactionally consistent copy that never
//! blocks the writer for long), then the blobs that copy references.
//! PostgreSQL stores are backed up with pg_dump (docs/operations.md).

use std::path::PathBuf;

use anyhow::{Context as _, bail};

use super::db::{self, Db};
use super::format;
use super::output::AtomicOutput;
use super::progress::Progress;
use crate::blobs::{Blobs, blob_ref};
use crate::store::DatabaseUrl;

pub struct BackupOptions {
    pub database: DatabaseUrl,
    pub blobs: String,
    pub out: PathBuf,
    /// Where the blobs go; `<out>.blobs` when not given.
    pub blobs_out: Option<String>,
    pub force: bool,
    pub quiet: bool,
}

#[derive(Debug, Default)]
pub struct BackupReport {
    pub blobs: u64,
    pub copied: u64,
    pub copied_bytes: u64,
    pub blobs_out: String,
}

pub async fn backup(options: &BackupOptions) -> anyhow::Result<BackupReport> {
    let Db::Sqlite(path) = Db::of(&options.database)? else {
        bail!(
            "backup copies the embedded SQLite store; back PostgreSQL up with pg_dump \
             (docs/operations.md) or use `abstore export`"
        );
    };
    let blobs = Blobs::open(&options.blobs).context("opening --blobs")?;
    let blobs_out = options
        .blobs_out
        .clone()
        .unwrap_or_else(|| format!("{}.blobs", options.out.display()));
    let target = Blobs::open(&blobs_out).context("opening the blob destination")?;

    let output = AtomicOutput::new(&options.out, options.force)?;
    {
        let conn = db::open_sqlite_read(&path)?;
        let tmp = output.tmp_path().to_string_lossy().into_owned();
        conn.execute("VACUUM INTO ?1", [&tmp])
            .with_context(|| format!("copying {}", path.display()))?;
    }

    // The copy's references, not the live store's: the blobs match the copy.
    let references: Vec<String> = {
        let conn = db::open_sqlite_read(output.tmp_path())?;
        let mut statement = conn.prepare(&format::referenced_blobs_sql(false))?;
        statement
            .query_map([], |row| row.get(0))?
            .collect::<Result<_, _>>()?
    };
    let mut report = BackupReport {
        blobs_out,
        ..BackupReport::default()
    };
    let mut progress = Progress::new("backup blobs", options.quiet);
    for address in &references {
        report.blobs += 1;
        if target.head(address).await?.is_some() {
            progress.add(1, 0);
            continue;
        }
        let bytes = blobs
            .get(address)
            .await
            .with_context(|| format!("reading blob {address}"))?;
        if blob_ref(&bytes) != *address {
            bail!("blob {address} in --blobs is corrupt: its bytes hash differently");
        }
        let size = bytes.len() as u64;
        target.put(address, bytes.to_vec()).await?;
        report.copied += 1;
        report.copied_bytes += size;
        progress.add(1, size);
    }
    progress.finish();
    // The database file appears last, once every blob it needs is in place.
    output.commit()?;
    Ok(report)
}
