//! The SQL both backends run, written once, and the decoding of its rows.
//!
//! A shared statement is a function returning its text and its arguments
//! ([`Statement`]), so the argument order its placeholders expect is
//! written once. Texts use PostgreSQL's numbered placeholders (`$1`, `$2`,
//! …). SQLite reads `$N` as a parameter *named* `$N` and numbers such
//! parameters by where they first appear, not by `N`, so the SQLite backend
//! binds them by name (`sqlite::primitives`). A text may leave a number out:
//! SQLite binds what appears, while PostgreSQL's form fused from two shared
//! texts uses every argument (see [`append_event`]).
//!
//! The operations (`ops/`) run them through [`Statements`], a backend's
//! connection or transaction. What stays in each backend is what only its
//! dialect has ([`WriteTx`](super::engine::WriteTx)): PostgreSQL's row
//! locks (`FOR UPDATE`), its statements fused with `WITH … AS (UPDATE …)`
//! from two texts here (SQLite runs the two), and its one-statement fast
//! paths. The few statements whose text differs by dialect are written
//! here once per [`Dialect`]: the `tails` query (JSON table functions
//! differ) and protocol 3's two derived reads (build digests, state
//! events), which look into the stored JSON.
//!
//! Rows are read by position, through [`Columns`], which both drivers' rows
//! implement: the column lists below fix the positions.

use bytes::BytesMut;
use serde_json::{Map, Value};

use super::api::NewArtifact;
use super::assets::{AssetKey, TicketAssetMeta, TicketAssetSummary};
use super::error::{StoreError, StoreResult};
use super::records::{ArtifactMeta, Lease, Record, Revocation, StreamArtifact, StreamRecord};
use super::rows::Listing;
use super::rows::write_json;
use super::statement::{Arg, Columns, Dialect, Statement, Statements};
use crate::protocol::ticket_assets::Layout;
use crate::protocol::{ResourceKind, ResourceRef};

// `concat!` takes literals only: texts other statements extend are macros.

/// A resource row's columns, in the order [`resource_row`] reads them.
macro_rules! resource_columns {
    () => {
        "id, attrs, created_at, updated_at, last_seq, lease_holder, lease_expires_at, \
         lease_ttl_ms, heartbeat_at"
    };
}

/// A stream row's columns, in the order [`stream_row`] reads them.
macro_rules! stream_columns {
    () => {
        "id, scope_kind, scope_id, label, status, created_at, last_seq, closed_at, outcome, \
         artifact_kind, artifact_revision, artifact_blob_ref, bytes"
    };
}

/// An artifact row's columns, in the order [`artifact_row`] reads them.
macro_rules! artifact_columns {
    () => {
        "artifact_kind, revision, blob_ref, size, metadata, created_at"
    };
}

/// A ticket-asset row's columns, in the order [`ticket_asset_summary_row`]
/// reads them; a meta read adds `entries` after them.
macro_rules! ticket_asset_columns {
    () => {
        "repo, ticket_id, asset_kind, name, revision, layout, size, file_count, dir_count, created_at"
    };
}

macro_rules! select_resource_sql {
    () => {
        concat!(
            "SELECT ",
            $crate::store::sql::resource_columns!(),
            " FROM resources WHERE kind = $1 AND id = $2"
        )
    };
}

macro_rules! select_stream_sql {
    () => {
        concat!(
            "SELECT ",
            $crate::store::sql::stream_columns!(),
            " FROM streams WHERE id = $1"
        )
    };
}

macro_rules! append_event_tail_sql {
    () => {
        "UPDATE resources SET last_seq = $3, updated_at = $4 WHERE kind = $1 AND id = $2"
    };
}

