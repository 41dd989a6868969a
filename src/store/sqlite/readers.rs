//! Read-only connections for concurrent reads under WAL. Each read is one
//! hop onto tokio's blocking pool with a pooled connection; rows are read
//! there, never one channel round trip per row. The blocking task finishes
//! (and returns its connection) even if the awaiting request is dropped.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use rusqlite::{Connection, OpenFlags};
use tokio::runtime::Handle;
use tokio::sync::Semaphore;

use super::{BUSY_TIMEOUT, FileGuard};
use crate::store::api::PoolStats;
use crate::store::error::{StoreError, StoreResult};
use crate::store::rows::Rows;
use crate::store::rows::{RowSink, StreamedReads};

pub(super) struct Readers {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
    /// Bounds concurrent reads (and so open connections) to the pool size.
    permits: Arc<Semaphore>,
    /// How long a read waits for a turn before it is refused (`Busy`).
    acquire_timeout: std::time::Duration,
    opened: std::sync::atomic::AtomicU32,
    /// The file's guard, declared after `idle` so that it is released
    /// after the pooled connections close (see `FileGuard`).
    _guard: Option<Arc<FileGuard>>,
}

impl Readers {
    pub(super) fn new(
        path: PathBuf,
        size: u32,
        acquire_timeout: std::time::Duration,
        guard: Option<Arc<FileGuard>>,
    ) -> Self {
        Readers {
            path,
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(size.max(1) as usize)),
            acquire_timeout,
            opened: std::sync::atomic::AtomicU32::new(0),
            _guard: guard,
        }
    }

    fn open(&self) -> StoreResult<Connection> {
        let conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        conn.set_prepared_statement_cache_capacity(64);
        self.opened
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(conn)
    }

    fn take(&self) -> StoreResult<Connection> {
        let pooled = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        match pooled {
            Some(conn) => Ok(conn),
            None => self.open(),
        }
    }

    fn give_back(&self, conn: Connection) {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(conn);
    }

    /// A turn: at most the pool size of reads hold a connection at once, and
    /// a read waits for one no longer than PostgreSQL's would for a
    /// connection (`--db-acquire-timeout-ms`).
    async fn permit(&self) -> StoreResult<tokio::sync::OwnedSemaphorePermit> {
        let permit = self.permits.clone().acquire_owned();
        match tokio::time::timeout(self.acquire_timeout, permit).await {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) => Err(StoreError::Corrupt("reader pool closed".into())),
            Err(_) => Err(StoreError::Busy(
                "every database reader is busy; retry shortly (--db-pool-size)",
            )),
        }
    }

    pub(super) async fn run<T: Send + 'static>(
        self: &Arc<Self>,
        op: impl FnOnce(&mut Connection) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        let permit = self.permit().await?;
        let readers = self.clone();
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let mut conn = readers.take()?;
            let out = op(&mut conn);
            readers.give_back(conn);
            out
        })
        .await
        .map_err(|err| StoreError::Corrupt(format!("read task failed: {err}")))?
    }

    /// A streamed read: `op` steps its statement on a pooled connection in
    /// a blocking task, writing rows into the sink and sending pieces as
    /// they fill (through `Handle::block_on`, with the handle it is given);
    /// the answer starts when the first piece (or the whole answer, or its
    /// failure) is ready. The task ends its statement and returns the
    /// connection as soon as the answer ends or the client goes away.
    pub(super) async fn stream(
        self: &Arc<Self>,
        reads: &StreamedReads,
        op: impl FnOnce(&mut Connection, &mut RowSink<()>, &Handle) -> StoreResult<()> + Send + 'static,
    ) -> StoreResult<Rows> {
        let permit = self.permit().await?;
        let (mut sink, pending) = reads.sink();
        let handle = Handle::current();
        let readers = self.clone();
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let outcome = match readers.take() {
                Ok(mut conn) => {
                    let outcome = op(&mut conn, &mut sink, &handle);
                    readers.give_back(conn);
                    outcome
                }
                Err(err) => Err(err),
            };
            handle.block_on(sink.finish(outcome));
        });
        pending.start().await
    }

    pub(super) fn stats(&self, max: u32) -> PoolStats {
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        PoolStats {
            size: self.opened.load(std::sync::atomic::Ordering::Relaxed),
            idle: u32::try_from(idle).unwrap_or(u32::MAX),
            max,
        }
    }
}
