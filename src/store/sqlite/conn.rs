//! The SQLite primitives of [`Reads`] and [`Writes`] over one rusqlite
//! connection. Every statement is prepared once per connection
//! (`prepare_cached`). The futures never pend: [`ops::drive`] runs them.
//!
//! No row lock is needed: the one writer connection, inside the batch's
//! `BEGIN IMMEDIATE`, already serialises every write.

use bytes::BytesMut;
use rusqlite::{Connection, OptionalExtension as _, Row, params};
use serde_json::{Map, Value};

use super::stream::Out;

use crate::clock::Clock;
use crate::protocol::{ResourceKind, ResourceRef};
use crate::store::ops::{Reads, ResourceRow, Writes};
use crate::store::rows::write_json;
use crate::store::{
    ArtifactMeta, Lease, Listing, NewArtifact, Record, StoreError, StoreResult, StreamArtifact,
    StreamRecord,
};

const RESOURCE_COLUMNS: &str = "id, attrs, created_at, updated_at, last_seq, lease_holder, \
     lease_expires_at, lease_ttl_ms, heartbeat_at";
const STREAM_COLUMNS: &str = "id, scope_kind, scope_id, label, status, created_at, last_seq, \
     closed_at, outcome, artifact_kind, artifact_revision, artifact_blob_ref";
const ARTIFACT_COLUMNS: &str = "artifact_kind, revision, blob_ref, size, metadata, created_at";

/// One connection, plus the clock writes read their time from.
pub(super) struct Conn<'c> {
    conn: &'c Connection,
    clock: &'c dyn Clock,
}

impl<'c> Conn<'c> {
    pub(super) fn new(conn: &'c Connection, clock: &'c dyn Clock) -> Self {
        Conn { conn, clock }
    }

    /// A cached statement, counted in `abstore_db_queries_total`.
    fn statement(&self, sql: &str) -> StoreResult<rusqlite::CachedStatement<'c>> {
        metrics::counter!("abstore_db_queries_total").increment(1);
        Ok(self.conn.prepare_cached(sql)?)
    }
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(format!("{what} is not a JSON object"))
}

fn json_object(text: &str, what: &str) -> StoreResult<Map<String, Value>> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(corrupt(what)),
    }
}

/// A stored JSON text column (envelopes, chunks), copied as is.
fn text_row(row: &Row<'_>, buf: &mut BytesMut) -> StoreResult<()> {
    let text = row.get_ref(0)?.as_str().map_err(rusqlite::Error::from)?;
    buf.extend_from_slice(text.as_bytes());
    Ok(())
}

/// Rows are read as raw values first: rusqlite's row closures can only fail
/// with its own error type, and JSON parsing happens after.
struct RawResource {
    id: String,
    attrs: Option<String>,
    created_at: i64,
    updated_at: i64,
    last_seq: i64,
    lease_holder: Option<String>,
    lease_expires_at: Option<i64>,
    lease_ttl_ms: Option<i64>,
    heartbeat_at: Option<i64>,
}

fn raw_resource(row: &Row<'_>) -> rusqlite::Result<RawResource> {
    Ok(RawResource {
        id: row.get(0)?,
        attrs: row.get(1)?,
        created_at: row.get(2)?,
        updated_at: row.get(3)?,
        last_seq: row.get(4)?,
        lease_holder: row.get(5)?,
        lease_expires_at: row.get(6)?,
        lease_ttl_ms: row.get(7)?,
        heartbeat_at: row.get(8)?,
    })
}

impl RawResource {
    fn parse(self, kind: ResourceKind) -> StoreResult<ResourceRow> {
        let attrs = match &self.attrs {
            Some(text) => json_object(text, "resource attrs")?,
            None => Map::new(),
        };
        Ok(ResourceRow {
            record: Record {
                resource: ResourceRef::new(kind, self.id),
                attrs,
                created_at: self.created_at,
                updated_at: self.updated_at,
                lease: self
                    .lease_holder
                    .zip(self.lease_expires_at)
                    .map(|(holder, expires_at)| Lease { holder, expires_at }),
                heartbeat_at: self.heartbeat_at,
            },
            last_seq: self.last_seq,
            lease_ttl_ms: self.lease_ttl_ms,
        })
    }
}

