//! Rendering a message's last snapshot into its `UIMessage` JSON.

use serde_json::{Map, Value};

use super::tool::{TextRef, Val};
use super::{Message, Part, partial_json};

impl Message {
    /// The last snapshot the SDK yielded for this message, if any.
    pub(super) fn into_snapshot(self) -> Option<Value> {
        let written = self.written?;
        let buffers = self.buffers;
        let parts: Vec<Value> = self
            .parts
            .into_iter()
            .take(written)
            .map(|part| render_part(part, &buffers))
            .collect();
        let mut message = Map::new();
        message.insert("id".into(), Value::String(self.id));
        if let Some(metadata) = self.metadata {
            message.insert("metadata".into(), metadata);
        }
        message.insert("role".into(), Value::String("assistant".into()));
        message.insert("parts".into(), Value::Array(parts));
        Some(Value::Object(message))
    }
}

fn render_part(part: Part, buffers: &[String]) -> Value {
    match part {
        Part::Plain(value) => value,
        Part::Text(t) => {
            let mut out = Map::new();
            match t.reasoning_id {
                Some(id) => {
                    out.insert("type".into(), Value::String("reasoning".into()));
                    out.insert("id".into(), Value::String(id));
                }
                None => {
                    out.insert("type".into(), Value::String("text".into()));
                }
            }
            out.insert("text".into(), Value::String(t.text));
            if let Some(pm) = t.provider_metadata {
                out.insert("providerMetadata".into(), pm);
            }
            let state = if t.done { "done" } else { "streaming" };
            out.insert("state".into(), Value::String(state.into()));
            if let Some(citations) = t.citations {
                out.insert("citations".into(), citations);
            }
            Value::Object(out)
        }
        Part::Tool(tool) => {
            let text = |r: TextRef| {
                buffers
                    .get(r.buffer)
                    .and_then(|b| b.get(..r.len))
                    .unwrap_or_default()
            };
            let mut out = Map::new();
            for (key, value) in tool.fields {
                let rendered = match value {
                    None => None,
                    Some(Val::Json(v)) => Some(v),
                    Some(Val::Text(r)) => Some(Value::String(text(r).to_owned())),
                    Some(Val::PartialJson(r)) => partial_json::parse_partial_json(text(r)),
                };
                if let Some(v) = rendered {
                    out.insert(key.into(), v);
                }
            }
            Value::Object(out)
        }
    }
}

pub(super) fn plain(ty: &str) -> Value {
    let mut out = Map::new();
    out.insert("type".into(), Value::String(ty.to_owned()));
    Value::Object(out)
}

/// Copy `key` from the part when present (an absent key is `undefined` and
/// would not be serialized by the SDK either).
pub(super) fn copy(out: &mut Value, p: &Map<String, Value>, key: &str) {
    if let (Value::Object(out), Some(v)) = (out, p.get(key)) {
        out.insert(key.to_owned(), v.clone());
    }
}
