//! Ticket-asset manifests (protocol 3) as the store keeps and returns them,
//! and their exact wire shapes: `TicketAssetMeta` (put, manifest read,
//! removal) and `TicketAssetSummary` (list).
//!
//! A revision's manifest is kept as the JSON text of its `entries`, exactly
//! as served, beside the columns lists and reads need (layout, size,
//! counts); the bytes are blobs. A removal is a tombstone: a revision
//! without a manifest, which every read treats as absent.

use serde_json::Value;

use super::error::{StoreError, StoreResult};
use crate::protocol::ticket_assets::Layout;
use crate::protocol::time::format_iso;

/// What names an asset: its revisions count from 0 per key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AssetKey {
    pub repo: String,
    pub ticket_id: String,
    pub kind: String,
    pub name: String,
}

/// One manifest entry: a file (its bytes a blob) or an explicit directory.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum AssetEntry {
    File {
        path: String,
        size: u64,
        #[serde(rename = "blobRef")]
        blob_ref: String,
    },
    Dir {
        path: String,
    },
}

impl AssetEntry {
    pub fn path(&self) -> &str {
        match self {
            AssetEntry::File { path, .. } | AssetEntry::Dir { path } => path,
        }
    }
}

/// A revision without its entries: what the list answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TicketAssetSummary {
    pub key: AssetKey,
    pub revision: i64,
    pub layout: Layout,
    /// Total file bytes.
    pub size: i64,
    pub file_count: i64,
    pub dir_count: i64,
    pub created_at: i64,
}

/// A revision with its manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TicketAssetMeta {
    pub summary: TicketAssetSummary,
    /// The entries as served: a JSON array the server wrote, in request order.
    pub entries_json: String,
}

/// A put whose blobs are written: the store assigns the revision and time.
#[derive(Clone, Debug)]
pub struct NewTicketAsset {
    pub key: AssetKey,
    pub layout: Layout,
    pub entries: Vec<AssetEntry>,
}

/// Judges an answer (a put's new manifest, a removal's removed one) inside
/// the writing transaction, before anything is written: an error (the
/// response ceiling's `StoreError::TooLarge`) stores nothing and consumes
/// no revision. Owned, like every closure a write runs (docs/decisions.md, 14).
pub type AnswerCheck = Box<dyn Fn(&TicketAssetMeta) -> StoreResult<()> + Send + Sync>;

/// `"text"` as JSON.
fn quoted(text: &str) -> String {
    Value::String(text.to_owned()).to_string()
}

impl TicketAssetSummary {
    /// The members every shape starts with, through `size`.
    fn head(&self) -> String {
        format!(
            "{{\"repo\":{},\"ticketId\":{},\"kind\":{},\"name\":{},\"revision\":{},\"layout\":\"{}\",\"size\":{}",
            quoted(&self.key.repo),
            quoted(&self.key.ticket_id),
            quoted(&self.key.kind),
            quoted(&self.key.name),
            self.revision,
            self.layout.as_str(),
            self.size,
        )
    }

    /// `TicketAssetSummary`.
    pub fn to_json_text(&self) -> String {
        format!(
            "{},\"fileCount\":{},\"dirCount\":{},\"createdAt\":\"{}\"}}",
            self.head(),
            self.file_count,
            self.dir_count,
            format_iso(self.created_at)
        )
    }
}

impl TicketAssetMeta {
    /// `TicketAssetMeta`.
    pub fn to_json_text(&self) -> String {
        format!(
            "{},\"entries\":{},\"createdAt\":\"{}\"}}",
            self.summary.head(),
            self.entries_json,
            format_iso(self.summary.created_at)
        )
    }

    /// The entries, parsed back from the stored text.
    pub fn entries(&self) -> StoreResult<Vec<AssetEntry>> {
        serde_json::from_str(&self.entries_json).map_err(|err| {
            StoreError::Corrupt(format!("a ticket asset manifest does not parse: {err}"))
        })
    }
}

impl NewTicketAsset {
    /// The revision's meta once the store assigned `revision` and `created_at`.
    pub fn meta(&self, revision: i64, created_at: i64) -> StoreResult<TicketAssetMeta> {
        let mut size: u64 = 0;
        let mut file_count = 0;
        for entry in &self.entries {
            if let AssetEntry::File { size: bytes, .. } = entry {
                size = size.saturating_add(*bytes);
                file_count += 1;
            }
        }
        let total = self.entries.len() as i64;
        let entries_json = serde_json::to_string(&self.entries).map_err(|err| {
            StoreError::Corrupt(format!("a ticket asset manifest does not serialise: {err}"))
        })?;
        Ok(TicketAssetMeta {
            summary: TicketAssetSummary {
                key: self.key.clone(),
                revision,
                layout: self.layout,
                size: i64::try_from(size).unwrap_or(i64::MAX),
                file_count,
                dir_count: total - file_count,
                created_at,
            },
            entries_json,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asset() -> NewTicketAsset {
        NewTicketAsset {
            key: AssetKey {
                repo: "acme/widgets".into(),
                ticket_id: "AUT-1".into(),
                kind: "design".into(),
                name: "home".into(),
            },
            layout: Layout::Tree,
            entries: vec![
                AssetEntry::File {
                    path: "index.html".into(),
                    size: 5,
                    blob_ref: "ab".repeat(32),
                },
                AssetEntry::Dir {
                    path: "img/\"empty\"".into(),
                },
            ],
        }
    }

    #[test]
    fn the_wire_shapes_are_exactly_the_protocols() {
        let meta = asset().meta(0, 1_790_000_000_000).unwrap();
        let json: Value = serde_json::from_str(&meta.to_json_text()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "repo": "acme/widgets", "ticketId": "AUT-1", "kind": "design", "name": "home",
                "revision": 0, "layout": "tree", "size": 5,
                "entries": [
                    {"type": "file", "path": "index.html", "size": 5, "blobRef": "ab".repeat(32)},
                    {"type": "dir", "path": "img/\"empty\""}
                ],
                "createdAt": "2026-09-21T14:13:20.000Z"
            })
        );
        // Member order as the protocol shows it.
        assert!(meta.to_json_text().starts_with(
            r#"{"repo":"acme/widgets","ticketId":"AUT-1","kind":"design","name":"home","revision":0,"layout":"tree","size":5,"entries":[{"type":"file","#
        ));
        assert_eq!(
            meta.summary.to_json_text(),
            r#"{"repo":"acme/widgets","ticketId":"AUT-1","kind":"design","name":"home","revision":0,"layout":"tree","size":5,"fileCount":1,"dirCount":1,"createdAt":"2026-09-21T14:13:20.000Z"}"#
        );
        assert_eq!(meta.entries().unwrap(), asset().entries);
    }
}
