//! Artifacts' statements and rows: a revision assigned on its head row
//! and stored (two texts, which PostgreSQL fuses, [`INSERT_ARTIFACT_POSTGRES`]),
//! the reads of one revision and of a resource's artifacts (a streamed
//! read), and retention's pruning.

use crate::protocol::ResourceRef;
use crate::store::api::NewArtifact;
use crate::store::error::StoreResult;
use crate::store::records::ArtifactMeta;
use crate::store::statement::{Arg, Columns, Fixed, args, json_object, statement};

/// An artifact row's columns, in the order [`artifact_row`] reads them.
macro_rules! artifact_columns {
    () => {
        "artifact_kind, revision, blob_ref, size, metadata, created_at"
    };
}

macro_rules! next_revision_sql {
    () => {
        "INSERT INTO artifact_heads (kind, resource_id, artifact_kind, next_revision) \
         VALUES ($1, $2, $3, 1) ON CONFLICT (kind, resource_id, artifact_kind) \
         DO UPDATE SET next_revision = artifact_heads.next_revision + 1 \
         RETURNING next_revision - 1 AS revision"
    };
}

pub(crate) fn select_artifact<'a>(r: &'a ResourceRef, kind: &'a str, rev: i64) -> Fixed<'a, 4> {
    const SQL: &str = concat!(
        "SELECT ",
        artifact_columns!(),
        " FROM artifacts WHERE kind = $1 AND resource_id = $2 AND artifact_kind = $3 AND revision = $4"
    );
    statement(SQL, args![r.kind.tag(), &r.id, kind, rev])
}

pub(crate) fn select_latest_artifact<'a>(r: &'a ResourceRef, kind: &'a str) -> Fixed<'a, 3> {
    const SQL: &str = concat!(
        "SELECT ",
        artifact_columns!(),
        " FROM artifacts WHERE kind = $1 AND resource_id = $2 AND artifact_kind = $3 \
         ORDER BY revision DESC LIMIT 1"
    );
    statement(SQL, args![r.kind.tag(), &r.id, kind])
}

/// The next revision of the artifact's kind, returned; the arguments also
/// carry the metadata (`$4` blob ref, `$5` size, `$6` metadata, `$7` now)
/// for the statement that stores it.
pub(crate) fn insert_artifact<'a>(
    r: &'a ResourceRef,
    artifact: &'a NewArtifact,
    metadata: &'a str,
    now: i64,
) -> Fixed<'a, 7> {
    const SQL: &str = next_revision_sql!();
    statement(
        SQL,
        args![
            r.kind.tag(),
            &r.id,
            &artifact.kind,
            &artifact.blob_ref,
            artifact.size,
            metadata,
            now
        ],
    )
}

/// The metadata of the revision [`insert_artifact`] assigned: its
/// arguments, and the revision as `$8` (PostgreSQL fuses the two).
pub(crate) fn store_revision(next: Fixed<'_, 7>, revision: i64) -> Fixed<'_, 8> {
    const SQL: &str = "INSERT INTO artifacts \
         (kind, resource_id, artifact_kind, revision, blob_ref, size, metadata, created_at) \
         VALUES ($1, $2, $3, $8, $4, $5, $6, $7)";
    let [a1, a2, a3, a4, a5, a6, a7] = next.args;
    statement(SQL, [a1, a2, a3, a4, a5, a6, a7, Arg::Int(revision)])
}

/// PostgreSQL's one round trip: assign the next revision
/// ([`insert_artifact`]'s arguments) and insert the metadata.
pub(crate) const INSERT_ARTIFACT_POSTGRES: &str = concat!(
    "WITH head AS (",
    next_revision_sql!(),
    ") INSERT INTO artifacts (kind, resource_id, artifact_kind, revision, blob_ref, size, metadata, created_at) \
     SELECT $1, $2, $3, head.revision, $4, $5, $6, $7 FROM head RETURNING revision"
);

/// Retention: the oldest revisions of one kind below its `keep`-th newest
/// (`$4` = keep - 1 rows skipped from the newest), at most `limit`, oldest
/// first. Fewer than `keep` revisions make the bound NULL, deleting
/// nothing. Both subqueries walk the primary key.
pub(crate) fn prune_revisions<'a>(
    r: &'a ResourceRef,
    kind: &'a str,
    keep: i64,
    limit: i64,
) -> Fixed<'a, 5> {
    const SQL: &str = "DELETE FROM artifacts \
         WHERE kind = $1 AND resource_id = $2 AND artifact_kind = $3 \
         AND revision IN (SELECT candidate.revision FROM artifacts candidate \
         WHERE candidate.kind = $1 AND candidate.resource_id = $2 \
         AND candidate.artifact_kind = $3 AND candidate.revision < (\
         SELECT bound.revision FROM artifacts bound \
         WHERE bound.kind = $1 AND bound.resource_id = $2 AND bound.artifact_kind = $3 \
         ORDER BY bound.revision DESC LIMIT 1 OFFSET $4) \
         ORDER BY candidate.revision LIMIT $5)";
    statement(SQL, args![r.kind.tag(), &r.id, kind, keep - 1, limit])
}

/// A resource's artifact metadata, by kind then revision (a streamed read).
pub(crate) fn resource_artifacts(r: &ResourceRef) -> Fixed<'_, 2> {
    const SQL: &str = concat!(
        "SELECT ",
        artifact_columns!(),
        " FROM artifacts WHERE kind = $1 AND resource_id = $2 ORDER BY artifact_kind, revision"
    );
    statement(SQL, args![r.kind.tag(), &r.id])
}

/// A resource's revisions of one kind, in order (a streamed read).
pub(crate) fn resource_artifacts_of_kind<'a>(r: &'a ResourceRef, kind: &'a str) -> Fixed<'a, 3> {
    const SQL: &str = concat!(
        "SELECT ",
        artifact_columns!(),
        " FROM artifacts WHERE kind = $1 AND resource_id = $2 AND artifact_kind = $3 ORDER BY revision"
    );
    statement(SQL, args![r.kind.tag(), &r.id, kind])
}

/// A row of `artifact_columns!()`, an artifact of `resource`.
pub(crate) fn artifact_row(
    resource: &ResourceRef,
    row: &(impl Columns + ?Sized),
) -> StoreResult<ArtifactMeta> {
    Ok(ArtifactMeta {
        resource: resource.clone(),
        kind: row.text(0)?,
        revision: row.int(1)?,
        blob_ref: row.text(2)?,
        size: row.int(3)?,
        metadata: json_object(row.str(4)?, "artifact metadata")?,
        created_at: row.int(5)?,
    })
}
