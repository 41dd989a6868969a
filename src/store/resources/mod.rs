//! What any resource shares: its record, the held-read sweep's tails, the
//! streamed reads of every listing, and the store's own health.

pub(crate) mod sql;

use async_trait::async_trait;

use crate::protocol::ResourceRef;
use crate::store::api::{PoolStats, Store};
use crate::store::engine::{Backend, Engine, WriteTx};
use crate::store::error::{StoreError, StoreResult};
use crate::store::records::{LogTail, Record, ResourceRow};
use crate::store::rows::{Listing, Rows};
use crate::store::statement::Statements;

#[async_trait]
impl<B: Backend> Store for Engine<B> {
    /// The backend runs the one loop of a streamed read
    /// ([`stream_listing`](crate::store::listing::stream_listing)) where it
    /// may wait for the client.
    async fn read(&self, listing: Listing) -> StoreResult<Rows> {
        self.backend.stream(listing).await
    }

    async fn get_record(&self, r: &ResourceRef) -> StoreResult<Option<Record>> {
        let r = r.clone();
        self.read_op(move |db| {
            Box::pin(async move { Ok(sql::resource(db, &r).await?.map(|row| row.record)) })
        })
        .await
    }

    /// Resources and streams in one statement; none asked, none read.
    async fn tails(&self, resources: &[ResourceRef]) -> StoreResult<Vec<(ResourceRef, i64)>> {
        if resources.is_empty() {
            return Ok(Vec::new());
        }
        let resources = resources.to_vec();
        self.read_op(move |db| Box::pin(async move { sql::tails(db, &resources).await }))
            .await
    }

    async fn ping(&self) -> StoreResult<()> {
        self.read_op(|db| {
            Box::pin(async move {
                db.first(sql::ping(), |_| Ok(())).await?;
                Ok(())
            })
        })
        .await
    }

    fn pool_stats(&self) -> PoolStats {
        self.backend.pool_stats()
    }
}

/// The resource row, held until the transaction ends; `NotFound` without it.
pub(crate) async fn locked(tx: &mut impl WriteTx, r: &ResourceRef) -> StoreResult<ResourceRow> {
    tx.lock_resource(r)
        .await?
        .ok_or_else(|| StoreError::NotFound(r.clone()))
}

/// The resource's log tail, its row held until the transaction ends;
/// `NotFound` without it. What a write that only extends the resource
/// locks: unlike [`locked`], it leaves the attributes undecoded.
pub(crate) async fn locked_tail(tx: &mut impl WriteTx, r: &ResourceRef) -> StoreResult<LogTail> {
    tx.lock_log_tail(r)
        .await?
        .ok_or_else(|| StoreError::NotFound(r.clone()))
}

/// A time for a write that never precedes the resource's last write, so
/// `ts` and `updatedAt` are nondecreasing along a resource's sequence even
/// if the clock steps back. Lease decisions use the clock itself.
pub(crate) fn write_time(tx: &impl WriteTx, tail: LogTail) -> i64 {
    tx.now().max(tail.updated_at)
}

/// The next value of a resource's child counter, which orders the sessions
/// and streams it creates (and stream closes) within a millisecond.
pub(crate) async fn next_child_order(
    tx: &mut impl WriteTx,
    parent: &ResourceRef,
) -> StoreResult<i64> {
    tx.first(sql::next_child_order(parent), |row| row.int(0))
        .await?
        .ok_or_else(|| StoreError::Corrupt("no child order assigned".into()))
}