macro_rules! insert_event_sql {
    () => {
        "INSERT INTO events (kind, resource_id, seq, envelope, type) VALUES ($1, $2, $3, $5, $6)"
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

macro_rules! append_chunk_tail_sql {
    () => {
        "UPDATE streams SET last_seq = $2, bytes = bytes + $4 WHERE id = $1"
    };
}

macro_rules! insert_chunk_sql {
    () => {
        "INSERT INTO stream_chunks (stream_id, seq, chunk) VALUES ($1, $2, $3)"
    };
}

pub(crate) use {
    append_chunk_tail_sql, append_event_tail_sql, insert_chunk_sql, insert_event_sql,
    next_revision_sql, resource_columns, select_resource_sql, select_stream_sql, stream_columns,
};

// Statements written once per `Dialect`: protocol 3's derived reads select
// events by the `type` column (migration 0011, index `events_by_type`), and
// look into the envelope for a digest's `ts` and into the record JSON for a
// build's repository, which the two databases spell differently
// (`json_extract` / `abstore_json_member`, migration 0005: PostgreSQL's own
// JSON functions refuse a document holding `\u0000`, and it reads the
// member's text as written, still escaped). The repository expression is
// exactly the one migration 0005 indexes, so the planners can use it;
// SQLite, whose planner keeps the primary key without statistics, is told
// to use the type index (`INDEXED BY`: a statement that could not use the
// index fails to prepare rather than scan).

/// The build digests of a repository (protocol 3): one row per event of the
/// four digest types of each of its builds, by slug then sequence, and a
/// row with `NULL`s for a build without any. `$1`: the repository.
///
/// The join selects by the indexed type column; the type and time a row
/// reports are `$row_ty` and `$row_ts`. On PostgreSQL the time is read by
/// position: its regular expression, for each of a week-old repository's
/// ~9,000 digest events, was most of the read's cost
/// (docs/benchmarks/frame-and-tick.md). By position is exact here: the
/// server writes envelopes compact, resource member, `seq`, `ts`, actor,
/// `type`, payload (store/envelope.rs, `envelope_json`), and a string value
/// cannot hold `,"ts":"` (its quotes are escaped), so the first is the
/// member itself. Every `ts` (ISO 8601) holds no escape or quote, and the
/// window (40 characters) exceeds it.
macro_rules! build_digests_sql {
    ($events:literal, $ty:literal, $row_ty:literal, $row_ts:literal, $repo:literal) => {
        concat!(
            "SELECT b.id, e.seq, ",
            $row_ty,
            ", ",
            $row_ts,
            " FROM resources b LEFT JOIN ",
            $events,
            " ON e.kind = 'build' AND e.resource_id = b.id AND ",
            $ty,
            " IN ('build.completed', 'build.aborted', 'pr.merged', 'observation.recorded') \
             WHERE b.kind = 'build' AND ",
            $repo,
            " = $1 ORDER BY b.id, e.seq"
        )
    };
}

/// A repository's state events (protocol 3): every event of a durable type
/// (`harvest.*`, `orchestrator.sandbox.*`, and three `dispatcher.*` settings)
/// and every event from the latest `dispatcher.run-started` on, when there is
/// one; in sequence order, one statement (one snapshot). Each part is a range
/// of the type index (or of the primary key, from the anchor), so neither the
/// journal nor its envelopes are scanned whole. `$1`: the repository; `$2`: the
/// journal's last sequence taken (the answer as the journal stood then).
macro_rules! state_events_sql {
    ($by_type:literal, $ty:literal) => {
        concat!(
            "SELECT envelope FROM events WHERE kind = 'repo' AND resource_id = $1 AND seq <= $2 \
             AND seq IN (",
            "SELECT seq FROM ",
            $by_type,
            " WHERE kind = 'repo' AND resource_id = $1 AND ",
            $ty,
            " >= 'harvest.' AND ",
            $ty,
            " < 'harvest/' UNION ALL ",
            "SELECT seq FROM ",
            $by_type,
            " WHERE kind = 'repo' AND resource_id = $1 AND ",
            $ty,
            " >= 'orchestrator.sandbox.' AND ",
            $ty,
            " < 'orchestrator.sandbox/' UNION ALL ",
            "SELECT seq FROM ",
            $by_type,
            " WHERE kind = 'repo' AND resource_id = $1 AND ",
            $ty,
            " IN ('dispatcher.intake-set', 'dispatcher.pause-set', \
             'dispatcher.auto-merge-default-set') UNION ALL ",
            "SELECT seq FROM events WHERE kind = 'repo' AND resource_id = $1 AND seq >= (",
            "SELECT seq FROM ",
            $by_type,
            " WHERE kind = 'repo' AND resource_id = $1 AND ",
            $ty,
            " = 'dispatcher.run-started' AND seq <= $2 ORDER BY seq DESC LIMIT 1)",
            ") ORDER BY seq"
        )
    };
}

// ------------------------------------------------------------- statements

/// A statement's arguments, each converted into an [`Arg`].
macro_rules! args {
    ($($arg:expr),* $(,)?) => {
        [$(Arg::from($arg)),*]
    };
}

type Fixed<'a, const N: usize> = Statement<[Arg<'a>; N]>;

fn statement<A>(text: &'static str, args: A) -> Statement<A> {
    Statement { text, args }
}

// ------------------------------------------------------------------ reads

/// The resource row as reads and locks return it.
pub(crate) struct ResourceRow {
    pub record: Record,
    pub last_seq: i64,
    pub lease_ttl_ms: Option<i64>,
}

/// A resource row, on any connection.
pub(crate) async fn resource(
    db: &mut (impl Statements + ?Sized),
    r: &ResourceRef,
) -> StoreResult<Option<ResourceRow>> {
    db.first(select_resource(r), |row| resource_row(r.kind, row))
        .await
}

/// A stream row, on any connection.
pub(crate) async fn stream(
    db: &mut (impl Statements + ?Sized),
    id: &str,
) -> StoreResult<Option<StreamRecord>> {
    db.first(select_stream(id), |row| stream_row(row)).await
}

/// Whether a resource exists, on any connection.
pub(crate) async fn exists(
    db: &mut (impl Statements + ?Sized),
    r: &ResourceRef,
) -> StoreResult<bool> {
    Ok(db.first(exists_resource(r), |_| Ok(())).await?.is_some())
}

pub(crate) fn select_resource(r: &ResourceRef) -> Fixed<'_, 2> {
    const SQL: &str = select_resource_sql!();
    statement(SQL, args![r.kind.tag(), &r.id])
}

