//! The production backend: PostgreSQL as the single source of truth for any
//! number of replicas. Writers to one resource serialise on its row
//! (`SELECT … FOR UPDATE`); different resources proceed in parallel.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use crate::clock::Clock;
use crate::notify::Notifier;
use crate::store::StoreOptions;

const LOCK_RESOURCE: &str = "SELECT id, attrs, created_at, updated_at, last_seq, lease_holder, \
     lease_expires_at, lease_ttl_ms, heartbeat_at FROM resources WHERE kind = $1 AND id = $2 FOR UPDATE";

/// The tails of the resources named by a JSON array of `{kind, id}`.
const TAILS: &str = "SELECT r.kind, r.id, r.last_seq FROM resources r \
     JOIN json_to_recordset($1::json) AS a(kind text, id text) \
     ON r.kind = a.kind COLLATE \"C\" AND r.id = a.id COLLATE \"C\"";

const LOCK_STREAM: &str = "SELECT id, scope_kind, scope_id, label, status, created_at, last_seq, closed_at, \
     outcome, artifact_kind, artifact_revision, artifact_blob_ref FROM streams WHERE id = $1 FOR UPDATE";

/// Stream tails for the sweep; a closed stream reports the largest tail.
const STREAM_TAILS: &str = "SELECT 'stream' AS kind, s.id, \
     CASE WHEN s.status = 'closed' THEN 9223372036854775807 ELSE s.last_seq END AS last_seq \
     FROM streams s JOIN json_to_recordset($1::json) AS a(kind text, id text) ON s.id = a.id COLLATE \"C\"";

/// The channel every replica listens on; payloads name a resource, never content.
pub const CHANNEL: &str = "abstore_events";

/// One statement notifying a batch of resources (payloads `kind:id`).
const PUBLISH: &str = "SELECT pg_notify('abstore_events', p) FROM unnest($1::text[]) AS p";

/// Payloads per NOTIFY statement.
const PUBLISH_BATCH: usize = 512;

/// How long a request waits for a pooled connection before failing.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

pub struct PgStore {
    pool: PgPool,
    clock: Arc<dyn Clock>,
    notifier: Arc<Notifier>,
    published: tokio::sync::mpsc::UnboundedSender<String>,
}

impl PgStore {
    pub async fn connect(
        url: &str,
        options: &StoreOptions,
        clock: Arc<dyn Clock>,
        notifier: Arc<Notifier>,
    ) -> anyhow::Result<Self> {
        let connect = PgConnectOptions::from_str(url)?.application_name("abstore");
        // One direct connection first: a pool only reports "timed out" after
        // retrying, where this names the cause (refused, auth, no database).
        use sqlx::Connection as _;
        sqlx::PgConnection::connect_with(&connect)
            .await?
            .close()
            .await?;
        let pool = PgPoolOptions::new()
            .max_connections(options.pool_size.max(1))
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(connect)
            .await?;
        if options.migrate {
            sqlx::migrate!("migrations/postgres").run(&pool).await?;
        }
        tokio::spawn(listen(url.to_owned(), notifier.clone()));
        let (published, pending) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(publish_batches(pool.clone(), pending));
        Ok(PgStore {
            pool,
            clock,
            notifier,
            published,
        })
    }

    /// Queue a NOTIFY for `resource` (after its transaction committed).
    /// NOTIFY takes a database-wide lock at commit, so it is kept out of the
    /// append transactions and sent in batches by one task; a notification
    /// lost to a crash or a dropped connection is covered by the sweep.
    fn publish(&self, resource: &crate::protocol::ResourceRef) {
        if let Some(payload) = crate::store::notify_payload(resource) {
            let _ = self.published.send(payload);
        }
    }

    fn reader(&self) -> &PgPool {
        &self.pool
    }

    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, sqlx::Error> {
        self.pool.begin().await
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
/// held reads. sqlx's listener reconnects by itself; notifications sent
/// while it is down are lost, which the once-a-second sweep covers.
async fn listen(url: String, notifier: Arc<Notifier>) {
    let mut backoff = Duration::from_millis(100);
    loop {
        match sqlx::postgres::PgListener::connect(&url).await {
            Ok(mut listener) => match listener.listen(CHANNEL).await {
                Ok(()) => {
                    backoff = Duration::from_millis(100);
                    metrics::gauge!("abstore_listen_connected").set(1.0);
                    tracing::info!("LISTEN connection up");
                    loop {
                        match listener.try_recv().await {
                            Ok(Some(note)) => {
                                if let Some(resource) =
                                    crate::store::parse_notify_payload(note.payload())
                                {
                                    notifier.notify(&resource);
                                }
                            }
                            // The connection dropped; sqlx re-LISTENs on the next call.
                            Ok(None) => {
                                metrics::gauge!("abstore_listen_connected").set(0.0);
                                tracing::warn!("LISTEN connection lost; reconnecting");
                            }
                            Err(err) => {
                                tracing::warn!(error = %err, "LISTEN connection failed");
                                break;
                            }
                        }
                    }
                }
                Err(err) => tracing::warn!(error = %err, "LISTEN failed"),
            },
            Err(err) => tracing::warn!(error = %err, "LISTEN connection could not connect"),
        }
        metrics::gauge!("abstore_listen_connected").set(0.0);
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}

crate::store::sql::impl_store!(PgStore, sqlx::Postgres);
