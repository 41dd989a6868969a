//! `abstore import`: verify the whole archive, then write its blobs, then
//! all its metadata in one transaction (so readers see all of it or none).
//! Rows that already exist must be identical: re-importing an archive is a
//! no-op, and a conflicting row fails the import naming it.
//!
//! Without `--apply` the same transaction runs and is rolled back, and no
//! blob is written: the report says what an apply would write. A dry run
//! creates nothing either: a destination database or local blob directory
//! that does not exist yet is read as empty, not created.

use std::collections::HashSet;
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use async_trait::async_trait;
use sqlx::{Connection as _, Executor as _};

use super::db::{self, Db};
use super::format::{self, TABLES, Table, Val};
use super::progress::Progress;
use super::reader::{ArchiveReader, Record};
use super::verify;
use crate::blobs::{Blobs, blob_ref};
use crate::store::DatabaseUrl;

pub struct ImportOptions {
    pub file: PathBuf,
    pub database: DatabaseUrl,
    pub blobs: String,
    pub apply: bool,
    pub quiet: bool,
}

#[derive(Debug, Default)]
pub struct ImportReport {
    pub new_records: u64,
    pub present_records: u64,
    pub new_blobs: u64,
    pub new_blob_bytes: u64,
    pub present_blobs: u64,
}

impl std::fmt::Display for ImportReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} records new, {} already present; {} blobs new ({} bytes), {} already present",
            self.new_records,
            self.present_records,
            self.new_blobs,
            self.new_blob_bytes,
            self.present_blobs
        )
    }
}

pub async fn import(options: &ImportOptions) -> anyhow::Result<ImportReport> {
    let db = Db::of(&options.database)?;
    // Opening a local directory creates it: a dry run does not open one
    // that is missing (it holds no blob, so every blob is new).
    let missing_dir = Blobs::local_dir(&options.blobs).is_some_and(|dir| !dir.exists());
    let blobs = if options.apply || !missing_dir {
        Some(Blobs::open(&options.blobs).context("opening --blobs")?)
    } else {
        None
    };
    verify::verify(&options.file, options.quiet).with_context(|| {
        format!(
            "{} is not a valid archive; nothing was imported",
            options.file.display()
        )
    })?;
    let mut report = ImportReport::default();
    import_blobs(options, blobs.as_ref(), &mut report).await?;
    let mut destination = open_destination(&db, &options.database, options.apply).await?;
    let mut written = import_rows(options, destination.as_mut(), &mut report).await;
    if written.is_ok() {
        written = destination.recount().await;
    }
    match written {
        Ok(()) => destination.finish(options.apply).await?,
        Err(err) => {
            destination.finish(false).await.ok();
            return Err(err.context("nothing was imported"));
        }
    }
    Ok(report)
}

/// Blobs first: metadata that points at them becomes visible only after.
async fn import_blobs(
    options: &ImportOptions,
    blobs: Option<&Blobs>,
    report: &mut ImportReport,
) -> anyhow::Result<()> {
    let mut reader = ArchiveReader::open(&options.file)?;
    let mut progress = Progress::new("import blobs", options.quiet);
    while reader.next_line()?.is_some() {
        let Record::Blob { sha256, bytes, .. } = reader.parse()? else {
            continue;
        };
        // Verified already; checked again in case the file changed since.
        if blob_ref(&bytes) != sha256 {
            bail!(
                "line {}: blob {sha256} changed since it was verified",
                reader.line_no
            );
        }
        let present = match blobs {
            Some(blobs) => blobs
                .head(&sha256)
                .await
                .with_context(|| format!("looking up blob {sha256}"))?
                .is_some_and(|info| info.size == bytes.len() as u64),
            None => false,
        };
        if present {
            report.present_blobs += 1;
        } else {
            report.new_blobs += 1;
            report.new_blob_bytes += bytes.len() as u64;
            if let Some(blobs) = blobs.filter(|_| options.apply) {
                let size = bytes.len() as u64;
                blobs
                    .put(&sha256, bytes)
                    .await
                    .with_context(|| format!("writing blob {sha256}"))?;
                progress.add(1, size);
                continue;
            }
        }
        progress.add(1, 0);
    }
    progress.finish();
    Ok(())
}

async fn import_rows(
    options: &ImportOptions,
    destination: &mut dyn Destination,
    report: &mut ImportReport,
) -> anyhow::Result<()> {
    let mut reader = ArchiveReader::open(&options.file)?;
    let mut progress = Progress::new("import records", options.quiet);
    // Rows of one table go in batches: over a network a round trip per row
    // was most of PostgreSQL's import time.
    let mut batch = Batch::default();
    while let Some(line) = reader.next_line()? {
        let bytes = line.len() as u64;
        let record = reader.parse()?;
        let (index, row) = match record {
            Record::Row(index, row) => (index, row),
            Record::Header(_) => continue,
            Record::Blob { .. } | Record::Footer(_) => break,
        };
        // Verified already; checked again in case the file changed since.
        if let Err(why) = super::checks::row(index, &row) {
            bail!(
                "line {}: {} changed since it was verified ({why})",
                reader.line_no,
                TABLES[index].describe_key(&row)
            );
        }
        if batch.table != Some(index) || batch.rows.len() == BATCH_ROWS {
            batch.flush(destination, report, &mut progress).await?;
            batch.table = Some(index);
        }
        batch.rows.push(row);
        batch.bytes += bytes;
    }
    batch.flush(destination, report, &mut progress).await?;
    progress.finish();
    Ok(())
}

