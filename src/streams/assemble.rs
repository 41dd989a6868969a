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

// Explicit paths keep the submodules where they are whether this file is
// compiled as `streams::assemble` or loaded elsewhere through `#[path]`.
#[cfg(test)]
#[path = "assemble/fixtures.rs"]
mod fixtures;
#[path = "assemble/merge.rs"]
mod merge;
#[path = "assemble/partial_json.rs"]
mod partial_json;
#[path = "assemble/schema.rs"]
mod schema;
#[cfg(test)]
#[path = "assemble/tests.rs"]
mod tests;

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
    let mut assembler = Assembler::default();
    let dropped = parts
        .iter()
        .filter(|part| assembler.apply(part).is_err())
        .count();
    Assembly {
        messages: assembler.finish(),
        dropped,
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

/// The part types of the protocol (spec section 6), besides the `data-*` namespace.
fn is_named(ty: &str) -> bool {
    matches!(
        ty,
        "text-start"
            | "text-delta"
            | "text-end"
            | "reasoning-start"
            | "reasoning-delta"
            | "reasoning-end"
            | "tool-input-start"
            | "tool-input-delta"
            | "tool-input-available"
            | "tool-input-error"
            | "tool-output-available"
            | "tool-output-error"
            | "tool-output-denied"
            | "tool-approval-request"
            | "tool-approval-response"
            | "start-step"
            | "finish-step"
            | "start"
            | "finish"
            | "abort"
            | "error"
            | "message-metadata"
            | "source-url"
            | "source-document"
            | "file"
            | "reasoning-file"
            | "custom"
    ) || ty.starts_with("data-")
}

/// A prefix of one of the message's append-only tool-input buffers.
#[derive(Debug, Clone, Copy)]
struct TextRef {
    buffer: usize,
    len: usize,
}

/// A tool-part field value; the text variants are resolved when rendering.
#[derive(Debug, Clone)]
enum Val {
    Json(Value),
    /// The text itself (`rawInput`, or `input` with `inputEncoding: "text"`).
    Text(TextRef),
    /// `parsePartialJson(text).value`; omitted when it is undefined.
    PartialJson(TextRef),
}

/// A tool part keeps JavaScript object semantics so that key order follows the
/// SDK: a key set to `undefined` (`None`) keeps its slot but is not rendered,
/// setting a new key appends it, deleting removes the slot.
#[derive(Debug)]
struct ToolPart {
    dynamic: bool,
    fields: Vec<(&'static str, Option<Val>)>,
}

impl ToolPart {
    fn get(&self, key: &str) -> Option<&Val> {
        self.fields
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, v)| v.as_ref())
    }

    fn get_json(&self, key: &str) -> Option<&Value> {
        match self.get(key) {
            Some(Val::Json(v)) => Some(v),
            _ => None,
        }
    }

    fn set(&mut self, key: &'static str, value: Option<Val>) {
        match self.fields.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.fields.push((key, value)),
        }
    }

    fn remove(&mut self, key: &str) {
        self.fields.retain(|(k, _)| *k != key);
    }

    /// `getStaticToolName` for static parts, `toolName` for dynamic ones.
    fn tool_name(&self) -> String {
        if self.dynamic {
            self.get_json("toolName")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        } else {
            self.get_json("type")
                .and_then(Value::as_str)
                .and_then(|t| t.strip_prefix("tool-"))
                .unwrap_or_default()
                .to_owned()
        }
    }

    fn approval_id(&self) -> Option<&str> {
        self.get_json("approval")?.get("id")?.as_str()
    }
}

#[derive(Debug)]
struct TextPart {
    /// Reasoning parts keep their id; text parts do not.
    reasoning_id: Option<String>,
    text: String,
    provider_metadata: Option<Value>,
    done: bool,
    citations: Option<Value>,
}

#[derive(Debug)]
enum Part {
    Text(TextPart),
    Tool(ToolPart),
    /// Parts that are final when pushed (step-start, file, sources, custom),
    /// and data parts, whose `data` may be replaced in place.
    Plain(Value),
}

