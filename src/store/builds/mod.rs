//! Builds: creating one, and the digests of a repository's builds
//! (protocol 3).

pub(crate) mod sql;

pub use sql::{DigestEvent, LogSpan};

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::protocol::{ResourceKind, ResourceRef};
use crate::store::api::Builds;
use crate::store::engine::{Backend, Engine, WriteTx, Written};
use crate::store::error::{StoreError, StoreResult};
use crate::store::records::{BuildDigest, Record};
use crate::store::resources::sql::insert_resource;
use crate::store::statement::Statements;

#[async_trait]
impl<B: Backend> Builds for Engine<B> {
    /// The record, unless a resource of that slug exists (`Conflict`).
    async fn create_build(&self, slug: &str, attrs: Map<String, Value>) -> StoreResult<Record> {
        let r = ResourceRef::new(ResourceKind::Build, slug);
        self.write_op(move |tx| {
            Box::pin(async move {
                let now = tx.now();
                let text = Value::Object(attrs.clone()).to_string();
                if tx.execute(insert_resource(&r, Some(&text), now)).await? == 0 {
                    return Err(StoreError::Conflict(r));
                }
                Ok(Written::kept(Record {
                    resource: r,
                    attrs,
                    created_at: now,
                    updated_at: now,
                    lease: None,
                    heartbeat_at: None,
                }))
            })
        })
        .await
    }

    /// Folded from one statement's rows (one snapshot). Built whole: a
    /// digest is a slug, a terminal fact, a merge time and one `{seq, ts}`
    /// per observation, so even a repository of thousands of builds answers
    /// in a few hundred kilobytes, and `Vec` order is already the answer's
    /// (the statement orders by slug).
    async fn build_digests(&self, repo: &str) -> StoreResult<Vec<BuildDigest>> {
        let repo = repo.to_owned();
        self.read_op(move |db| {
            Box::pin(async move {
                let rows = sql::digest_rows(db, &repo).await?;
                let mut digests: Vec<BuildDigest> = Vec::new();
                for (slug, event) in rows {
                    if digests.last().is_none_or(|d| d.slug != slug) {
                        digests.push(BuildDigest::new(slug));
                    }
                    if let (Some((seq, event_type, ts)), Some(digest)) = (event, digests.last_mut())
                    {
                        digest.apply(seq, &event_type, &ts);
                    }
                }
                Ok(digests)
            })
        })
        .await
    }

    async fn build_tails(&self, repo: &str) -> StoreResult<Vec<(String, i64)>> {
        let repo = repo.to_owned();
        self.read_op(move |db| Box::pin(async move { sql::tail_rows(db, &repo).await }))
            .await
    }

    async fn digest_events(&self, spans: Vec<LogSpan>) -> StoreResult<Vec<(String, DigestEvent)>> {
        if spans.is_empty() {
            return Ok(Vec::new());
        }
        self.read_op(move |db| Box::pin(async move { sql::span_rows(db, &spans).await }))
            .await
    }
}
