//! `abstore gc`: blobs are written before their metadata, so a crash or a
//! failed deposit leaves blobs nothing references. What references a blob:
//! an artifact, a closed stream, or a file of a ticket-asset manifest (any
//! revision, a removed asset's included: a pinned revision stays readable). List them (and delete
//! them with `--apply`), sparing any blob younger than the grace period: a
//! deposit in flight has written its blob but not yet committed.
//!
//! Order matters: blobs are listed first and the references read after, so
//! a deposit that commits in between is seen as a reference. Just before a
//! delete the blob's write time and references are checked once more, which
//! narrows (but cannot close: the object store has no transactions) the
//! window in which a new deposit of the very same bytes rewrites it.

use std::collections::HashSet;
use std::time::Duration;

use anyhow::Context as _;
use futures_util::TryStreamExt as _;
use sqlx::Connection as _;

use super::db::{self, Db};
use super::export::now_ms;
use super::format;
use super::progress::Progress;
use crate::blobs::{BlobInfo, Blobs};
use crate::store::DatabaseUrl;

pub struct GcOptions {
    pub database: DatabaseUrl,
    pub blobs: String,
    pub grace: Duration,
    pub apply: bool,
    pub quiet: bool,
}

#[derive(Debug, Default)]
pub struct GcReport {
    pub scanned: u64,
    pub scanned_bytes: u64,
    pub young: u64,
    pub unreferenced: Vec<BlobInfo>,
    pub deleted: u64,
    pub deleted_bytes: u64,
}

impl std::fmt::Display for GcReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bytes: u64 = self.unreferenced.iter().map(|b| b.size).sum();
        write!(
            f,
            "{} blobs ({} bytes) scanned, {} younger than the grace period kept, \
             {} unreferenced ({} bytes), {} deleted ({} bytes)",
            self.scanned,
            self.scanned_bytes,
            self.young,
            self.unreferenced.len(),
            bytes,
            self.deleted,
            self.deleted_bytes
        )
    }
}

pub async fn gc(options: &GcOptions) -> anyhow::Result<GcReport> {
    let db = Db::of(&options.database)?;
    let blobs = Blobs::open(&options.blobs).context("opening --blobs")?;
    let grace_ms = i64::try_from(options.grace.as_millis()).unwrap_or(i64::MAX);
    let cutoff = now_ms().saturating_sub(grace_ms);
    let mut report = GcReport::default();
    let mut progress = Progress::new("gc", options.quiet);

    let mut old = Vec::new();
    let mut listing = std::pin::pin!(blobs.list());
    while let Some(info) = listing.try_next().await.context("listing --blobs")? {
        report.scanned += 1;
        report.scanned_bytes += info.size;
        progress.add(1, info.size);
        if info.modified_ms >= cutoff {
            report.young += 1;
        } else {
            old.push(info);
        }
    }
    let referenced = referenced_blobs(&db).await?;
    report.unreferenced = old
        .into_iter()
        .filter(|info| !referenced.contains(&info.blob_ref))
        .collect();
    report
        .unreferenced
        .sort_by(|a, b| a.blob_ref.cmp(&b.blob_ref));

    if options.apply {
        for info in &report.unreferenced {
            let still_old = blobs
                .head(&info.blob_ref)
                .await?
                .is_some_and(|now| now.modified_ms < cutoff);
            if still_old && !is_referenced(&db, &info.blob_ref).await? {
                blobs
                    .delete(&info.blob_ref)
                    .await
                    .with_context(|| format!("deleting blob {}", info.blob_ref))?;
                report.deleted += 1;
                report.deleted_bytes += info.size;
            }
        }
    }
    progress.finish();
    Ok(report)
}

/// Every blob the metadata references (32-byte keys would halve this
/// set's memory; hex strings keep it simple at ~100 bytes a blob).
async fn referenced_blobs(db: &Db) -> anyhow::Result<HashSet<String>> {
    match db {
        Db::Sqlite(path) => {
            let conn = db::open_sqlite_read(path)?;
            let mut statement = conn.prepare(&format::referenced_blobs_sql(false))?;
            let refs = statement
                .query_map([], |row| row.get::<_, String>(0))?
                .collect::<Result<HashSet<_>, _>>()?;
            Ok(refs)
        }
        Db::Postgres(connect) => {
            let mut conn = sqlx::PgConnection::connect_with(connect).await?;
            let sql = format::referenced_blobs_sql(true);
            let refs = sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(sql))
                .fetch(&mut conn)
                .try_collect()
                .await?;
            Ok(refs)
        }
    }
}

/// Whether anything references blob `$1`: an artifact, a closed stream, or
/// a file of a ticket-asset manifest, found as its `"blobRef":"…"` member in
/// the stored JSON (a path cannot hold that text unescaped, and SQLite's
/// case-blind `LIKE` could only keep a blob, never lose one).
const IS_REFERENCED: &str = "SELECT EXISTS (SELECT 1 FROM artifacts WHERE blob_ref = $1) \
     OR EXISTS (SELECT 1 FROM streams WHERE artifact_blob_ref = $1) \
     OR EXISTS (SELECT 1 FROM ticket_assets WHERE entries LIKE '%\"blobRef\":\"' || $1 || '\"%')";

async fn is_referenced(db: &Db, address: &str) -> anyhow::Result<bool> {
    match db {
        Db::Sqlite(path) => {
            let conn = db::open_sqlite_read(path)?;
            Ok(conn.query_row(IS_REFERENCED, [address], |row| row.get(0))?)
        }
        Db::Postgres(connect) => {
            let mut conn = sqlx::PgConnection::connect_with(connect).await?;
            Ok(sqlx::query_scalar(IS_REFERENCED)
                .bind(address)
                .fetch_one(&mut conn)
                .await?)
        }
    }
}
