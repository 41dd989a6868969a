//! The production backend: PostgreSQL as the single source of truth for any
//! number of replicas. The operations are the shared ones ([`ops`]) over
//! [`prims`]; each write runs in its own task so that a request dropped
//! mid-way never cancels a transaction halfway (docs/decisions.md, 14).

mod database;
mod prims;
mod stream;

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use async_trait::async_trait;
use serde_json::{Map, Value};

use self::database::Database;
use self::prims::{PgRead, PgTx};
use crate::clock::Clock;
use crate::held::Notifier;
use crate::protocol::{ResourceKind, ResourceRef};
use crate::store::ops::{self, Written};
use crate::store::retention::Retention;
use crate::store::{
    ArtifactMeta, CloseOutcome, Listing, MakeEvent, MakeFirstEvent, NewArtifact, NewEvent,
    PoolStats, Record, Rows, Store, StoreError, StoreOptions, StoreResult, StreamRecord,
};

/// A write operation's future over one borrowed transaction (the shape
/// sqlx's own `Connection::transaction` takes).
type OpFuture<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = StoreResult<Written<T>>> + Send + 'a>>;

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

pub struct PgStore {
    db: Arc<Database>,
    clock: Arc<dyn Clock>,
    notifier: Arc<Notifier>,
    published: tokio::sync::mpsc::UnboundedSender<String>,
    retention: Retention,
    /// How long a streamed read waits for its client to take a piece.
    stall: Duration,
}

