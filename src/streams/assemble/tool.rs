//! Tool parts: `tool-input-*`, `tool-output-*` and `tool-approval-*`.

use serde_json::{Map, Value};

use super::{Assembler, Message, Part, Rejected, str_of, truthy};

/// A prefix of one of the message's append-only tool-input buffers.
#[derive(Debug, Clone, Copy)]
pub(super) struct TextRef {
    pub(super) buffer: usize,
    pub(super) len: usize,
}

/// A tool-part field value; the text variants are resolved when rendering.
#[derive(Debug, Clone)]
pub(super) enum Val {
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
pub(super) struct ToolPart {
    pub(super) dynamic: bool,
    pub(super) fields: Vec<(&'static str, Option<Val>)>,
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

/// `partialToolCalls[toolCallId]`.
#[derive(Debug)]
pub(super) struct PartialCall {
    buffer: usize,
    input_encoding: Option<Value>,
    tool_name: String,
    dynamic: bool,
    title: Option<Value>,
    tool_metadata: Option<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ToolKind {
    Static,
    Dynamic,
    Any,
}

/// The options of the SDK's `updateToolPart` / `updateDynamicToolPart`;
/// `None` is `undefined`.
#[derive(Debug, Default)]
pub(super) struct ToolUpdate {
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

fn json(value: Option<&Value>) -> Option<Val> {
    value.cloned().map(Val::Json)
}

fn text_val(s: &str) -> Option<Val> {
    Some(Val::Json(Value::String(s.to_owned())))
}

impl Assembler {
    pub(super) fn tool_input_start(&mut self, p: &Map<String, Value>) {
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

    pub(super) fn tool_input_delta(&mut self, p: &Map<String, Value>) -> Result<(), Rejected> {
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

    pub(super) fn tool_input_available(&mut self, p: &Map<String, Value>) {
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
    }

    pub(super) fn tool_input_error(&mut self, p: &Map<String, Value>) {
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
    }

    pub(super) fn tool_output_denied(&mut self, p: &Map<String, Value>) -> Result<(), Rejected> {
        let i = self.current.tool_invocation(str_of(p, "toolCallId"))?;
        if let Some(tool) = self.current.tool_mut(i) {
            tool.set("state", text_val("output-denied"));
        }
        self.write();
        Ok(())
    }

    pub(super) fn approval_request(&mut self, p: &Map<String, Value>) -> Result<(), Rejected> {
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

    pub(super) fn approval_response(&mut self, p: &Map<String, Value>) -> Result<(), Rejected> {
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

    pub(super) fn tool_output(
        &mut self,
        p: &Map<String, Value>,
        available: bool,
    ) -> Result<(), Rejected> {
        let msg = &mut self.current;
        let call_id = str_of(p, "toolCallId");
        let index = msg.tool_invocation(call_id)?;
        let Some(tool) = msg.tool(index) else {
            return Err(Rejected::OutOfSequence);
        };
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
}