pub(crate) fn exists_resource(r: &ResourceRef) -> Fixed<'_, 2> {
    const SQL: &str = "SELECT 1 AS one FROM resources WHERE kind = $1 AND id = $2";
    statement(SQL, args![r.kind.tag(), &r.id])
}

/// Envelopes after `since`, at most `limit`.
pub(crate) fn events_page(r: &ResourceRef, since: i64, limit: Option<i64>) -> Fixed<'_, 4> {
    const SQL: &str = "SELECT envelope FROM events WHERE kind = $1 AND resource_id = $2 \
         AND seq > $3 ORDER BY seq LIMIT $4";
    let [kind, id, since] = args![r.kind.tag(), &r.id, since];
    statement(SQL, [kind, id, since, Arg::Limit(limit)])
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

pub(crate) fn select_stream(id: &str) -> Fixed<'_, 1> {
    const SQL: &str = select_stream_sql!();
    statement(SQL, args![id])
}

/// Chunks after `since`, at most `limit`.
pub(crate) fn chunks_page(id: &str, since: i64, limit: Option<i64>) -> Fixed<'_, 3> {
    const SQL: &str =
        "SELECT chunk FROM stream_chunks WHERE stream_id = $1 AND seq > $2 ORDER BY seq LIMIT $3";
    let [id, since] = args![id, since];
    statement(SQL, [id, since, Arg::Limit(limit)])
}

/// The digest rows of `repo`'s builds ([`build_digests`], [`digest_row`]),
/// on any connection.
pub(crate) async fn digest_rows<D: Statements>(
    db: &mut D,
    repo: &str,
) -> StoreResult<Vec<(String, Option<DigestEvent>)>> {
    let repo = digests_repo(repo, D::DIALECT);
    db.all(build_digests(&repo, D::DIALECT), |row| digest_row(row))
        .await
}

/// The repository parameter of [`build_digests`]: PostgreSQL compares it
/// as the attributes' JSON text writes it, escapes included (migration
/// 0005, `abstore_json_member`), so it is given serde_json's escaping, the
/// one every stored record's JSON was written with.
fn digests_repo(repo: &str, dialect: Dialect) -> std::borrow::Cow<'_, str> {
    match dialect {
        Dialect::Sqlite => repo.into(),
        Dialect::Postgres => {
            let quoted = Value::String(repo.to_owned()).to_string();
            quoted[1..quoted.len() - 1].to_owned().into()
        }
    }
}

/// The digest rows of `repo`'s builds ([`digest_row`] reads them); `repo`
/// as [`digests_repo`] gives it.
pub(crate) fn build_digests(repo: &str, dialect: Dialect) -> Fixed<'_, 1> {
    // SQLite keeps json_extract: by position (instr and substr, which walk
    // the text by characters) measured slower there, 49-52 against 37-42 ms
    // of server CPU a week-old store's frame.
    const SQLITE: &str = build_digests_sql!(
        "events e INDEXED BY events_by_type",
        "e.type",
        "e.type",
        "json_extract(e.envelope, '$.ts')",
        "json_extract(b.attrs, '$.repo')"
    );
    const POSTGRES: &str = build_digests_sql!(
        "events e",
        "e.type",
        "e.type",
        "split_part(substr(e.envelope, strpos(e.envelope, ',\"ts\":\"') + 7, 40), '\"', 1)",
        "(abstore_json_member(b.attrs, 'repo') COLLATE \"C\")"
    );
    let text = match dialect {
        Dialect::Sqlite => SQLITE,
        Dialect::Postgres => POSTGRES,
    };
    statement(text, args![repo])
}

/// A digest event's seq, type and ts.
pub(crate) type DigestEvent = (i64, String, String);

/// A row of [`build_digests`]: slug, and the event's seq, type and ts
/// (`None` for a build without digest events).
pub(crate) fn digest_row(
    row: &(impl Columns + ?Sized),
) -> StoreResult<(String, Option<DigestEvent>)> {
    let slug = row.text(0)?;
    let event = match row.optional_int(1)? {
        Some(seq) => Some((seq, row.text(2)?, row.text(3)?)),
        None => None,
    };
    Ok((slug, event))
}

pub(crate) fn ping() -> Fixed<'static, 0> {
    statement("SELECT 1 AS one", [])
}

/// Every revoked token, by digest ([`revocation_row`] reads them).
pub(crate) fn select_revocations() -> Fixed<'static, 0> {
    const SQL: &str =
        "SELECT digest, expires_at, revoked_at, note FROM revoked_tokens ORDER BY digest";
    statement(SQL, [])
}

