//! The one [`Store`] implementation: each operation of [`ops`] run on a
//! [`Backend`], which says only how a read and a write transaction run
//! (SQLite: a blocking reader, the writer thread's group commit;
//! PostgreSQL: a pooled connection, a task of its own per write).

use std::future::Future;
use std::pin::Pin;

use async_trait::async_trait;
use serde_json::{Map, Value};

use super::api::{
    CloseOutcome, MakeEvent, MakeFirstEvent, NewArtifact, NewEvent, PoolStats, Store,
};
use super::assets::{AnswerCheck, AssetKey, NewTicketAsset, TicketAssetMeta};
use super::bounds::Bounds;
use super::error::StoreResult;
use super::ops::{self, Reads, Writes, Written};
use super::records::{ArtifactMeta, BuildDigest, Record, Revocation, StreamRecord};
use super::retention::Retention;
use super::rows::{Listing, Rows};
use crate::protocol::ResourceRef;

/// An operation's future over a borrowed transaction or read connection
/// (the shape sqlx's own `Connection::transaction` takes).
pub(crate) type OpFuture<'a, T> = Pin<Box<dyn Future<Output = StoreResult<T>> + Send + 'a>>;

/// How one database runs the operations.
pub(crate) trait Backend: Send + Sync + 'static {
    /// The primitives of one write transaction.
    type Tx<'t>: Writes;
    /// The primitives of one read, outside any write transaction.
    type Read<'r>: Reads;

    /// Run `op` as one write, to its end even if the caller goes away
    /// (docs/decisions.md, 14): commit its changes when its outcome is kept
    /// (roll them back otherwise), then count what it pruned and wake the
    /// held reads of the resource it names.
    fn write<T, F>(&self, op: F) -> impl Future<Output = StoreResult<T>> + Send
    where
        T: Send + 'static,
        F: for<'a, 't> FnOnce(&'a mut Self::Tx<'t>) -> OpFuture<'a, Written<T>> + Send + 'static;

    /// Run `op` as one read.
    fn read<T, F>(&self, op: F) -> impl Future<Output = StoreResult<T>> + Send
    where
        T: Send + 'static,
        F: for<'a, 'r> FnOnce(&'a mut Self::Read<'r>) -> OpFuture<'a, T> + Send + 'static;

    /// A streamed read ([`Store::read`]).
    fn stream(&self, listing: Listing) -> impl Future<Output = StoreResult<Rows>> + Send;

    fn pool_stats(&self) -> PoolStats;
}

/// The store: `backend` running [`ops`], with the retention puts and
/// deposits apply and the bounds every write that grows a collection keeps.
pub(crate) struct Engine<B> {
    pub(crate) backend: B,
    retention: Retention,
    bounds: Bounds,
}

impl<B: Backend> Engine<B> {
    pub(crate) fn new(backend: B, retention: Retention, bounds: Bounds) -> Self {
        Engine {
            backend,
            retention,
            bounds,
        }
    }
}

#[async_trait]
impl<B: Backend> Store for Engine<B> {
    async fn create_build(&self, slug: &str, attrs: Map<String, Value>) -> StoreResult<Record> {
        let slug = slug.to_owned();
        self.backend
            .write(move |tx| Box::pin(async move { ops::create_build(tx, &slug, attrs).await }))
            .await
    }

    async fn read(&self, listing: Listing) -> StoreResult<Rows> {
        self.backend.stream(listing).await
    }

    async fn ensure_repo(&self, repo: &str) -> StoreResult<Record> {
        ops::ensure_repo(&self.backend, repo).await
    }

    async fn get_record(&self, r: &ResourceRef) -> StoreResult<Option<Record>> {
        let r = r.clone();
        self.backend
            .read(move |db| Box::pin(async move { ops::get_record(db, &r).await }))
            .await
    }

    async fn build_digests(&self, repo: &str) -> StoreResult<Vec<BuildDigest>> {
        let repo = repo.to_owned();
        self.backend
            .read(move |db| Box::pin(async move { ops::build_digests(db, &repo).await }))
            .await
    }

    async fn append(
        &self,
        r: &ResourceRef,
        event: NewEvent,
        expected_seq: Option<i64>,
    ) -> StoreResult<Option<String>> {
        let (r, bounds) = (r.clone(), self.bounds);
        self.backend
            .write(move |tx| {
                Box::pin(async move { ops::append(tx, &r, &event, expected_seq, &bounds).await })
            })
            .await
    }

    async fn events_page(
        &self,
        r: &ResourceRef,
        since: i64,
        limit: i64,
    ) -> StoreResult<Vec<String>> {
        let r = r.clone();
        self.backend
            .read(move |db| Box::pin(async move { ops::events_page(db, &r, since, limit).await }))
            .await
    }

    async fn put_artifact(
        &self,
        r: &ResourceRef,
        artifact: NewArtifact,
    ) -> StoreResult<ArtifactMeta> {
        let (r, retention, bounds) = (r.clone(), self.retention.clone(), self.bounds);
        self.backend
            .write(move |tx| {
                Box::pin(
                    async move { ops::put_artifact(tx, &r, artifact, &retention, &bounds).await },
                )
            })
            .await
    }

    async fn deposit(
        &self,
        r: &ResourceRef,
        artifacts: Vec<NewArtifact>,
        make_event: MakeEvent,
    ) -> StoreResult<(String, Vec<ArtifactMeta>)> {
        let (r, retention, bounds) = (r.clone(), self.retention.clone(), self.bounds);
        self.backend
            .write(move |tx| {
                Box::pin(async move {
                    ops::deposit(tx, &r, artifacts, &make_event, &retention, &bounds).await
                })
            })
            .await
    }