struct RawArtifact {
    kind: String,
    revision: i64,
    blob_ref: String,
    size: i64,
    metadata: String,
    created_at: i64,
}

fn raw_artifact(row: &Row<'_>) -> rusqlite::Result<RawArtifact> {
    Ok(RawArtifact {
        kind: row.get(0)?,
        revision: row.get(1)?,
        blob_ref: row.get(2)?,
        size: row.get(3)?,
        metadata: row.get(4)?,
        created_at: row.get(5)?,
    })
}

impl RawArtifact {
    fn parse(self, r: &ResourceRef) -> StoreResult<ArtifactMeta> {
        Ok(ArtifactMeta {
            resource: r.clone(),
            kind: self.kind,
            revision: self.revision,
            blob_ref: self.blob_ref,
            size: self.size,
            metadata: json_object(&self.metadata, "artifact metadata")?,
            created_at: self.created_at,
        })
    }
}

struct RawStream {
    record: StreamRecord,
    scope_kind: String,
}

fn raw_stream(row: &Row<'_>) -> rusqlite::Result<RawStream> {
    let artifact_kind: Option<String> = row.get(9)?;
    let artifact_revision: Option<i64> = row.get(10)?;
    let artifact_blob_ref: Option<String> = row.get(11)?;
    let status: String = row.get(4)?;
    Ok(RawStream {
        scope_kind: row.get(1)?,
        record: StreamRecord {
            id: row.get(0)?,
            // The kind is checked in `parse`; build is a placeholder.
            scope: ResourceRef::new(ResourceKind::Build, row.get::<_, String>(2)?),
            label: row.get(3)?,
            closed: status == "closed",
            created_at: row.get(5)?,
            last_seq: row.get(6)?,
            closed_at: row.get(7)?,
            outcome: row.get(8)?,
            artifact: match (artifact_kind, artifact_revision, artifact_blob_ref) {
                (Some(kind), Some(revision), Some(blob_ref)) => Some(StreamArtifact {
                    kind,
                    revision,
                    blob_ref,
                }),
                _ => None,
            },
        },
    })
}

impl RawStream {
    fn parse(self) -> StoreResult<StreamRecord> {
        let kind = ResourceKind::from_tag(&self.scope_kind).ok_or_else(|| {
            StoreError::Corrupt(format!("unknown stream scope {:?}", self.scope_kind))
        })?;
        let mut record = self.record;
        record.scope = ResourceRef::new(kind, std::mem::take(&mut record.scope.id));
        Ok(record)
    }
}