/// Rows per insert statement: PostgreSQL takes at most 65,535 parameters in
/// one statement, and no table has more than 64 columns.
const BATCH_ROWS: usize = 512;

/// Consecutive archive rows of one table, not yet inserted.
#[derive(Default)]
struct Batch {
    table: Option<usize>,
    rows: Vec<Vec<Val>>,
    bytes: u64,
}

impl Batch {
    async fn flush(
        &mut self,
        destination: &mut dyn Destination,
        report: &mut ImportReport,
        progress: &mut Progress,
    ) -> anyhow::Result<()> {
        let Some(index) = self.table else {
            return Ok(());
        };
        let table = &TABLES[index];
        // Insert first: into a new store every row is new; only a row whose
        // key exists is read back and compared.
        let inserted = destination.insert(table, &self.rows).await?;
        for (row, inserted) in self.rows.iter().zip(inserted) {
            if inserted {
                report.new_records += 1;
                continue;
            }
            let existing = destination.find(table, row).await?;
            if existing.as_ref() != Some(row) {
                let column = existing
                    .iter()
                    .flat_map(|existing| table.columns.iter().zip(existing.iter().zip(row)))
                    .find(|(_, (a, b))| a != b)
                    .map_or("?", |(c, _)| c.name);
                bail!(
                    "{} already exists with different content ({} differs)",
                    table.describe_key(row),
                    column
                );
            }
            report.present_records += 1;
        }
        progress.add(self.rows.len() as u64, self.bytes);
        self.rows.clear();
        self.bytes = 0;
        Ok(())
    }
}

/// Where rows go: one open transaction.
#[async_trait(?Send)]
trait Destination {
    async fn find(&mut self, table: &Table, row: &[Val]) -> anyhow::Result<Option<Vec<Val>>>;
    /// Inserts each row unless its key exists: for each row, true when it
    /// did. An error names the row that failed.
    async fn insert(&mut self, table: &Table, rows: &[Vec<Val>]) -> anyhow::Result<Vec<bool>>;
    /// Recomputes the columns the archive does not carry
    /// ([`format::DERIVED`](super::format::DERIVED)) from the rows now held.
    async fn recount(&mut self) -> anyhow::Result<()>;
    /// Commits when `commit`, rolls back otherwise.
    async fn finish(&mut self, commit: bool) -> anyhow::Result<()>;
}

async fn open_destination(
    db: &Db,
    url: &DatabaseUrl,
    apply: bool,
) -> anyhow::Result<Box<dyn Destination>> {
    if apply {
        url.migrate().await?;
    }
    match db {
        Db::Sqlite(path) => {
            if !apply && !path.exists() {
                return Ok(Box::new(EmptyDestination));
            }
            let conn = db::open_sqlite_write(path)?;
            conn.execute_batch("BEGIN IMMEDIATE")?;
            Ok(Box::new(SqliteDestination { conn }))
        }
        Db::Postgres(connect) => {
            let mut conn = sqlx::PgConnection::connect_with(connect).await?;
            let migrated: bool = sqlx::query_scalar("SELECT to_regclass('resources') IS NOT NULL")
                .fetch_one(&mut conn)
                .await?;
            if !migrated {
                return Ok(Box::new(EmptyDestination));
            }
            conn.execute("BEGIN").await?;
            Ok(Box::new(PgDestination { conn }))
        }
    }
}

/// A dry run against a store that does not exist yet: everything is new.
struct EmptyDestination;

#[async_trait(?Send)]
impl Destination for EmptyDestination {
    async fn find(&mut self, _: &Table, _: &[Val]) -> anyhow::Result<Option<Vec<Val>>> {
        Ok(None)
    }
    async fn insert(&mut self, _: &Table, rows: &[Vec<Val>]) -> anyhow::Result<Vec<bool>> {
        Ok(vec![true; rows.len()])
    }
    async fn recount(&mut self) -> anyhow::Result<()> {
        Ok(())
    }
    async fn finish(&mut self, _: bool) -> anyhow::Result<()> {
        Ok(())
    }
}

struct SqliteDestination {
    conn: rusqlite::Connection,
}