impl PgStore {
    pub async fn connect(
        connect: &PgConnectOptions,
        options: &StoreOptions,
        clock: Arc<dyn Clock>,
        notifier: Arc<Notifier>,
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
            sqlx::migrate!("migrations/postgres").run(&pool).await?;
        }
        let (published, pending) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(publish_batches(pool.clone(), pending));
        let db = Arc::new(Database::new(pool, options.unavailable_acquire_timeout));
        tokio::spawn(listen(connect, db.clone(), notifier.clone()));
        Ok(PgStore {
            db,
            clock,
            notifier,
            published,
            retention: options.retention.clone(),
            stall: options.stall,
        })
    }

    fn reads(&self) -> PgRead<'_> {
        PgRead::new(&self.db)
    }

    /// Run `op` in its own task, as one fast-path statement or in one
    /// transaction, begun on its first primitive: it commits (when its
    /// outcome is kept) or rolls back whatever happens to the caller. After
    /// a commit, this process's held reads wake and the other replicas are
    /// told (NOTIFY, batched by one task: it takes a database-wide lock at
    /// commit, so it stays out of the append transactions; a notification
    /// lost to a crash is covered by the sweep).
    async fn write<T, F>(&self, op: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: for<'a> FnOnce(&'a mut PgTx) -> OpFuture<'a, T> + Send + 'static,
    {
        let db = self.db.clone();
        let clock = self.clock.clone();
        let notifier = self.notifier.clone();
        let published = self.published.clone();
        let outcome = tokio::spawn(async move {
            let mut tx = PgTx::new(db.acquire().await?, clock);
            // An error drops `tx`, which rolls back a transaction begun.
            let written = op(&mut tx).await?;
            tx.finish(written.keep).await?;
            if written.keep {
                written.pruned.record();
            }
            if let Some(resource) = &written.wake {
                notifier.notify(resource);
                if let Some(payload) = crate::store::notify_payload(resource) {
                    let _ = published.send(payload);
                }
            }
            Ok(written.value)
        })
        .await
        .map_err(|err| StoreError::Corrupt(format!("store task failed: {err}")))?;
        self.db.settle(outcome)
    }
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
        if let Err(err) = crate::store::counted::<sqlx::Postgres>(PUBLISH)
            .bind(&batch)
            .execute(&pool)
            .await
        {
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
async fn listen(connect: PgConnectOptions, db: Arc<Database>, notifier: Arc<Notifier>) {
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
                            if let Some(resource) =
                                crate::store::parse_notify_payload(note.payload())
                            {
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
                if database::is_outage(&err) {
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

#[async_trait]
impl Store for PgStore {
    async fn create_build(&self, slug: &str, attrs: Map<String, Value>) -> StoreResult<Record> {
        let slug = slug.to_owned();
        self.write(move |tx| Box::pin(async move { ops::create_build(tx, &slug, attrs).await }))
            .await
    }

    async fn read(&self, listing: Listing) -> StoreResult<Rows> {
        stream::read(self.db.clone(), listing, self.stall).await
    }

    async fn ensure_repo(&self, repo: &str) -> StoreResult<Record> {
        let r = ResourceRef::new(ResourceKind::Repo, repo);
        if let Some(record) = self.get_record(&r).await? {
            return Ok(record);
        }
        self.write(move |tx| Box::pin(async move { ops::ensure_repo(tx, &r.id).await }))
            .await
    }

    async fn get_record(&self, r: &ResourceRef) -> StoreResult<Option<Record>> {
        self.db.settle(ops::get_record(&mut self.reads(), r).await)
    }

    async fn append(
        &self,
        r: &ResourceRef,
        event: NewEvent,
        expected_seq: Option<i64>,
    ) -> StoreResult<Option<String>> {
        let r = r.clone();
        self.write(move |tx| {
            Box::pin(async move { ops::append(tx, &r, &event, expected_seq).await })
        })
        .await
    }

    async fn events_page(
        &self,
        r: &ResourceRef,
        since: i64,
        limit: i64,
    ) -> StoreResult<Vec<String>> {
        self.db
            .settle(ops::events_page(&mut self.reads(), r, since, limit).await)
    }

    async fn put_artifact(
        &self,
        r: &ResourceRef,
        artifact: NewArtifact,
    ) -> StoreResult<ArtifactMeta> {
        let (r, retention) = (r.clone(), self.retention.clone());
        self.write(move |tx| {
            Box::pin(async move { ops::put_artifact(tx, &r, artifact, &retention).await })
        })
        .await
    }

    async fn deposit(
        &self,
        r: &ResourceRef,
        artifacts: Vec<NewArtifact>,
        make_event: MakeEvent,
    ) -> StoreResult<(String, Vec<ArtifactMeta>)> {
        let (r, retention) = (r.clone(), self.retention.clone());
        self.write(move |tx| {
            Box::pin(async move { ops::deposit(tx, &r, artifacts, &make_event, &retention).await })
        })
        .await
    }

    async fn get_artifact(
        &self,
        r: &ResourceRef,
        kind: &str,
        rev: Option<i64>,
    ) -> StoreResult<Option<ArtifactMeta>> {
        self.db
            .settle(ops::get_artifact(&mut self.reads(), r, kind, rev).await)
    }

    async fn claim_lease(&self, r: &ResourceRef, holder: &str, ttl_ms: i64) -> StoreResult<bool> {
        let (r, holder) = (r.clone(), holder.to_owned());
        self.write(move |tx| {
            Box::pin(async move { ops::claim_lease(tx, &r, &holder, ttl_ms).await })
        })
        .await
    }

    async fn heartbeat(&self, r: &ResourceRef, holder: &str) -> StoreResult<bool> {
        let (r, holder) = (r.clone(), holder.to_owned());
        self.write(move |tx| Box::pin(async move { ops::heartbeat(tx, &r, &holder).await }))
            .await
    }

    async fn release_lease(&self, r: &ResourceRef, holder: &str) -> StoreResult<()> {
        let (r, holder) = (r.clone(), holder.to_owned());
        self.write(move |tx| Box::pin(async move { ops::release_lease(tx, &r, &holder).await }))
            .await
    }

    async fn tails(&self, resources: &[ResourceRef]) -> StoreResult<Vec<(ResourceRef, i64)>> {
        self.db
            .settle(ops::tails(&mut self.reads(), resources).await)
    }

    async fn create_session(
        &self,
        repo: &str,
        id: &str,
        attrs: Map<String, Value>,
        make_event: MakeFirstEvent,
    ) -> StoreResult<Record> {
        let (repo, id) = (repo.to_owned(), id.to_owned());
        self.write(move |tx| {
            Box::pin(async move { ops::create_session(tx, &repo, &id, attrs, &make_event).await })
        })
        .await
    }

    async fn create_stream(
        &self,
        scope: &ResourceRef,
        id: &str,
        label: &str,
    ) -> StoreResult<StreamRecord> {
        let (scope, id, label) = (scope.clone(), id.to_owned(), label.to_owned());
        self.write(move |tx| {
            Box::pin(async move { ops::create_stream(tx, &scope, &id, &label).await })
        })
        .await
    }

    async fn get_stream(&self, id: &str) -> StoreResult<Option<StreamRecord>> {
        self.db
            .settle(ops::Reads::stream(&mut self.reads(), id).await)
    }

    async fn append_chunk(&self, id: &str, parts_json: &str) -> StoreResult<String> {
        let (id, parts_json) = (id.to_owned(), parts_json.to_owned());
        self.write(move |tx| Box::pin(async move { ops::append_chunk(tx, &id, &parts_json).await }))
            .await
    }

    async fn chunks_page(
        &self,
        id: &str,
        since: i64,
        limit: Option<i64>,
    ) -> StoreResult<(StreamRecord, Vec<String>)> {
        self.db
            .settle(ops::chunks_page(&mut self.reads(), id, since, limit).await)
    }

    async fn close_stream(
        &self,
        id: &str,
        outcome: &str,
        expected_last_seq: i64,
        artifact: NewArtifact,
    ) -> StoreResult<CloseOutcome> {
        let (id, outcome) = (id.to_owned(), outcome.to_owned());
        self.write(move |tx| {
            Box::pin(async move {
                ops::close_stream(tx, &id, &outcome, expected_last_seq, artifact).await
            })
        })
        .await
    }

    async fn ping(&self) -> StoreResult<()> {
        self.db.settle(ops::Reads::ping(&mut self.reads()).await)
    }

    fn pool_stats(&self) -> PoolStats {
        PoolStats {
            size: self.db.pool().size(),
            idle: u32::try_from(self.db.pool().num_idle()).unwrap_or(u32::MAX),
            max: self.db.pool().options().get_max_connections(),
        }
    }
}