/// A row of [`select_revocations`].
pub(crate) fn revocation_row(row: &(impl Columns + ?Sized)) -> StoreResult<Revocation> {
    Ok(Revocation {
        digest: row.text(0)?,
        expires_at: row.optional_int(1)?,
        revoked_at: row.int(2)?,
        note: row.optional_text(3)?,
    })
}

/// One revision of an asset (`None`: the latest), on any connection;
/// absent and tombstones alike are `None`.
pub(crate) async fn ticket_asset(
    db: &mut (impl Statements + ?Sized),
    key: &AssetKey,
    rev: Option<i64>,
) -> StoreResult<Option<TicketAssetMeta>> {
    let decode = |row: &dyn Columns| ticket_asset_row(row);
    let found = match rev {
        Some(rev) => db.first(select_ticket_asset(key, rev), decode).await?,
        None => db.first(select_latest_ticket_asset(key), decode).await?,
    };
    Ok(found.flatten())
}

pub(crate) fn select_ticket_asset(key: &AssetKey, rev: i64) -> Fixed<'_, 5> {
    const SQL: &str = concat!(
        "SELECT ",
        ticket_asset_columns!(),
        ", entries FROM ticket_assets \
         WHERE repo = $1 AND ticket_id = $2 AND asset_kind = $3 AND name = $4 AND revision = $5"
    );
    statement(
        SQL,
        args![&key.repo, &key.ticket_id, &key.kind, &key.name, rev],
    )
}

/// The latest revision, a tombstone included: the latest row decides
/// whether the asset is live.
pub(crate) fn select_latest_ticket_asset(key: &AssetKey) -> Fixed<'_, 4> {
    const SQL: &str = concat!(
        "SELECT ",
        ticket_asset_columns!(),
        ", entries FROM ticket_assets \
         WHERE repo = $1 AND ticket_id = $2 AND asset_kind = $3 AND name = $4 \
         ORDER BY revision DESC LIMIT 1"
    );
    statement(SQL, args![&key.repo, &key.ticket_id, &key.kind, &key.name])
}

/// A ticket's summaries by kind, name, revision, in the primary key's
/// order: with `revisions`, every revision but tombstones; else the latest
/// revision of each kind and name when it is no tombstone.
pub(crate) fn list_ticket_assets<'a>(
    repo: &'a str,
    ticket_id: &'a str,
    revisions: bool,
) -> Fixed<'a, 2> {
    const LATEST: &str = concat!(
        "SELECT ",
        ticket_asset_columns!(),
        " FROM ticket_assets a WHERE repo = $1 AND ticket_id = $2 AND layout IS NOT NULL \
         AND revision = (SELECT MAX(l.revision) FROM ticket_assets l \
         WHERE l.repo = $1 AND l.ticket_id = $2 AND l.asset_kind = a.asset_kind AND l.name = a.name) \
         ORDER BY asset_kind, name, revision"
    );
    const ALL: &str = concat!(
        "SELECT ",
        ticket_asset_columns!(),
        " FROM ticket_assets WHERE repo = $1 AND ticket_id = $2 AND layout IS NOT NULL \
         ORDER BY asset_kind, name, revision"
    );
    statement(if revisions { ALL } else { LATEST }, args![repo, ticket_id])
}

/// How many of a ticket's assets are live, and (as a count, 0 or 1)
/// whether `key` is: each asset's head row names its latest revision
/// (`next_revision - 1`), a primary-key lookup, so the cost is one step per
/// asset of the ticket, never per revision. Run before the asset's own
/// counter is bumped.
pub(crate) fn live_ticket_assets(key: &AssetKey) -> Fixed<'_, 4> {
    const SQL: &str = "SELECT COUNT(*) AS live, \
         COALESCE(SUM(CASE WHEN h.asset_kind = $3 AND h.name = $4 THEN 1 ELSE 0 END), 0) AS this \
         FROM ticket_asset_heads h JOIN ticket_assets a ON a.repo = h.repo \
         AND a.ticket_id = h.ticket_id AND a.asset_kind = h.asset_kind AND a.name = h.name \
         AND a.revision = h.next_revision - 1 \
         WHERE h.repo = $1 AND h.ticket_id = $2 AND a.layout IS NOT NULL";
    statement(SQL, args![&key.repo, &key.ticket_id, &key.kind, &key.name])
}

/// The tails of `resources`, on any connection ([`select_tails`]).
pub(crate) async fn tails<D: Statements>(
    db: &mut D,
    resources: &[ResourceRef],
) -> StoreResult<Vec<(ResourceRef, i64)>> {
    let param = tails_param(resources);
    db.all(select_tails(&param, D::DIALECT), |row| tail_row(row))
        .await
}

/// The JSON array parameter of [`select_tails`]: `[{"kind","id"},…]`.
fn tails_param(resources: &[ResourceRef]) -> String {
    let items: Vec<Value> = resources
        .iter()
        .map(|r| serde_json::json!({ "kind": r.kind.tag(), "id": r.id }))
        .collect();
    Value::Array(items).to_string()
}

