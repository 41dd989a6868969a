//! Statement text and transaction logic shared verbatim by both backends.
//!
//! Both dialects accept `$n` placeholders, `INSERT … ON CONFLICT` and
//! `RETURNING`, so every statement except the row lock is written once here.
//! `impl_store!` expands the one implementation of [`Store`](super::Store)
//! for a backend type, which supplies `reader()`, `begin_write()`, `clock`,
//! `notifier`, `publish()` (telling other replicas about a commit; PostgreSQL
//! only) and the dialect statements `LOCK_RESOURCE`/`LOCK_STREAM` (PostgreSQL
//! adds `FOR UPDATE`; SQLite's single writer connection with `BEGIN IMMEDIATE`
//! already serialises) and `TAILS`/`STREAM_TAILS` (a JSON array parameter
//! expanded by `json_to_recordset` or `json_each`).
//! A macro rather than generics because sqlx's generic-over-database bounds
//! would have to be restated on every function.

pub const INSERT_RESOURCE: &str = "INSERT INTO resources (kind, id, attrs, created_at, updated_at, last_seq) \
     VALUES ($1, $2, $3, $4, $4, 0) ON CONFLICT (kind, id) DO NOTHING";

pub const SELECT_RESOURCE: &str = "SELECT id, attrs, created_at, updated_at, last_seq, lease_holder, \
     lease_expires_at, lease_ttl_ms, heartbeat_at FROM resources WHERE kind = $1 AND id = $2";

pub const LIST_RESOURCES: &str = "SELECT id, attrs, created_at, updated_at, last_seq, lease_holder, \
     lease_expires_at, lease_ttl_ms, heartbeat_at FROM resources WHERE kind = $1 ORDER BY created_at, id";

pub const EXISTS_RESOURCE: &str = "SELECT 1 AS one FROM resources WHERE kind = $1 AND id = $2";

pub const INSERT_EVENT: &str =
    "INSERT INTO events (kind, resource_id, seq, envelope) VALUES ($1, $2, $3, $4)";

pub const SELECT_EVENTS_SINCE: &str =
    "SELECT envelope FROM events WHERE kind = $1 AND resource_id = $2 AND seq > $3 ORDER BY seq";

pub const BUMP_SEQ: &str =
    "UPDATE resources SET last_seq = $3, updated_at = $4 WHERE kind = $1 AND id = $2";

pub const TOUCH: &str = "UPDATE resources SET updated_at = $3 WHERE kind = $1 AND id = $2";

pub const NEXT_REVISION: &str = "INSERT INTO artifact_heads (kind, resource_id, artifact_kind, next_revision) \
     VALUES ($1, $2, $3, 1) ON CONFLICT (kind, resource_id, artifact_kind) \
     DO UPDATE SET next_revision = artifact_heads.next_revision + 1 RETURNING next_revision - 1 AS revision";

pub const INSERT_ARTIFACT: &str = "INSERT INTO artifacts \
     (kind, resource_id, artifact_kind, revision, blob_ref, size, metadata, created_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

pub const SELECT_ARTIFACT: &str = "SELECT artifact_kind, revision, blob_ref, size, metadata, created_at \
     FROM artifacts WHERE kind = $1 AND resource_id = $2 AND artifact_kind = $3 AND revision = $4";

pub const SELECT_LATEST_ARTIFACT: &str = "SELECT artifact_kind, revision, blob_ref, size, metadata, created_at \
     FROM artifacts WHERE kind = $1 AND resource_id = $2 AND artifact_kind = $3 ORDER BY revision DESC LIMIT 1";

pub const LIST_ARTIFACTS: &str = "SELECT artifact_kind, revision, blob_ref, size, metadata, created_at \
     FROM artifacts WHERE kind = $1 AND resource_id = $2 ORDER BY artifact_kind, revision";

pub const LIST_ARTIFACTS_OF_KIND: &str = "SELECT artifact_kind, revision, blob_ref, size, metadata, created_at \
     FROM artifacts WHERE kind = $1 AND resource_id = $2 AND artifact_kind = $3 ORDER BY revision";

pub const SET_LEASE: &str = "UPDATE resources SET lease_holder = $3, lease_expires_at = $4, lease_ttl_ms = $5, \
     updated_at = $6 WHERE kind = $1 AND id = $2";

