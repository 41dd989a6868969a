//! The writer thread (docs/decisions.md, 13): one OS thread owns the write
//! connection and commits queued jobs in groups.
//!
//! It blocks for the first job, drains whatever else is already queued (up
//! to [`MAX_BATCH`]), opens one `BEGIN IMMEDIATE`, runs each job inside its
//! own `SAVEPOINT` (a failed or no-op job rolls back only itself; a job
//! alone in its batch needs none), commits once — one fsync for the whole
//! batch — and only then answers every job. [`run_batch`] is also what the
//! in-memory store's callers run themselves (`super::combining`).
//! A failed `COMMIT` fails every job of the batch. A job runs to the end
//! whether or not anyone still waits for its answer (docs/decisions.md, 14).
//!
//! A failure never stops the thread: the transaction is rolled back, every
//! job it touched (and every job refused unrun) is answered with the
//! [`Failure`], and the next batch starts afresh. A full disk
//! ([`super::errors`]) is therefore refused write by write and heals by
//! itself: once space is freed, the next `BEGIN … COMMIT` writes the WAL
//! again.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::Instant;

use rusqlite::Connection;

use super::FileGuard;
use crate::store::error::StoreError;

/// Jobs per transaction: bounds the latency one batch adds to its first job.
pub(super) const MAX_BATCH: usize = 256;

/// A unit of work for the writer: runs against the connection inside its
/// savepoint (alone in its batch, inside the batch's transaction) and says
/// whether to keep its changes; `finish` is called with the batch's result
/// (its `COMMIT`'s, or the `ROLLBACK`'s of a lone job that kept nothing). Given no connection, the job is refused
/// unrun: it does nothing, and `finish` is called with why.
pub(super) type Job = Box<dyn FnOnce(Option<&mut Connection>) -> Done + Send>;

pub(super) struct Done {
    pub keep: bool,
    /// Why the job itself failed, when it did: the cause every other job
    /// of the batch is answered with if SQLite rolled the whole
    /// transaction back because of it.
    pub failed: Option<Failure>,
    pub finish: Finish,
}

/// What to call with the batch's result once it is known.
pub(super) type Finish = Box<dyn FnOnce(Result<(), Failure>) + Send>;

/// Why a write was not kept, as every job of a failed batch is told.
#[derive(Clone, Debug)]
pub(super) struct Failure {
    message: String,
    /// The disk under the database is full ([`super::errors::is_storage_full`]).
    full: bool,
}

impl Failure {
    /// `err` as returned on this thread just now: the thread's `errno` is
    /// read here, before anything else can overwrite it.
    pub fn of(err: &rusqlite::Error) -> Failure {
        let errno = std::io::Error::last_os_error();
        Failure {
            message: err.to_string(),
            full: super::errors::is_storage_full(err, &errno),
        }
    }

    /// A store error a job returned (already classified by the job).
    pub fn of_store(err: &StoreError) -> Failure {
        match err {
            StoreError::Full(detail) => Failure {
                message: detail.clone(),
                full: true,
            },
            other => Failure::other(&other.to_string()),
        }
    }

    fn other(message: &str) -> Failure {
        Failure {
            message: message.to_owned(),
            full: false,
        }
    }

    /// Logged where it happened; a full disk only at `DEBUG`: every batch
    /// fails while it lasts, and each refused write is counted and logged
    /// (rate-limited) where it is answered (`storage_full::refused`).
    fn log(&self, what: &str) {
        if self.full {
            tracing::debug!(error = %self.message, "{what}: the disk is full");
        } else {
            tracing::error!(error = %self.message, "{what}");
        }
    }
}

impl From<Failure> for StoreError {
    fn from(failure: Failure) -> StoreError {
        if failure.full {
            StoreError::Full(failure.message)
        } else {
            StoreError::Commit(failure.message)
        }
    }
}

/// Jobs per commit: how many writes shared one fsync (`crate::metrics`
/// describes it and gives it count buckets).
pub const COMMIT_BATCH_JOBS: &str = "abstore_sqlite_commit_batch_jobs";
/// Each batch's time, `BEGIN` until its jobs are answered.
pub const COMMIT_SECONDS: &str = "abstore_sqlite_commit_seconds";

/// Where the writer thread records each batch it commits. Taken once per
/// thread: the server installs its recorder before it opens the store;
/// without one the handles record nothing.
struct CommitBatches {
    jobs: metrics::Histogram,
    seconds: metrics::Histogram,
}

impl CommitBatches {
    fn new() -> CommitBatches {
        CommitBatches {
            jobs: metrics::histogram!(COMMIT_BATCH_JOBS),
            seconds: metrics::histogram!(COMMIT_SECONDS),
        }
    }

