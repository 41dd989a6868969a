//! Artifacts: a revision put, a deposit (revisions and an event in one
//! commit), a revision read; and artifact retention (spec section 3),
//! applied by puts and deposits inside their own transaction.

pub(crate) mod sql;

use async_trait::async_trait;
use serde_json::Value;

use crate::protocol::ResourceRef;
use crate::store::api::{Artifacts, MakeEvent, NewArtifact};
use crate::store::bounds::{Bounds, OverBound};
use crate::store::engine::{Backend, Engine, Pruned, WriteTx, Written};
use crate::store::error::{StoreError, StoreResult};
use crate::store::events::{append_after, check_events};
use crate::store::records::ArtifactMeta;
use crate::store::resources::sql::{exists, touch};
use crate::store::resources::{locked_tail, write_time};
use crate::store::retention::Retention;
use crate::store::statement::{Columns, Statements};

#[async_trait]
impl<B: Backend> Artifacts for Engine<B> {
    /// A new revision, then retention in the same transaction. Over the
    /// bound on revisions the revision assigned is rolled back with the
    /// rest.
    async fn put_artifact(
        &self,
        r: &ResourceRef,
        artifact: NewArtifact,
    ) -> StoreResult<ArtifactMeta> {
        let (r, retention, bounds) = (r.clone(), self.retention.clone(), self.bounds);
        self.write_op(move |tx| {
            Box::pin(async move {
                let tail = locked_tail(tx, &r).await?;
                let now = write_time(tx, tail);
                let meta = insert_artifacts(tx, &r, vec![artifact], now)
                    .await?
                    .pop()
                    .ok_or_else(|| StoreError::Corrupt("no artifact inserted".into()))?;
                let written = std::slice::from_ref(&meta);
                check_revisions(&r, written, &retention, &bounds)?;
                let pruned = apply_retention(tx, &r, written, &retention).await?;
                tx.run(touch(&r, now)).await?;
                Ok(Written::kept(meta).pruning(pruned))
            })
        })
        .await
    }

    /// Revisions, `make_event` over the assigned metadata, the event and
    /// retention, in one transaction: a rejection leaves nothing, consumes
    /// nothing and prunes nothing. The bounds are checked after the catalog
    /// (a `422` before a `413`, as for an append, whose event is validated
    /// before the store is asked): events per log, then revisions per kind.
    async fn deposit(
        &self,
        r: &ResourceRef,
        artifacts: Vec<NewArtifact>,
        make_event: MakeEvent,
    ) -> StoreResult<(String, Vec<ArtifactMeta>)> {
        let (r, retention, bounds) = (r.clone(), self.retention.clone(), self.bounds);
        self.write_op(move |tx| {
            Box::pin(async move {
                // The one-statement deposit prunes nothing: a deposit of a
                // kind the retention policy selects (rare: configuration
                // snapshots) takes the transaction, which prunes in the
                // same commit.
                let retained = artifacts
                    .iter()
                    .any(|a| retention.policy.keep_for(&a.kind).is_some());
                if !retained
                    && let Some(done) = tx.try_deposit(&r, &artifacts, &make_event, &bounds).await?
                {
                    return Ok(Written::waking(done, r));
                }
                let tail = locked_tail(tx, &r).await?;
                let now = write_time(tx, tail);
                let metas = insert_artifacts(tx, &r, artifacts, now).await?;
                let event = make_event(&metas)?;
                check_events(&r, tail, &bounds)?;
                check_revisions(&r, &metas, &retention, &bounds)?;
                let envelope = append_after(tx, &r, tail.last_seq, now, &event).await?;
                let pruned = apply_retention(tx, &r, &metas, &retention).await?;
                Ok(Written::waking((envelope, metas), r).pruning(pruned))
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
        self.read_op(move |db| {
            Box::pin(async move {
                let decode = |row: &dyn Columns| sql::artifact_row(&r, row);
                let found = match rev {
                    Some(rev) => {
                        db.first(sql::select_artifact(&r, &kind, rev), decode)
                            .await?
                    }
                    None => {
                        db.first(sql::select_latest_artifact(&r, &kind), decode)
                            .await?
                    }
                };
                match found {
                    Some(meta) => Ok(Some(meta)),
                    None if exists(db, &r).await? => Ok(None),
                    None => Err(StoreError::NotFound(r)),
                }
            })
        })
        .await
    }
}

/// Assign the next revision of each artifact's kind and store the
/// metadata, in order.
pub(super) async fn insert_artifacts(
    tx: &mut impl WriteTx,
    r: &ResourceRef,
    artifacts: Vec<NewArtifact>,
    now: i64,
) -> StoreResult<Vec<ArtifactMeta>> {
    let mut metas = Vec::with_capacity(artifacts.len());
    for artifact in artifacts {
        let metadata = Value::Object(artifact.metadata.clone()).to_string();
        let revision = tx.insert_artifact(r, &artifact, &metadata, now).await?;
        metas.push(ArtifactMeta {
            resource: r.clone(),
            kind: artifact.kind,
            revision,
            blob_ref: artifact.blob_ref,
            size: artifact.size,
            metadata: artifact.metadata,
            created_at: now,
        });
    }
    Ok(metas)
}

/// Every revision just assigned is within the bound on revisions, unless a
/// retention rule selects its kind (retention bounds what such a kind
/// keeps). Revisions count from 0, so revision `n` is the `n + 1`-th.
fn check_revisions(
    r: &ResourceRef,
    written: &[ArtifactMeta],
    retention: &Retention,
    bounds: &Bounds,
) -> StoreResult<()> {
    let max = bounds.max_artifact_revisions;
    match written
        .iter()
        .find(|m| m.revision >= max && retention.policy.keep_for(&m.kind).is_none())
    {
        Some(over) => Err(OverBound::artifact_revisions(r, &over.kind, max).into()),
        None => Ok(()),
    }
}

/// Artifact retention, inside the writing transaction (which holds the
/// resource row, so writers of one resource prune one at a time and readers
/// see the revisions before or after, never between): for each kind just
/// written that a rule selects, delete the oldest revisions beyond the
/// rule's `keep`, at most `prune_limit` in all for this write. A kind whose
/// newest revision number is below `keep` cannot have more than `keep`
/// revisions, so it costs no statement. `stream:` kinds are never selected.
async fn apply_retention(
    tx: &mut impl WriteTx,
    r: &ResourceRef,
    written: &[ArtifactMeta],
    retention: &Retention,
) -> StoreResult<Pruned> {
    let mut pruned = Pruned {
        family: Some(r.kind),
        revisions: 0,
    };
    if retention.policy.is_empty() {
        return Ok(pruned);
    }
    let mut budget = retention.prune_limit;
    let mut done: Vec<&str> = Vec::new();
    for meta in written {
        let kind = meta.kind.as_str();
        if budget <= 0 {
            break;
        }
        if done.contains(&kind) {
            continue;
        }
        done.push(kind);
        let Some(keep) = retention.policy.keep_for(kind) else {
            continue;
        };
        let newest = written
            .iter()
            .filter(|m| m.kind == kind)
            .map(|m| m.revision)
            .max()
            .unwrap_or(meta.revision);
        if newest < keep {
            continue;
        }
        let deleted = tx
            .execute(sql::prune_revisions(r, kind, keep, budget))
            .await?;
        pruned.revisions += deleted;
        budget = budget.saturating_sub(i64::try_from(deleted).unwrap_or(i64::MAX));
    }
    Ok(pruned)
}
