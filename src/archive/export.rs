//! `abstore export`: one consistent snapshot of a store streamed to an
//! archive. A producer reads the snapshot (one read transaction) and sends
//! rows through a bounded channel; the writer fetches each referenced blob
//! and writes lines. Memory holds a channel's worth of rows and one blob.

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::{Context as _, anyhow, bail};
use futures_util::TryStreamExt as _;
use sha2::{Digest as _, Sha256};
use sqlx::Connection as _;
use tokio::sync::mpsc;

use super::db::{self, Db};
use super::format::{self, Counts, TABLES, Val};
use super::output::AtomicOutput;
use super::progress::Progress;
use crate::blobs::{Blobs, blob_ref};
use crate::store::DatabaseUrl;

pub struct ExportOptions {
    pub database: DatabaseUrl,
    pub blobs: String,
    pub out: PathBuf,
    pub force: bool,
    pub quiet: bool,
}

/// What the snapshot reader sends the writer, in archive order.
pub enum Item {
    Row(usize, Vec<Val>),
    /// A blob by address, with its size when the reader knows it (a source
    /// store's blob, read no further than that).
    Blob(String, Option<u64>),
}

/// Rows in flight between the reader and the writer.
pub(super) const CHANNEL_ROWS: usize = 256;

pub async fn export(options: &ExportOptions) -> anyhow::Result<Counts> {
    let db = Db::of(&options.database)?;
    let blobs = Blobs::open(&options.blobs).context("opening --blobs")?;
    let output = AtomicOutput::new(&options.out, options.force)?;
    let (tx, rx) = mpsc::channel(CHANNEL_ROWS);
    let reader = match db.clone() {
        Db::Sqlite(path) => tokio::task::spawn_blocking(move || read_sqlite(&path, &tx)),
        Db::Postgres(connect) => tokio::spawn(async move { read_postgres(&connect, &tx).await }),
    };
    let written = write_archive(
        output.tmp_path(),
        options.database.backend(),
        rx,
        &BlobSource::Store(blobs),
        options.quiet,
    )
    .await;
    let read = reader
        .await
        .map_err(|err| anyhow!("the snapshot reader failed: {err}"))?;
    // A writer error comes first (the reader then only saw the channel close);
    // a reader error explains a writer that saw the channel end early.
    let counts = written?;
    read.context("reading the snapshot")?;
    output.commit()?;
    Ok(counts)
}

/// Where the writer reads the blobs the snapshot names.
pub(super) enum BlobSource {
    /// A store's blob location (`--blobs`).
    Store(Blobs),
    /// An Autobuild store's blobs, each read as the hostile file it may be
    /// and no further than the size it was hashed at.
    Source(crate::archive::autobuild::source_blobs::SourceBlobs),
}

impl BlobSource {
    async fn get(&self, address: &str, size: Option<u64>) -> anyhow::Result<bytes::Bytes> {
        match (self, size) {
            (BlobSource::Store(blobs), _) => Ok(blobs.get(address).await?),
            (BlobSource::Source(source), Some(size)) => source.read(address, size).await,
            (BlobSource::Source(_), None) => bail!("blob {address} was never hashed"),
        }
    }
}