    fn record(&self, jobs: usize, took: std::time::Duration) {
        self.jobs.record(jobs as f64);
        self.seconds.record(took.as_secs_f64());
    }
}

/// Run batches until every sender is gone (the store was dropped).
/// The connection closes before `guard` is released (see `FileGuard`).
pub(super) fn run(mut conn: Connection, jobs: Receiver<Job>, guard: Option<Arc<FileGuard>>) {
    let batches = CommitBatches::new();
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        let (size, started) = (batch.len(), Instant::now());
        run_batch(&mut conn, batch);
        batches.record(size, started.elapsed());
    }
    drop(conn);
    drop(guard);
}

/// Answer `jobs` without running them.
fn refuse(jobs: impl IntoIterator<Item = Job>, failure: &Failure) {
    for job in jobs {
        (job(None).finish)(Err(failure.clone()));
    }
}

/// One transaction-control statement, prepared once per connection: each
/// batch runs four of them, and preparing them anew cost an append about
/// 7,000 instructions (docs/benchmarks.md, "Issue 36, fifth pass").
fn control(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

/// Run `batch` in one transaction. A job alone in its batch runs without
/// a savepoint: the transaction is its own, so rolling it back undoes that
/// job and nothing else (two statements fewer for the common case of one
/// client writing at a time).
pub(super) fn run_batch(conn: &mut Connection, batch: Vec<Job>) {
    if let Err(err) = control(conn, "BEGIN IMMEDIATE") {
        let failure = Failure::of(&err);
        failure.log("SQLite BEGIN failed");
        // Outside a transaction nothing may run: the jobs are refused unrun.
        refuse(batch, &failure);
        return;
    }
    let alone = batch.len() == 1;
    let mut kept = false;
    let mut finished = Vec::with_capacity(batch.len());
    let mut jobs = batch.into_iter();
    for job in jobs.by_ref() {
        let done = if alone {
            run_guarded(conn, job)
        } else {
            run_job(conn, job)
        };
        kept |= done.keep;
        finished.push(done.finish);
        // Some errors (disk full, I/O) make SQLite roll the whole
        // transaction back by itself: nothing of this batch is kept, so
        // every job of it fails with the cause, and the rest are refused
        // unrun.
        if conn.is_autocommit() {
            let failure = done
                .failed
                .unwrap_or_else(|| Failure::other("the transaction was rolled back"));
            failure.log("SQLite rolled the batch's transaction back");
            for finish in finished {
                finish(Err(failure.clone()));
            }
            refuse(jobs, &failure);
            return;
        }
    }
    // A lone job that keeps nothing (a read, a refused write) is undone by
    // rolling its transaction back; a batch's are already undone by their
    // savepoints, and its commit keeps the rest.
    let (end, what) = if alone && !kept {
        ("ROLLBACK", "SQLite ROLLBACK failed")
    } else {
        ("COMMIT", "SQLite group COMMIT failed")
    };
    let ended = control(conn, end).map_err(|err| {
        let failure = Failure::of(&err);
        failure.log(what);
        if !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        failure
    });
    for finish in finished {
        finish(ended.clone());
    }
}

/// `job` on `conn`. A panicking job fails alone: it keeps nothing, and its
/// answer channel is dropped, so its caller sees an error.
fn run_guarded(conn: &mut Connection, job: Job) -> Done {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(Some(&mut *conn)))) {
        Ok(done) => done,
        Err(_) => {
            tracing::error!("a SQLite write job panicked; rolled back");
            Done {
                keep: false,
                failed: None,
                finish: Box::new(|_| ()),
            }
        }
    }
}

/// One job inside its savepoint. A savepoint that cannot be opened or
/// closed fails the job alone.
fn run_job(conn: &mut Connection, job: Job) -> Done {
    if let Err(err) = control(conn, "SAVEPOINT job") {
        let failure = Failure::of(&err);
        failure.log("SQLite SAVEPOINT failed");
        let finish = job(None).finish;
        let answer = failure.clone();
        return Done {
            finish: Box::new(move |_| finish(Err(answer))),
            keep: false,
            failed: Some(failure),
        };
    }
    let done = run_guarded(conn, job);
    let closed = if done.keep {
        control(conn, "RELEASE job")
    } else {
        conn.execute_batch("ROLLBACK TO job; RELEASE job")
    };
    match closed {
        Ok(()) => done,
        Err(err) => {
            let failure = Failure::of(&err);
            let _ = conn.execute_batch("ROLLBACK TO job; RELEASE job");
            let answer = failure.clone();
            let finish = done.finish;
            Done {
                finish: Box::new(move |_| finish(Err(answer))),
                keep: false,
                failed: Some(done.failed.unwrap_or(failure)),
            }
        }
    }
}