#[async_trait(?Send)]
impl Destination for SqliteDestination {
    async fn find(&mut self, table: &Table, row: &[Val]) -> anyhow::Result<Option<Vec<Val>>> {
        let mut statement = self
            .conn
            .prepare_cached(&table.select_one_sql(db::sqlite_placeholder))?;
        let key = db::sqlite_params(&row[..table.key_len]);
        let mut rows = statement.query(rusqlite::params_from_iter(key))?;
        match rows.next()? {
            Some(found) => Ok(Some(db::sqlite_row(table, found)?)),
            None => Ok(None),
        }
    }

    async fn insert(&mut self, table: &Table, rows: &[Vec<Val>]) -> anyhow::Result<Vec<bool>> {
        // In-process SQLite pays no round trip: one prepared statement a row.
        let mut statement = self
            .conn
            .prepare_cached(&table.insert_sql(db::sqlite_placeholder))?;
        rows.iter()
            .map(|row| {
                let done = statement
                    .execute(rusqlite::params_from_iter(db::sqlite_params(row)))
                    .with_context(|| format!("inserting {}", table.describe_key(row)))?;
                Ok(done == 1)
            })
            .collect()
    }

    async fn recount(&mut self) -> anyhow::Result<()> {
        self.conn
            .execute_batch(format::recount_sql(false))
            .context("recounting stream bytes and filling event types")?;
        Ok(())
    }

    async fn finish(&mut self, commit: bool) -> anyhow::Result<()> {
        self.conn
            .execute_batch(if commit { "COMMIT" } else { "ROLLBACK" })?;
        Ok(())
    }
}

struct PgDestination {
    conn: sqlx::PgConnection,
}

impl PgDestination {
    /// A statement a row, to name the row a batch failed on.
    async fn insert_each(&mut self, table: &Table, rows: &[Vec<Val>]) -> anyhow::Result<Vec<bool>> {
        let sql = table.insert_sql(db::pg_placeholder);
        let mut inserted = Vec::with_capacity(rows.len());
        for row in rows {
            let done = db::pg_bind(sqlx::query(sqlx::AssertSqlSafe(sql.clone())), table, row)
                .execute(&mut self.conn)
                .await
                .with_context(|| format!("inserting {}", table.describe_key(row)))?;
            inserted.push(done.rows_affected() == 1);
        }
        Ok(inserted)
    }
}

#[async_trait(?Send)]
impl Destination for PgDestination {
    async fn find(&mut self, table: &Table, row: &[Val]) -> anyhow::Result<Option<Vec<Val>>> {
        let sql = table.select_one_sql(db::pg_placeholder);
        let query = db::pg_bind(
            sqlx::query(sqlx::AssertSqlSafe(sql)),
            table,
            &row[..table.key_len],
        );
        match query.fetch_optional(&mut self.conn).await? {
            Some(found) => Ok(Some(db::pg_row(table, &found)?)),
            None => Ok(None),
        }
    }

    async fn insert(&mut self, table: &Table, rows: &[Vec<Val>]) -> anyhow::Result<Vec<bool>> {
        // One statement for the batch, inside a savepoint: if it fails, the
        // rows go again one by one so that the error names the row.
        self.conn.execute("SAVEPOINT batch").await?;
        let sql = table.insert_many_sql(rows.len());
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for row in rows {
            query = db::pg_bind(query, table, row);
        }
        let returned = match query.fetch_all(&mut self.conn).await {
            Ok(returned) => returned,
            Err(_) => {
                self.conn.execute("ROLLBACK TO SAVEPOINT batch").await?;
                return self.insert_each(table, rows).await;
            }
        };
        self.conn.execute("RELEASE SAVEPOINT batch").await?;
        let inserted: HashSet<Vec<Val>> = returned
            .iter()
            .map(|found| db::pg_key(table, found))
            .collect::<anyhow::Result<_>>()?;
        Ok(rows
            .iter()
            .map(|row| inserted.contains(&row[..table.key_len]))
            .collect())
    }

    async fn recount(&mut self) -> anyhow::Result<()> {
        self.conn
            .execute(format::recount_sql(true))
            .await
            .context("recounting stream bytes")?;
        Ok(())
    }

    async fn finish(&mut self, commit: bool) -> anyhow::Result<()> {
        self.conn
            .execute(if commit { "COMMIT" } else { "ROLLBACK" })
            .await?;
        if commit {
            // Statistics now, not at autovacuum's next pass: without them the
            // planner takes the freshly filled tables for empty and plans
            // protocol 3's state-events read as a nested loop over the
            // journal, quadratic in its length (20 s for one read of a
            // 2,000-event journal; 10 ms after ANALYZE:
            // docs/benchmarks/frame-and-tick.md).
            // An import is exactly when a store meets its clients again.
            let tables: Vec<&str> = TABLES.iter().map(|table| table.table).collect();
            let analyze = format!("ANALYZE {}", tables.join(", "));
            self.conn.execute(sqlx::AssertSqlSafe(analyze)).await?;
        }
        Ok(())
    }
}
