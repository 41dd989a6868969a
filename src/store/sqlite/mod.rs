//! The embedded backend: one SQLite file in WAL mode with `synchronous=FULL`,
//! on rusqlite.
//!
//! - Writes: one dedicated thread owns a file's write connection and
//!   commits queued operations in groups (`writer`); callers hand it a job
//!   and await a oneshot answer. In memory the callers run the queue
//!   themselves (`combining`): there is no `fsync` to wait for, and the
//!   hand-off would cost more than the job.
//! - Reads: a small pool of read-only connections, each read one hop onto
//!   tokio's blocking pool (never a hop per row).
//! - `sqlite::memory:`: an in-memory database exists per connection, so the
//!   writer's connection serves reads and writes alike and lives as long
//!   as the store.
//! - A lock on the database file itself (and on `PATH.lock`) admits one
//!   process per file, whatever path names it (`FileGuard`).

mod combining;
mod errors;
mod fill_types;
mod migrate;
mod primitives;
mod readers;
mod writer;
pub use self::writer::{COMMIT_BATCH_JOBS, COMMIT_SECONDS};

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::time::Duration;

use anyhow::Context as _;
use rusqlite::Connection;

use self::combining::{Combining, Length};
use self::primitives::{Conn, run_synchronously};
use self::readers::Readers;
use self::writer::{Done, Failure, Job};
use crate::clock::Clock;
use crate::store::api::PoolStats;
use crate::store::engine::{AfterCommit, Backend, OpFuture, Written};
use crate::store::error::{StoreError, StoreResult};
use crate::store::listing::stream_listing;
use crate::store::migration::{MigrationReport, MigrationSettings};
use crate::store::options::StoreOptions;
use crate::store::record_cache::BuildRecordCache;
use crate::store::rows::{Listing, RowSink, Rows, StreamedReads};
use crate::store::url::SqliteLocation as Location;

/// How long a statement waits for another connection's lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The write connection's settings (readers set their own).
fn configure(conn: &Connection, in_memory: bool) -> rusqlite::Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(
        None,
        "journal_mode",
        if in_memory { "MEMORY" } else { "WAL" },
    )?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", true)?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(())
}

/// The one-process guard of a database file (docs/decisions.md, 25): an
/// exclusive `flock` on the database file itself, so it holds for the file
/// whatever path names it (a symlink, a hard link, `..` in the path), and
/// one on `<path>.lock`, the only lock servers before this one took, so
/// that neither kind starts beside the other. A second server on the file
/// would bypass the single writer (and its group commit), the short-log
/// cache's promise that this process writes every log, and the `tails`
/// sweep's view.
///
/// `flock` and SQLite's own `fcntl` locks do not interact on Linux. But
/// closing *any* descriptor of a file drops every `fcntl` lock the process
/// holds on it, so the guard's descriptor is closed only after every
/// SQLite connection of the store: the writer thread and the readers each
/// hold the guard (`Arc<FileGuard>`) and drop their connections first.
struct FileGuard {
    _database: std::fs::File,
    _beside: std::fs::File,
}

fn lock_database(path: &std::path::Path) -> anyhow::Result<FileGuard> {
    let mut beside = path.as_os_str().to_owned();
    beside.push(".lock");
    let beside = PathBuf::from(beside);
    let held_elsewhere = |what: &str| {
        anyhow::anyhow!(
            "another abstore process is using the SQLite database {} ({what} is locked); \
             one process per SQLite file, whatever path names it",
            path.display(),
        )
    };
    let beside_file = exclusive_lock(&beside, &|| {
        held_elsewhere(&format!("lock file {}", beside.display()))
    })?;
    let database = exclusive_lock(path, &|| held_elsewhere(&describe_file(path)))?;
    Ok(FileGuard {
        _database: database,
        _beside: beside_file,
    })
}

/// `path` opened (created when missing) and locked exclusively, or the
/// error `held` makes when another process holds its lock.
fn exclusive_lock(
    path: &std::path::Path,
    held: &dyn Fn() -> anyhow::Error,
) -> anyhow::Result<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)
        .with_context(|| format!("opening {} to lock it", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(held()),
        Err(std::fs::TryLockError::Error(err)) => {
            Err(err).with_context(|| format!("locking {}", path.display()))
        }
    }
}

/// The database file as the message names it: the file another name of it
/// locked (its device and inode), so an operator can find that other name.
fn describe_file(path: &std::path::Path) -> String {
    use std::os::unix::fs::MetadataExt as _;
    match std::fs::metadata(path) {
        Ok(meta) => format!(
            "the database file itself, device {} inode {}, perhaps under another name",
            meta.dev(),
            meta.ino()
        ),
        Err(_) => "the database file itself".to_owned(),
    }
}

