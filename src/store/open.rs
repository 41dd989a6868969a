//! Opening the store a [`DatabaseUrl`] names: the one place that knows both
//! backends, beside the parser of the URL ([`super::url`]). `serve`,
//! `migrate`, `token revoke` and the archive tools all open (and migrate)
//! through here.

use std::sync::Arc;

use anyhow::Context as _;

use super::api::Store;
use super::engine::Engine;
use super::options::StoreOptions;
use super::postgres::PgBackend;
use super::retention::Retention;
use super::sqlite::SqliteBackend;
use super::url::{DatabaseUrl, Location};
use crate::clock::{Clock, SystemClock};
use crate::notify::Notifier;

impl DatabaseUrl {
    /// Open the store, applying migrations when `options.migrate`; its
    /// writes wake held reads through `notifier`.
    pub async fn open(
        &self,
        options: &StoreOptions,
        clock: Arc<dyn Clock>,
        notifier: Arc<Notifier>,
    ) -> anyhow::Result<Arc<dyn Store>> {
        let (retention, bounds) = (options.retention.clone(), options.bounds);
        Ok(match self.location() {
            Location::Postgres(connect) => Arc::new(Engine::new(
                PgBackend::connect(connect, options, clock, notifier.clone()).await?,
                retention,
                bounds,
                notifier,
            )),
            Location::Sqlite(location) => Arc::new(Engine::new(
                SqliteBackend::connect(location, options, clock).await?,
                retention,
                bounds,
                notifier,
            )),
        })
    }

    /// Create the schema or bring it up to date, then close: `abstore
    /// migrate`, and the archive tools before they write (`import --apply`),
    /// through the store's own opener.
    pub async fn migrate(&self) -> anyhow::Result<()> {
        self.migrate_in_batches(StoreOptions::default().migrate_batch_rows)
            .await
    }

    /// [`Self::migrate`], converting `batch_rows` rows per transaction
    /// (`--migrate-batch-rows`).
    pub async fn migrate_in_batches(&self, batch_rows: u32) -> anyhow::Result<()> {
        let options = StoreOptions {
            pool_size: 1,
            migrate: true,
            migrate_batch_rows: batch_rows,
            retention: Retention::disabled(),
            ..StoreOptions::default()
        };
        self.open(&options, Arc::new(SystemClock), Arc::new(Notifier::new()))
            .await
            .with_context(|| format!("migrating {self}"))?;
        Ok(())
    }
}