impl Conn<'_> {
    fn resource_row(&self, r: &ResourceRef) -> StoreResult<Option<ResourceRow>> {
        self.statement(&format!(
            "SELECT {RESOURCE_COLUMNS} FROM resources WHERE kind = ?1 AND id = ?2"
        ))?
        .query_row(params![r.kind.tag(), r.id], raw_resource)
        .optional()?
        .map(|raw| raw.parse(r.kind))
        .transpose()
    }

    fn stream_row(&self, id: &str) -> StoreResult<Option<StreamRecord>> {
        self.statement(&format!(
            "SELECT {STREAM_COLUMNS} FROM streams WHERE id = ?1"
        ))?
        .query_row(params![id], raw_stream)
        .optional()?
        .map(RawStream::parse)
        .transpose()
    }

    /// Run `listing`'s statement, writing each row's wire JSON to `out` as
    /// the statement steps (one statement: one snapshot); an empty answer
    /// of an unknown owner is `NotFound`.
    pub(super) fn stream(&self, listing: &Listing, out: &mut Out) -> StoreResult<()> {
        match listing {
            Listing::Events { resource, since } => self.each(
                "SELECT envelope FROM events WHERE kind = ?1 AND resource_id = ?2 AND seq > ?3 \
                 ORDER BY seq",
                params![resource.kind.tag(), resource.id, since],
                out,
                text_row,
            )?,
            Listing::Chunks { id, since } => self.each(
                "SELECT chunk FROM stream_chunks WHERE stream_id = ?1 AND seq > ?2 ORDER BY seq",
                params![id, since],
                out,
                text_row,
            )?,
            Listing::Builds => self.each(
                &format!(
                    "SELECT {RESOURCE_COLUMNS} FROM resources WHERE kind = 'build' \
                     ORDER BY created_at, id"
                ),
                [],
                out,
                |row, buf| {
                    let record = raw_resource(row)?.parse(ResourceKind::Build)?.record;
                    write_json(buf, &record.to_json())
                },
            )?,
            Listing::Sessions { repo } => self.each(
                &format!(
                    "SELECT {RESOURCE_COLUMNS} FROM resources WHERE kind = 'session' AND parent = ?1 \
                     ORDER BY created_at, created_order"
                ),
                params![repo],
                out,
                |row, buf| {
                    let record = raw_resource(row)?.parse(ResourceKind::Session)?.record;
                    write_json(buf, &record.to_json())
                },
            )?,
            Listing::Artifacts { resource, kind } => self.each(
                // `?3 IS NULL` lets one statement serve both listings.
                &format!(
                    "SELECT {ARTIFACT_COLUMNS} FROM artifacts WHERE kind = ?1 AND resource_id = ?2 \
                     AND (?3 IS NULL OR artifact_kind = ?3) ORDER BY artifact_kind, revision"
                ),
                params![resource.kind.tag(), resource.id, kind],
                out,
                |row, buf| write_json(buf, &raw_artifact(row)?.parse(resource)?.to_json()),
            )?,
            Listing::Streams { scope } => self.each(
                &format!(
                    "SELECT {STREAM_COLUMNS} FROM streams WHERE scope_kind = ?1 AND scope_id = ?2 \
                     ORDER BY created_at, created_order"
                ),
                params![scope.kind.tag(), scope.id],
                out,
                |row, buf| write_json(buf, &raw_stream(row)?.parse()?.to_json()),
            )?,
        }
        if !out.has_rows()
            && let Some(owner) = listing.owner()
            && !self.exists_row(&owner)?
        {
            return Err(StoreError::NotFound(owner));
        }
        Ok(())
    }

    fn exists_row(&self, r: &ResourceRef) -> StoreResult<bool> {
        Ok(self
            .statement("SELECT 1 FROM resources WHERE kind = ?1 AND id = ?2")?
            .exists(params![r.kind.tag(), r.id])?)
    }

    /// Step `sql`'s rows into `out`, sending each piece as it fills.
    fn each(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
        out: &mut Out,
        render: impl Fn(&Row<'_>, &mut BytesMut) -> StoreResult<()>,
    ) -> StoreResult<()> {
        let mut statement = self.statement(sql)?;
        let mut rows = statement.query(params)?;
        while let Some(row) = rows.next()? {
            render(row, out.row())?;
            out.flush_if_full()?;
        }
        Ok(())
    }

    fn texts(&self, sql: &str, params: impl rusqlite::Params) -> StoreResult<Vec<String>> {
        let mut statement = self.statement(sql)?;
        let texts = statement
            .query_map(params, |row| row.get::<_, String>(0))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(texts)
    }
}

