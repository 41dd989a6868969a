//! The production backend: PostgreSQL as the single source of truth for any
//! number of replicas. The engine runs the operations over `primitives`;
//! each write runs in its own task so that a request dropped mid-way never
//! cancels a transaction halfway (docs/decisions.md, 14), and so does each
//! streamed read, which may wait for its client.

mod connections;
mod errors;
mod fill_types;
mod migrate;
mod primitives;

use std::sync::Arc;
use std::time::Duration;

use sqlx::Postgres;
use sqlx::postgres::{PgArguments, PgConnectOptions, PgPool, PgPoolOptions};

use self::connections::Connections;
use self::primitives::{PgRead, PgTx};
use crate::clock::Clock;
use crate::notify::Notifier;
use crate::protocol::{ResourceKind, ResourceRef};
use crate::store::api::PoolStats;
use crate::store::engine::{AfterCommit, Backend, OpFuture, Written};
use crate::store::error::{StoreError, StoreResult};
use crate::store::listing::stream_listing;
use crate::store::migration::{MigrationReport, MigrationSettings, Progress};
use crate::store::options::StoreOptions;
use crate::store::record_cache::BuildRecordCache;
use crate::store::rows::{Listing, Rows, StreamedReads};

/// The channel every replica listens on; payloads name a resource, never content.
pub const CHANNEL: &str = "abstore_events";

/// One statement notifying a batch of resources (payloads `kind:id`).
const PUBLISH: &str = "SELECT pg_notify('abstore_events', p) FROM unnest($1::text[]) AS p";

/// Payloads per NOTIFY statement.
const PUBLISH_BATCH: usize = 512;

/// A pooled connection idle this long is checked (a ping) before use; one
/// used more recently is handed out as is, saving a round trip per request
/// under load. A dead one then fails its statement, marking the database
/// down if it is.
const PING_IF_IDLE: Duration = Duration::from_secs(1);

/// The LISTEN connection's reconnect delays: doubling from the first to the last.
const LISTEN_BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(1));

/// Start a statement, counting it: `abstore_db_queries_total` is how the
/// held-read budget (a handful of queries per second per process, whatever
/// the number of held reads) is measured.
fn counted(sql: &'static str) -> sqlx::query::Query<'static, Postgres, PgArguments> {
    metrics::counter!("abstore_db_queries_total").increment(1);
    sqlx::query(sql)
}

pub struct PgBackend {
    connections: Arc<Connections>,
    clock: Arc<dyn Clock>,
    published: tokio::sync::mpsc::UnboundedSender<String>,
    /// The bounds of streamed reads.
    reads: StreamedReads,
    /// Builds' rendered records, for `GET /builds`.
    build_records: Option<Arc<BuildRecordCache>>,
    /// Whether writes try their one-statement fast paths before the
    /// transaction: always, but in the contract case that holds the two
    /// paths against each other.
    fast_paths: bool,
}

impl PgBackend {
    /// Connect (and migrate, when `options.migrate`; else wait for another
    /// process to have migrated), saying how far it got in `progress`; the
    /// LISTEN connection wakes this process's held reads through
    /// `notifier` for writes by any replica.
    pub async fn connect(
        connect: &PgConnectOptions,
        options: &StoreOptions,
        clock: Arc<dyn Clock>,
        notifier: Arc<Notifier>,
        progress: &Progress,
    ) -> anyhow::Result<Self> {
        let connect = connect.clone().application_name("abstore");
        // One direct connection first: a pool only reports "timed out" after
        // retrying, where this names the cause (refused, auth, no database).
        use sqlx::Connection as _;
        sqlx::PgConnection::connect_with(&connect)
            .await?
            .close()
            .await?;
        // The floor is opened here, before the server listens, and kept by
        // sqlx's maintenance task (a connection closed for its age or
        // idleness is replaced in the background): a request below it
        // never waits for a connection to be opened (issue 21).
        let pool_size = options.pool_size.max(1);
        let pool = PgPoolOptions::new()
            .max_connections(pool_size)
            .min_connections(options.min_connections.min(pool_size))
            .acquire_timeout(options.acquire_timeout)
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for >= PING_IF_IDLE {
                        conn.ping().await?;
                    }
                    Ok(true)
                })
            })
            .connect_with(connect.clone())
            .await?;
        if options.migrate {
            migrate::migrate(&connect, &options.migration, clock.now_ms(), progress)
                .await?
                .log();
        } else {
            let unknown = migrate::await_schema(&connect, &options.migration, progress).await?;
            MigrationReport {
                unknown,
                ..MigrationReport::default()
            }
            .log();
        }
        let (published, pending) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(publish_batches(pool.clone(), pending));
        let connections = Arc::new(Connections::new(
            pool,
            options.unavailable_acquire_timeout,
            options.write_connections,
        ));
        tokio::spawn(listen(connect, connections.clone(), notifier));
        Ok(PgBackend {
            connections,
            clock,
            published,
            reads: options.streamed_reads(),
            build_records: options.build_records(),
            fast_paths: true,
        })
    }

    /// Every write takes the transaction path: the contract's witness that
    /// a fast path answers as the rule does (`store/contract/events.rs`).
    #[cfg(test)]
    pub(crate) fn without_fast_paths(self) -> Self {
        PgBackend {
            fast_paths: false,
            ..self
        }
    }
}