/// The tails of the resources `param` ([`tails_param`]) names, in one
/// statement: each existing resource's `last_seq`, and each stream's, a
/// closed stream reporting the largest tail so its readers wake
/// ([`tail_row`] reads them). The JSON table functions differ by dialect.
fn select_tails(param: &str, dialect: Dialect) -> Fixed<'_, 1> {
    const SQLITE: &str = "SELECT r.kind, r.id, r.last_seq FROM resources r JOIN json_each($1) j \
         ON r.kind = json_extract(j.value, '$.kind') AND r.id = json_extract(j.value, '$.id') \
         UNION ALL \
         SELECT 'stream', s.id, CASE WHEN s.status = 'closed' THEN 9223372036854775807 ELSE s.last_seq END \
         FROM streams s JOIN json_each($1) j \
         ON json_extract(j.value, '$.kind') = 'stream' AND s.id = json_extract(j.value, '$.id')";
    const POSTGRES: &str = "SELECT r.kind, r.id, r.last_seq FROM resources r \
         JOIN json_to_recordset($1::json) AS a(kind text, id text) \
         ON r.kind = a.kind COLLATE \"C\" AND r.id = a.id COLLATE \"C\" \
         UNION ALL \
         SELECT 'stream', s.id, CASE WHEN s.status = 'closed' THEN 9223372036854775807 ELSE s.last_seq END \
         FROM streams s JOIN json_to_recordset($1::json) AS a(kind text, id text) \
         ON a.kind = 'stream' AND s.id = a.id COLLATE \"C\"";
    let text = match dialect {
        Dialect::Sqlite => SQLITE,
        Dialect::Postgres => POSTGRES,
    };
    statement(text, args![param])
}

/// The one statement a streamed read runs.
pub(crate) fn listing(listing: &Listing, dialect: Dialect) -> Statement<Vec<Arg<'_>>> {
    const EVENTS: &str = "SELECT envelope FROM events \
         WHERE kind = $1 AND resource_id = $2 AND seq > $3 AND seq <= $4 ORDER BY seq";
    const CHUNKS: &str =
        "SELECT chunk FROM stream_chunks WHERE stream_id = $1 AND seq > $2 ORDER BY seq";
    const BUILDS: &str = concat!(
        "SELECT ",
        resource_columns!(),
        " FROM resources WHERE kind = 'build' ORDER BY created_at, id"
    );
    const SESSIONS: &str = concat!(
        "SELECT ",
        resource_columns!(),
        " FROM resources WHERE kind = 'session' AND parent = $1 ORDER BY created_at, created_order"
    );
    const ARTIFACTS: &str = concat!(
        "SELECT ",
        artifact_columns!(),
        " FROM artifacts WHERE kind = $1 AND resource_id = $2 ORDER BY artifact_kind, revision"
    );
    const ARTIFACTS_OF_KIND: &str = concat!(
        "SELECT ",
        artifact_columns!(),
        " FROM artifacts WHERE kind = $1 AND resource_id = $2 AND artifact_kind = $3 ORDER BY revision"
    );
    const STREAMS: &str = concat!(
        "SELECT ",
        stream_columns!(),
        " FROM streams WHERE scope_kind = $1 AND scope_id = $2 ORDER BY created_at, created_order"
    );
    const STATE_EVENTS_SQLITE: &str = state_events_sql!("events INDEXED BY events_by_type", "type");
    const STATE_EVENTS_POSTGRES: &str = state_events_sql!("events", "type");
    match listing {
        Listing::Events {
            resource: r,
            since,
            until,
        } => {
            let until = until.unwrap_or(i64::MAX);
            statement(EVENTS, args![r.kind.tag(), &r.id, *since, until].into())
        }
        Listing::StateEvents { repo, until } => {
            let text = match dialect {
                Dialect::Sqlite => STATE_EVENTS_SQLITE,
                Dialect::Postgres => STATE_EVENTS_POSTGRES,
            };
            statement(text, args![repo, until.unwrap_or(i64::MAX)].into())
        }
        Listing::Chunks { id, since } => statement(CHUNKS, args![id, *since].into()),
        Listing::Builds => statement(BUILDS, Vec::new()),
        Listing::Sessions { repo } => statement(SESSIONS, args![repo].into()),
        Listing::Artifacts {
            resource: r,
            kind: Some(kind),
        } => statement(ARTIFACTS_OF_KIND, args![r.kind.tag(), &r.id, kind].into()),
        Listing::Artifacts {
            resource: r,
            kind: None,
        } => statement(ARTIFACTS, args![r.kind.tag(), &r.id].into()),
        Listing::Streams { scope } => statement(STREAMS, args![scope.kind.tag(), &scope.id].into()),
        Listing::TicketAssets {
            repo,
            ticket_id,
            revisions,
        } => {
            let list = list_ticket_assets(repo, ticket_id, *revisions);
            statement(list.text, list.args.into())
        }
    }
}