impl Reads for Conn<'_> {
    async fn resource(&mut self, r: &ResourceRef) -> StoreResult<Option<ResourceRow>> {
        self.resource_row(r)
    }

    async fn exists(&mut self, r: &ResourceRef) -> StoreResult<bool> {
        self.exists_row(r)
    }

    async fn events_since(
        &mut self,
        r: &ResourceRef,
        since: i64,
        limit: Option<i64>,
    ) -> StoreResult<Vec<String>> {
        // A negative LIMIT is no limit in SQLite.
        self.texts(
            "SELECT envelope FROM events WHERE kind = ?1 AND resource_id = ?2 AND seq > ?3 \
             ORDER BY seq LIMIT ?4",
            params![r.kind.tag(), r.id, since, limit.unwrap_or(-1)],
        )
    }

    async fn artifact(
        &mut self,
        r: &ResourceRef,
        kind: &str,
        rev: Option<i64>,
    ) -> StoreResult<Option<ArtifactMeta>> {
        let raw = match rev {
            Some(rev) => self
                .statement(&format!(
                    "SELECT {ARTIFACT_COLUMNS} FROM artifacts WHERE kind = ?1 AND resource_id = ?2 \
                     AND artifact_kind = ?3 AND revision = ?4"
                ))?
                .query_row(params![r.kind.tag(), r.id, kind, rev], raw_artifact)
                .optional()?,
            None => self
                .statement(&format!(
                    "SELECT {ARTIFACT_COLUMNS} FROM artifacts WHERE kind = ?1 AND resource_id = ?2 \
                     AND artifact_kind = ?3 ORDER BY revision DESC LIMIT 1"
                ))?
                .query_row(params![r.kind.tag(), r.id, kind], raw_artifact)
                .optional()?,
        };
        raw.map(|raw| raw.parse(r)).transpose()
    }

    async fn stream(&mut self, id: &str) -> StoreResult<Option<StreamRecord>> {
        self.stream_row(id)
    }

    async fn chunks_since(
        &mut self,
        id: &str,
        since: i64,
        limit: Option<i64>,
    ) -> StoreResult<Vec<String>> {
        self.texts(
            "SELECT chunk FROM stream_chunks WHERE stream_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
            params![id, since, limit.unwrap_or(-1)],
        )
    }

    async fn tails(&mut self, resources: &[ResourceRef]) -> StoreResult<Vec<(ResourceRef, i64)>> {
        // One statement for resources and streams; a closed stream reports
        // the largest tail so its readers wake.
        let param = crate::store::tails_param(resources);
        let mut statement = self.statement(
            "SELECT r.kind, r.id, r.last_seq FROM resources r JOIN json_each(?1) j \
             ON r.kind = json_extract(j.value, '$.kind') AND r.id = json_extract(j.value, '$.id') \
             UNION ALL \
             SELECT 'stream', s.id, CASE WHEN s.status = 'closed' THEN 9223372036854775807 ELSE s.last_seq END \
             FROM streams s JOIN json_each(?1) j \
             ON json_extract(j.value, '$.kind') = 'stream' AND s.id = json_extract(j.value, '$.id')",
        )?;
        let rows = statement
            .query_map(params![param], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, i64>(2)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        rows.into_iter()
            .map(|(tag, id, seq)| {
                let kind = ResourceKind::from_tag(&tag)
                    .ok_or_else(|| StoreError::Corrupt(format!("unknown resource kind {tag:?}")))?;
                Ok((ResourceRef::new(kind, id), seq))
            })
            .collect()
    }

    async fn ping(&mut self) -> StoreResult<()> {
        self.statement("SELECT 1")?.query_row([], |_| Ok(()))?;
        Ok(())
    }
}

