//! The PostgreSQL primitives of [`Reads`] (over the pool) and [`Writes`]
//! (over one transaction). Writers to one resource serialise on its row
//! (`SELECT … FOR UPDATE`); different resources proceed in parallel.

use std::sync::Arc;

use serde_json::{Map, Value};
use sqlx::postgres::{PgPool, PgRow};
use sqlx::{Postgres, Row as _, Transaction};

use crate::clock::Clock;
use crate::protocol::{ResourceKind, ResourceRef};
use crate::store::ops::{Reads, ResourceRow, Writes};
use crate::store::{
    ArtifactMeta, Lease, NewArtifact, Record, StoreError, StoreResult, StreamArtifact,
    StreamRecord, counted,
};

const SELECT_RESOURCE: &str = "SELECT id, attrs, created_at, updated_at, last_seq, lease_holder, \
     lease_expires_at, lease_ttl_ms, heartbeat_at FROM resources WHERE kind = $1 AND id = $2";
const LOCK_RESOURCE: &str = "SELECT id, attrs, created_at, updated_at, last_seq, lease_holder, \
     lease_expires_at, lease_ttl_ms, heartbeat_at FROM resources WHERE kind = $1 AND id = $2 FOR UPDATE";
const LIST_RESOURCES: &str = "SELECT id, attrs, created_at, updated_at, last_seq, lease_holder, \
     lease_expires_at, lease_ttl_ms, heartbeat_at FROM resources WHERE kind = $1 ORDER BY created_at, id";
const LIST_SESSIONS: &str = "SELECT id, attrs, created_at, updated_at, last_seq, lease_holder, \
     lease_expires_at, lease_ttl_ms, heartbeat_at FROM resources WHERE kind = 'session' AND parent = $1 \
     ORDER BY created_at, created_order";
const EXISTS_RESOURCE: &str = "SELECT 1 AS one FROM resources WHERE kind = $1 AND id = $2";
const SELECT_EVENTS_SINCE: &str =
    "SELECT envelope FROM events WHERE kind = $1 AND resource_id = $2 AND seq > $3 ORDER BY seq";
const SELECT_ARTIFACT: &str = "SELECT artifact_kind, revision, blob_ref, size, metadata, created_at \
     FROM artifacts WHERE kind = $1 AND resource_id = $2 AND artifact_kind = $3 AND revision = $4";
const SELECT_LATEST_ARTIFACT: &str = "SELECT artifact_kind, revision, blob_ref, size, metadata, created_at \
     FROM artifacts WHERE kind = $1 AND resource_id = $2 AND artifact_kind = $3 ORDER BY revision DESC LIMIT 1";
const LIST_ARTIFACTS: &str = "SELECT artifact_kind, revision, blob_ref, size, metadata, created_at \
     FROM artifacts WHERE kind = $1 AND resource_id = $2 ORDER BY artifact_kind, revision";
const LIST_ARTIFACTS_OF_KIND: &str = "SELECT artifact_kind, revision, blob_ref, size, metadata, created_at \
     FROM artifacts WHERE kind = $1 AND resource_id = $2 AND artifact_kind = $3 ORDER BY revision";
const SELECT_STREAM: &str = "SELECT id, scope_kind, scope_id, label, status, created_at, last_seq, closed_at, \
     outcome, artifact_kind, artifact_revision, artifact_blob_ref FROM streams WHERE id = $1";
const LOCK_STREAM: &str = "SELECT id, scope_kind, scope_id, label, status, created_at, last_seq, closed_at, \
     outcome, artifact_kind, artifact_revision, artifact_blob_ref FROM streams WHERE id = $1 FOR UPDATE";
const LIST_STREAMS: &str = "SELECT id, scope_kind, scope_id, label, status, created_at, last_seq, closed_at, \
     outcome, artifact_kind, artifact_revision, artifact_blob_ref FROM streams \
     WHERE scope_kind = $1 AND scope_id = $2 ORDER BY created_at, created_order";
const SELECT_CHUNKS_SINCE: &str =
    "SELECT chunk FROM stream_chunks WHERE stream_id = $1 AND seq > $2 ORDER BY seq";