// ----------------------------------------------------------------- writes

/// A revoked token; nothing when its digest is already revoked (the first
/// revocation, its expiry and note, stand).
pub(crate) fn insert_revocation(revocation: &Revocation) -> Fixed<'_, 4> {
    const SQL: &str = "INSERT INTO revoked_tokens (digest, expires_at, revoked_at, note) \
         VALUES ($1, $2, $3, $4) ON CONFLICT (digest) DO NOTHING";
    statement(
        SQL,
        args![
            &revocation.digest,
            revocation.expires_at,
            revocation.revoked_at,
            revocation.note.as_deref()
        ],
    )
}

/// The revocations of tokens expired by `$1`.
pub(crate) fn prune_revocations(now: i64) -> Fixed<'static, 1> {
    const SQL: &str =
        "DELETE FROM revoked_tokens WHERE expires_at IS NOT NULL AND expires_at <= $1";
    statement(SQL, args![now])
}

/// A resource with no events; nothing when it exists.
pub(crate) fn insert_resource<'a>(
    r: &'a ResourceRef,
    attrs: Option<&'a str>,
    now: i64,
) -> Fixed<'a, 4> {
    const SQL: &str = "INSERT INTO resources (kind, id, attrs, created_at, updated_at, last_seq) \
         VALUES ($1, $2, $3, $4, $4, 0) ON CONFLICT (kind, id) DO NOTHING";
    statement(SQL, args![r.kind.tag(), &r.id, attrs, now])
}

/// The event stored as sequence `seq`; with the same arguments,
/// [`APPEND_EVENT_TAIL`] makes it the resource's tail.
pub(crate) fn append_event<'a>(
    r: &'a ResourceRef,
    seq: i64,
    now: i64,
    envelope: &'a str,
    event_type: &'a str,
) -> Fixed<'a, 6> {
    const SQL: &str = insert_event_sql!();
    statement(
        SQL,
        args![r.kind.tag(), &r.id, seq, now, envelope, event_type],
    )
}

/// [`append_event`]'s second half.
pub(crate) const APPEND_EVENT_TAIL: &str = append_event_tail_sql!();

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

pub(crate) fn touch(r: &ResourceRef, now: i64) -> Fixed<'_, 3> {
    const SQL: &str = "UPDATE resources SET updated_at = $3 WHERE kind = $1 AND id = $2";
    statement(SQL, args![r.kind.tag(), &r.id, now])
}

pub(crate) fn set_lease<'a>(
    r: &'a ResourceRef,
    holder: &'a str,
    expires_at: i64,
    ttl_ms: i64,
    now: i64,
) -> Fixed<'a, 6> {
    const SQL: &str = "UPDATE resources SET lease_holder = $3, lease_expires_at = $4, \
         lease_ttl_ms = $5, updated_at = $6 WHERE kind = $1 AND id = $2";
    statement(
        SQL,
        args![r.kind.tag(), &r.id, holder, expires_at, ttl_ms, now],
    )
}

pub(crate) fn extend_lease(
    r: &ResourceRef,
    expires_at: i64,
    heartbeat: i64,
    now: i64,
) -> Fixed<'_, 5> {
    const SQL: &str = "UPDATE resources SET lease_expires_at = $3, heartbeat_at = $4, \
         updated_at = $5 WHERE kind = $1 AND id = $2";
    statement(SQL, args![r.kind.tag(), &r.id, expires_at, heartbeat, now])
}

pub(crate) fn clear_lease(r: &ResourceRef, now: i64) -> Fixed<'_, 3> {
    const SQL: &str = "UPDATE resources SET lease_holder = NULL, lease_expires_at = NULL, \
         lease_ttl_ms = NULL, updated_at = $3 WHERE kind = $1 AND id = $2";
    statement(SQL, args![r.kind.tag(), &r.id, now])
}

/// Bumps and returns the parent's child counter.
pub(crate) fn next_child_order(parent: &ResourceRef) -> Fixed<'_, 2> {
    const SQL: &str = "UPDATE resources SET stream_counter = stream_counter + 1 \
         WHERE kind = $1 AND id = $2 RETURNING stream_counter";
    statement(SQL, args![parent.kind.tag(), &parent.id])
}

pub(crate) fn insert_session<'a>(
    id: &'a str,
    attrs: &'a str,
    now: i64,
    repo: &'a str,
    order: i64,
) -> Fixed<'a, 5> {
    const SQL: &str = "INSERT INTO resources \
         (kind, id, attrs, created_at, updated_at, last_seq, parent, created_order) \
         VALUES ('session', $1, $2, $3, $3, 0, $4, $5)";
    statement(SQL, args![id, attrs, now, repo, order])
}