/// Apply the pending migrations and finish migration 0011's backfill.
fn migrate_connection(
    conn: &mut Connection,
    settings: &MigrationSettings,
    now_ms: i64,
) -> anyhow::Result<MigrationReport> {
    let mut report = migrate::run(conn)?;
    if !fill_types::filled(conn)? {
        let started = std::time::Instant::now();
        let filled = fill_types::fill(conn, settings.batch_rows, now_ms)?;
        report.filled = Some((filled, started.elapsed()));
    }
    Ok(report)
}

/// `abstore migrate` on SQLite: open the database as its one process (a
/// file another process serves is refused, naming it), migrate, close.
pub fn migrate(
    location: &Location,
    settings: &MigrationSettings,
    now_ms: i64,
) -> anyhow::Result<MigrationReport> {
    // Declared first, so dropped last: the guard's descriptor outlives the
    // connection (see `FileGuard`).
    let (_guard, mut conn) = match location {
        Location::Memory => (None, Connection::open_in_memory()?),
        Location::File(path) => {
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent)?;
            }
            let guard = lock_database(path)?;
            let conn =
                Connection::open(path).with_context(|| format!("opening {}", path.display()))?;
            (Some(guard), conn)
        }
    };
    configure(&conn, *location == Location::Memory)?;
    migrate_connection(&mut conn, settings, now_ms)
}

/// Where jobs for the write connection go.
enum Writer {
    /// A file's: the writer thread.
    Thread(Sender<Job>),
    /// In memory: run by the callers themselves.
    Combining(Arc<Combining>),
}

impl Writer {
    fn submit(&self, job: Job, length: Length) -> StoreResult<()> {
        match self {
            Writer::Thread(jobs) => jobs
                .send(job)
                .map_err(|_| StoreError::Commit("the SQLite writer has stopped".into())),
            Writer::Combining(combining) => {
                combining.submit(job, length);
                Ok(())
            }
        }
    }
}

pub struct SqliteBackend {
    writer: Writer,
    /// `None` in memory: reads go to the writer.
    readers: Option<Arc<Readers>>,
    pool_size: u32,
    clock: Arc<dyn Clock>,
    /// The bounds of streamed reads.
    reads: StreamedReads,
    /// Builds' rendered records, for `GET /builds`.
    build_records: Option<Arc<BuildRecordCache>>,
    /// A file's writer thread, joined when the store is dropped: it holds
    /// the file's guard, which must be gone before the same process may
    /// open the file again.
    writer_thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for SqliteBackend {
    /// Stop the writer thread and wait for it: it answers the jobs already
    /// queued, closes its connection, then releases its share of the
    /// file's guard. The thread stops once its queue's sender is gone, so
    /// the sender is swapped for one whose queue nobody reads.
    fn drop(&mut self) {
        if let Writer::Thread(jobs) = &mut self.writer {
            drop(std::mem::replace(jobs, std::sync::mpsc::channel().0));
        }
        if let Some(thread) = self.writer_thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the SQLite writer thread panicked");
        }
    }
}

