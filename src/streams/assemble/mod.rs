//! Assembly of a stream's parts into the `UIMessage[]` document (spec section 6,
//! close), following `readUIMessageStream` of the AI SDK (`ai@7.0.173`).
//!
//! Pure and deterministic: no I/O, no clock, no generated ids. The rules, part
//! by part, are those of the SDK's `processUIMessageStream` in read mode:
//!
//! - One assistant message per `start.messageId`: a `start` whose id differs
//!   from the current one finalizes the current message and starts an empty one
//!   (parts before the first `start` belong to a message with id `""`). The
//!   document lists each id once, in order of first appearance, holding the last
//!   snapshot the SDK would have yielded for it: a `step-start` pushed after the
//!   last yielded update is not in it, and a message for which nothing was
//!   yielded is absent (see `docs/streams.md`).
//! - Unfinished text, reasoning and tool parts keep their streaming states.
//! - A part is dropped and counted, and assembly goes on with the next one, when
//!   it is not an object with a string `type`, when its type is not one the
//!   protocol names (the SDK's `steering-message` and `reset-step` included),
//!   when it fails the SDK's chunk schema, or when the SDK would throw on it (a
//!   delta or end without its start, an unknown tool call or approval id, a
//!   metadata merge into a primitive). The SDK stops at such a part; every SDK
//!   throw happens before any change, so dropping it is the same as skipping it.
//!
//! Cost is linear in the input: open text, reasoning and tool parts, tool calls,
//! approvals and data ids are indexed. Streamed tool input is kept as a prefix
//! of an append-only buffer and repaired (`partial_json`) only once, when the
//! document is rendered, instead of once per delta as the SDK does; only the
//! final value is observable, so the result is the same.

use std::collections::{BTreeSet, HashMap};

use serde_json::{Map, Value};

use part_type::PartType;
use text::TextPart;
use tool::{PartialCall, ToolPart};

mod data;
#[cfg(test)]
mod fixtures;
mod merge;
mod part_type;
mod partial_json;
mod render;
mod schema;
#[cfg(test)]
mod tests;
mod text;
mod tool;

/// The assembled document and how many parts were dropped on the way.
#[derive(Debug, Clone, PartialEq)]
pub struct Assembly {
    /// A JSON array of `UIMessage` objects.
    pub messages: Value,
    /// Parts dropped: not an object with a string `type`, an undefined type, a
    /// chunk-schema failure, or a part out of sequence.
    pub dropped: usize,
}

/// Assemble a stream's parts (all chunks' parts concatenated in seq order) into the
/// `UIMessage[]` document and the number of dropped parts.
pub fn assemble(parts: &[Value]) -> Assembly {
    let mut assembly = Assembling::default();
    for part in parts {
        assembly.push(part);
    }
    assembly.finish()
}

/// Assembly part by part, for a caller that reads the parts in pieces: the
/// parts themselves need not be kept, only what the document holds so far.
#[derive(Debug, Default)]
pub struct Assembling {
    assembler: Assembler,
    dropped: usize,
}

impl Assembling {
    /// Apply the next part in order (a dropped one is counted).
    pub fn push(&mut self, part: &Value) {
        if self.assembler.apply(part).is_err() {
            self.dropped += 1;
        }
    }

    /// The document of every part pushed.
    pub fn finish(self) -> Assembly {
        Assembly {
            messages: self.assembler.finish(),
            dropped: self.dropped,
        }
    }
}

/// Why a part was dropped. Only the count leaves this module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rejected {
    /// Not an object, or `type` missing or not a string.
    Malformed,
    /// A type the protocol does not name.
    UndefinedType,
    /// Fails the SDK's chunk schema.
    Schema,
    /// The SDK would throw: missing start, unknown tool call or approval id,
    /// or metadata that cannot merge.
    OutOfSequence,
}

#[derive(Debug)]
enum Part {
    Text(TextPart),
    Tool(ToolPart),
    /// Parts that are final when pushed (step-start, file, sources, custom),
    /// and data parts, whose `data` may be replaced in place.
    Plain(Value),
}

/// One message under assembly (`StreamingUIMessageState`) plus its indexes.
#[derive(Debug, Default)]
struct Message {
    id: String,
    metadata: Option<Value>,
    parts: Vec<Part>,
    /// Index of the first part of the current step (after the last step-start).
    step_start: usize,
    /// Number of parts when the SDK last yielded a snapshot; `None` if never.
    written: Option<usize>,
    /// Whether this id has its slot in the document yet.
    has_slot: bool,
    active_text: HashMap<String, usize>,
    active_reasoning: HashMap<String, usize>,
    partial_calls: HashMap<String, PartialCall>,
    buffers: Vec<String>,
    /// Tool part indices per toolCallId, ascending (parts are never removed).
    tools_by_call: HashMap<String, Vec<usize>>,
    /// Tool part indices per current `approval.id`.
    tools_by_approval: HashMap<String, BTreeSet<usize>>,
    /// First data part per type and id.
    data_by_id: HashMap<String, HashMap<String, usize>>,
}

