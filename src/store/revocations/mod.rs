//! Revoked tokens (`abstore token revoke`, `crate::revocation`).

pub(crate) mod sql;

use async_trait::async_trait;

use crate::store::api::Revocations;
use crate::store::engine::{Backend, Engine, Written};
use crate::store::error::StoreResult;
use crate::store::records::Revocation;
use crate::store::statement::Statements;

#[async_trait]
impl<B: Backend> Revocations for Engine<B> {
    /// A digest already revoked changes nothing: the first revocation, its
    /// expiry and note, stand.
    async fn revoke_token(&self, revocation: Revocation) -> StoreResult<bool> {
        self.write_op(move |tx| {
            Box::pin(async move {
                Ok(
                    if tx.execute(sql::insert_revocation(&revocation)).await? > 0 {
                        Written::kept(true)
                    } else {
                        Written::unchanged(false)
                    },
                )
            })
        })
        .await
    }

    async fn revocations(&self) -> StoreResult<Vec<Revocation>> {
        self.read_op(|db| {
            Box::pin(async move {
                db.all(sql::select_revocations(), |row| sql::revocation_row(row))
                    .await
            })
        })
        .await
    }

    async fn prune_revocations(&self, now: i64) -> StoreResult<u64> {
        self.write_op(move |tx| {
            Box::pin(async move {
                let pruned = tx.execute(sql::prune_revocations(now)).await?;
                Ok(Written::kept(pruned))
            })
        })
        .await
    }
}
