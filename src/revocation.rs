//! Revoked tokens on the server side: the digests of every revoked token
//! (`abstore token revoke` writes them to the database), held in memory and
//! re-read every few seconds, so every replica refuses a revoked token
//! within `--revocation-refresh-seconds` of the revocation.
//!
//! - A server in authenticated mode loads the set before it listens; a start
//!   that cannot read it fails (serving without it would honour tokens the
//!   operator revoked).
//! - Each refresh is one statement ([`Revocations::revocations`](crate::store::Revocations::revocations)). When it fails
//!   (the database is down), the set in force stays and the failure is
//!   logged once per outage, not per attempt.
//! - A request pays for a SHA-256 of its token (about a microsecond for a
//!   typical token) and a hash-set lookup, and only while at least one
//!   revocation exists; never for a token that already failed its signature.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

use crate::auth;
use crate::store::{Store, StoreResult};

/// The longest note a revocation keeps (`abstore token revoke --note`),
/// in bytes; a note holds no NUL.
pub const MAX_NOTE_BYTES: usize = 1000;

/// The digests of the revoked tokens, as last read from the database.
#[derive(Default)]
pub struct Revocations {
    digests: RwLock<HashSet<[u8; 32]>>,
}

impl std::fmt::Debug for Revocations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Revocations({})", self.len())
    }
}

impl Revocations {
    /// Read the revocations; the start fails when they cannot be read.
    pub async fn load(store: &dyn Store) -> anyhow::Result<Revocations> {
        let revocations = Revocations::default();
        let count = revocations.refresh(store).await.context(
            "loading the revoked tokens (table revoked_tokens, migration 0007; \
                 with --no-migrate, run `abstore migrate` first)",
        )?;
        tracing::info!(revoked = count, "token revocations loaded");
        Ok(revocations)
    }

    /// Whether `token` (its text, as the client sent it) is revoked.
    pub fn contains(&self, token: &str) -> bool {
        let digests = self
            .digests
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // No revocation, no hashing: the common case costs one read lock.
        !digests.is_empty() && digests.contains(&auth::digest(token))
    }

    /// How many tokens are revoked.
    pub fn len(&self) -> usize {
        self.digests
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Replace the set with what the database holds now; its size. A row
    /// whose digest is not 64 hex digits (written by hand) is skipped and
    /// logged: it names no token.
    pub async fn refresh(&self, store: &dyn Store) -> StoreResult<usize> {
        let rows = store.revocations().await?;
        let mut fresh = HashSet::with_capacity(rows.len());
        for row in rows {
            let mut digest = [0u8; 32];
            match hex::decode_to_slice(&row.digest, &mut digest) {
                Ok(()) => {
                    fresh.insert(digest);
                }
                Err(_) => tracing::warn!(
                    digest = %row.digest,
                    "a revoked_tokens row is not a SHA-256 digest (64 hex digits); ignored"
                ),
            }
        }
        let count = fresh.len();
        metrics::gauge!("abstore_revoked_tokens").set(count as f64);
        *self
            .digests
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = fresh;
        Ok(count)
    }

    /// Re-read the set every `every` until `shutdown`. A failed refresh
    /// keeps the set in force; the first failure of an outage is logged as
    /// an error, the recovery as information.
    pub async fn watch(
        self: Arc<Self>,
        store: Arc<dyn Store>,
        every: Duration,
        shutdown: CancellationToken,
    ) {
        let mut ticker = tokio::time::interval(every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is immediate, and the set was just loaded.
        ticker.tick().await;
        let mut failing = false;
        let mut known = self.len();
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = ticker.tick() => {}
            }
            match self.refresh(&*store).await {
                Ok(count) => {
                    if failing {
                        tracing::info!(revoked = count, "token revocations read again");
                    } else if count != known {
                        tracing::info!(revoked = count, "token revocations changed");
                    }
                    failing = false;
                    known = count;
                }
                Err(err) if !failing => {
                    failing = true;
                    tracing::error!(
                        error = %err,
                        revoked = self.len(),
                        "cannot read the token revocations; the ones already loaded stay in force"
                    );
                }
                Err(err) => tracing::debug!(error = %err, "token revocations still unreadable"),
            }
        }
    }
}
