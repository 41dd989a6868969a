//! What any resource shares: its record, the held-read sweep's tails, the
//! streamed reads of every listing, and the store's own health.

use async_trait::async_trait;

use crate::protocol::ResourceRef;
use crate::store::api::{PoolStats, Store};
use crate::store::engine::{Backend, Engine};
use crate::store::error::StoreResult;
use crate::store::records::Record;
use crate::store::rows::{Listing, Rows};
use crate::store::sql;
use crate::store::statement::Statements;

#[async_trait]
impl<B: Backend> Store for Engine<B> {
    /// The backend runs the one loop of a streamed read
    /// ([`stream_listing`](crate::store::engine::stream_listing)) where it
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
