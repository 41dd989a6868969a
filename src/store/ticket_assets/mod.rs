//! A ticket's assets (protocol 3): a revision put, a removal (a tombstone
//! as the next revision), a revision read. A revision is counted on the
//! asset's `ticket_asset_heads` row: the counter is the lock, as
//! `artifact_heads` is for a deposit's revisions.

pub(crate) mod sql;

use async_trait::async_trait;

use crate::store::api::TicketAssets;
use crate::store::assets::{AnswerCheck, AssetKey, NewTicketAsset, TicketAssetMeta};
use crate::store::bounds::{Bounds, OverBound};
use crate::store::engine::{Backend, Engine, WriteTx, Written};
use crate::store::error::{StoreError, StoreResult};
use crate::store::statement::Statements;

#[async_trait]
impl<B: Backend> TicketAssets for Engine<B> {
    /// A put that would make one more asset live is refused when the ticket
    /// has `max_ticket_assets` live ones; the ticket is locked first, so
    /// such puts count one at a time. Then the counter row is taken, so
    /// concurrent puts of one asset serialise on it, and its revision is
    /// held to the bound on revisions. Refused by a bound or by `check`,
    /// nothing is written and no revision consumed.
    async fn put_ticket_asset(
        &self,
        asset: NewTicketAsset,
        check: AnswerCheck,
    ) -> StoreResult<TicketAssetMeta> {
        let bounds = self.bounds;
        self.write_op(move |tx| {
            Box::pin(async move {
                let key = &asset.key;
                tx.lock_ticket(&key.repo, &key.ticket_id).await?;
                let (live, this_live) = live_ticket_assets(tx, key).await?;
                if !this_live && live >= bounds.max_ticket_assets {
                    let max = bounds.max_ticket_assets;
                    return Err(OverBound::ticket_assets(&key.ticket_id, live, max).into());
                }
                let (revision, now) = next_revision(tx, key).await?;
                check_revision(key, revision, &bounds)?;
                let meta = asset.meta(revision, now)?;
                check(&meta)?;
                tx.run(sql::insert_ticket_asset(key, revision, now, Some(&meta)))
                    .await?;
                Ok(Written::kept(meta))
            })
        })
        .await
    }

    /// A tombstone as the next revision when the latest revision is live,
    /// answering that revision; otherwise nothing is written (the counter's
    /// bump rolls back). The counter row is taken before the latest
    /// revision is read, so a concurrent put or removal is either wholly
    /// before or wholly after this one. A tombstone is a revision: the bound
    /// on revisions holds it too.
    async fn remove_ticket_asset(
        &self,
        key: &AssetKey,
        check: AnswerCheck,
    ) -> StoreResult<Option<TicketAssetMeta>> {
        let (key, bounds) = (key.clone(), self.bounds);
        self.write_op(move |tx| {
            Box::pin(async move {
                let (revision, now) = next_revision(tx, &key).await?;
                let Some(live) = sql::ticket_asset(tx, &key, None).await? else {
                    return Ok(Written::unchanged(None));
                };
                check_revision(&key, revision, &bounds)?;
                check(&live)?;
                tx.run(sql::insert_ticket_asset(&key, revision, now, None))
                    .await?;
                Ok(Written::kept(Some(live)))
            })
        })
        .await
    }

    async fn get_ticket_asset(
        &self,
        key: &AssetKey,
        rev: Option<i64>,
    ) -> StoreResult<Option<TicketAssetMeta>> {
        let key = key.clone();
        self.read_op(move |db| Box::pin(async move { sql::ticket_asset(db, &key, rev).await }))
            .await
    }
}

/// How many assets of `key`'s ticket are live (their latest revision no
/// tombstone), and whether `key` is one of them.
async fn live_ticket_assets(tx: &mut impl WriteTx, key: &AssetKey) -> StoreResult<(i64, bool)> {
    let found = tx
        .first(sql::live_ticket_assets(key), |row| {
            Ok((row.int(0)?, row.int(1)? > 0))
        })
        .await?;
    Ok(found.unwrap_or((0, false)))
}

/// Assign the next revision of a ticket asset, holding its counter row
/// until the transaction ends; the revision and its time.
async fn next_revision(tx: &mut impl WriteTx, key: &AssetKey) -> StoreResult<(i64, i64)> {
    let now = tx.now();
    tx.first(sql::next_ticket_asset_revision(key, now), |row| {
        Ok((row.int(0)?, row.int(1)?))
    })
    .await?
    .ok_or_else(|| StoreError::Corrupt("no ticket asset revision assigned".into()))
}

/// Revision `revision` (counted from 0) of `key`, a put or a tombstone, is
/// within the bound on revisions: an asset at the bound can be neither
/// replaced nor removed until the bound is raised.
fn check_revision(key: &AssetKey, revision: i64, bounds: &Bounds) -> StoreResult<()> {
    let max = bounds.max_ticket_asset_revisions;
    if revision >= max {
        return Err(OverBound::ticket_asset_revisions(&key.kind, &key.name, max).into());
    }
    Ok(())
}
