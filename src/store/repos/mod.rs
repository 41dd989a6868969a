//! Repositories: `ensureRepo`.

use async_trait::async_trait;

use crate::protocol::{ResourceKind, ResourceRef};
use crate::store::api::Repos;
use crate::store::engine::{Backend, Engine, WriteTx, Written};
use crate::store::error::StoreResult;
use crate::store::records::Record;
use crate::store::resources::locked;
use crate::store::resources::sql::{insert_resource, resource};
use crate::store::statement::Statements;

#[async_trait]
impl<B: Backend> Repos for Engine<B> {
    /// A read first, since the repository almost always exists (then
    /// nothing is written, and no write transaction or writer-queue slot is
    /// taken); only a missing one is created, or returned untouched when a
    /// concurrent `ensureRepo` created it first.
    async fn ensure_repo(&self, repo: &str) -> StoreResult<Record> {
        let r = ResourceRef::new(ResourceKind::Repo, repo);
        let read = r.clone();
        let found = self
            .read_op(move |db| Box::pin(async move { resource(db, &read).await }))
            .await?;
        if let Some(row) = found {
            return Ok(row.record);
        }
        self.write_op(move |tx| {
            Box::pin(async move {
                let now = tx.now();
                let inserted = tx.execute(insert_resource(&r, None, now)).await? > 0;
                let row = locked(tx, &r).await?;
                Ok(if inserted {
                    Written::kept(row.record)
                } else {
                    Written::unchanged(row.record)
                })
            })
        })
        .await
    }
}