pub const HEARTBEAT: &str = "UPDATE resources SET lease_expires_at = $3, heartbeat_at = $4, updated_at = $4 \
     WHERE kind = $1 AND id = $2";

pub const CLEAR_LEASE: &str = "UPDATE resources SET lease_holder = NULL, lease_expires_at = NULL, \
     lease_ttl_ms = NULL, updated_at = $3 WHERE kind = $1 AND id = $2";

pub const PING: &str = "SELECT 1 AS one";

pub const INSERT_SESSION: &str = "INSERT INTO resources (kind, id, attrs, created_at, updated_at, last_seq, parent, created_order) \
     VALUES ('session', $1, $2, $3, $3, 0, $4, $5)";

pub const LIST_SESSIONS: &str = "SELECT id, attrs, created_at, updated_at, last_seq, lease_holder, \
     lease_expires_at, lease_ttl_ms, heartbeat_at FROM resources WHERE kind = 'session' AND parent = $1 \
     ORDER BY created_at, created_order";

pub const SELECT_STREAM: &str = "SELECT id, scope_kind, scope_id, label, status, created_at, last_seq, closed_at, \
     outcome, artifact_kind, artifact_revision, artifact_blob_ref FROM streams WHERE id = $1";

pub const LIST_STREAMS: &str = "SELECT id, scope_kind, scope_id, label, status, created_at, last_seq, closed_at, \
     outcome, artifact_kind, artifact_revision, artifact_blob_ref FROM streams \
     WHERE scope_kind = $1 AND scope_id = $2 ORDER BY created_at, created_order";

pub const NEXT_CHILD_ORDER: &str = "UPDATE resources SET stream_counter = stream_counter + 1 WHERE kind = $1 AND id = $2 RETURNING stream_counter";

/// Chunk retention (spec section 6): at a create, drop the chunks of every
/// closed stream in the scope except the most recently closed one.
pub const PRUNE_CLOSED_CHUNKS: &str = "DELETE FROM stream_chunks WHERE stream_id IN (\
     SELECT id FROM streams WHERE scope_kind = $1 AND scope_id = $2 AND status = 'closed' AND id <> COALESCE((\
     SELECT latest.id FROM streams latest WHERE latest.scope_kind = $1 AND latest.scope_id = $2 \
     AND latest.status = 'closed' ORDER BY latest.closed_at DESC, latest.closed_order DESC LIMIT 1), ''))";

pub const INSERT_STREAM: &str = "INSERT INTO streams (id, scope_kind, scope_id, label, status, created_at, created_order) \
     VALUES ($1, $2, $3, $4, 'open', $5, $6)";

pub const INSERT_CHUNK: &str =
    "INSERT INTO stream_chunks (stream_id, seq, chunk) VALUES ($1, $2, $3)";

pub const BUMP_CHUNK_SEQ: &str = "UPDATE streams SET last_seq = $2 WHERE id = $1";

pub const SELECT_CHUNKS_SINCE: &str =
    "SELECT chunk FROM stream_chunks WHERE stream_id = $1 AND seq > $2 ORDER BY seq";

pub const CLOSE_STREAM: &str = "UPDATE streams SET status = 'closed', closed_at = $2, closed_order = $3, outcome = $4, \
     artifact_kind = $5, artifact_revision = $6, artifact_blob_ref = $7 WHERE id = $1";

#[cfg(test)]
#[test]
fn artifact_selects_share_their_columns() {
    const ARTIFACT_COLUMNS: &str = "artifact_kind, revision, blob_ref, size, metadata, created_at";
    for sql in [
        SELECT_ARTIFACT,
        SELECT_LATEST_ARTIFACT,
        LIST_ARTIFACTS,
        LIST_ARTIFACTS_OF_KIND,
    ] {
        assert!(
            sql.starts_with(&format!("SELECT {ARTIFACT_COLUMNS} FROM")),
            "{sql}"
        );
    }
}

/// The resource row as the lock query and record reads return it.
pub(crate) struct ResourceRow {
    pub record: super::Record,
    pub last_seq: i64,
    pub lease_ttl_ms: Option<i64>,
}