/// Writes the archive of the items `rx` yields to `path` (created new).
pub(super) async fn write_archive(
    path: &std::path::Path,
    source: &str,
    mut rx: mpsc::Receiver<Item>,
    blobs: &BlobSource,
    quiet: bool,
) -> anyhow::Result<Counts> {
    // 0600: an archive holds every event and blob of its store.
    let file = super::temp::create_private(path)
        .with_context(|| format!("creating {}", path.display()))?;
    let mut out = LineWriter {
        out: std::io::BufWriter::with_capacity(1 << 20, file),
        digest: Sha256::new(),
    };
    let mut counts = Counts::default();
    let mut progress = Progress::new("export", quiet);
    let now = crate::protocol::time::format_iso(now_ms());
    out.line(&format::header_line(source, &now))?;
    // The digest covers the records, not the header that names the source and
    // the time: two archives of the same data are identical after line 1.
    out.digest = Sha256::new();
    while let Some(item) = rx.recv().await {
        match item {
            Item::Row(table, row) => {
                let n = out.line(&TABLES[table].encode(&row))?;
                counts.rows[table] += 1;
                progress.add(1, n);
            }
            Item::Blob(address, size) => {
                let bytes = blobs.get(&address, size).await.with_context(|| {
                    format!("blob {address}, referenced by the store, cannot be read")
                })?;
                if blob_ref(&bytes) != address {
                    bail!("blob {address} in --blobs is corrupt: its bytes hash differently");
                }
                let n = out.line(&format::blob_line(&address, &bytes))?;
                counts.blobs += 1;
                counts.blob_bytes += bytes.len() as u64;
                progress.add(1, n);
            }
        }
    }
    let digest = hex::encode(out.digest.finalize_reset());
    writeln!(out.out, "{}", format::footer_line(&counts, &digest))?;
    out.out.flush()?;
    progress.finish();
    Ok(counts)
}

/// Writes lines and hashes every byte it writes.
struct LineWriter {
    out: std::io::BufWriter<std::fs::File>,
    digest: Sha256,
}

impl LineWriter {
    fn line(&mut self, line: &str) -> anyhow::Result<u64> {
        self.out.write_all(line.as_bytes())?;
        self.out.write_all(b"\n")?;
        self.digest.update(line.as_bytes());
        self.digest.update(b"\n");
        Ok(line.len() as u64 + 1)
    }
}

fn send_blocking(tx: &mpsc::Sender<Item>, item: Item) -> anyhow::Result<()> {
    tx.blocking_send(item)
        .map_err(|_| anyhow!("the archive writer stopped"))
}

/// The snapshot from SQLite: one deferred read transaction, which in WAL
/// mode sees the database as of its first read, whatever commits meanwhile.
fn read_sqlite(path: &std::path::Path, tx: &mpsc::Sender<Item>) -> anyhow::Result<()> {
    let mut conn = db::open_sqlite_read(path)?;
    let snapshot = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Deferred)?;
    for (i, table) in TABLES.iter().enumerate() {
        let mut statement = snapshot.prepare(&table.select_all_sql())?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            send_blocking(tx, Item::Row(i, db::sqlite_row(table, row)?))?;
        }
    }
    let mut statement = snapshot.prepare(&format::referenced_blobs_sql(false))?;
    let mut rows = statement.query([])?;
    while let Some(row) = rows.next()? {
        send_blocking(tx, Item::Blob(row.get(0)?, None))?;
    }
    Ok(())
}

/// The snapshot from PostgreSQL: one REPEATABLE READ, READ ONLY transaction.
async fn read_postgres(
    connect: &sqlx::postgres::PgConnectOptions,
    tx: &mpsc::Sender<Item>,
) -> anyhow::Result<()> {
    let mut conn = sqlx::PgConnection::connect_with(connect).await?;
    let mut snapshot = conn
        .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .await?;
    let stopped = || anyhow!("the archive writer stopped");
    for (i, table) in TABLES.iter().enumerate() {
        let sql = table.select_all_sql();
        let mut rows = sqlx::query(sqlx::AssertSqlSafe(sql)).fetch(&mut *snapshot);
        while let Some(row) = rows.try_next().await? {
            tx.send(Item::Row(i, db::pg_row(table, &row)?))
                .await
                .map_err(|_| stopped())?;
        }
    }
    let sql = format::referenced_blobs_sql(true);
    let mut rows = sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(sql)).fetch(&mut *snapshot);
    while let Some(address) = rows.try_next().await? {
        tx.send(Item::Blob(address, None))
            .await
            .map_err(|_| stopped())?;
    }
    drop(rows);
    snapshot.rollback().await?;
    Ok(())
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}
