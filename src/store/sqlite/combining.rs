//! The in-memory store's writer: no thread of its own. The caller that
//! finds the connection free runs the queued jobs itself, on the thread it
//! is already on (flat combining); a caller that finds it busy leaves its
//! job in the queue for the one running them.
//!
//! Why not the writer thread the SQLite file uses (`writer`): in memory a
//! job is a few tens of microseconds of CPU and never waits for a disk, so
//! handing it to another thread and its answer back cost more than the job
//! (two cross-thread wake-ups an append, measured in docs/benchmarks.md,
//! "Issue 36, fifth pass"). A file's commit waits for `fsync`, which must
//! not hold a runtime worker: files keep the thread.
//!
//! Two kinds of work still leave the caller's thread, for the tokio
//! blocking pool: a job marked long (a whole listing, gathered in memory),
//! and whatever is still queued after one caller has run [`INLINE_JOBS`]
//! jobs, so that no request keeps a runtime worker busy with other
//! requests' writes for long.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use rusqlite::Connection;

use super::writer::{self, Job};

/// Jobs one caller runs on its own thread before handing the rest of the
/// queue to the blocking pool.
const INLINE_JOBS: usize = 64;

pub(super) struct Combining {
    /// Jobs waiting for whoever holds `conn`.
    queue: Mutex<VecDeque<Job>>,
    /// Held by the one caller running jobs; `try_lock` elects it.
    conn: Mutex<Connection>,
}

/// Where a submitted job may run.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Length {
    /// Short: on the submitter's thread when the connection is free.
    Short,
    /// Possibly long (a whole listing): on the blocking pool.
    Long,
}

impl Combining {
    pub fn new(conn: Connection) -> Arc<Combining> {
        Arc::new(Combining {
            queue: Mutex::new(VecDeque::new()),
            conn: Mutex::new(conn),
        })
    }

    /// Queue `job`; run the queue here if `length` allows and nobody else
    /// is running it. Must be called inside a tokio runtime (the blocking
    /// pool takes what is not run here).
    pub fn submit(self: &Arc<Combining>, job: Job, length: Length) {
        self.lock_queue().push_back(job);
        match length {
            Length::Short => self.drain(INLINE_JOBS),
            Length::Long => self.drain_elsewhere(),
        }
    }

    /// Run queued jobs while this caller holds the connection, up to
    /// `budget` of them; what is left then goes to the blocking pool.
    ///
    /// No job is stranded: a submitter queues before it tries the lock,
    /// and the holder looks at the queue again after releasing it, so
    /// either the holder sees the job or the submitter's `try_lock` comes
    /// after the release.
    fn drain(self: &Arc<Combining>, mut budget: usize) {
        loop {
            let Ok(mut conn) = self.conn.try_lock().or_else(|err| match err {
                std::sync::TryLockError::Poisoned(poisoned) => Ok(poisoned.into_inner()),
                std::sync::TryLockError::WouldBlock => Err(()),
            }) else {
                return;
            };
            // A panic outside a job's own guard (none is known) would have
            // left the transaction open: end it before the next batch.
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            while budget > 0 {
                let batch = self.take(budget);
                if batch.is_empty() {
                    break;
                }
                budget -= batch.len();
                writer::run_batch(&mut conn, batch);
            }
            drop(conn);
            if self.lock_queue().is_empty() {
                return;
            }
            if budget == 0 {
                self.drain_elsewhere();
                return;
            }
        }
    }

    /// Hand the queue to a thread of the blocking pool.
    fn drain_elsewhere(self: &Arc<Combining>) {
        let combining = Arc::clone(self);
        // Its handle is not kept: the jobs answer their own callers.
        drop(tokio::task::spawn_blocking(move || {
            combining.drain(usize::MAX);
        }));
    }

    /// Up to `most` jobs (and at most a batch) from the front of the queue.
    fn take(&self, most: usize) -> Vec<Job> {
        let mut queue = self.lock_queue();
        let n = queue.len().min(most).min(writer::MAX_BATCH);
        queue.drain(..n).collect()
    }

    fn lock_queue(&self) -> std::sync::MutexGuard<'_, VecDeque<Job>> {
        // Only pushes and pops happen under this lock: a panic cannot
        // leave the queue half-changed.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::thread::ThreadId;

    use rusqlite::Connection;

    use super::{Combining, Length};
    use crate::store::sqlite::writer::{Done, Job};

