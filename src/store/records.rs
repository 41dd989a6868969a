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

/// A build or repository record. `attrs` carries the build's create-time
/// members (`repo`, `repoOrigin`, `ticket`, `branch`); repositories have none.
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
    /// `BuildRecord` or `RepositoryRecord` (spec section 2).
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        let id_key = match self.resource.kind {
            ResourceKind::Build => "slug",
            ResourceKind::Repo => "repo",
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
        out.insert(self.resource.kind.wire_key().into(), Value::String(self.resource.id.clone()));
        out.insert("kind".into(), self.kind.clone().into());
        out.insert("revision".into(), self.revision.into());
        out.insert("blobRef".into(), self.blob_ref.clone().into());
        out.insert("metadata".into(), Value::Object(self.metadata.clone()));
        out.insert("createdAt".into(), format_iso(self.created_at).into());
        Value::Object(out)
    }
}