impl SqliteBackend {
    pub async fn connect(
        location: &Location,
        options: &StoreOptions,
        clock: Arc<dyn Clock>,
    ) -> anyhow::Result<Self> {
        // Declared first, so dropped last if a step below fails: the guard's
        // descriptor outlives every connection (see `FileGuard`).
        let (guard, mut conn, readers) = match location {
            Location::Memory => (None, Connection::open_in_memory()?, None),
            Location::File(path) => {
                if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                    std::fs::create_dir_all(parent)?;
                }
                let guard = if options.exclusive {
                    Some(Arc::new(lock_database(path)?))
                } else {
                    None
                };
                let conn = Connection::open(path)
                    .with_context(|| format!("opening {}", path.display()))?;
                let readers = Readers::new(
                    path.clone(),
                    options.pool_size,
                    options.acquire_timeout,
                    guard.clone(),
                );
                (guard, conn, Some(Arc::new(readers)))
            }
        };
        configure(&conn, *location == Location::Memory)?;
        if options.migrate {
            migrate_connection(&mut conn, &options.migration, clock.now_ms())?.log();
        } else if fill_types::unfinished(&conn)? {
            anyhow::bail!(
                "events stored before migration 0011 have no type column yet: \
                 run `abstore migrate` (or start without --no-migrate)"
            );
        }
        let (writer, writer_thread) = if *location == Location::Memory {
            (Writer::Combining(Combining::new(conn)), None)
        } else {
            let (jobs, queue) = std::sync::mpsc::channel();
            let thread = std::thread::Builder::new()
                .name("abstore-sqlite-writer".into())
                .spawn(move || writer::run(conn, queue, guard))?;
            (Writer::Thread(jobs), Some(thread))
        };
        Ok(SqliteBackend {
            writer,
            writer_thread,
            readers,
            pool_size: options.pool_size.max(1),
            clock,
            reads: options.streamed_reads(),
            build_records: options.build_records(),
        })
    }

    /// Queue `op` for the write connection and await its answer: what
    /// `answer` makes of its outcome once the batch committed.
    async fn run_on_writer<T: Send + 'static, W: Send + 'static>(
        &self,
        length: Length,
        op: impl FnOnce(&mut Conn<'_>) -> StoreResult<Written<W>> + Send + 'static,
        answer: impl FnOnce(Written<W>) -> T + Send + 'static,
    ) -> StoreResult<T> {
        let (reply, replied) = tokio::sync::oneshot::channel();
        let clock = self.clock.clone();
        let job: Job = Box::new(move |conn: Option<&mut Connection>| {
            let Some(conn) = conn else {
                // Refused unrun: `finish` is told why.
                return Done {
                    keep: false,
                    failed: None,
                    finish: Box::new(move |refused| {
                        let why = refused.err().map_or_else(
                            || StoreError::Commit("the SQLite writer refused the write".into()),
                            StoreError::from,
                        );
                        let _ = reply.send(Err(why));
                    }),
                };
            };
            match op(&mut Conn::new(conn, &*clock)) {
                Ok(written) => Done {
                    keep: written.keep,
                    failed: None,
                    finish: Box::new(move |committed| {
                        let _ = reply.send(committed.map(|()| answer(written)).map_err(Into::into));
                    }),
                },
                Err(err) => {
                    let err = errors::classify(err);
                    Done {
                        keep: false,
                        failed: Some(Failure::of_store(&err)),
                        finish: Box::new(move |_| {
                            let _ = reply.send(Err(err));
                        }),
                    }
                }
            }
        });
        self.writer.submit(job, length)?;
        replied
            .await
            .map_err(|_| StoreError::Commit("the SQLite writer refused the write".into()))?
    }
}

impl Backend for SqliteBackend {
    type Tx<'t> = Conn<'t>;
    type Read<'r> = Conn<'r>;

    /// A job for the write connection, answered once its batch committed.
    async fn write<T, F>(&self, op: F, after_commit: AfterCommit) -> StoreResult<T>
    where
        T: Send + 'static,
        F: for<'a, 't> FnOnce(&'a mut Self::Tx<'t>) -> OpFuture<'a, Written<T>> + Send + 'static,
    {
        self.run_on_writer(
            Length::Short,
            move |conn| run_synchronously(op(conn)),
            move |written| after_commit.answer(written),
        )
        .await
    }

