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

/// How long a request waits for a pooled connection before failing.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

pub struct PgStore {
    pool: PgPool,
    clock: Arc<dyn Clock>,
    notifier: Arc<Notifier>,
}

impl PgStore {
    pub async fn connect(url: &str, options: &StoreOptions, clock: Arc<dyn Clock>, notifier: Arc<Notifier>) -> anyhow::Result<Self> {
        let connect = PgConnectOptions::from_str(url)?.application_name("abstore");
        let pool = PgPoolOptions::new()
            .max_connections(options.pool_size.max(1))
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(connect)
            .await?;
        if options.migrate {
            sqlx::migrate!("migrations/postgres").run(&pool).await?;
        }
        Ok(PgStore { pool, clock, notifier })
    }

    fn reader(&self) -> &PgPool {
        &self.pool
    }

    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, sqlx::Error> {
        self.pool.begin().await
    }
}

crate::store::sql::impl_store!(PgStore, sqlx::Postgres);
