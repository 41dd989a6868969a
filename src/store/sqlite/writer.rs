//! The writer thread (DESIGN decision 13): one OS thread owns the write
//! connection and commits queued jobs in groups.
//!
//! It blocks for the first job, drains whatever else is already queued (up
//! to [`MAX_BATCH`]), opens one `BEGIN IMMEDIATE`, runs each job inside its
//! own `SAVEPOINT` (a failed or no-op job rolls back only itself), commits
//! once — one fsync for the whole batch — and only then answers every job.
//! A failed `COMMIT` fails every job of the batch. A job runs to the end
//! whether or not anyone still waits for its answer (DESIGN decision 14).

use std::sync::mpsc::{Receiver, TryRecvError};

use rusqlite::Connection;

/// Jobs per transaction: bounds the latency one batch adds to its first job.
const MAX_BATCH: usize = 256;

/// A unit of work for the writer: runs against the connection inside its
/// savepoint and says whether to keep its changes; `finish` is called with
/// the batch's commit result.
pub(super) type Job = Box<dyn FnOnce(&Connection) -> Done + Send>;

pub(super) struct Done {
    pub keep: bool,
    pub finish: Box<dyn FnOnce(Result<(), String>) + Send>,
}

/// Run batches until every sender is gone (the store was dropped).
pub(super) fn run(conn: Connection, jobs: Receiver<Job>) {
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        run_batch(&conn, batch);
    }
}

fn run_batch(conn: &Connection, batch: Vec<Job>) {
    if let Err(err) = conn.execute_batch("BEGIN IMMEDIATE") {
        let message = err.to_string();
        tracing::error!(error = %message, "SQLite BEGIN failed");
        // Outside a transaction nothing may run: dropping the jobs unruns
        // them, and their callers see the write refused.
        drop(batch);
        return;
    }
    let mut finished = Vec::with_capacity(batch.len());
    for job in batch {
        finished.push(run_job(conn, job));
        // Some errors (disk full, I/O) make SQLite roll the whole
        // transaction back by itself: nothing of this batch is kept, so
        // every job of it fails and the rest are refused unrun (dropped
        // with the iterator on return).
        if conn.is_autocommit() {
            tracing::error!("SQLite rolled the batch's transaction back");
            for finish in finished {
                finish(Err("the transaction was rolled back".into()));
            }
            return;
        }
    }
    let committed = conn.execute_batch("COMMIT").map_err(|err| {
        let message = err.to_string();
        tracing::error!(error = %message, "SQLite group COMMIT failed");
        if !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        message
    });
    for finish in finished {
        finish(committed.clone());
    }
}

/// One job inside its savepoint. A savepoint that cannot be opened or
/// closed fails the job alone.
fn run_job(conn: &Connection, job: Job) -> Box<dyn FnOnce(Result<(), String>) + Send> {
    if let Err(err) = conn.execute_batch("SAVEPOINT job") {
        tracing::error!(error = %err, "SQLite SAVEPOINT failed");
        drop(job);
        return Box::new(|_| ());
    }
    // A panicking job fails alone: its answer channel is dropped (the
    // caller sees an error) and its savepoint is rolled back.
    let done = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(conn))) {
        Ok(done) => done,
        Err(_) => {
            tracing::error!("a SQLite write job panicked; rolled back");
            Done {
                keep: false,
                finish: Box::new(|_| ()),
            }
        }
    };
    let closed = if done.keep {
        conn.execute_batch("RELEASE job")
    } else {
        conn.execute_batch("ROLLBACK TO job; RELEASE job")
    };
    match closed {
        Ok(()) => done.finish,
        Err(err) => {
            let message = err.to_string();
            let _ = conn.execute_batch("ROLLBACK TO job; RELEASE job");
            Box::new(move |_| (done.finish)(Err(message)))
        }
    }
}
