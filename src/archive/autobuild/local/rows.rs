//! Building archive rows from the local store's rows, the same way in both
//! passes: the plan pass builds them to decide what can be carried, the
//! emit pass builds them again to send. Each is read column by column as
//! whatever SQLite holds ([`cell_text`], [`cell_int`]) and passes its
//! write route's checks (`archive::checks`) or says why not.

use serde_json::{Map, Value};

use super::*;
use crate::archive::checks;
use crate::protocol::wire;

/// The `SELECT` of a family's records, in key order: id, the two times,
/// the lease's four columns, then the family's own members.
pub(super) fn resource_sql(family: Family, shape: &Shape) -> String {
    match family {
        Family::Build => format!(
            "SELECT slug, created_at, updated_at, lease_holder, lease_expires_at, lease_ttl_ms, \
             heartbeat_at, repo, {origin}, ticket, branch FROM builds ORDER BY slug COLLATE BINARY",
            origin = if shape.has_column("builds", "repo_origin") {
                "repo_origin"
            } else {
                "NULL"
            }
        ),
        Family::Repo => "SELECT repo, created_at, updated_at, lease_holder, lease_expires_at, \
             lease_ttl_ms, heartbeat_at FROM repo_streams ORDER BY repo COLLATE BINARY"
            .to_owned(),
        Family::Session => "SELECT id, created_at, updated_at, NULL, NULL, NULL, NULL, repo, \
             operator, title FROM sessions ORDER BY id COLLATE BINARY"
            .to_owned(),
    }
}

/// What the archive row of a record holds besides the source's columns.
pub(super) struct Counters {
    pub last_seq: i64,
    pub stream_counter: i64,
    /// A session's place among its repository's creations.
    pub created_order: Option<i64>,
}

impl Counters {
    /// Stand-ins for the plan pass, which checks a record before its
    /// counters are known.
    pub fn planned(family: Family) -> Counters {
        Counters {
            last_seq: 0,
            stream_counter: 0,
            created_order: (family == Family::Session).then_some(1),
        }
    }
}

/// A record's archive row (`resource_sql`'s row `row`, whose id is `id`),
/// with what the create route would have kept of its members.
pub(super) fn resource_row(
    family: Family,
    id: &str,
    row: &rusqlite::Row<'_>,
    counters: &Counters,
) -> Result<Vec<Val>, String> {
    let created = required_time(cell_text(row, 1, "created_at")?.as_deref(), "created_at")?;
    let updated = required_time(cell_text(row, 2, "updated_at")?.as_deref(), "updated_at")?;
    let holder = cell_text(row, 3, "lease_holder")?;
    let expires = time(cell_text(row, 4, "lease_expires_at")?.as_deref())?;
    let ttl = cell_int(row, 5, "lease_ttl_ms")?;
    let heartbeat = time(cell_text(row, 6, "heartbeat_at")?.as_deref())?;
    let schema = |result: wire::SchemaResult<Map<String, Value>>| {
        result.map_err(|wire::SchemaError(why)| format!("its record: {why}"))
    };
    let (attrs, parent) = match family {
        Family::Build => {
            let mut body = Map::new();
            if let Some(repo) = cell_text(row, 7, "repo")? {
                body.insert("repo".into(), repo.into());
            }
            if let Some(origin) = cell_text(row, 8, "repo_origin")? {
                body.insert("repoOrigin".into(), origin.into());
            }
            if let Some(ticket) = cell_text(row, 9, "ticket")? {
                let ticket: Value = serde_json::from_str(&ticket)
                    .map_err(|err| format!("its ticket is not JSON ({err})"))?;
                body.insert("ticket".into(), ticket);
            }
            if let Some(branch) = cell_text(row, 10, "branch")? {
                body.insert("branch".into(), branch.into());
            }
            let attrs = schema(wire::build_attrs(&body))?;
            (Val::Text(Value::Object(attrs).to_string()), Val::Null)
        }
        Family::Repo => (Val::Null, Val::Null),
        Family::Session => {
            let repo = required_text(row, 7, "repo")?;
            let mut body = Map::new();
            body.insert("repo".into(), repo.clone().into());
            if let Some(operator) = cell_text(row, 8, "operator")? {
                body.insert("operator".into(), operator.into());
            }
            if let Some(title) = cell_text(row, 9, "title")? {
                body.insert("title".into(), title.into());
            }
            let attrs = schema(wire::session_attrs(&body, &repo))?;
            (Val::Text(Value::Object(attrs).to_string()), Val::Text(repo))
        }
    };
    let row = vec![
        Val::Text(family.kind().to_owned()),
        Val::Text(id.to_owned()),
        attrs,
        Val::Int(created),
        Val::Int(updated),
        Val::Int(counters.last_seq),
        opt(holder),
        opt_int(expires),
        opt_int(ttl),
        opt_int(heartbeat),
        Val::Int(counters.stream_counter),
        parent,
        opt_int(counters.created_order),
    ];
    checks::row(RESOURCE, &row)?;
    Ok(row)
}

/// The `SELECT` of a family's events, in key order.
pub(super) fn events_sql(family: Family) -> String {
    format!(
        "SELECT {owner}, seq, ts, actor, type, payload FROM {table} \
         ORDER BY {owner} COLLATE BINARY, seq",
        owner = family.owner(),
        table = family.events_table()
    )
}