    /// On a pooled read-only connection (or, in memory, on the writer's
    /// connection, where it commits nothing).
    async fn read<T, F>(&self, op: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: for<'a, 'r> FnOnce(&'a mut Self::Read<'r>) -> OpFuture<'a, T> + Send + 'static,
    {
        match &self.readers {
            Some(readers) => {
                let clock = self.clock.clone();
                readers
                    .run(move |conn| run_synchronously(op(&mut Conn::new(conn, &*clock))))
                    .await
            }
            None => {
                self.run_on_writer(
                    Length::Short,
                    move |conn| Ok(Written::unchanged(run_synchronously(op(conn))?)),
                    |read| read.value,
                )
                .await
            }
        }
    }

    /// A file's: on a reader's blocking task, pieces sent as they fill. In
    /// memory: gathered whole by the write connection on the blocking pool
    /// (the rows are in memory anyway, the one connection must not wait for
    /// a client, and a long listing must not hold a runtime worker).
    async fn stream(&self, listing: Listing) -> StoreResult<Rows> {
        match &self.readers {
            Some(readers) => {
                let clock = self.clock.clone();
                let records = self.build_records.clone();
                readers
                    .stream(&self.reads, move |conn, sink, handle| {
                        let mut conn = Conn::new(conn, &*clock);
                        handle.block_on(stream_listing(
                            &mut conn,
                            &listing,
                            records.as_deref(),
                            sink,
                        ))
                    })
                    .await
            }
            None => {
                let records = self.build_records.clone();
                self.run_on_writer(
                    Length::Long,
                    move |conn| {
                        let mut sink = RowSink::gathering();
                        run_synchronously(stream_listing(
                            conn,
                            &listing,
                            records.as_deref(),
                            &mut sink,
                        ))?;
                        Ok(Written::unchanged(sink.into_complete(())))
                    },
                    |read| read.value,
                )
                .await
            }
        }
    }

    fn pool_stats(&self) -> PoolStats {
        match &self.readers {
            Some(readers) => readers.stats(self.pool_size),
            None => PoolStats {
                size: 1,
                idle: 1,
                max: 1,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rusqlite::Connection;
    use serde_json::Map;

    use super::writer::{Done, Failure, Job};
    use super::{Location, SqliteBackend};
    use crate::clock::TestClock;
    use crate::notify::Notifier;
    use crate::protocol::{ResourceKind, ResourceRef};
    use crate::store::api::{Builds as _, Events as _, NewEvent};
    use crate::store::engine::Engine;
    use crate::store::error::StoreError;
    use crate::store::options::StoreOptions;
    use crate::store::retention::Retention;

    /// A job running `f` on the writer's connection inside a batch; the
    /// receiver gets the batch's result.
    fn job_running(
        f: impl FnOnce(&Connection) + Send + 'static,
    ) -> (Job, tokio::sync::oneshot::Receiver<Result<(), Failure>>) {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |conn: Option<&mut Connection>| {
            if let Some(conn) = conn {
                f(conn);
            }
            Done {
                keep: true,
                failed: None,
                finish: Box::new(move |committed| {
                    let _ = answer.send(committed);
                }),
            }
        });
        (job, answered)
    }

    /// Set the writer connection's `max_page_count` to its page count plus
    /// `room` (SQLite fails a write that needs more with `SQLITE_FULL`,
    /// exactly as on a full disk).
    async fn limit_growth(store: &SqliteBackend, room: i64) {
        let (job, answered) = job_running(move |conn| {
            let pages: i64 = conn
                .pragma_query_value(None, "page_count", |row| row.get(0))
                .unwrap();
            conn.pragma_update(None, "max_page_count", pages + room)
                .unwrap();
        });
        store.writer.submit(job, super::Length::Short).unwrap();
        answered.await.unwrap().unwrap();
    }

    fn event(n: usize) -> NewEvent {
        NewEvent {
            actor_json: r#"{"kind":"kernel"}"#.into(),
            type_json: r#""observation.recorded""#.into(),
            // Two to three pages each.
            payload_json: format!(r#"{{"n":{n},"pad":"{}"}}"#, "x".repeat(8000)),
        }
    }

    /// One group commit of 40 appends on a database that may grow by one
    /// page, less than any of them needs: `SQLITE_FULL`, after which SQLite
    /// rolls back the statement or the whole transaction, its choice (it
    /// depends on where the page allocation fails, so on the schema's
    /// layout: with room for a few pages the first append once fitted and
    /// a later one rolled the whole batch back; since migration 0010 the
    /// same room fails a statement alone). Either way every append of the
    /// batch answers `StoreError::Full`, nothing of them is kept, and the
    /// writer goes on: once the database may grow, the same appends succeed
    /// on the same connection.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_full_database_fails_the_whole_batch_and_the_writer_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let store = Engine::new(
            SqliteBackend::connect(
                &Location::File(dir.path().join("full.db")),
                &StoreOptions::default(),
                Arc::new(TestClock::new(1_784_116_800_000)),
            )
            .await
            .unwrap(),
            Retention::default(),
            crate::store::Bounds::default(),
            Arc::new(Notifier::new()),
        );
        let build = ResourceRef::new(ResourceKind::Build, "b");
        let mut attrs = Map::new();
        attrs.insert("repo".into(), "acme/widgets".into());
        store.create_build("b", attrs).await.unwrap();
        store.append(&build, event(0), None).await.unwrap();
        limit_growth(&store.backend, 1).await;

        // Hold the writer in a job of its own until every append is
        // queued, so that they are drained into one batch.
        let (release, released) = std::sync::mpsc::channel::<()>();
        let (hold, held) = job_running(move |_| {
            let _ = released.recv();
        });
        store
            .backend
            .writer
            .submit(hold, super::Length::Short)
            .unwrap();
        let mut appends: Vec<_> = (1..=40)
            .map(|n| store.append(&build, event(n), None))
            .collect();
        for append in &mut appends {
            // The first poll queues the job, then waits for its answer.
            assert!(futures_util::poll!(append).is_pending());
        }
        release.send(()).unwrap();
        let _ = held.await;
        for (n, append) in (1..).zip(appends) {
            match append.await {
                Err(StoreError::Full(_)) => {}
                other => panic!("append {n}: not refused as full: {other:?}"),
            }
        }
        assert_eq!(store.events_page(&build, 0, 1000).await.unwrap().len(), 1);

        limit_growth(&store.backend, 1_000_000).await;
        for n in 1..=40 {
            store.append(&build, event(n), None).await.unwrap();
        }
        let stored: Vec<u64> = store
            .events_page(&build, 0, 1000)
            .await
            .unwrap()
            .iter()
            .map(|envelope| {
                let envelope: serde_json::Value = serde_json::from_str(envelope).unwrap();
                envelope["payload"]["n"].as_u64().unwrap()
            })
            .collect();
        assert_eq!(stored, (0..=40).collect::<Vec<u64>>());
    }
}