/// Resource and stream tails of a JSON array of `{kind, id}` in one
/// statement; a closed stream reports the largest tail so its readers wake.
const TAILS: &str = "SELECT r.kind, r.id, r.last_seq FROM resources r \
     JOIN json_to_recordset($1::json) AS a(kind text, id text) \
     ON r.kind = a.kind COLLATE \"C\" AND r.id = a.id COLLATE \"C\" \
     UNION ALL \
     SELECT 'stream', s.id, CASE WHEN s.status = 'closed' THEN 9223372036854775807 ELSE s.last_seq END \
     FROM streams s JOIN json_to_recordset($1::json) AS a(kind text, id text) \
     ON a.kind = 'stream' AND s.id = a.id COLLATE \"C\"";
const PING: &str = "SELECT 1 AS one";

const INSERT_RESOURCE: &str = "INSERT INTO resources (kind, id, attrs, created_at, updated_at, last_seq) \
     VALUES ($1, $2, $3, $4, $4, 0) ON CONFLICT (kind, id) DO NOTHING";
/// The event and the counter in one statement (one round trip, not two).
const APPEND_EVENT: &str = "WITH bumped AS (\
     UPDATE resources SET last_seq = $3, updated_at = $4 WHERE kind = $1 AND id = $2) \
     INSERT INTO events (kind, resource_id, seq, envelope) VALUES ($1, $2, $3, $5)";
const TOUCH: &str = "UPDATE resources SET updated_at = $3 WHERE kind = $1 AND id = $2";
/// Assign the next revision and insert the metadata in one statement.
const INSERT_ARTIFACT: &str = "WITH head AS (\
     INSERT INTO artifact_heads (kind, resource_id, artifact_kind, next_revision) \
     VALUES ($1, $2, $3, 1) ON CONFLICT (kind, resource_id, artifact_kind) \
     DO UPDATE SET next_revision = artifact_heads.next_revision + 1 RETURNING next_revision - 1 AS revision) \
     INSERT INTO artifacts (kind, resource_id, artifact_kind, revision, blob_ref, size, metadata, created_at) \
     SELECT $1, $2, $3, head.revision, $4, $5, $6, $7 FROM head RETURNING revision";
const SET_LEASE: &str = "UPDATE resources SET lease_holder = $3, lease_expires_at = $4, lease_ttl_ms = $5, \
     updated_at = $6 WHERE kind = $1 AND id = $2";
const EXTEND_LEASE: &str = "UPDATE resources SET lease_expires_at = $3, heartbeat_at = $4, updated_at = $5 \
     WHERE kind = $1 AND id = $2";
const CLEAR_LEASE: &str = "UPDATE resources SET lease_holder = NULL, lease_expires_at = NULL, \
     lease_ttl_ms = NULL, updated_at = $3 WHERE kind = $1 AND id = $2";
const NEXT_CHILD_ORDER: &str = "UPDATE resources SET stream_counter = stream_counter + 1 \
     WHERE kind = $1 AND id = $2 RETURNING stream_counter";
const INSERT_SESSION: &str = "INSERT INTO resources (kind, id, attrs, created_at, updated_at, last_seq, parent, created_order) \
     VALUES ('session', $1, $2, $3, $3, 0, $4, $5)";
const PRUNE_CLOSED_CHUNKS: &str = "DELETE FROM stream_chunks WHERE stream_id IN (\
     SELECT id FROM streams WHERE scope_kind = $1 AND scope_id = $2 AND status = 'closed' AND id <> COALESCE((\
     SELECT latest.id FROM streams latest WHERE latest.scope_kind = $1 AND latest.scope_id = $2 \
     AND latest.status = 'closed' ORDER BY latest.closed_at DESC, latest.closed_order DESC LIMIT 1), ''))";