    async fn get_artifact(
        &self,
        r: &ResourceRef,
        kind: &str,
        rev: Option<i64>,
    ) -> StoreResult<Option<ArtifactMeta>> {
        let (r, kind) = (r.clone(), kind.to_owned());
        self.backend
            .read(move |db| Box::pin(async move { ops::get_artifact(db, &r, &kind, rev).await }))
            .await
    }

    async fn claim_lease(&self, r: &ResourceRef, holder: &str, ttl_ms: i64) -> StoreResult<bool> {
        let (r, holder) = (r.clone(), holder.to_owned());
        self.backend
            .write(move |tx| {
                Box::pin(async move { ops::claim_lease(tx, &r, &holder, ttl_ms).await })
            })
            .await
    }

    async fn heartbeat(&self, r: &ResourceRef, holder: &str) -> StoreResult<bool> {
        let (r, holder) = (r.clone(), holder.to_owned());
        self.backend
            .write(move |tx| Box::pin(async move { ops::heartbeat(tx, &r, &holder).await }))
            .await
    }

    async fn release_lease(&self, r: &ResourceRef, holder: &str) -> StoreResult<()> {
        let (r, holder) = (r.clone(), holder.to_owned());
        self.backend
            .write(move |tx| Box::pin(async move { ops::release_lease(tx, &r, &holder).await }))
            .await
    }

    async fn tails(&self, resources: &[ResourceRef]) -> StoreResult<Vec<(ResourceRef, i64)>> {
        let resources = resources.to_vec();
        self.backend
            .read(move |db| Box::pin(async move { ops::tails(db, &resources).await }))
            .await
    }

    async fn create_session(
        &self,
        repo: &str,
        id: &str,
        attrs: Map<String, Value>,
        make_event: MakeFirstEvent,
    ) -> StoreResult<Record> {
        let (repo, id) = (repo.to_owned(), id.to_owned());
        self.backend
            .write(move |tx| {
                Box::pin(
                    async move { ops::create_session(tx, &repo, &id, attrs, &make_event).await },
                )
            })
            .await
    }

    async fn create_stream(
        &self,
        scope: &ResourceRef,
        id: &str,
        label: &str,
    ) -> StoreResult<StreamRecord> {
        let (scope, id, label) = (scope.clone(), id.to_owned(), label.to_owned());
        self.backend
            .write(move |tx| {
                Box::pin(async move { ops::create_stream(tx, &scope, &id, &label).await })
            })
            .await
    }

    async fn get_stream(&self, id: &str) -> StoreResult<Option<StreamRecord>> {
        let id = id.to_owned();
        self.backend
            .read(move |db| Box::pin(async move { db.stream(&id).await }))
            .await
    }

    async fn append_chunk(&self, id: &str, parts_json: &str) -> StoreResult<String> {
        let (id, parts_json, bounds) = (id.to_owned(), parts_json.to_owned(), self.bounds);
        self.backend
            .write(move |tx| {
                Box::pin(async move { ops::append_chunk(tx, &id, &parts_json, &bounds).await })
            })
            .await
    }

    async fn chunks_page(
        &self,
        id: &str,
        since: i64,
        limit: Option<i64>,
    ) -> StoreResult<(StreamRecord, Vec<String>)> {
        let id = id.to_owned();
        self.backend
            .read(move |db| Box::pin(async move { ops::chunks_page(db, &id, since, limit).await }))
            .await
    }

    async fn close_stream(
        &self,
        id: &str,
        outcome: &str,
        expected_last_seq: i64,
        artifact: NewArtifact,
    ) -> StoreResult<CloseOutcome> {
        let (id, outcome) = (id.to_owned(), outcome.to_owned());
        self.backend
            .write(move |tx| {
                Box::pin(async move {
                    ops::close_stream(tx, &id, &outcome, expected_last_seq, artifact).await
                })
            })
            .await
    }

    async fn put_ticket_asset(
        &self,
        asset: NewTicketAsset,
        check: AnswerCheck,
    ) -> StoreResult<TicketAssetMeta> {
        let bounds = self.bounds;
        self.backend
            .write(move |tx| {
                Box::pin(async move { ops::put_ticket_asset(tx, asset, &check, &bounds).await })
            })
            .await
    }

    async fn remove_ticket_asset(
        &self,
        key: &AssetKey,
        check: AnswerCheck,
    ) -> StoreResult<Option<TicketAssetMeta>> {
        let (key, bounds) = (key.clone(), self.bounds);
        self.backend
            .write(move |tx| {
                Box::pin(async move { ops::remove_ticket_asset(tx, &key, &check, &bounds).await })
            })
            .await
    }

    async fn get_ticket_asset(
        &self,
        key: &AssetKey,
        rev: Option<i64>,
    ) -> StoreResult<Option<TicketAssetMeta>> {
        let key = key.clone();
        self.backend
            .read(move |db| Box::pin(async move { db.ticket_asset(&key, rev).await }))
            .await
    }

    async fn revoke_token(&self, revocation: Revocation) -> StoreResult<bool> {
        self.backend
            .write(move |tx| Box::pin(async move { ops::revoke_token(tx, &revocation).await }))
            .await
    }

    async fn revocations(&self) -> StoreResult<Vec<Revocation>> {
        self.backend
            .read(|db| Box::pin(async move { db.revocations().await }))
            .await
    }

    async fn prune_revocations(&self, now: i64) -> StoreResult<u64> {
        self.backend
            .write(move |tx| Box::pin(async move { ops::prune_revocations(tx, now).await }))
            .await
    }

    async fn ping(&self) -> StoreResult<()> {
        self.backend
            .read(|db| Box::pin(async move { db.ping().await }))
            .await
    }

    fn pool_stats(&self) -> PoolStats {
        self.backend.pool_stats()
    }
}