impl Writes for Conn<'_> {
    fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    async fn lock_resource(&mut self, r: &ResourceRef) -> StoreResult<Option<ResourceRow>> {
        self.resource_row(r)
    }

    async fn insert_resource(
        &mut self,
        r: &ResourceRef,
        attrs: Option<&str>,
        now: i64,
    ) -> StoreResult<bool> {
        let inserted = self
            .statement(
                "INSERT INTO resources (kind, id, attrs, created_at, updated_at, last_seq) \
                 VALUES (?1, ?2, ?3, ?4, ?4, 0) ON CONFLICT (kind, id) DO NOTHING",
            )?
            .execute(params![r.kind.tag(), r.id, attrs, now])?;
        Ok(inserted > 0)
    }

    async fn append_event(
        &mut self,
        r: &ResourceRef,
        seq: i64,
        now: i64,
        envelope: &str,
    ) -> StoreResult<()> {
        self.statement(
            "INSERT INTO events (kind, resource_id, seq, envelope) VALUES (?1, ?2, ?3, ?4)",
        )?
        .execute(params![r.kind.tag(), r.id, seq, envelope])?;
        self.statement(
            "UPDATE resources SET last_seq = ?3, updated_at = ?4 WHERE kind = ?1 AND id = ?2",
        )?
        .execute(params![r.kind.tag(), r.id, seq, now])?;
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
            let revision: i64 = self
                .statement(
                    "INSERT INTO artifact_heads (kind, resource_id, artifact_kind, next_revision) \
                     VALUES (?1, ?2, ?3, 1) ON CONFLICT (kind, resource_id, artifact_kind) \
                     DO UPDATE SET next_revision = artifact_heads.next_revision + 1 \
                     RETURNING next_revision - 1",
                )?
                .query_row(params![r.kind.tag(), r.id, artifact.kind], |row| row.get(0))?;
            self.statement(
                "INSERT INTO artifacts \
                 (kind, resource_id, artifact_kind, revision, blob_ref, size, metadata, created_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![
                r.kind.tag(),
                r.id,
                artifact.kind,
                revision,
                artifact.blob_ref,
                artifact.size,
                Value::Object(artifact.metadata.clone()).to_string(),
                now
            ])?;
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
        self.statement("UPDATE resources SET updated_at = ?3 WHERE kind = ?1 AND id = ?2")?
            .execute(params![r.kind.tag(), r.id, now])?;
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
        self.statement(
            "UPDATE resources SET lease_holder = ?3, lease_expires_at = ?4, lease_ttl_ms = ?5, \
             updated_at = ?6 WHERE kind = ?1 AND id = ?2",
        )?
        .execute(params![r.kind.tag(), r.id, holder, expires_at, ttl_ms, now])?;
        Ok(())
    }

    async fn extend_lease(
        &mut self,
        r: &ResourceRef,
        expires_at: i64,
        heartbeat_at: i64,
        now: i64,
    ) -> StoreResult<()> {
        self.statement(
            "UPDATE resources SET lease_expires_at = ?3, heartbeat_at = ?4, updated_at = ?5 \
             WHERE kind = ?1 AND id = ?2",
        )?
        .execute(params![r.kind.tag(), r.id, expires_at, heartbeat_at, now])?;
        Ok(())
    }

    async fn clear_lease(&mut self, r: &ResourceRef, now: i64) -> StoreResult<()> {
        self.statement(
            "UPDATE resources SET lease_holder = NULL, lease_expires_at = NULL, \
             lease_ttl_ms = NULL, updated_at = ?3 WHERE kind = ?1 AND id = ?2",
        )?
        .execute(params![r.kind.tag(), r.id, now])?;
        Ok(())
    }

    async fn next_child_order(&mut self, parent: &ResourceRef) -> StoreResult<i64> {
        Ok(self
            .statement(
                "UPDATE resources SET stream_counter = stream_counter + 1 \
                 WHERE kind = ?1 AND id = ?2 RETURNING stream_counter",
            )?
            .query_row(params![parent.kind.tag(), parent.id], |row| row.get(0))?)
    }

    async fn insert_session(
        &mut self,
        id: &str,
        attrs: &str,
        now: i64,
        repo: &str,
        order: i64,
    ) -> StoreResult<()> {
        self.statement(
            "INSERT INTO resources (kind, id, attrs, created_at, updated_at, last_seq, parent, created_order) \
             VALUES ('session', ?1, ?2, ?3, ?3, 0, ?4, ?5)",
        )?
        .execute(params![id, attrs, now, repo, order])?;
        Ok(())
    }

    async fn prune_closed_chunks(&mut self, scope: &ResourceRef) -> StoreResult<()> {
        self.statement(
            "DELETE FROM stream_chunks WHERE stream_id IN (\
             SELECT id FROM streams WHERE scope_kind = ?1 AND scope_id = ?2 AND status = 'closed' \
             AND id <> COALESCE((SELECT latest.id FROM streams latest WHERE latest.scope_kind = ?1 \
             AND latest.scope_id = ?2 AND latest.status = 'closed' \
             ORDER BY latest.closed_at DESC, latest.closed_order DESC LIMIT 1), ''))",
        )?
        .execute(params![scope.kind.tag(), scope.id])?;
        Ok(())
    }

    async fn prune_revisions(
        &mut self,
        r: &ResourceRef,
        kind: &str,
        keep: i64,
        limit: i64,
    ) -> StoreResult<u64> {
        // The oldest revisions below the `keep`-th newest (?4 = keep - 1
        // rows skipped from the newest), at most ?5; fewer than `keep`
        // revisions make the bound NULL, deleting nothing.
        let deleted = self
            .statement(
                "DELETE FROM artifacts WHERE kind = ?1 AND resource_id = ?2 AND artifact_kind = ?3 \
                 AND revision IN (SELECT candidate.revision FROM artifacts candidate \
                 WHERE candidate.kind = ?1 AND candidate.resource_id = ?2 AND candidate.artifact_kind = ?3 AND candidate.revision < (\
                 SELECT bound.revision FROM artifacts bound \
                 WHERE bound.kind = ?1 AND bound.resource_id = ?2 AND bound.artifact_kind = ?3 \
                 ORDER BY bound.revision DESC LIMIT 1 OFFSET ?4) \
                 ORDER BY candidate.revision LIMIT ?5)",
            )?
            .execute(params![r.kind.tag(), r.id, kind, keep - 1, limit])?;
        Ok(u64::try_from(deleted).unwrap_or(u64::MAX))
    }

    async fn insert_stream(
        &mut self,
        id: &str,
        scope: &ResourceRef,
        label: &str,
        now: i64,
        order: i64,
    ) -> StoreResult<()> {
        self.statement(
            "INSERT INTO streams (id, scope_kind, scope_id, label, status, created_at, created_order) \
             VALUES (?1, ?2, ?3, ?4, 'open', ?5, ?6)",
        )?
        .execute(params![id, scope.kind.tag(), scope.id, label, now, order])?;
        Ok(())
    }

    async fn stream_scope(&mut self, id: &str) -> StoreResult<Option<ResourceRef>> {
        Ok(self.stream_row(id)?.map(|stream| stream.scope))
    }

    async fn lock_stream(&mut self, id: &str) -> StoreResult<Option<StreamRecord>> {
        self.stream_row(id)
    }

    async fn append_chunk(&mut self, id: &str, seq: i64, chunk: &str) -> StoreResult<()> {
        self.statement("INSERT INTO stream_chunks (stream_id, seq, chunk) VALUES (?1, ?2, ?3)")?
            .execute(params![id, seq, chunk])?;
        self.statement("UPDATE streams SET last_seq = ?2 WHERE id = ?1")?
            .execute(params![id, seq])?;
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
        self.statement(
            "UPDATE streams SET status = 'closed', closed_at = ?2, closed_order = ?3, outcome = ?4, \
             artifact_kind = ?5, artifact_revision = ?6, artifact_blob_ref = ?7 WHERE id = ?1",
        )?
        .execute(params![
            id,
            now,
            order,
            outcome,
            artifact.kind,
            artifact.revision,
            artifact.blob_ref
        ])?;
        Ok(())
    }
}