/// `abstore migrate` on PostgreSQL: migrate and close (no pool, no LISTEN).
pub async fn migrate(
    connect: &PgConnectOptions,
    settings: &MigrationSettings,
    now_ms: i64,
    progress: &Progress,
) -> anyhow::Result<MigrationReport> {
    migrate::migrate(connect, settings, now_ms, progress).await
}

impl Backend for PgBackend {
    type Tx<'t> = PgTx;
    type Read<'r> = PgRead<'r>;

    /// In its own task, as one fast-path statement or in one transaction,
    /// begun on its first step: it commits (when its outcome is kept) or
    /// rolls back whatever happens to the caller. After a commit, besides
    /// `after_commit`, the other replicas are told (NOTIFY, batched by one
    /// task: it takes a database-wide lock at commit, so it stays out of the
    /// append transactions; a notification lost to a crash is covered by
    /// the sweep).
    async fn write<T, F>(&self, op: F, after_commit: AfterCommit) -> StoreResult<T>
    where
        T: Send + 'static,
        F: for<'a, 't> FnOnce(&'a mut Self::Tx<'t>) -> OpFuture<'a, Written<T>> + Send + 'static,
    {
        let db = self.connections.clone();
        let clock = self.clock.clone();
        let published = self.published.clone();
        let fast_paths = self.fast_paths;
        let outcome = tokio::spawn(async move {
            let mut tx = PgTx::new(db.acquire().await?, clock, fast_paths);
            // An error drops `tx`, which rolls back a transaction begun.
            let written = op(&mut tx).await?;
            tx.finish(written.keep).await?;
            let payload = written.wake.as_ref().and_then(notify_payload);
            let value = after_commit.answer(written);
            if let Some(payload) = payload {
                let _ = published.send(payload);
            }
            Ok(value)
        })
        .await
        .map_err(|err| StoreError::Corrupt(format!("store task failed: {err}")))?;
        self.connections.record_outcome(outcome)
    }