/// Retention: the oldest revisions of one kind below its `keep`-th newest
/// ($4 = keep - 1 rows skipped from the newest), at most $5, oldest first.
/// Fewer than `keep` revisions make the bound NULL, deleting nothing. Both
/// subqueries walk the primary key.
const PRUNE_REVISIONS: &str = "DELETE FROM artifacts WHERE kind = $1 AND resource_id = $2 AND artifact_kind = $3 \
     AND revision IN (SELECT candidate.revision FROM artifacts candidate \
     WHERE candidate.kind = $1 AND candidate.resource_id = $2 AND candidate.artifact_kind = $3 AND candidate.revision < (\
     SELECT bound.revision FROM artifacts bound \
     WHERE bound.kind = $1 AND bound.resource_id = $2 AND bound.artifact_kind = $3 \
     ORDER BY bound.revision DESC OFFSET $4 LIMIT 1) \
     ORDER BY candidate.revision LIMIT $5)";
const INSERT_STREAM: &str = "INSERT INTO streams (id, scope_kind, scope_id, label, status, created_at, created_order) \
     VALUES ($1, $2, $3, $4, 'open', $5, $6)";
/// The chunk and the stream's counter in one statement.
const APPEND_CHUNK: &str = "WITH bumped AS (UPDATE streams SET last_seq = $2 WHERE id = $1) \
     INSERT INTO stream_chunks (stream_id, seq, chunk) VALUES ($1, $2, $3)";
const CLOSE_STREAM: &str = "UPDATE streams SET status = 'closed', closed_at = $2, closed_order = $3, outcome = $4, \
     artifact_kind = $5, artifact_revision = $6, artifact_blob_ref = $7 WHERE id = $1";

fn resource_row(kind: ResourceKind, row: &PgRow) -> StoreResult<ResourceRow> {
    let attrs: Option<String> = row.try_get("attrs")?;
    let attrs = match attrs {
        Some(text) => match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(map)) => map,
            _ => {
                return Err(StoreError::Corrupt(
                    "resource attrs are not a JSON object".into(),
                ));
            }
        },
        None => Map::new(),
    };
    let holder: Option<String> = row.try_get("lease_holder")?;
    let expires: Option<i64> = row.try_get("lease_expires_at")?;
    Ok(ResourceRow {
        record: Record {
            resource: ResourceRef::new(kind, row.try_get::<String, _>("id")?),
            attrs,
            created_at: row.try_get("created_at")?,
            updated_at: row.try_get("updated_at")?,
            lease: holder
                .zip(expires)
                .map(|(holder, expires_at)| Lease { holder, expires_at }),
            heartbeat_at: row.try_get("heartbeat_at")?,
        },
        last_seq: row.try_get("last_seq")?,
        lease_ttl_ms: row.try_get("lease_ttl_ms")?,
    })
}

fn stream_row(row: &PgRow) -> StoreResult<StreamRecord> {
    let tag: String = row.try_get("scope_kind")?;
    let kind = ResourceKind::from_tag(&tag)
        .ok_or_else(|| StoreError::Corrupt(format!("unknown stream scope {tag:?}")))?;
    let artifact_kind: Option<String> = row.try_get("artifact_kind")?;
    let artifact_revision: Option<i64> = row.try_get("artifact_revision")?;
    let artifact_blob_ref: Option<String> = row.try_get("artifact_blob_ref")?;
    let status: String = row.try_get("status")?;
    Ok(StreamRecord {
        id: row.try_get("id")?,
        scope: ResourceRef::new(kind, row.try_get::<String, _>("scope_id")?),
        label: row.try_get("label")?,
        closed: status == "closed",
        created_at: row.try_get("created_at")?,
        closed_at: row.try_get("closed_at")?,
        outcome: row.try_get("outcome")?,
        artifact: match (artifact_kind, artifact_revision, artifact_blob_ref) {
            (Some(kind), Some(revision), Some(blob_ref)) => Some(StreamArtifact {
                kind,
                revision,
                blob_ref,
            }),
            _ => None,
        },
        last_seq: row.try_get("last_seq")?,
    })
}