/// An event as it was stored: its texts, and its actor and payload parsed.
pub(super) struct StoredEvent {
    pub seq: i64,
    pub ts: String,
    pub event_type: String,
    pub actor_text: String,
    pub actor: Value,
    pub payload_text: String,
    pub payload: Value,
}

/// The event of `events_sql`'s row `row` (whose owner is `id`), and its
/// archive row: the envelope spliced from the stored texts, never
/// re-serialised (§4.2), so it is what Autobuild served.
pub(super) fn event_row(
    family: Family,
    id: &str,
    row: &rusqlite::Row<'_>,
) -> Result<(StoredEvent, Vec<Val>), String> {
    let seq = required_int(row, 1, "seq")?;
    let ts = required_text(row, 2, "ts").map_err(|why| format!("event {seq}: {why}"))?;
    let actor_text = required_text(row, 3, "actor").map_err(|why| format!("event {seq}: {why}"))?;
    let event_type = required_text(row, 4, "type").map_err(|why| format!("event {seq}: {why}"))?;
    let payload_text =
        required_text(row, 5, "payload").map_err(|why| format!("event {seq}: {why}"))?;
    let parse = |what: &str, text: &str| {
        serde_json::from_str::<Value>(text)
            .map_err(|err| format!("event {seq}'s {what} is JSON abstore cannot read ({err})"))
    };
    let actor = parse("actor", &actor_text)?;
    let payload = parse("payload", &payload_text)?;
    let envelope = format!(
        "{{\"{key}\":{id},\"seq\":{seq},\"ts\":{ts},\"actor\":{actor_text},\"type\":{ty},\"payload\":{payload_text}}}",
        key = family.owner(),
        id = Value::String(id.to_owned()),
        ts = Value::String(ts.clone()),
        ty = Value::String(event_type.clone()),
    );
    let archived = vec![
        Val::Text(family.kind().to_owned()),
        Val::Text(id.to_owned()),
        Val::Int(seq),
        Val::Text(envelope),
    ];
    checks::row(EVENT, &archived).map_err(|why| format!("event {seq}: {why}"))?;
    Ok((
        StoredEvent {
            seq,
            ts,
            event_type,
            actor_text,
            actor,
            payload_text,
            payload,
        },
        archived,
    ))
}

/// A stream's archive row.
pub(super) fn stream_row(s: &StreamRow) -> Vec<Val> {
    vec![
        Val::Text(s.id.clone()),
        Val::Text(s.scope.0.kind().to_owned()),
        Val::Text(s.scope.1.clone()),
        Val::Text(s.label.clone()),
        Val::Text(s.status.clone()),
        Val::Int(s.created_at),
        Val::Int(s.created_order),
        Val::Int(s.last_seq),
        opt_int(s.closed_at),
        opt_int(s.closed_order),
        opt(s.outcome.clone()),
        opt(s.artifact_kind.clone()),
        opt_int(s.artifact_revision),
        opt(s.artifact_blob_ref.clone()),
    ]
}

/// Every chunk, in key order.
pub(super) const CHUNKS_SQL: &str =
    "SELECT stream, seq, ts, parts FROM stream_chunks ORDER BY stream COLLATE BINARY, seq";

/// The archive row of `CHUNKS_SQL`'s row `row` (of stream `id`): the chunk
/// spliced from its stored parts.
pub(super) fn chunk_row(id: &str, row: &rusqlite::Row<'_>) -> Result<Vec<Val>, String> {
    let seq = required_int(row, 1, "seq")?;
    let ts = required_text(row, 2, "ts").map_err(|why| format!("chunk {seq}: {why}"))?;
    let parts = required_text(row, 3, "parts").map_err(|why| format!("chunk {seq}: {why}"))?;
    let chunk = format!(
        "{{\"stream\":{},\"seq\":{seq},\"ts\":{},\"parts\":{parts}}}",
        Value::String(id.to_owned()),
        Value::String(ts)
    );
    let archived = vec![Val::Text(id.to_owned()), Val::Int(seq), Val::Text(chunk)];
    checks::row(STREAM_CHUNK, &archived).map_err(|why| format!("chunk {seq}: {why}"))?;
    Ok(archived)
}

/// The `SELECT` of a family's artifacts, in key order.
pub(super) fn artifacts_sql(family: Family) -> String {
    format!(
        "SELECT {owner}, kind, revision, blob_ref, metadata, created_at FROM {table} \
         ORDER BY {owner} COLLATE BINARY, kind COLLATE BINARY, revision",
        owner = family.owner(),
        table = family.artifacts_table()
    )
}

/// An artifact's archive row from `artifacts_sql`'s row `row`, its size
/// not yet known (0): what it is, not yet what its blob is.
pub(super) fn artifact_row(
    family: Family,
    id: &str,
    row: &rusqlite::Row<'_>,
) -> Result<Vec<Val>, String> {
    let kind = required_text(row, 1, "kind")?;
    let revision = required_int(row, 2, "revision")?;
    let blob = required_text(row, 3, "blob_ref")?;
    let metadata = required_text(row, 4, "metadata")?;
    let created = required_time(cell_text(row, 5, "created_at")?.as_deref(), "created_at")?;
    let archived = vec![
        Val::Text(family.kind().to_owned()),
        Val::Text(id.to_owned()),
        Val::Text(kind),
        Val::Int(revision),
        Val::Text(blob),
        Val::Int(0),
        Val::Text(metadata),
        Val::Int(created),
    ];
    checks::row(ARTIFACT, &archived)?;
    Ok(archived)
}
