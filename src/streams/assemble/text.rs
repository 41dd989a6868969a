//! Text and reasoning parts: `text-*` and `reasoning-*`.

use serde_json::{Map, Value};

use super::{Assembler, Part, Rejected, str_of};

#[derive(Debug)]
pub(super) struct TextPart {
    /// Reasoning parts keep their id; text parts do not.
    pub(super) reasoning_id: Option<String>,
    pub(super) text: String,
    pub(super) provider_metadata: Option<Value>,
    pub(super) done: bool,
    pub(super) citations: Option<Value>,
}

impl Assembler {
    pub(super) fn text_start(&mut self, p: &Map<String, Value>, reasoning: bool) {
        let id = str_of(p, "id");
        let msg = &mut self.current;
        let index = msg.parts.len();
        msg.parts.push(Part::Text(TextPart {
            reasoning_id: reasoning.then(|| id.to_owned()),
            text: String::new(),
            provider_metadata: p.get("providerMetadata").cloned(),
            done: false,
            citations: None,
        }));
        let active = if reasoning {
            &mut msg.active_reasoning
        } else {
            &mut msg.active_text
        };
        // A second start for an open id leaves the first part streaming.
        active.insert(id.to_owned(), index);
        self.write();
    }

    pub(super) fn text_update(
        &mut self,
        p: &Map<String, Value>,
        reasoning: bool,
        end: bool,
    ) -> Result<(), Rejected> {
        let id = str_of(p, "id");
        let msg = &mut self.current;
        let active = if reasoning {
            &mut msg.active_reasoning
        } else {
            &mut msg.active_text
        };
        let index = if end {
            active.remove(id)
        } else {
            active.get(id).copied()
        };
        let Some(Part::Text(part)) = index.and_then(|i| msg.parts.get_mut(i)) else {
            return Err(Rejected::OutOfSequence);
        };
        if end {
            part.done = true;
            if !reasoning && let Some(citations) = p.get("citations") {
                part.citations = Some(citations.clone());
            }
        } else {
            part.text.push_str(str_of(p, "delta"));
        }
        if let Some(pm) = p.get("providerMetadata") {
            part.provider_metadata = Some(pm.clone());
        }
        self.write();
        Ok(())
    }
}
