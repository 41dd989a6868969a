//! Opening the store a [`DatabaseUrl`] names: the one place that knows both
//! backends, beside the parser of the URL ([`super::url`]). `serve`,
//! `migrate`, `token revoke` and the archive tools all open (and migrate)
//! through here.

use std::sync::Arc;

use anyhow::Context as _;

use super::api::Store;
use super::engine::Engine;
use super::migration::{MigrationReport, MigrationSettings, Progress};
use super::options::StoreOptions;
use super::postgres::{self, PgBackend};
use super::sqlite::{self, SqliteBackend};
use super::url::{DatabaseUrl, Location};
use crate::clock::{Clock, SystemClock};
use crate::notify::Notifier;

impl DatabaseUrl {
    /// Open the store, applying migrations when `options.migrate` (on
    /// PostgreSQL, waiting for another process's migration to finish, or
    /// without `migrate` for another process to have migrated); its writes
    /// wake held reads through `notifier`. `progress` says how far the
    /// opening got (`/readyz` reads it while the server starts).
    pub async fn open(
        &self,
        options: &StoreOptions,
        clock: Arc<dyn Clock>,
        notifier: Arc<Notifier>,
        progress: &Progress,
    ) -> anyhow::Result<Arc<dyn Store>> {
        let (retention, bounds) = (options.retention.clone(), options.bounds);
        Ok(match self.location() {
            Location::Postgres(connect) => Arc::new(Engine::new(
                PgBackend::connect(connect, options, clock, notifier.clone(), progress).await?,
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

    /// Create the schema or bring it up to date, then close: the archive
    /// tools before they write (`import --apply`), with the default bounds.
    pub async fn migrate(&self) -> anyhow::Result<MigrationReport> {
        self.migrate_with(&MigrationSettings::default(), &Progress::default())
            .await
    }

    /// [`Self::migrate`] within `settings` (`abstore migrate`'s flags): what
    /// was applied and how long each step took. On PostgreSQL it shares
    /// the servers' migration lock and guarantees
    /// (`store/postgres/migrate/`); a SQLite file another process serves
    /// is refused.
    pub async fn migrate_with(
        &self,
        settings: &MigrationSettings,
        progress: &Progress,
    ) -> anyhow::Result<MigrationReport> {
        let now_ms = SystemClock.now_ms();
        match self.location() {
            Location::Postgres(connect) => {
                postgres::migrate(connect, settings, now_ms, progress).await
            }
            Location::Sqlite(location) => {
                let (location, settings) = (location.clone(), *settings);
                tokio::task::spawn_blocking(move || sqlite::migrate(&location, &settings, now_ms))
                    .await
                    .context("the SQLite migration task failed")?
            }
        }
        .with_context(|| format!("migrating {self}"))
    }
}