/// The chunks of every closed stream of `scope` but the most recently
/// closed one.
pub(crate) fn prune_closed_chunks(scope: &ResourceRef) -> Fixed<'_, 2> {
    const SQL: &str = "DELETE FROM stream_chunks WHERE stream_id IN (\
         SELECT id FROM streams WHERE scope_kind = $1 AND scope_id = $2 AND status = 'closed' \
         AND id <> COALESCE((SELECT latest.id FROM streams latest WHERE latest.scope_kind = $1 \
         AND latest.scope_id = $2 AND latest.status = 'closed' \
         ORDER BY latest.closed_at DESC, latest.closed_order DESC LIMIT 1), ''))";
    statement(SQL, args![scope.kind.tag(), &scope.id])
}

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

pub(crate) fn insert_stream<'a>(
    id: &'a str,
    scope: &'a ResourceRef,
    label: &'a str,
    now: i64,
    order: i64,
) -> Fixed<'a, 6> {
    const SQL: &str = "INSERT INTO streams \
         (id, scope_kind, scope_id, label, status, created_at, created_order) \
         VALUES ($1, $2, $3, $4, 'open', $5, $6)";
    statement(
        SQL,
        args![id, scope.kind.tag(), &scope.id, label, now, order],
    )
}

/// The chunk stored as sequence `seq`; with the same arguments,
/// [`APPEND_CHUNK_TAIL`] makes it the stream's tail and adds its bytes
/// (`$4`, the UTF-8 length, which each dialect's `length` counts otherwise)
/// to the stream's total.
pub(crate) fn append_chunk<'a>(id: &'a str, seq: i64, chunk: &'a str) -> Fixed<'a, 4> {
    const SQL: &str = insert_chunk_sql!();
    let size = i64::try_from(chunk.len()).unwrap_or(i64::MAX);
    statement(SQL, args![id, seq, chunk, size])
}

/// [`append_chunk`]'s second half.
pub(crate) const APPEND_CHUNK_TAIL: &str = append_chunk_tail_sql!();

pub(crate) fn close_stream<'a>(
    id: &'a str,
    now: i64,
    order: i64,
    outcome: &'a str,
    artifact: &'a StreamArtifact,
) -> Fixed<'a, 7> {
    const SQL: &str = "UPDATE streams SET status = 'closed', closed_at = $2, closed_order = $3, \
         outcome = $4, artifact_kind = $5, artifact_revision = $6, artifact_blob_ref = $7 \
         WHERE id = $1";
    let a = artifact;
    statement(
        SQL,
        args![id, now, order, outcome, &a.kind, a.revision, &a.blob_ref],
    )
}

/// Bumps the asset's revision counter (creating it at 1) and returns the
/// revision it assigned with the revision's time: `$5` (the clock), or the
/// previous revision's when the clock is behind it, so times never run
/// backwards along an asset's revisions.
pub(crate) fn next_ticket_asset_revision(key: &AssetKey, now: i64) -> Fixed<'_, 5> {
    const SQL: &str = "INSERT INTO ticket_asset_heads \
         (repo, ticket_id, asset_kind, name, next_revision, created_at) \
         VALUES ($1, $2, $3, $4, 1, $5) ON CONFLICT (repo, ticket_id, asset_kind, name) \
         DO UPDATE SET next_revision = ticket_asset_heads.next_revision + 1, \
         created_at = CASE WHEN ticket_asset_heads.created_at > excluded.created_at \
         THEN ticket_asset_heads.created_at ELSE excluded.created_at END \
         RETURNING next_revision - 1 AS revision, created_at";
    statement(
        SQL,
        args![&key.repo, &key.ticket_id, &key.kind, &key.name, now],
    )
}

/// A revision's row: `meta`'s, or (`None`) a tombstone of `key` at
/// `revision`, created at `now`.
pub(crate) fn insert_ticket_asset<'a>(
    key: &'a AssetKey,
    revision: i64,
    now: i64,
    meta: Option<&'a TicketAssetMeta>,
) -> Fixed<'a, 11> {
    const SQL: &str = "INSERT INTO ticket_assets \
         (repo, ticket_id, asset_kind, name, revision, layout, size, file_count, dir_count, \
         entries, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";
    let (layout, size, files, dirs, entries) = match meta {
        Some(m) => (
            Some(m.summary.layout.as_str()),
            m.summary.size,
            m.summary.file_count,
            m.summary.dir_count,
            Some(m.entries_json.as_str()),
        ),
        None => (None, 0, 0, 0, None),
    };
    statement(
        SQL,
        args![
            &key.repo,
            &key.ticket_id,
            &key.kind,
            &key.name,
            revision,
            layout,
            size,
            files,
            dirs,
            entries,
            now
        ],
    )
}