    /// A job that inserts `n` and tells `answer` on which thread it ran
    /// once its batch committed.
    fn insert(n: i64) -> (Job, tokio::sync::oneshot::Receiver<ThreadId>) {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |conn: Option<&mut Connection>| {
            let conn = conn.expect("run, not refused");
            conn.execute("INSERT INTO t (n) VALUES (?1)", [n]).unwrap();
            let ran_on = std::thread::current().id();
            Done {
                keep: true,
                failed: None,
                finish: Box::new(move |committed| {
                    committed.unwrap();
                    let _ = answer.send(ran_on);
                }),
            }
        });
        (job, answered)
    }

    /// A job that inserts `n` and keeps it only if `keep`.
    fn insert_keeping(n: i64, keep: bool) -> (Job, tokio::sync::oneshot::Receiver<()>) {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |conn: Option<&mut Connection>| {
            let conn = conn.expect("run, not refused");
            conn.execute("INSERT INTO t (n) VALUES (?1)", [n]).unwrap();
            Done {
                keep,
                failed: None,
                finish: Box::new(move |committed| {
                    committed.unwrap();
                    let _ = answer.send(());
                }),
            }
        });
        (job, answered)
    }

    fn combining() -> Arc<Combining> {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (n INTEGER PRIMARY KEY)")
            .unwrap();
        Combining::new(conn)
    }

    fn count(combining: &Combining) -> i64 {
        let conn = combining.conn.lock().unwrap();
        conn.query_row("SELECT count(*) FROM t", [], |row| row.get(0))
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_short_job_runs_on_its_callers_thread_and_a_long_one_elsewhere() {
        let combining = combining();
        let (job, ran) = insert(1);
        combining.submit(job, Length::Short);
        assert_eq!(ran.await.unwrap(), std::thread::current().id());
        let (job, ran) = insert(2);
        combining.submit(job, Length::Long);
        assert_ne!(ran.await.unwrap(), std::thread::current().id());
        assert_eq!(count(&combining), 2);
    }

    /// A job that keeps nothing leaves nothing, alone in its transaction
    /// (rolled back) or in a batch (its savepoint rolled back, the others'
    /// changes committed).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_that_keeps_nothing_leaves_nothing_alone_or_in_a_batch() {
        let combining = combining();
        let (job, done) = insert_keeping(1, false);
        combining.submit(job, Length::Short);
        done.await.unwrap();
        assert_eq!(count(&combining), 0);

        let held = combining.conn.lock().unwrap();
        let (dropped, dropped_done) = insert_keeping(2, false);
        let (kept, kept_done) = insert_keeping(3, true);
        combining.submit(dropped, Length::Short);
        combining.submit(kept, Length::Short);
        drop(held);
        // The next caller runs the queue: all three in one batch.
        let (job, done) = insert_keeping(4, true);
        combining.submit(job, Length::Short);
        for answered in [dropped_done, kept_done, done] {
            answered.await.unwrap();
        }
        let conn = combining.conn.lock().unwrap();
        let kept: Vec<i64> = conn
            .prepare("SELECT n FROM t ORDER BY n")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(kept, [3, 4]);
    }

    /// Many callers at once, on both workers: every job runs once and is
    /// answered (none is left in the queue when its submitter found the
    /// connection busy), whoever ran it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_callers_leave_no_job_behind() {
        let combining = combining();
        let callers: Vec<_> = (0..16)
            .map(|caller| {
                let combining = combining.clone();
                tokio::spawn(async move {
                    for i in 0..300 {
                        let (job, ran) = insert(caller * 1000 + i);
                        combining.submit(job, Length::Short);
                        ran.await.unwrap();
                    }
                })
            })
            .collect();
        for caller in callers {
            caller.await.unwrap();
        }
        assert_eq!(count(&combining), 16 * 300);
    }

    /// A caller runs at most `INLINE_JOBS` jobs; the rest of a long queue
    /// is run on the blocking pool, and all of it is answered.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_long_queue_is_handed_to_the_blocking_pool() {
        let combining = combining();
        let queued = super::INLINE_JOBS * 3;
        let mut answers = Vec::new();
        {
            // Hold the connection so that the jobs queue up behind it.
            let held = combining.conn.lock().unwrap();
            for n in 0..queued {
                let (job, ran) = insert(i64::try_from(n).unwrap());
                combining.submit(job, Length::Short);
                answers.push(ran);
            }
            drop(held);
        }
        // Nobody is running the queue now: the next caller runs a batch of
        // it and hands the rest on.
        let (job, last) = insert(-1);
        combining.submit(job, Length::Short);
        let caller = std::thread::current().id();
        let mut elsewhere = 0;
        for ran in answers {
            if ran.await.unwrap() != caller {
                elsewhere += 1;
            }
        }
        last.await.unwrap();
        assert!(elsewhere > 0, "some of the queue ran on the blocking pool");
        assert_eq!(count(&combining), i64::try_from(queued).unwrap() + 1);
    }
}
