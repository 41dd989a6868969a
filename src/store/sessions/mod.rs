//! Sessions: `createSession`.

pub(crate) mod sql;

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::protocol::{ResourceKind, ResourceRef};
use crate::store::api::{MakeFirstEvent, Sessions};
use crate::store::engine::{Backend, Engine, WriteTx, Written};
use crate::store::error::StoreResult;
use crate::store::events::append_after;
use crate::store::records::Record;
use crate::store::resources::{locked_tail, next_child_order};
use crate::store::statement::Statements;

#[async_trait]
impl<B: Backend> Sessions for Engine<B> {
    /// The record and its `session.created` event as sequence 1, together
    /// or not at all, under the repository's row; its place among the
    /// repository's sessions is the repository's next child order.
    async fn create_session(
        &self,
        repo: &str,
        id: &str,
        attrs: Map<String, Value>,
        make_event: MakeFirstEvent,
    ) -> StoreResult<Record> {
        let repo_ref = ResourceRef::new(ResourceKind::Repo, repo);
        let session = ResourceRef::new(ResourceKind::Session, id);
        self.write_op(move |tx| {
            Box::pin(async move {
                locked_tail(tx, &repo_ref).await?;
                let now = tx.now();
                let order = next_child_order(tx, &repo_ref).await?;
                let text = Value::Object(attrs.clone()).to_string();
                let insert = sql::insert_session(&session.id, &text, now, &repo_ref.id, order);
                tx.run(insert).await?;
                let event = make_event()?;
                append_after(tx, &session, 0, now, &event).await?;
                // Announced like every other write to a log: a whole-log read
                // that began before this commit may have found no rows and
                // then the session (two statements, two snapshots on a
                // SQLite file), and must not keep that `[]`
                // (`history::ShortLogCache`).
                Ok(Written::waking(
                    Record {
                        resource: session.clone(),
                        attrs,
                        created_at: now,
                        updated_at: now,
                        lease: None,
                        heartbeat_at: None,
                    },
                    session,
                ))
            })
        })
        .await
    }
}
