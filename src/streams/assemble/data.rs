//! Parts that are final when pushed: `data-*` (whose `data` may be replaced
//! in place by a later part with the same type and id), files, sources and
//! `custom`.

use serde_json::{Map, Value};

use super::render::{copy, plain};
use super::{Assembler, Part, str_of, truthy};

impl Assembler {
    pub(super) fn data(&mut self, p: &Map<String, Value>) {
        if truthy(p.get("transient")) {
            return;
        }
        let ty = str_of(p, "type");
        let msg = &mut self.current;
        let id = p.get("id").and_then(Value::as_str);
        let existing = id.and_then(|id| msg.data_by_id.get(ty)?.get(id).copied());
        match existing.and_then(|i| msg.parts.get_mut(i)) {
            Some(Part::Plain(Value::Object(part))) => {
                part.insert("data".into(), p.get("data").cloned().unwrap_or(Value::Null));
            }
            _ => {
                if let Some(id) = id {
                    msg.data_by_id
                        .entry(ty.to_owned())
                        .or_default()
                        .insert(id.to_owned(), msg.parts.len());
                }
                msg.parts.push(Part::Plain(Value::Object(p.clone())));
            }
        }
        self.write();
    }

    fn push_plain(&mut self, part: Value) {
        self.current.parts.push(Part::Plain(part));
        self.write();
    }

    pub(super) fn custom(&mut self, p: &Map<String, Value>) {
        let mut out = plain("custom");
        copy(&mut out, p, "kind");
        copy(&mut out, p, "providerMetadata");
        self.push_plain(out);
    }

    pub(super) fn file(&mut self, p: &Map<String, Value>, ty: &str) {
        let mut out = plain(ty);
        copy(&mut out, p, "mediaType");
        copy(&mut out, p, "url");
        copy(&mut out, p, "providerMetadata");
        self.push_plain(out);
    }

    pub(super) fn source_url(&mut self, p: &Map<String, Value>) {
        let mut out = plain("source-url");
        for key in ["sourceId", "url", "title", "providerMetadata"] {
            copy(&mut out, p, key);
        }
        self.push_plain(out);
    }

    pub(super) fn source_document(&mut self, p: &Map<String, Value>) {
        let mut out = plain("source-document");
        for key in [
            "sourceId",
            "mediaType",
            "title",
            "filename",
            "providerMetadata",
        ] {
            copy(&mut out, p, key);
        }
        self.push_plain(out);
    }
}