    /// In the caller's task, on one pooled connection.
    async fn read<T, F>(&self, op: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: for<'a, 'r> FnOnce(&'a mut Self::Read<'r>) -> OpFuture<'a, T> + Send + 'static,
    {
        let mut read = PgRead::new(&self.connections);
        let outcome = op(&mut read).await;
        self.connections.record_outcome(outcome)
    }

    /// In a task of its own, whose answer begins with its first piece;
    /// rows are rendered as sqlx hands them over from the socket. A read
    /// its client left mid-answer closes its connection rather than
    /// returning it: the rest of the statement's rows would otherwise be
    /// read and thrown away by the connection's next user.
    async fn stream(&self, listing: Listing) -> StoreResult<Rows> {
        let (mut sink, pending) = self.reads.sink();
        let connections = self.connections.clone();
        let records = self.build_records.clone();
        tokio::spawn(async move {
            let mut read = PgRead::new(&connections);
            let outcome = stream_listing(&mut read, &listing, records.as_deref(), &mut sink).await;
            drop(read);
            sink.finish(connections.record_outcome(outcome)).await;
        });
        pending.start().await
    }

    fn pool_stats(&self) -> PoolStats {
        let pool = self.connections.pool();
        PoolStats {
            size: pool.size(),
            idle: u32::try_from(pool.num_idle()).unwrap_or(u32::MAX),
            max: pool.options().get_max_connections(),
        }
    }
}

/// The NOTIFY payload naming a resource (`kind:id`; never content), or
/// `None` when it would exceed PostgreSQL's 8000-byte limit, in which case
/// the sweep wakes the readers instead.
pub(crate) fn notify_payload(resource: &ResourceRef) -> Option<String> {
    let payload = format!("{}:{}", resource.kind.tag(), resource.id);
    (payload.len() < 7900).then_some(payload)
}

/// Parse a NOTIFY payload back into the resource it names.
pub(crate) fn parse_notify_payload(payload: &str) -> Option<ResourceRef> {
    let (tag, id) = payload.split_once(':')?;
    let kind = ResourceKind::from_tag(tag)?;
    Some(ResourceRef::new(kind, id))
}

/// Send queued notifications, as many per statement as are waiting.
async fn publish_batches(pool: PgPool, mut pending: tokio::sync::mpsc::UnboundedReceiver<String>) {
    while let Some(first) = pending.recv().await {
        let mut batch = vec![first];
        while batch.len() < PUBLISH_BATCH {
            match pending.try_recv() {
                Ok(payload) => batch.push(payload),
                Err(_) => break,
            }
        }
        batch.sort_unstable();
        batch.dedup();
        if let Err(err) = counted(PUBLISH).bind(&batch).execute(&pool).await {
            tracing::warn!(error = %err, count = batch.len(), "NOTIFY failed; the sweep will wake those readers");
        }
    }
}

/// The process's one LISTEN connection: fans notifications out to local
/// held reads. It reconnects itself (sqlx's own reconnect would wait out a
/// pool timeout with the connection gauge still 1), backing off from 0.1 s
/// to 1 s; `abstore_listen_connected` follows the real connection. A failed
/// connect tells the database it is down, so requests stop waiting out the
/// long acquire bound at once. Notifications sent while it is down are
/// lost, which the once-a-second sweep covers.
async fn listen(connect: PgConnectOptions, db: Arc<Connections>, notifier: Arc<Notifier>) {
    let mut backoff = LISTEN_BACKOFF.0;
    // Logged once per loss, not once per attempt.
    let mut quiet = false;
    loop {
        match listener(&connect).await {
            Ok(mut listener) => {
                db.mark_up();
                backoff = LISTEN_BACKOFF.0;
                quiet = false;
                metrics::gauge!("abstore_listen_connected").set(1.0);
                tracing::info!("LISTEN connection up");
                let lost = loop {
                    match listener.try_recv().await {
                        Ok(Some(note)) => {
                            if let Some(resource) = parse_notify_payload(note.payload()) {
                                notifier.notify(&resource);
                            }
                        }
                        Ok(None) => break "connection closed".to_owned(),
                        Err(err) => break err.to_string(),
                    }
                };
                metrics::gauge!("abstore_listen_connected").set(0.0);
                tracing::warn!(error = %lost, "LISTEN connection lost; reconnecting");
                // Reconnect at once: a failure is how an outage is noticed.
                continue;
            }
            Err(err) => {
                metrics::gauge!("abstore_listen_connected").set(0.0);
                if errors::is_outage(&err) {
                    db.mark_down(&err);
                }
                if !quiet {
                    tracing::warn!(error = %err, "LISTEN connection could not connect; retrying");
                    quiet = true;
                }
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(LISTEN_BACKOFF.1);
    }
}

/// A LISTEN connection on `CHANNEL`. The connect is made directly first: a
/// pool only reports "timed out" after retrying a refused connection.
async fn listener(connect: &PgConnectOptions) -> Result<sqlx::postgres::PgListener, sqlx::Error> {
    use sqlx::Connection as _;
    sqlx::PgConnection::connect_with(connect)
        .await?
        .close()
        .await?;
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .acquire_timeout(Duration::from_secs(5))
        .test_before_acquire(false)
        .connect_lazy_with(connect.clone());
    let mut listener = sqlx::postgres::PgListener::connect_with(&pool).await?;
    // A lost connection ends `try_recv` with `Ok(None)` at once; the loop
    // above reconnects.
    listener.eager_reconnect(false);
    listener.listen(CHANNEL).await?;
    Ok(listener)
}