/// `partialToolCalls[toolCallId]`.
#[derive(Debug)]
struct PartialCall {
    buffer: usize,
    input_encoding: Option<Value>,
    tool_name: String,
    dynamic: bool,
    title: Option<Value>,
    tool_metadata: Option<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ToolKind {
    Static,
    Dynamic,
    Any,
}

/// The options of the SDK's `updateToolPart` / `updateDynamicToolPart`;
/// `None` is `undefined`.
#[derive(Debug, Default)]
struct ToolUpdate {
    tool_call_id: String,
    tool_name: String,
    state: &'static str,
    input: Option<Val>,
    output: Option<Value>,
    error_text: Option<Value>,
    raw_input: Option<Val>,
    input_encoding: Option<Value>,
    preliminary: Option<Value>,
    title: Option<Value>,
    tool_metadata: Option<Value>,
    provider_executed: Option<Value>,
    provider_metadata: Option<Value>,
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

fn json(value: Option<&Value>) -> Option<Val> {
    value.cloned().map(Val::Json)
}

fn text_val(s: &str) -> Option<Val> {
    Some(Val::Json(Value::String(s.to_owned())))
}

impl Assembler {
    fn apply(&mut self, part: &Value) -> Result<(), Rejected> {
        let Value::Object(p) = part else {
            return Err(Rejected::Malformed);
        };
        let Some(ty) = p.get("type").and_then(Value::as_str) else {
            return Err(Rejected::Malformed);
        };
        if !is_named(ty) {
            return Err(Rejected::UndefinedType);
        }
        if !schema::conforms(ty, p) {
            return Err(Rejected::Schema);
        }
        match ty {
            "start" => self.start(p),
            "finish" | "message-metadata" => {
                let msg = &mut self.current;
                if merge::update_metadata(&mut msg.metadata, p.get("messageMetadata"))
                    .map_err(|_| Rejected::OutOfSequence)?
                {
                    self.write();
                }
                Ok(())
            }
            "start-step" => {
                let msg = &mut self.current;
                msg.parts.push(Part::Plain(plain("step-start")));
                msg.step_start = msg.parts.len();
                Ok(())
            }
            "finish-step" | "abort" | "error" => Ok(()),
            "text-start" | "reasoning-start" => {
                self.text_start(p, ty == "reasoning-start");
                Ok(())
            }
            "text-delta" | "text-end" | "reasoning-delta" | "reasoning-end" => {
                self.text_update(p, ty)
            }
            "custom" => {
                let mut out = plain("custom");
                copy(&mut out, p, "kind");
                copy(&mut out, p, "providerMetadata");
                self.push_plain(out);
                Ok(())
            }
            "file" | "reasoning-file" => {
                let mut out = plain(ty);
                copy(&mut out, p, "mediaType");
                copy(&mut out, p, "url");
                copy(&mut out, p, "providerMetadata");
                self.push_plain(out);
                Ok(())
            }
            "source-url" => {
                let mut out = plain(ty);
                for key in ["sourceId", "url", "title", "providerMetadata"] {
                    copy(&mut out, p, key);
                }
                self.push_plain(out);
                Ok(())
            }
            "source-document" => {
                let mut out = plain(ty);
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
                Ok(())
            }
            "tool-input-start" => {
                self.tool_input_start(p);
                Ok(())
            }
            "tool-input-delta" => self.tool_input_delta(p),
            "tool-input-available" => {
                let update = ToolUpdate {
                    tool_call_id: str_of(p, "toolCallId").to_owned(),
                    tool_name: str_of(p, "toolName").to_owned(),
                    state: "input-available",
                    input: json(p.get("input")),
                    provider_executed: p.get("providerExecuted").cloned(),
                    provider_metadata: p.get("providerMetadata").cloned(),
                    title: p.get("title").cloned(),
                    tool_metadata: p.get("toolMetadata").cloned(),
                    ..ToolUpdate::default()
                };
                let dynamic = truthy(p.get("dynamic"));
                self.current.update_tool(dynamic, update, None);
                self.write();
                Ok(())
            }
            "tool-input-error" => {
                let call_id = str_of(p, "toolCallId");
                // An existing part in the step decides static vs dynamic.
                let dynamic = match self.current.find_in_step(call_id, ToolKind::Any) {
                    Some(i) => self.current.tool(i).is_some_and(|t| t.dynamic),
                    None => truthy(p.get("dynamic")),
                };
                let update = ToolUpdate {
                    tool_call_id: call_id.to_owned(),
                    tool_name: str_of(p, "toolName").to_owned(),
                    state: "output-error",
                    input: json(p.get("input")),
                    error_text: p.get("errorText").cloned(),
                    provider_executed: p.get("providerExecuted").cloned(),
                    provider_metadata: p.get("providerMetadata").cloned(),
                    tool_metadata: p.get("toolMetadata").cloned(),
                    ..ToolUpdate::default()
                };
                self.current.update_tool(dynamic, update, None);
                self.write();
                Ok(())
            }
            "tool-approval-request" => self.approval_request(p),
            "tool-approval-response" => self.approval_response(p),
            "tool-output-denied" => {
                let i = self.current.tool_invocation(str_of(p, "toolCallId"))?;
                if let Some(tool) = self.current.tool_mut(i) {
                    tool.set("state", text_val("output-denied"));
                }
                self.write();
                Ok(())
            }
            "tool-output-available" | "tool-output-error" => self.tool_output(p, ty),
            _ => {
                // `data-*`, the only remaining named types.
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

    fn push_plain(&mut self, part: Value) {
        self.current.parts.push(Part::Plain(part));
        self.write();
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

    fn text_start(&mut self, p: &Map<String, Value>, reasoning: bool) {
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

    fn text_update(&mut self, p: &Map<String, Value>, ty: &str) -> Result<(), Rejected> {
        let id = str_of(p, "id");
        let msg = &mut self.current;
        let (active, end) = match ty {
            "text-delta" => (&mut msg.active_text, false),
            "text-end" => (&mut msg.active_text, true),
            "reasoning-delta" => (&mut msg.active_reasoning, false),
            _ => (&mut msg.active_reasoning, true),
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
            if ty == "text-end"
                && let Some(citations) = p.get("citations")
            {
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

    fn tool_input_start(&mut self, p: &Map<String, Value>) {
        let msg = &mut self.current;
        let call_id = str_of(p, "toolCallId");
        let dynamic = truthy(p.get("dynamic"));
        let buffer = msg.buffers.len();
        msg.buffers.push(String::new());
        msg.partial_calls.insert(
            call_id.to_owned(),
            PartialCall {
                buffer,
                input_encoding: p.get("inputEncoding").cloned(),
                tool_name: str_of(p, "toolName").to_owned(),
                dynamic,
                title: p.get("title").cloned(),
                tool_metadata: p.get("toolMetadata").cloned(),
            },
        );
        let update = ToolUpdate {
            tool_call_id: call_id.to_owned(),
            tool_name: str_of(p, "toolName").to_owned(),
            state: "input-streaming",
            input_encoding: p.get("inputEncoding").cloned(),
            provider_executed: p.get("providerExecuted").cloned(),
            title: p.get("title").cloned(),
            tool_metadata: p.get("toolMetadata").cloned(),
            provider_metadata: p.get("providerMetadata").cloned(),
            ..ToolUpdate::default()
        };
        msg.update_tool(dynamic, update, None);
        self.write();
    }

    fn tool_input_delta(&mut self, p: &Map<String, Value>) -> Result<(), Rejected> {
        let call_id = str_of(p, "toolCallId");
        let msg = &mut self.current;
        let Some(call) = msg.partial_calls.get(call_id) else {
            return Err(Rejected::OutOfSequence);
        };
        let buffer = &mut msg.buffers[call.buffer];
        buffer.push_str(str_of(p, "inputTextDelta"));
        let text = TextRef {
            buffer: call.buffer,
            len: buffer.len(),
        };
        let is_text = call.input_encoding.as_ref().and_then(Value::as_str) == Some("text");
        let update = ToolUpdate {
            tool_call_id: call_id.to_owned(),
            tool_name: call.tool_name.clone(),
            state: "input-streaming",
            input_encoding: call.input_encoding.clone(),
            input: Some(if is_text {
                Val::Text(text)
            } else {
                Val::PartialJson(text)
            }),
            raw_input: Some(Val::Text(text)),
            title: call.title.clone(),
            tool_metadata: call.tool_metadata.clone(),
            ..ToolUpdate::default()
        };
        let dynamic = call.dynamic;
        msg.update_tool(dynamic, update, None);
        self.write();
        Ok(())
    }

    fn approval_request(&mut self, p: &Map<String, Value>) -> Result<(), Rejected> {
        let msg = &mut self.current;
        let index = msg.tool_invocation(str_of(p, "toolCallId"))?;
        let approval_id = str_of(p, "approvalId");
        let mut approval = Map::new();
        approval.insert("id".into(), Value::String(approval_id.to_owned()));
        if let Some(v) = p.get("approvalDescriptor").filter(|v| !v.is_null()) {
            approval.insert("descriptor".into(), v.clone());
        }
        if let Some(v) = p.get("inputSchemaInput") {
            approval.insert("inputSchemaInput".into(), v.clone());
        }
        if let Some(v) = p.get("reason") {
            approval.insert("requestReason".into(), v.clone());
        }
        if p.get("isAutomatic") == Some(&Value::Bool(true)) {
            approval.insert("isAutomatic".into(), Value::Bool(true));
        }
        if let Some(v) = p.get("signature") {
            approval.insert("signature".into(), v.clone());
        }
        let Some(Part::Tool(tool)) = msg.parts.get_mut(index) else {
            return Err(Rejected::OutOfSequence);
        };
        if let Some(old) = tool.approval_id()
            && let Some(set) = msg.tools_by_approval.get_mut(old)
        {
            set.remove(&index);
        }
        tool.set("state", text_val("approval-requested"));
        tool.set("approval", Some(Val::Json(Value::Object(approval))));
        msg.tools_by_approval
            .entry(approval_id.to_owned())
            .or_default()
            .insert(index);
        self.write();
        Ok(())
    }

    fn approval_response(&mut self, p: &Map<String, Value>) -> Result<(), Rejected> {
        let msg = &mut self.current;
        let approval_id = str_of(p, "approvalId");
        let index = msg
            .tools_by_approval
            .get(approval_id)
            .and_then(|set| set.first().copied())
            .ok_or(Rejected::OutOfSequence)?;
        let Some(Part::Tool(tool)) = msg.parts.get_mut(index) else {
            return Err(Rejected::OutOfSequence);
        };
        let mut approval = tool
            .get_json("approval")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        approval.insert("id".into(), Value::String(approval_id.to_owned()));
        if let Some(v) = p.get("approved") {
            approval.insert("approved".into(), v.clone());
        }
        if let Some(v) = p.get("reason") {
            approval.insert("reason".into(), v.clone());
        }
        tool.set("state", text_val("approval-responded"));
        tool.set("approval", Some(Val::Json(Value::Object(approval))));
        if let Some(v) = p.get("providerExecuted") {
            tool.set("providerExecuted", Some(Val::Json(v.clone())));
        }
        if let Some(v) = p.get("providerMetadata") {
            tool.set("callProviderMetadata", Some(Val::Json(v.clone())));
        }
        self.write();
        Ok(())
    }

    fn tool_output(&mut self, p: &Map<String, Value>, ty: &str) -> Result<(), Rejected> {
        let msg = &mut self.current;
        let call_id = str_of(p, "toolCallId");
        let index = msg.tool_invocation(call_id)?;
        let Some(tool) = msg.tool(index) else {
            return Err(Rejected::OutOfSequence);
        };
        let available = ty == "tool-output-available";
        let dynamic = tool.dynamic;
        let mut update = ToolUpdate {
            tool_call_id: call_id.to_owned(),
            tool_name: tool.tool_name(),
            state: if available {
                "output-available"
            } else {
                "output-error"
            },
            input: tool.get("input").cloned(),
            provider_executed: p.get("providerExecuted").cloned(),
            provider_metadata: p.get("providerMetadata").cloned(),
            title: tool.get_json("title").cloned(),
            tool_metadata: p
                .get("toolMetadata")
                .or_else(|| tool.get_json("toolMetadata"))
                .cloned(),
            ..ToolUpdate::default()
        };
        if available {
            update.output = p.get("output").cloned();
            update.preliminary = p.get("preliminary").cloned();
        } else {
            update.error_text = p.get("errorText").cloned();
            // A static part keeps its raw input on error; a dynamic one loses it.
            if !dynamic {
                update.raw_input = tool.get("rawInput").cloned();
            }
        }
        msg.update_tool(dynamic, update, Some(index));
        self.write();
        Ok(())
    }

    fn data(&mut self, p: &Map<String, Value>) {
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
}

impl Message {
    fn tool(&self, index: usize) -> Option<&ToolPart> {
        match self.parts.get(index) {
            Some(Part::Tool(tool)) => Some(tool),
            _ => None,
        }
    }

    fn tool_mut(&mut self, index: usize) -> Option<&mut ToolPart> {
        match self.parts.get_mut(index) {
            Some(Part::Tool(tool)) => Some(tool),
            _ => None,
        }
    }

    /// First tool part of the current step with this toolCallId and kind.
    fn find_in_step(&self, call_id: &str, kind: ToolKind) -> Option<usize> {
        let indices = self.tools_by_call.get(call_id)?;
        let from = indices.partition_point(|&i| i < self.step_start);
        indices[from..].iter().copied().find(|&i| {
            self.tool(i).is_some_and(|t| match kind {
                ToolKind::Any => true,
                ToolKind::Static => !t.dynamic,
                ToolKind::Dynamic => t.dynamic,
            })
        })
    }

    /// `getToolInvocation`: first match in the current step, else the last in
    /// the message; the SDK throws when there is none.
    fn tool_invocation(&self, call_id: &str) -> Result<usize, Rejected> {
        self.find_in_step(call_id, ToolKind::Any)
            .or_else(|| self.tools_by_call.get(call_id)?.last().copied())
            .ok_or(Rejected::OutOfSequence)
    }

    /// `updateToolPart` (static) and `updateDynamicToolPart`.
    fn update_tool(&mut self, dynamic: bool, u: ToolUpdate, existing: Option<usize>) {
        let kind = if dynamic {
            ToolKind::Dynamic
        } else {
            ToolKind::Static
        };
        let found = existing.or_else(|| self.find_in_step(&u.tool_call_id, kind));
        let result_state = matches!(u.state, "output-available" | "output-error");
        let metadata_key = if result_state {
            "resultProviderMetadata"
        } else {
            "callProviderMetadata"
        };
        if let Some(tool) = found.and_then(|i| self.tool_mut(i)) {
            tool.set("state", text_val(u.state));
            if dynamic {
                tool.set("toolName", Some(Val::Json(Value::String(u.tool_name))));
            } else {
                tool.set(
                    "type",
                    Some(Val::Json(Value::String(format!("tool-{}", u.tool_name)))),
                );
            }
            tool.set("input", u.input);
            tool.set("output", u.output.map(Val::Json));
            tool.set("errorText", u.error_text.map(Val::Json));
            tool.set("rawInput", u.raw_input);
            match u.input_encoding {
                Some(encoding) => tool.set("inputEncoding", Some(Val::Json(encoding))),
                None => tool.remove("inputEncoding"),
            }
            tool.set("preliminary", u.preliminary.map(Val::Json));
            if let Some(title) = u.title {
                tool.set("title", Some(Val::Json(title)));
            }
            if let Some(tool_metadata) = u.tool_metadata {
                tool.set("toolMetadata", Some(Val::Json(tool_metadata)));
            }
            // Once providerExecuted is set, it stays.
            let provider_executed = u
                .provider_executed
                .map(Val::Json)
                .or_else(|| tool.get("providerExecuted").cloned());
            tool.set("providerExecuted", provider_executed);
            if let Some(pm) = u.provider_metadata {
                tool.set(metadata_key, Some(Val::Json(pm)));
            }
            return;
        }

        let state = text_val(u.state);
        let call_id = Some(Val::Json(Value::String(u.tool_call_id.clone())));
        let mut fields: Vec<(&'static str, Option<Val>)> = Vec::with_capacity(14);
        if dynamic {
            fields.push(("type", text_val("dynamic-tool")));
            fields.push(("toolName", Some(Val::Json(Value::String(u.tool_name)))));
            fields.push(("toolCallId", call_id));
            fields.push(("state", state));
            fields.push(("input", u.input));
            if let Some(encoding) = u.input_encoding {
                fields.push(("inputEncoding", Some(Val::Json(encoding))));
            }
            fields.push(("output", u.output.map(Val::Json)));
            fields.push(("errorText", u.error_text.map(Val::Json)));
            fields.push(("preliminary", u.preliminary.map(Val::Json)));
            fields.push(("providerExecuted", u.provider_executed.map(Val::Json)));
            fields.push(("title", u.title.map(Val::Json)));
            if let Some(tool_metadata) = u.tool_metadata {
                fields.push(("toolMetadata", Some(Val::Json(tool_metadata))));
            }
        } else {
            fields.push((
                "type",
                Some(Val::Json(Value::String(format!("tool-{}", u.tool_name)))),
            ));
            fields.push(("toolCallId", call_id));
            fields.push(("state", state));
            fields.push(("title", u.title.map(Val::Json)));
            if let Some(tool_metadata) = u.tool_metadata {
                fields.push(("toolMetadata", Some(Val::Json(tool_metadata))));
            }
            fields.push(("input", u.input));
            if let Some(encoding) = u.input_encoding {
                fields.push(("inputEncoding", Some(Val::Json(encoding))));
            }
            fields.push(("output", u.output.map(Val::Json)));
            fields.push(("rawInput", u.raw_input));
            fields.push(("errorText", u.error_text.map(Val::Json)));
            fields.push(("providerExecuted", u.provider_executed.map(Val::Json)));
            fields.push(("preliminary", u.preliminary.map(Val::Json)));
        }
        if let Some(pm) = u.provider_metadata {
            fields.push((metadata_key, Some(Val::Json(pm))));
        }
        let index = self.parts.len();
        self.parts.push(Part::Tool(ToolPart { dynamic, fields }));
        self.tools_by_call
            .entry(u.tool_call_id)
            .or_default()
            .push(index);
    }

    /// The last snapshot the SDK yielded for this message, if any.
    fn into_snapshot(self) -> Option<Value> {
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

fn plain(ty: &str) -> Value {
    let mut out = Map::new();
    out.insert("type".into(), Value::String(ty.to_owned()));
    Value::Object(out)
}

/// Copy `key` from the part when present (an absent key is `undefined` and
/// would not be serialized by the SDK either).
fn copy(out: &mut Value, p: &Map<String, Value>, key: &str) {
    if let (Value::Object(out), Some(v)) = (out, p.get(key)) {
        out.insert(key.to_owned(), v.clone());
    }
}

fn truthy(v: Option<&Value>) -> bool {
    v == Some(&Value::Bool(true))
}