fn artifact_row(resource: &ResourceRef, row: &PgRow) -> StoreResult<ArtifactMeta> {
    let metadata: String = row.try_get("metadata")?;
    let Ok(Value::Object(metadata)) = serde_json::from_str::<Value>(&metadata) else {
        return Err(StoreError::Corrupt(
            "artifact metadata is not a JSON object".into(),
        ));
    };
    Ok(ArtifactMeta {
        resource: resource.clone(),
        kind: row.try_get("artifact_kind")?,
        revision: row.try_get("revision")?,
        blob_ref: row.try_get("blob_ref")?,
        size: row.try_get("size")?,
        metadata,
        created_at: row.try_get("created_at")?,
    })
}

/// Reads over the pool, each statement on whichever connection is free.
pub(super) struct PgRead<'p>(pub &'p PgPool);

impl Reads for PgRead<'_> {
    async fn resource(&mut self, r: &ResourceRef) -> StoreResult<Option<ResourceRow>> {
        counted::<Postgres>(SELECT_RESOURCE)
            .bind(r.kind.tag())
            .bind(&r.id)
            .fetch_optional(self.0)
            .await?
            .map(|row| resource_row(r.kind, &row))
            .transpose()
    }

    async fn exists(&mut self, r: &ResourceRef) -> StoreResult<bool> {
        Ok(counted::<Postgres>(EXISTS_RESOURCE)
            .bind(r.kind.tag())
            .bind(&r.id)
            .fetch_optional(self.0)
            .await?
            .is_some())
    }

    async fn resources(&mut self, kind: ResourceKind) -> StoreResult<Vec<Record>> {
        let rows = counted::<Postgres>(LIST_RESOURCES)
            .bind(kind.tag())
            .fetch_all(self.0)
            .await?;
        rows.iter()
            .map(|row| Ok(resource_row(kind, row)?.record))
            .collect()
    }

    async fn events_since(&mut self, r: &ResourceRef, since: i64) -> StoreResult<Vec<String>> {
        let rows = counted::<Postgres>(SELECT_EVENTS_SINCE)
            .bind(r.kind.tag())
            .bind(&r.id)
            .bind(since)
            .fetch_all(self.0)
            .await?;
        rows.iter()
            .map(|row| Ok(row.try_get::<String, _>("envelope")?))
            .collect()
    }

    async fn artifact(
        &mut self,
        r: &ResourceRef,
        kind: &str,
        rev: Option<i64>,
    ) -> StoreResult<Option<ArtifactMeta>> {
        let query = match rev {
            Some(rev) => counted::<Postgres>(SELECT_ARTIFACT)
                .bind(r.kind.tag())
                .bind(&r.id)
                .bind(kind)
                .bind(rev),
            None => counted::<Postgres>(SELECT_LATEST_ARTIFACT)
                .bind(r.kind.tag())
                .bind(&r.id)
                .bind(kind),
        };
        query
            .fetch_optional(self.0)
            .await?
            .map(|row| artifact_row(r, &row))
            .transpose()
    }

    async fn artifacts(
        &mut self,
        r: &ResourceRef,
        kind: Option<&str>,
    ) -> StoreResult<Vec<ArtifactMeta>> {
        let query = match kind {
            Some(kind) => counted::<Postgres>(LIST_ARTIFACTS_OF_KIND)
                .bind(r.kind.tag())
                .bind(&r.id)
                .bind(kind),
            None => counted::<Postgres>(LIST_ARTIFACTS)
                .bind(r.kind.tag())
                .bind(&r.id),
        };
        let rows = query.fetch_all(self.0).await?;
        rows.iter().map(|row| artifact_row(r, row)).collect()
    }

    async fn sessions(&mut self, repo: &str) -> StoreResult<Vec<Record>> {
        let rows = counted::<Postgres>(LIST_SESSIONS)
            .bind(repo)
            .fetch_all(self.0)
            .await?;
        rows.iter()
            .map(|row| Ok(resource_row(ResourceKind::Session, row)?.record))
            .collect()
    }

    async fn streams(&mut self, scope: &ResourceRef) -> StoreResult<Vec<StreamRecord>> {
        let rows = counted::<Postgres>(LIST_STREAMS)
            .bind(scope.kind.tag())
            .bind(&scope.id)
            .fetch_all(self.0)
            .await?;
        rows.iter().map(stream_row).collect()
    }

    async fn stream(&mut self, id: &str) -> StoreResult<Option<StreamRecord>> {
        counted::<Postgres>(SELECT_STREAM)
            .bind(id)
            .fetch_optional(self.0)
            .await?
            .map(|row| stream_row(&row))
            .transpose()
    }

    async fn chunks_since(&mut self, id: &str, since: i64) -> StoreResult<Vec<String>> {
        let rows = counted::<Postgres>(SELECT_CHUNKS_SINCE)
            .bind(id)
            .bind(since)
            .fetch_all(self.0)
            .await?;
        rows.iter()
            .map(|row| Ok(row.try_get::<String, _>("chunk")?))
            .collect()
    }

    async fn tails(&mut self, resources: &[ResourceRef]) -> StoreResult<Vec<(ResourceRef, i64)>> {
        let rows = counted::<Postgres>(TAILS)
            .bind(crate::store::tails_param(resources))
            .fetch_all(self.0)
            .await?;
        rows.iter()
            .map(|row| {
                let tag: String = row.try_get(0)?;
                let kind = ResourceKind::from_tag(&tag)
                    .ok_or_else(|| StoreError::Corrupt(format!("unknown resource kind {tag:?}")))?;
                Ok((
                    ResourceRef::new(kind, row.try_get::<String, _>(1)?),
                    row.try_get(2)?,
                ))
            })
            .collect()
    }

    async fn ping(&mut self) -> StoreResult<()> {
        counted::<Postgres>(PING).fetch_one(self.0).await?;
        Ok(())
    }
}