/// Expands `impl Store for $backend`. See the module docs for what the
/// backend type must provide.
macro_rules! impl_store {
    ($backend:ty, $db:ty) => {
        use async_trait::async_trait;
        use serde_json::{Map, Value};
        use sqlx::Row as _;

        use crate::protocol::{ResourceKind, ResourceRef};
        use crate::store::sql::{self, ResourceRow};
        use crate::store::{
            ArtifactMeta, Lease, MakeEvent, NewArtifact, NewEvent, Record, Store, StoreError,
            StoreResult, envelope_json,
        };

        fn resource_row(
            kind: ResourceKind,
            row: &<$db as sqlx::Database>::Row,
        ) -> StoreResult<ResourceRow> {
            let attrs: Option<String> = row.try_get("attrs")?;
            let attrs = match attrs {
                Some(text) => match serde_json::from_str::<Value>(&text) {
                    Ok(Value::Object(map)) => map,
                    _ => {
                        return Err(StoreError::Corrupt(
                            "resource attrs are not a JSON object".into(),
                        ))
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

        fn stream_row(
            row: &<$db as sqlx::Database>::Row,
        ) -> StoreResult<crate::store::StreamRecord> {
            let tag: String = row.try_get("scope_kind")?;
            let kind = ResourceKind::from_tag(&tag)
                .ok_or_else(|| StoreError::Corrupt(format!("unknown stream scope {tag:?}")))?;
            let artifact_kind: Option<String> = row.try_get("artifact_kind")?;
            let artifact_revision: Option<i64> = row.try_get("artifact_revision")?;
            let artifact_blob_ref: Option<String> = row.try_get("artifact_blob_ref")?;
            let status: String = row.try_get("status")?;
            Ok(crate::store::StreamRecord {
                id: row.try_get("id")?,
                scope: ResourceRef::new(kind, row.try_get::<String, _>("scope_id")?),
                label: row.try_get("label")?,
                closed: status == "closed",
                created_at: row.try_get("created_at")?,
                closed_at: row.try_get("closed_at")?,
                outcome: row.try_get("outcome")?,
                artifact: match (artifact_kind, artifact_revision, artifact_blob_ref) {
                    (Some(kind), Some(revision), Some(blob_ref)) => {
                        Some(crate::store::StreamArtifact {
                            kind,
                            revision,
                            blob_ref,
                        })
                    }
                    _ => None,
                },
                last_seq: row.try_get("last_seq")?,
            })
        }

        fn artifact_row(
            resource: &ResourceRef,
            row: &<$db as sqlx::Database>::Row,
        ) -> StoreResult<ArtifactMeta> {
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

        impl $backend {
            /// Lock the resource row inside `tx` and read it; `NotFound` when absent.
            async fn lock(
                tx: &mut sqlx::Transaction<'static, $db>,
                r: &ResourceRef,
            ) -> StoreResult<ResourceRow> {
                let row = crate::store::counted::<$db>(LOCK_RESOURCE)
                    .bind(r.kind.tag())
                    .bind(&r.id)
                    .fetch_optional(&mut **tx)
                    .await?
                    .ok_or(StoreError::NotFound)?;
                resource_row(r.kind, &row)
            }

            async fn exists(&self, r: &ResourceRef) -> StoreResult<bool> {
                Ok(crate::store::counted::<$db>(sql::EXISTS_RESOURCE)
                    .bind(r.kind.tag())
                    .bind(&r.id)
                    .fetch_optional(self.reader())
                    .await?
                    .is_some())
            }

            /// Assign the next revision of each artifact's kind and insert its metadata.
            async fn insert_artifacts(
                tx: &mut sqlx::Transaction<'static, $db>,
                r: &ResourceRef,
                artifacts: Vec<NewArtifact>,
                now: i64,
            ) -> StoreResult<Vec<ArtifactMeta>> {
                let mut metas = Vec::with_capacity(artifacts.len());
                for artifact in artifacts {
                    let revision: i64 = crate::store::counted::<$db>(sql::NEXT_REVISION)
                        .bind(r.kind.tag())
                        .bind(&r.id)
                        .bind(&artifact.kind)
                        .fetch_one(&mut **tx)
                        .await?
                        .try_get("revision")?;
                    let metadata_text = Value::Object(artifact.metadata.clone()).to_string();
                    crate::store::counted::<$db>(sql::INSERT_ARTIFACT)
                        .bind(r.kind.tag())
                        .bind(&r.id)
                        .bind(&artifact.kind)
                        .bind(revision)
                        .bind(&artifact.blob_ref)
                        .bind(artifact.size)
                        .bind(metadata_text)
                        .bind(now)
                        .execute(&mut **tx)
                        .await?;
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

            /// Insert the envelope as `last_seq + 1` and advance the counter.
            async fn insert_event(
                tx: &mut sqlx::Transaction<'static, $db>,
                r: &ResourceRef,
                last_seq: i64,
                now: i64,
                event: &NewEvent,
            ) -> StoreResult<String> {
                let seq = last_seq + 1;
                let envelope = envelope_json(r, seq, now, event);
                crate::store::counted::<$db>(sql::INSERT_EVENT)
                    .bind(r.kind.tag())
                    .bind(&r.id)
                    .bind(seq)
                    .bind(&envelope)
                    .execute(&mut **tx)
                    .await?;
                crate::store::counted::<$db>(sql::BUMP_SEQ)
                    .bind(r.kind.tag())
                    .bind(&r.id)
                    .bind(seq)
                    .bind(now)
                    .execute(&mut **tx)
                    .await?;
                Ok(envelope)
            }

            /// The next value of a resource's child counter, which orders the
            /// streams and sessions it creates (and stream closes) within one
            /// millisecond.
            async fn next_child_order(
                tx: &mut sqlx::Transaction<'static, $db>,
                parent: &ResourceRef,
            ) -> StoreResult<i64> {
                Ok(crate::store::counted::<$db>(sql::NEXT_CHILD_ORDER)
                    .bind(parent.kind.tag())
                    .bind(&parent.id)
                    .fetch_one(&mut **tx)
                    .await?
                    .try_get("stream_counter")?)
            }

            /// Lock a stream row inside `tx`; `NotFound` when absent.
            async fn lock_stream(
                tx: &mut sqlx::Transaction<'static, $db>,
                id: &str,
            ) -> StoreResult<crate::store::StreamRecord> {
                let row = crate::store::counted::<$db>(LOCK_STREAM)
                    .bind(id)
                    .fetch_optional(&mut **tx)
                    .await?
                    .ok_or(StoreError::NotFound)?;
                stream_row(&row)
            }

            /// After a commit that readers may wait for: wake this process's
            /// held reads, and tell the other replicas (PostgreSQL).
            fn written(&self, r: &ResourceRef) {
                self.notifier.notify(r);
                self.publish(r);
            }

            /// A time for this write that never precedes the resource's last
            /// write, so `ts` is nondecreasing along the sequence even if the
            /// system clock steps back.
            fn write_time(&self, row: &ResourceRow) -> i64 {
                self.clock.now_ms().max(row.record.updated_at)
            }
        }

        #[async_trait]
        impl Store for $backend {
            async fn create_build(
                &self,
                slug: &str,
                attrs: Map<String, Value>,
            ) -> StoreResult<Record> {
                let mut tx = self.begin_write().await?;
                let now = self.clock.now_ms();
                let inserted = crate::store::counted::<$db>(sql::INSERT_RESOURCE)
                    .bind(ResourceKind::Build.tag())
                    .bind(slug)
                    .bind(Value::Object(attrs.clone()).to_string())
                    .bind(now)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                if inserted == 0 {
                    return Err(StoreError::Conflict);
                }
                tx.commit().await?;
                Ok(Record {
                    resource: ResourceRef::new(ResourceKind::Build, slug),
                    attrs,
                    created_at: now,
                    updated_at: now,
                    lease: None,
                    heartbeat_at: None,
                })
            }

            async fn list_builds(&self) -> StoreResult<Vec<Record>> {
                let rows = crate::store::counted::<$db>(sql::LIST_RESOURCES)
                    .bind(ResourceKind::Build.tag())
                    .fetch_all(self.reader())
                    .await?;
                rows.iter()
                    .map(|row| Ok(resource_row(ResourceKind::Build, row)?.record))
                    .collect()
            }

            async fn ensure_repo(&self, repo: &str) -> StoreResult<Record> {
                let r = ResourceRef::new(ResourceKind::Repo, repo);
                if let Some(record) = self.get_record(&r).await? {
                    return Ok(record);
                }
                let mut tx = self.begin_write().await?;
                crate::store::counted::<$db>(sql::INSERT_RESOURCE)
                    .bind(ResourceKind::Repo.tag())
                    .bind(repo)
                    .bind(None::<String>)
                    .bind(self.clock.now_ms())
                    .execute(&mut *tx)
                    .await?;
                let row = Self::lock(&mut tx, &r).await?;
                tx.commit().await?;
                Ok(row.record)
            }

            async fn get_record(&self, r: &ResourceRef) -> StoreResult<Option<Record>> {
                let row = crate::store::counted::<$db>(sql::SELECT_RESOURCE)
                    .bind(r.kind.tag())
                    .bind(&r.id)
                    .fetch_optional(self.reader())
                    .await?;
                row.map(|row| Ok(resource_row(r.kind, &row)?.record))
                    .transpose()
            }

            async fn append(
                &self,
                r: &ResourceRef,
                event: NewEvent,
                expected_seq: Option<i64>,
            ) -> StoreResult<Option<String>> {
                let mut tx = self.begin_write().await?;
                let row = Self::lock(&mut tx, r).await?;
                if expected_seq.is_some_and(|expected| expected != row.last_seq) {
                    // Stale: the transaction is dropped (rolled back) untouched.
                    return Ok(None);
                }
                let now = self.write_time(&row);
                let envelope = Self::insert_event(&mut tx, r, row.last_seq, now, &event).await?;
                tx.commit().await?;
                self.written(r);
                Ok(Some(envelope))
            }

            async fn events_since(&self, r: &ResourceRef, since: i64) -> StoreResult<Vec<String>> {
                let rows = crate::store::counted::<$db>(sql::SELECT_EVENTS_SINCE)
                    .bind(r.kind.tag())
                    .bind(&r.id)
                    .bind(since)
                    .fetch_all(self.reader())
                    .await?;
                // No events either means nothing new or no resource; only the
                // empty answer pays for the existence check.
                if rows.is_empty() && !self.exists(r).await? {
                    return Err(StoreError::NotFound);
                }
                rows.iter()
                    .map(|row| Ok(row.try_get::<String, _>("envelope")?))
                    .collect()
            }

            async fn put_artifact(
                &self,
                r: &ResourceRef,
                artifact: NewArtifact,
            ) -> StoreResult<ArtifactMeta> {
                let mut tx = self.begin_write().await?;
                let row = Self::lock(&mut tx, r).await?;
                let now = self.write_time(&row);
                let mut metas = Self::insert_artifacts(&mut tx, r, vec![artifact], now).await?;
                crate::store::counted::<$db>(sql::TOUCH)
                    .bind(r.kind.tag())
                    .bind(&r.id)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                metas
                    .pop()
                    .ok_or_else(|| StoreError::Corrupt("no artifact inserted".into()))
            }

            async fn deposit(
                &self,
                r: &ResourceRef,
                artifacts: Vec<NewArtifact>,
                make_event: &MakeEvent<'_>,
            ) -> StoreResult<(String, Vec<ArtifactMeta>)> {
                let mut tx = self.begin_write().await?;
                let row = Self::lock(&mut tx, r).await?;
                let now = self.write_time(&row);
                let metas = Self::insert_artifacts(&mut tx, r, artifacts, now).await?;
                // A rejection returns here and drops `tx`: nothing is visible
                // and no revision or sequence is consumed.
                let event = make_event(&metas)?;
                let envelope = Self::insert_event(&mut tx, r, row.last_seq, now, &event).await?;
                tx.commit().await?;
                self.written(r);
                Ok((envelope, metas))
            }

            async fn get_artifact(
                &self,
                r: &ResourceRef,
                kind: &str,
                rev: Option<i64>,
            ) -> StoreResult<Option<ArtifactMeta>> {
                let query = match rev {
                    Some(rev) => crate::store::counted::<$db>(sql::SELECT_ARTIFACT)
                        .bind(r.kind.tag())
                        .bind(&r.id)
                        .bind(kind)
                        .bind(rev),
                    None => crate::store::counted::<$db>(sql::SELECT_LATEST_ARTIFACT)
                        .bind(r.kind.tag())
                        .bind(&r.id)
                        .bind(kind),
                };
                match query.fetch_optional(self.reader()).await? {
                    Some(row) => Ok(Some(artifact_row(r, &row)?)),
                    None if self.exists(r).await? => Ok(None),
                    None => Err(StoreError::NotFound),
                }
            }

            async fn list_artifacts(
                &self,
                r: &ResourceRef,
                kind: Option<&str>,
            ) -> StoreResult<Vec<ArtifactMeta>> {
                let query = match kind {
                    Some(kind) => crate::store::counted::<$db>(sql::LIST_ARTIFACTS_OF_KIND)
                        .bind(r.kind.tag())
                        .bind(&r.id)
                        .bind(kind),
                    None => crate::store::counted::<$db>(sql::LIST_ARTIFACTS)
                        .bind(r.kind.tag())
                        .bind(&r.id),
                };
                let rows = query.fetch_all(self.reader()).await?;
                if rows.is_empty() && !self.exists(r).await? {
                    return Err(StoreError::NotFound);
                }
                rows.iter().map(|row| artifact_row(r, row)).collect()
            }

            async fn claim_lease(
                &self,
                r: &ResourceRef,
                holder: &str,
                ttl_ms: i64,
            ) -> StoreResult<bool> {
                let mut tx = self.begin_write().await?;
                let row = Self::lock(&mut tx, r).await?;
                let now = self.write_time(&row);
                if let Some(lease) = &row.record.lease {
                    if lease.holder != holder && lease.expires_at > now {
                        return Ok(false);
                    }
                }
                let expires = now
                    .saturating_add(ttl_ms)
                    .min(crate::protocol::time::MAX_JS_TIME_MS);
                crate::store::counted::<$db>(sql::SET_LEASE)
                    .bind(r.kind.tag())
                    .bind(&r.id)
                    .bind(holder)
                    .bind(expires)
                    .bind(ttl_ms)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(true)
            }

            async fn heartbeat(&self, r: &ResourceRef, holder: &str) -> StoreResult<bool> {
                let mut tx = self.begin_write().await?;
                let row = Self::lock(&mut tx, r).await?;
                let now = self.write_time(&row);
                let held = row
                    .record
                    .lease
                    .as_ref()
                    .is_some_and(|l| l.holder == holder && l.expires_at > now);
                if !held {
                    return Ok(false);
                }
                let ttl = row.lease_ttl_ms.unwrap_or(0);
                let expires = now
                    .saturating_add(ttl)
                    .min(crate::protocol::time::MAX_JS_TIME_MS);
                crate::store::counted::<$db>(sql::HEARTBEAT)
                    .bind(r.kind.tag())
                    .bind(&r.id)
                    .bind(expires)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(true)
            }

            async fn release_lease(&self, r: &ResourceRef, holder: &str) -> StoreResult<()> {
                let mut tx = self.begin_write().await?;
                let row = Self::lock(&mut tx, r).await?;
                if row
                    .record
                    .lease
                    .as_ref()
                    .is_some_and(|l| l.holder == holder)
                {
                    let now = self.write_time(&row);
                    crate::store::counted::<$db>(sql::CLEAR_LEASE)
                        .bind(r.kind.tag())
                        .bind(&r.id)
                        .bind(now)
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                }
                Ok(())
            }

            async fn tails(
                &self,
                resources: &[ResourceRef],
            ) -> StoreResult<Vec<(ResourceRef, i64)>> {
                let (streams, others): (Vec<ResourceRef>, Vec<ResourceRef>) = resources
                    .iter()
                    .cloned()
                    .partition(|r| r.kind == ResourceKind::Stream);
                let mut tails = Vec::with_capacity(resources.len());
                // A closed stream reports the largest tail: its readers must wake.
                for (sql, batch) in [(TAILS, others), (STREAM_TAILS, streams)] {
                    if batch.is_empty() {
                        continue;
                    }
                    let rows = crate::store::counted::<$db>(sql)
                        .bind(crate::store::tails_param(&batch))
                        .fetch_all(self.reader())
                        .await?;
                    for row in &rows {
                        let tag: String = row.try_get("kind")?;
                        let kind = ResourceKind::from_tag(&tag).ok_or_else(|| {
                            StoreError::Corrupt(format!("unknown resource kind {tag:?}"))
                        })?;
                        tails.push((
                            ResourceRef::new(kind, row.try_get::<String, _>("id")?),
                            row.try_get("last_seq")?,
                        ));
                    }
                }
                Ok(tails)
            }

            async fn create_session(
                &self,
                repo: &str,
                id: &str,
                attrs: Map<String, Value>,
                make_event: &crate::store::MakeFirstEvent<'_>,
            ) -> StoreResult<Record> {
                let repo_ref = ResourceRef::new(ResourceKind::Repo, repo);
                let session = ResourceRef::new(ResourceKind::Session, id);
                let mut tx = self.begin_write().await?;
                Self::lock(&mut tx, &repo_ref).await?;
                let now = self.clock.now_ms();
                let order = Self::next_child_order(&mut tx, &repo_ref).await?;
                crate::store::counted::<$db>(sql::INSERT_SESSION)
                    .bind(id)
                    .bind(Value::Object(attrs.clone()).to_string())
                    .bind(now)
                    .bind(repo)
                    .bind(order)
                    .execute(&mut *tx)
                    .await?;
                // session.created is sequence 1, visible together with the record or not at all.
                let event = make_event()?;
                Self::insert_event(&mut tx, &session, 0, now, &event).await?;
                tx.commit().await?;
                Ok(Record {
                    resource: session,
                    attrs,
                    created_at: now,
                    updated_at: now,
                    lease: None,
                    heartbeat_at: None,
                })
            }

            async fn list_sessions(&self, repo: &str) -> StoreResult<Vec<Record>> {
                let repo_ref = ResourceRef::new(ResourceKind::Repo, repo);
                let rows = crate::store::counted::<$db>(sql::LIST_SESSIONS)
                    .bind(repo)
                    .fetch_all(self.reader())
                    .await?;
                if rows.is_empty() && !self.exists(&repo_ref).await? {
                    return Err(StoreError::NotFound);
                }
                rows.iter()
                    .map(|row| Ok(resource_row(ResourceKind::Session, row)?.record))
                    .collect()
            }

            async fn create_stream(
                &self,
                scope: &ResourceRef,
                id: &str,
                label: &str,
            ) -> StoreResult<crate::store::StreamRecord> {
                let mut tx = self.begin_write().await?;
                let row = Self::lock(&mut tx, scope).await?;
                let now = self.clock.now_ms();
                let order = Self::next_child_order(&mut tx, scope).await?;
                crate::store::counted::<$db>(sql::PRUNE_CLOSED_CHUNKS)
                    .bind(scope.kind.tag())
                    .bind(&scope.id)
                    .execute(&mut *tx)
                    .await?;
                crate::store::counted::<$db>(sql::INSERT_STREAM)
                    .bind(id)
                    .bind(scope.kind.tag())
                    .bind(&scope.id)
                    .bind(label)
                    .bind(now)
                    .bind(order)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                drop(row);
                Ok(crate::store::StreamRecord {
                    id: id.to_owned(),
                    scope: scope.clone(),
                    label: label.to_owned(),
                    closed: false,
                    created_at: now,
                    closed_at: None,
                    outcome: None,
                    artifact: None,
                    last_seq: 0,
                })
            }

            async fn list_streams(
                &self,
                scope: &ResourceRef,
            ) -> StoreResult<Vec<crate::store::StreamRecord>> {
                let rows = crate::store::counted::<$db>(sql::LIST_STREAMS)
                    .bind(scope.kind.tag())
                    .bind(&scope.id)
                    .fetch_all(self.reader())
                    .await?;
                if rows.is_empty() && !self.exists(scope).await? {
                    return Err(StoreError::NotFound);
                }
                rows.iter().map(stream_row).collect()
            }

            async fn get_stream(
                &self,
                id: &str,
            ) -> StoreResult<Option<crate::store::StreamRecord>> {
                let row = crate::store::counted::<$db>(sql::SELECT_STREAM)
                    .bind(id)
                    .fetch_optional(self.reader())
                    .await?;
                row.map(|row| stream_row(&row)).transpose()
            }

            async fn append_chunk(&self, id: &str, parts_json: &str) -> StoreResult<String> {
                let mut tx = self.begin_write().await?;
                let stream = Self::lock_stream(&mut tx, id).await?;
                if stream.closed {
                    return Err(StoreError::Closed);
                }
                let seq = stream.last_seq + 1;
                let chunk = crate::store::chunk_json(
                    id,
                    seq,
                    self.clock.now_ms().max(stream.created_at),
                    parts_json,
                );
                crate::store::counted::<$db>(sql::INSERT_CHUNK)
                    .bind(id)
                    .bind(seq)
                    .bind(&chunk)
                    .execute(&mut *tx)
                    .await?;
                crate::store::counted::<$db>(sql::BUMP_CHUNK_SEQ)
                    .bind(id)
                    .bind(seq)
                    .execute(&mut *tx)
                    .await?;
                let stream_ref = ResourceRef::new(ResourceKind::Stream, id);
                tx.commit().await?;
                self.written(&stream_ref);
                Ok(chunk)
            }

            async fn read_chunks(
                &self,
                id: &str,
                since: i64,
            ) -> StoreResult<(crate::store::StreamRecord, Vec<String>)> {
                // Chunks first, then the record: a close landing between the two
                // reads is seen as closed with every chunk already read.
                let rows = crate::store::counted::<$db>(sql::SELECT_CHUNKS_SINCE)
                    .bind(id)
                    .bind(since)
                    .fetch_all(self.reader())
                    .await?;
                let stream = self.get_stream(id).await?.ok_or(StoreError::NotFound)?;
                let chunks = rows
                    .iter()
                    .map(|row| Ok(row.try_get::<String, _>("chunk")?))
                    .collect::<StoreResult<Vec<_>>>()?;
                Ok((stream, chunks))
            }

            async fn close_stream(
                &self,
                id: &str,
                outcome: &str,
                expected_last_seq: i64,
                artifact: NewArtifact,
            ) -> StoreResult<crate::store::CloseOutcome> {
                let scope = self
                    .get_stream(id)
                    .await?
                    .ok_or(StoreError::NotFound)?
                    .scope;
                let mut tx = self.begin_write().await?;
                // Resource row before stream row: the order every writer uses.
                let row = Self::lock(&mut tx, &scope).await?;
                let stream = Self::lock_stream(&mut tx, id).await?;
                if stream.closed {
                    return Ok(crate::store::CloseOutcome::AlreadyClosed(stream));
                }
                if stream.last_seq != expected_last_seq {
                    return Ok(crate::store::CloseOutcome::Moved);
                }
                let now = self.write_time(&row);
                let mut metas =
                    Self::insert_artifacts(&mut tx, &scope, vec![artifact], now).await?;
                let meta = metas
                    .pop()
                    .ok_or_else(|| StoreError::Corrupt("no artifact inserted".into()))?;
                let order = Self::next_child_order(&mut tx, &scope).await?;
                crate::store::counted::<$db>(sql::CLOSE_STREAM)
                    .bind(id)
                    .bind(now)
                    .bind(order)
                    .bind(outcome)
                    .bind(&meta.kind)
                    .bind(meta.revision)
                    .bind(&meta.blob_ref)
                    .execute(&mut *tx)
                    .await?;
                crate::store::counted::<$db>(sql::TOUCH)
                    .bind(scope.kind.tag())
                    .bind(&scope.id)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                let stream_ref = ResourceRef::new(ResourceKind::Stream, id);
                tx.commit().await?;
                self.written(&stream_ref);
                Ok(crate::store::CloseOutcome::Closed(
                    crate::store::StreamRecord {
                        closed: true,
                        closed_at: Some(now),
                        outcome: Some(outcome.to_owned()),
                        artifact: Some(crate::store::StreamArtifact {
                            kind: meta.kind,
                            revision: meta.revision,
                            blob_ref: meta.blob_ref,
                        }),
                        ..stream
                    },
                ))
            }

            fn pool_stats(&self) -> crate::store::PoolStats {
                let pool = self.reader();
                crate::store::PoolStats {
                    size: pool.size(),
                    idle: u32::try_from(pool.num_idle()).unwrap_or(u32::MAX),
                    max: pool.options().get_max_connections(),
                }
            }

            async fn ping(&self) -> StoreResult<()> {
                crate::store::counted::<$db>(sql::PING)
                    .fetch_one(self.reader())
                    .await?;
                Ok(())
            }
        }
    };
}

pub(crate) use impl_store;
