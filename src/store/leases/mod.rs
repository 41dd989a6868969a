//! Leases (spec section 10): claim, heartbeat, release. A lease is judged
//! by the clock itself, even when it stepped back behind the resource's
//! `updatedAt`; the record's `updatedAt` never goes back.

pub(crate) mod sql;

use async_trait::async_trait;

use crate::protocol::ResourceRef;
use crate::store::api::Leases;
use crate::store::engine::{Backend, Engine, WriteTx, Written};
use crate::store::error::StoreResult;
use crate::store::resources::{locked, write_time};
use crate::store::statement::Statements;

#[async_trait]
impl<B: Backend> Leases for Engine<B> {
    /// A claim succeeds when the lease is free, expired by the server's
    /// clock, or already held by `holder`; it sets `now + ttl`.
    async fn claim_lease(&self, r: &ResourceRef, holder: &str, ttl_ms: i64) -> StoreResult<bool> {
        let (r, holder) = (r.clone(), holder.to_owned());
        self.write_op(move |tx| {
            Box::pin(async move {
                let row = locked(tx, &r).await?;
                let now = tx.now();
                if let Some(lease) = &row.record.lease
                    && lease.holder != holder
                    && lease.expires_at > now
                {
                    return Ok(Written::unchanged(false));
                }
                let updated = write_time(tx, row.tail());
                let expires_at = lease_expiry(now, ttl_ms);
                tx.run(sql::set_lease(&r, &holder, expires_at, ttl_ms, updated))
                    .await?;
                Ok(Written::kept(true))
            })
        })
        .await
    }

    /// A heartbeat extends an unexpired lease held by `holder` by its ttl.
    async fn heartbeat(&self, r: &ResourceRef, holder: &str) -> StoreResult<bool> {
        let (r, holder) = (r.clone(), holder.to_owned());
        self.write_op(move |tx| {
            Box::pin(async move {
                let row = locked(tx, &r).await?;
                let now = tx.now();
                let held = row
                    .record
                    .lease
                    .as_ref()
                    .is_some_and(|l| l.holder == holder && l.expires_at > now);
                if !held {
                    return Ok(Written::unchanged(false));
                }
                let ttl = row.lease_ttl_ms.unwrap_or(0);
                let updated = write_time(tx, row.tail());
                tx.run(sql::extend_lease(&r, lease_expiry(now, ttl), now, updated))
                    .await?;
                Ok(Written::kept(true))
            })
        })
        .await
    }

    /// Releasing a lease one does not hold changes nothing.
    async fn release_lease(&self, r: &ResourceRef, holder: &str) -> StoreResult<()> {
        let (r, holder) = (r.clone(), holder.to_owned());
        self.write_op(move |tx| {
            Box::pin(async move {
                let row = locked(tx, &r).await?;
                if row.record.lease.as_ref().is_none_or(|l| l.holder != holder) {
                    return Ok(Written::unchanged(()));
                }
                let now = write_time(tx, row.tail());
                tx.run(sql::clear_lease(&r, now)).await?;
                Ok(Written::kept(()))
            })
        })
        .await
    }
}

/// `now + ttl`, within what a JavaScript date can hold.
fn lease_expiry(now: i64, ttl_ms: i64) -> i64 {
    now.saturating_add(ttl_ms)
        .min(crate::protocol::time::MAX_JS_TIME_MS)
}