/// One write transaction.
pub(super) struct PgTx {
    pub tx: Transaction<'static, Postgres>,
    pub clock: Arc<dyn Clock>,
}

impl Writes for PgTx {
    fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    async fn lock_resource(&mut self, r: &ResourceRef) -> StoreResult<Option<ResourceRow>> {
        counted::<Postgres>(LOCK_RESOURCE)
            .bind(r.kind.tag())
            .bind(&r.id)
            .fetch_optional(&mut *self.tx)
            .await?
            .map(|row| resource_row(r.kind, &row))
            .transpose()
    }

    async fn insert_resource(
        &mut self,
        r: &ResourceRef,
        attrs: Option<&str>,
        now: i64,
    ) -> StoreResult<bool> {
        let inserted = counted::<Postgres>(INSERT_RESOURCE)
            .bind(r.kind.tag())
            .bind(&r.id)
            .bind(attrs)
            .bind(now)
            .execute(&mut *self.tx)
            .await?
            .rows_affected();
        Ok(inserted > 0)
    }

    async fn append_event(
        &mut self,
        r: &ResourceRef,
        seq: i64,
        now: i64,
        envelope: &str,
    ) -> StoreResult<()> {
        counted::<Postgres>(APPEND_EVENT)
            .bind(r.kind.tag())
            .bind(&r.id)
            .bind(seq)
            .bind(now)
            .bind(envelope)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn insert_artifacts(
        &mut self,
        r: &ResourceRef,
        artifacts: Vec<NewArtifact>,
        now: i64,
    ) -> StoreResult<Vec<ArtifactMeta>> {
        let mut metas = Vec::with_capacity(artifacts.len());
        for artifact in artifacts {
            let revision: i64 = counted::<Postgres>(INSERT_ARTIFACT)
                .bind(r.kind.tag())
                .bind(&r.id)
                .bind(&artifact.kind)
                .bind(&artifact.blob_ref)
                .bind(artifact.size)
                .bind(Value::Object(artifact.metadata.clone()).to_string())
                .bind(now)
                .fetch_one(&mut *self.tx)
                .await?
                .try_get("revision")?;
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

    async fn touch(&mut self, r: &ResourceRef, now: i64) -> StoreResult<()> {
        counted::<Postgres>(TOUCH)
            .bind(r.kind.tag())
            .bind(&r.id)
            .bind(now)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn set_lease(
        &mut self,
        r: &ResourceRef,
        holder: &str,
        expires_at: i64,
        ttl_ms: i64,
        now: i64,
    ) -> StoreResult<()> {
        counted::<Postgres>(SET_LEASE)
            .bind(r.kind.tag())
            .bind(&r.id)
            .bind(holder)
            .bind(expires_at)
            .bind(ttl_ms)
            .bind(now)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn extend_lease(
        &mut self,
        r: &ResourceRef,
        expires_at: i64,
        heartbeat_at: i64,
        now: i64,
    ) -> StoreResult<()> {
        counted::<Postgres>(EXTEND_LEASE)
            .bind(r.kind.tag())
            .bind(&r.id)
            .bind(expires_at)
            .bind(heartbeat_at)
            .bind(now)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn clear_lease(&mut self, r: &ResourceRef, now: i64) -> StoreResult<()> {
        counted::<Postgres>(CLEAR_LEASE)
            .bind(r.kind.tag())
            .bind(&r.id)
            .bind(now)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn next_child_order(&mut self, parent: &ResourceRef) -> StoreResult<i64> {
        Ok(counted::<Postgres>(NEXT_CHILD_ORDER)
            .bind(parent.kind.tag())
            .bind(&parent.id)
            .fetch_one(&mut *self.tx)
            .await?
            .try_get("stream_counter")?)
    }

    async fn insert_session(
        &mut self,
        id: &str,
        attrs: &str,
        now: i64,
        repo: &str,
        order: i64,
    ) -> StoreResult<()> {
        counted::<Postgres>(INSERT_SESSION)
            .bind(id)
            .bind(attrs)
            .bind(now)
            .bind(repo)
            .bind(order)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn prune_closed_chunks(&mut self, scope: &ResourceRef) -> StoreResult<()> {
        counted::<Postgres>(PRUNE_CLOSED_CHUNKS)
            .bind(scope.kind.tag())
            .bind(&scope.id)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn prune_revisions(
        &mut self,
        r: &ResourceRef,
        kind: &str,
        keep: i64,
        limit: i64,
    ) -> StoreResult<u64> {
        Ok(counted::<Postgres>(PRUNE_REVISIONS)
            .bind(r.kind.tag())
            .bind(&r.id)
            .bind(kind)
            .bind(keep - 1)
            .bind(limit)
            .execute(&mut *self.tx)
            .await?
            .rows_affected())
    }

    async fn insert_stream(
        &mut self,
        id: &str,
        scope: &ResourceRef,
        label: &str,
        now: i64,
        order: i64,
    ) -> StoreResult<()> {
        counted::<Postgres>(INSERT_STREAM)
            .bind(id)
            .bind(scope.kind.tag())
            .bind(&scope.id)
            .bind(label)
            .bind(now)
            .bind(order)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn stream_scope(&mut self, id: &str) -> StoreResult<Option<ResourceRef>> {
        counted::<Postgres>(SELECT_STREAM)
            .bind(id)
            .fetch_optional(&mut *self.tx)
            .await?
            .map(|row| Ok(stream_row(&row)?.scope))
            .transpose()
    }

    async fn lock_stream(&mut self, id: &str) -> StoreResult<Option<StreamRecord>> {
        counted::<Postgres>(LOCK_STREAM)
            .bind(id)
            .fetch_optional(&mut *self.tx)
            .await?
            .map(|row| stream_row(&row))
            .transpose()
    }

    async fn append_chunk(&mut self, id: &str, seq: i64, chunk: &str) -> StoreResult<()> {
        counted::<Postgres>(APPEND_CHUNK)
            .bind(id)
            .bind(seq)
            .bind(chunk)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    async fn mark_closed(
        &mut self,
        id: &str,
        now: i64,
        order: i64,
        outcome: &str,
        artifact: &StreamArtifact,
    ) -> StoreResult<()> {
        counted::<Postgres>(CLOSE_STREAM)
            .bind(id)
            .bind(now)
            .bind(order)
            .bind(outcome)
            .bind(&artifact.kind)
            .bind(artifact.revision)
            .bind(&artifact.blob_ref)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }
}
