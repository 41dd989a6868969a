//! Resource records and artifact metadata as the store returns them, and
//! their exact wire shapes (optional members omitted, never `null`).

use serde_json::{Map, Value};

use crate::protocol::time::format_iso;
use crate::protocol::{ResourceKind, ResourceRef};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub holder: String,
    pub expires_at: i64,
}

/// A build, repository or session record. `attrs` carries the create-time
/// members: a build's `repo`, `repoOrigin`, `ticket`, `branch`; a session's
/// `repo`, `operator`, `title`; repositories have none.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub resource: ResourceRef,
    pub attrs: Map<String, Value>,
    pub created_at: i64,
    pub updated_at: i64,
    pub lease: Option<Lease>,
    pub heartbeat_at: Option<i64>,
}

impl Record {
    /// `BuildRecord`, `RepositoryRecord` (spec section 2) or `SessionRecord`
    /// (section 5; sessions have no lease, so none is ever shown).
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        let id_key = match self.resource.kind {
            ResourceKind::Build => "slug",
            ResourceKind::Session => "id",
            ResourceKind::Repo | ResourceKind::Stream => self.resource.kind.wire_key(),
        };
        out.insert(id_key.into(), Value::String(self.resource.id.clone()));
        for (key, value) in &self.attrs {
            out.insert(key.clone(), value.clone());
        }
        out.insert("createdAt".into(), format_iso(self.created_at).into());
        out.insert("updatedAt".into(), format_iso(self.updated_at).into());
        if let Some(lease) = &self.lease {
            let mut l = Map::new();
            l.insert("holder".into(), lease.holder.clone().into());
            l.insert("expiresAt".into(), format_iso(lease.expires_at).into());
            out.insert("lease".into(), Value::Object(l));
        }
        if let Some(at) = self.heartbeat_at {
            out.insert("heartbeatAt".into(), format_iso(at).into());
        }
        Value::Object(out)
    }
}

/// A build, session or repository as the console lists it
/// ([`ConsoleReads`](super::api::ConsoleReads)): no attributes, its event
/// count (`last_seq`: logs are append-only) and what it last did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceSummary {
    pub id: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub last_seq: i64,
    pub lease_holder: Option<String>,
    pub lease_expires_at: Option<i64>,
    /// The last event's type and `ts`, as stored.
    pub last_type: Option<String>,
    pub last_ts: Option<String>,
    /// A repository's build count.
    pub children: i64,
}

/// One artifact revision as the console lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredArtifact {
    pub kind: String,
    pub revision: i64,
    pub size: i64,
    pub created_at: i64,
}

/// A ticket's comment as the console shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TicketComment {
    pub seq: i64,
    pub body: String,
    pub created_at: i64,
}

/// A revoked token (`abstore token revoke`; migration 0007): never the token,
/// only what names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Revocation {
    /// The SHA-256 of the token's text, 64 lowercase hex digits.
    pub digest: String,
    /// The token's own `exp` (epoch ms), when the token itself was given.
    pub expires_at: Option<i64>,
    /// When it was revoked (epoch ms).
    pub revoked_at: i64,
    /// Why, in the operator's words.
    pub note: Option<String>,
}

/// Artifact metadata (spec section 2), for any resource family.
#[derive(Clone, Debug, PartialEq)]
pub struct ArtifactMeta {
    pub resource: ResourceRef,
    pub kind: String,
    pub revision: i64,
    pub blob_ref: String,
    pub size: i64,
    pub metadata: Map<String, Value>,
    pub created_at: i64,
}

impl ArtifactMeta {
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert(
            self.resource.kind.wire_key().into(),
            Value::String(self.resource.id.clone()),
        );
        out.insert("kind".into(), self.kind.clone().into());
        out.insert("revision".into(), self.revision.into());
        out.insert("blobRef".into(), self.blob_ref.clone().into());
        out.insert("metadata".into(), Value::Object(self.metadata.clone()));
        out.insert("createdAt".into(), format_iso(self.created_at).into());
        Value::Object(out)
    }
}

/// The literal stream format (spec section 6).
pub const STREAM_FORMAT: &str = "ai-ui-message-stream/v1";

/// A stream's finalized artifact reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamArtifact {
    pub kind: String,
    pub revision: i64,
    pub blob_ref: String,
}