#[derive(Debug, Default)]
struct Assembler {
    current: Message,
    /// Snapshots in order of first appearance; filled when a message is finalized.
    slots: Vec<Option<Value>>,
    slot_of: HashMap<String, usize>,
}

fn str_of<'a>(p: &'a Map<String, Value>, key: &str) -> &'a str {
    p.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn truthy(v: Option<&Value>) -> bool {
    v == Some(&Value::Bool(true))
}

impl Assembler {
    fn apply(&mut self, part: &Value) -> Result<(), Rejected> {
        let Value::Object(p) = part else {
            return Err(Rejected::Malformed);
        };
        let Some(ty) = p.get("type").and_then(Value::as_str) else {
            return Err(Rejected::Malformed);
        };
        let Some(part_type) = PartType::parse(ty) else {
            return Err(Rejected::UndefinedType);
        };
        if !schema::conforms(ty, p) {
            return Err(Rejected::Schema);
        }
        match part_type {
            PartType::Start => self.start(p),
            PartType::Finish | PartType::MessageMetadata => self.metadata(p),
            PartType::StartStep => {
                self.step_start();
                Ok(())
            }
            PartType::FinishStep | PartType::Abort | PartType::Error => Ok(()),
            PartType::TextStart => {
                self.text_start(p, false);
                Ok(())
            }
            PartType::ReasoningStart => {
                self.text_start(p, true);
                Ok(())
            }
            PartType::TextDelta => self.text_update(p, false, false),
            PartType::TextEnd => self.text_update(p, false, true),
            PartType::ReasoningDelta => self.text_update(p, true, false),
            PartType::ReasoningEnd => self.text_update(p, true, true),
            PartType::Custom => {
                self.custom(p);
                Ok(())
            }
            PartType::File | PartType::ReasoningFile => {
                self.file(p, ty);
                Ok(())
            }
            PartType::SourceUrl => {
                self.source_url(p);
                Ok(())
            }
            PartType::SourceDocument => {
                self.source_document(p);
                Ok(())
            }
            PartType::ToolInputStart => {
                self.tool_input_start(p);
                Ok(())
            }
            PartType::ToolInputDelta => self.tool_input_delta(p),
            PartType::ToolInputAvailable => {
                self.tool_input_available(p);
                Ok(())
            }
            PartType::ToolInputError => {
                self.tool_input_error(p);
                Ok(())
            }
            PartType::ToolApprovalRequest => self.approval_request(p),
            PartType::ToolApprovalResponse => self.approval_response(p),
            PartType::ToolOutputDenied => self.tool_output_denied(p),
            PartType::ToolOutputAvailable => self.tool_output(p, true),
            PartType::ToolOutputError => self.tool_output(p, false),
            PartType::Data => {
                self.data(p);
                Ok(())
            }
        }
    }

    /// The SDK's `write()`: a snapshot of the current message is yielded.
    fn write(&mut self) {
        let msg = &mut self.current;
        msg.written = Some(msg.parts.len());
        if !msg.has_slot {
            msg.has_slot = true;
            if !self.slot_of.contains_key(&msg.id) {
                self.slot_of.insert(msg.id.clone(), self.slots.len());
                self.slots.push(None);
            }
        }
    }

    /// Render the current message's last snapshot into its slot.
    fn finalize_current(&mut self) {
        let msg = std::mem::take(&mut self.current);
        if let Some(slot) = self.slot_of.get(&msg.id).copied()
            && let Some(snapshot) = msg.into_snapshot()
        {
            self.slots[slot] = Some(snapshot);
        }
    }

    fn finish(mut self) -> Value {
        self.finalize_current();
        Value::Array(self.slots.into_iter().flatten().collect())
    }

    fn start(&mut self, p: &Map<String, Value>) -> Result<(), Rejected> {
        let message_id = p.get("messageId").and_then(Value::as_str);
        let reset = message_id.is_some_and(|id| id != self.current.id);
        if reset {
            self.finalize_current();
            self.current.id = message_id.unwrap_or_default().to_owned();
        }
        // After a reset the metadata is undefined, so a failing merge (a part
        // the SDK throws on) can only happen without one, and changes nothing.
        let metadata_given =
            merge::update_metadata(&mut self.current.metadata, p.get("messageMetadata"))
                .map_err(|_| Rejected::OutOfSequence)?;
        if reset || message_id.is_some() || metadata_given {
            self.write();
        }
        Ok(())
    }

    fn metadata(&mut self, p: &Map<String, Value>) -> Result<(), Rejected> {
        let msg = &mut self.current;
        if merge::update_metadata(&mut msg.metadata, p.get("messageMetadata"))
            .map_err(|_| Rejected::OutOfSequence)?
        {
            self.write();
        }
        Ok(())
    }

    fn step_start(&mut self) {
        let msg = &mut self.current;
        msg.parts.push(Part::Plain(render::plain("step-start")));
        msg.step_start = msg.parts.len();
    }
}