/// One row of [`listing`]'s statement as its wire JSON.
pub(crate) fn render(
    listing: &Listing,
    row: &(impl Columns + ?Sized),
    piece: &mut BytesMut,
) -> StoreResult<()> {
    match listing {
        Listing::Events { .. } | Listing::StateEvents { .. } | Listing::Chunks { .. } => {
            // Stored as the served JSON text: copied as is.
            piece.extend_from_slice(row.str(0)?.as_bytes());
            Ok(())
        }
        Listing::Builds => write_json(
            piece,
            &resource_row(ResourceKind::Build, row)?.record.to_json(),
        ),
        Listing::Sessions { .. } => write_json(
            piece,
            &resource_row(ResourceKind::Session, row)?.record.to_json(),
        ),
        Listing::Artifacts { resource, .. } => {
            write_json(piece, &artifact_row(resource, row)?.to_json())
        }
        Listing::Streams { .. } => write_json(piece, &stream_row(row)?.to_json()),
        Listing::TicketAssets { .. } => {
            // The statement selects no tombstone.
            let summary = ticket_asset_summary_row(row)?
                .ok_or_else(|| StoreError::Corrupt("a tombstone in an asset list".into()))?;
            piece.extend_from_slice(summary.to_json_text().as_bytes());
            Ok(())
        }
    }
}

// --------------------------------------------------------------- decoding

fn json_object(text: &str, what: &str) -> StoreResult<Map<String, Value>> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(StoreError::Corrupt(format!("{what} is not a JSON object"))),
    }
}

fn resource_kind(tag: &str, what: &str) -> StoreResult<ResourceKind> {
    ResourceKind::from_tag(tag)
        .ok_or_else(|| StoreError::Corrupt(format!("unknown {what} {tag:?}")))
}

/// A row of `resource_columns!()`.
pub(crate) fn resource_row(
    kind: ResourceKind,
    row: &(impl Columns + ?Sized),
) -> StoreResult<ResourceRow> {
    let attrs = match row.optional_text(1)? {
        Some(text) => json_object(&text, "resource attrs")?,
        None => Map::new(),
    };
    let lease = row
        .optional_text(5)?
        .zip(row.optional_int(6)?)
        .map(|(holder, expires_at)| Lease { holder, expires_at });
    Ok(ResourceRow {
        record: Record {
            resource: ResourceRef::new(kind, row.text(0)?),
            attrs,
            created_at: row.int(2)?,
            updated_at: row.int(3)?,
            lease,
            heartbeat_at: row.optional_int(8)?,
        },
        last_seq: row.int(4)?,
        lease_ttl_ms: row.optional_int(7)?,
    })
}

/// A row of `stream_columns!()`.
pub(crate) fn stream_row(row: &(impl Columns + ?Sized)) -> StoreResult<StreamRecord> {
    let kind = resource_kind(row.str(1)?, "stream scope")?;
    let artifact = match (
        row.optional_text(9)?,
        row.optional_int(10)?,
        row.optional_text(11)?,
    ) {
        (Some(kind), Some(revision), Some(blob_ref)) => Some(StreamArtifact {
            kind,
            revision,
            blob_ref,
        }),
        _ => None,
    };
    Ok(StreamRecord {
        id: row.text(0)?,
        scope: ResourceRef::new(kind, row.text(2)?),
        label: row.text(3)?,
        closed: row.str(4)? == "closed",
        created_at: row.int(5)?,
        last_seq: row.int(6)?,
        closed_at: row.optional_int(7)?,
        outcome: row.optional_text(8)?,
        artifact,
        bytes: row.int(12)?,
    })
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

/// A row of `ticket_asset_columns!()`; `None` for a tombstone.
pub(crate) fn ticket_asset_summary_row(
    row: &(impl Columns + ?Sized),
) -> StoreResult<Option<TicketAssetSummary>> {
    let Some(layout) = row.optional_text(5)? else {
        return Ok(None);
    };
    let layout = Layout::parse(&layout)
        .ok_or_else(|| StoreError::Corrupt(format!("unknown ticket asset layout {layout:?}")))?;
    Ok(Some(TicketAssetSummary {
        key: AssetKey {
            repo: row.text(0)?,
            ticket_id: row.text(1)?,
            kind: row.text(2)?,
            name: row.text(3)?,
        },
        revision: row.int(4)?,
        layout,
        size: row.int(6)?,
        file_count: row.int(7)?,
        dir_count: row.int(8)?,
        created_at: row.int(9)?,
    }))
}

/// A row of `ticket_asset_columns!()` and `entries`; `None` for a tombstone.
pub(crate) fn ticket_asset_row(
    row: &(impl Columns + ?Sized),
) -> StoreResult<Option<TicketAssetMeta>> {
    let Some(summary) = ticket_asset_summary_row(row)? else {
        return Ok(None);
    };
    let entries_json = row
        .optional_text(10)?
        .ok_or_else(|| StoreError::Corrupt("a ticket asset revision without entries".into()))?;
    Ok(Some(TicketAssetMeta {
        summary,
        entries_json,
    }))
}

/// A row of a `tails` statement: kind, id, tail.
pub(crate) fn tail_row(row: &(impl Columns + ?Sized)) -> StoreResult<(ResourceRef, i64)> {
    let kind = resource_kind(row.str(0)?, "resource kind")?;
    Ok((ResourceRef::new(kind, row.text(1)?), row.int(2)?))
}