/// A stream record (spec section 6) plus its chunk counter and byte total.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamRecord {
    pub id: String,
    pub scope: ResourceRef,
    pub label: String,
    pub closed: bool,
    pub created_at: i64,
    pub closed_at: Option<i64>,
    pub outcome: Option<String>,
    pub artifact: Option<StreamArtifact>,
    pub last_seq: i64,
    /// The UTF-8 bytes of the chunks appended, as stored (the text a close
    /// reads), held to `--max-stream-bytes`. Kept while the stream is open;
    /// a closed stream's chunks may be pruned, and its total is not used.
    pub bytes: i64,
}

impl StreamRecord {
    pub fn status(&self) -> &'static str {
        if self.closed { "closed" } else { "open" }
    }

    /// `{"kind": "build", "build": slug}` or `{"kind": "repo", "repo": id}`.
    pub fn scope_json(&self) -> Value {
        let mut scope = Map::new();
        scope.insert("kind".into(), self.scope.kind.tag().into());
        scope.insert(
            self.scope.kind.wire_key().into(),
            self.scope.id.clone().into(),
        );
        Value::Object(scope)
    }

    pub fn artifact_json(&self) -> Option<Value> {
        self.artifact.as_ref().map(|a| serde_json::json!({ "kind": a.kind, "revision": a.revision, "blobRef": a.blob_ref }))
    }

    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("id".into(), self.id.clone().into());
        out.insert("scope".into(), self.scope_json());
        out.insert("label".into(), self.label.clone().into());
        out.insert("format".into(), STREAM_FORMAT.into());
        out.insert("status".into(), self.status().into());
        out.insert("createdAt".into(), format_iso(self.created_at).into());
        if let Some(at) = self.closed_at {
            out.insert("closedAt".into(), format_iso(at).into());
        }
        if let Some(outcome) = &self.outcome {
            out.insert("outcome".into(), outcome.clone().into());
        }
        if let Some(artifact) = self.artifact_json() {
            out.insert("artifact".into(), artifact);
        }
        Value::Object(out)
    }
}

/// One build's digest (protocol 3, `GET /repos/{repo}/build-digests`),
/// derived from its log on every read: the latest terminal fact, every
/// `observation.recorded` as `{seq, ts}`, the latest `pr.merged`'s `ts`.
/// Absent members are omitted, never `null`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BuildDigest {
    pub slug: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terminal: Option<Terminal>,
    pub observations: Vec<Observation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merged: Option<String>,
}

/// A build's terminal fact: `build.completed` or `build.aborted`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Terminal {
    Done,
    Aborted,
}

/// An `observation.recorded` event's place in its log.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Observation {
    pub seq: i64,
    pub ts: String,
}

/// The four event types a digest reads, as the digest statement selects them.
pub const DIGEST_TYPES: [&str; 4] = [
    "build.completed",
    "build.aborted",
    "pr.merged",
    "observation.recorded",
];

impl BuildDigest {
    pub fn new(slug: String) -> Self {
        BuildDigest {
            slug,
            terminal: None,
            observations: Vec::new(),
            merged: None,
        }
    }

    /// Fold one event of the build's log, taken in sequence order; types
    /// other than [`DIGEST_TYPES`] change nothing.
    pub fn apply(&mut self, seq: i64, event_type: &str, ts: &str) {
        match event_type {
            "build.completed" => self.terminal = Some(Terminal::Done),
            "build.aborted" => self.terminal = Some(Terminal::Aborted),
            "pr.merged" => self.merged = Some(ts.to_owned()),
            "observation.recorded" => self.observations.push(Observation {
                seq,
                ts: ts.to_owned(),
            }),
            _ => {}
        }
    }
}

/// The resource row as reads and locks return it: the record, its tail and
/// its lease's ttl (`resources::sql` reads it).
pub(crate) struct ResourceRow {
    pub record: Record,
    pub last_seq: i64,
    pub lease_ttl_ms: Option<i64>,
}

impl ResourceRow {
    pub(crate) fn tail(&self) -> LogTail {
        LogTail {
            last_seq: self.last_seq,
            updated_at: self.record.updated_at,
        }
    }
}

/// What a write that only extends a resource needs of its row: the log's
/// tail and the time of its last write. Locking just these two columns
/// spares an append the decoding of the resource's attributes (issue 52:
/// 3,600 of a SQLite append job's 66,700 instructions), which it never
/// reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LogTail {
    pub last_seq: i64,
    pub updated_at: i64,
}
