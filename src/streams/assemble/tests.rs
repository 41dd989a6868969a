//! Unit tests, part type by part type. Expected values follow `ai@7.0.173`
//! (`readUIMessageStream`); the differential fixtures in `fixtures/streams`
//! check the same behaviour against the package itself.

use serde_json::{Value, json};

use super::{Assembler, Rejected, assemble};

fn run(parts: Value) -> (Value, usize) {
    let parts = parts.as_array().cloned().unwrap_or_default();
    let assembly = assemble(&parts);
    (assembly.messages, assembly.dropped)
}

/// Parts of the single message the stream assembles to.
fn only_parts(parts: Value) -> Value {
    let (messages, dropped) = run(parts);
    assert_eq!(dropped, 0, "unexpected drops: {messages}");
    assert_eq!(messages.as_array().map(Vec::len), Some(1), "{messages}");
    messages[0]["parts"].clone()
}

fn rejection(parts: Value) -> Option<Rejected> {
    let mut assembler = Assembler::default();
    let parts = parts.as_array().cloned().unwrap_or_default();
    let (last, init) = parts.split_last()?;
    for part in init {
        assert_eq!(assembler.apply(part), Ok(()), "setup part {part}");
    }
    assembler.apply(last).err()
}

#[test]
fn empty_stream_is_an_empty_document() {
    assert_eq!(run(json!([])), (json!([]), 0));
}

#[test]
fn text_parts_accumulate_and_close() {
    let parts = only_parts(json!([
        {"type": "start", "messageId": "m1"},
        {"type": "text-start", "id": "t1"},
        {"type": "text-delta", "id": "t1", "delta": "Hel"},
        {"type": "text-delta", "id": "t1", "delta": "lo", "providerMetadata": {"p": {"k": 1}}},
        {"type": "text-end", "id": "t1", "citations": []},
        {"type": "text-start", "id": "t2"},
        {"type": "text-delta", "id": "t2", "delta": "open"},
    ]));
    assert_eq!(
        parts,
        json!([
            {"type": "text", "text": "Hello", "providerMetadata": {"p": {"k": 1}}, "state": "done", "citations": []},
            {"type": "text", "text": "open", "state": "streaming"},
        ])
    );
}

#[test]
fn text_delta_or_end_without_start_is_dropped() {
    assert_eq!(
        rejection(json!([{"type": "text-delta", "id": "x", "delta": "a"}])),
        Some(Rejected::OutOfSequence)
    );
    assert_eq!(
        rejection(json!([
            {"type": "text-start", "id": "x"},
            {"type": "text-end", "id": "x"},
            {"type": "text-delta", "id": "x", "delta": "late"},
        ])),
        Some(Rejected::OutOfSequence)
    );
    let (messages, dropped) = run(json!([
        {"type": "text-start", "id": "a"},
        {"type": "text-end", "id": "b"},
        {"type": "text-delta", "id": "a", "delta": "kept"},
    ]));
    assert_eq!(dropped, 1);
    assert_eq!(messages[0]["parts"][0]["text"], "kept");
}

#[test]
fn duplicate_text_start_leaves_the_first_part_streaming() {
    let parts = only_parts(json!([
        {"type": "text-start", "id": "t"},
        {"type": "text-start", "id": "t"},
        {"type": "text-delta", "id": "t", "delta": "x"},
        {"type": "text-end", "id": "t"},
    ]));
    assert_eq!(
        parts[0],
        json!({"type": "text", "text": "", "state": "streaming"})
    );
    assert_eq!(
        parts[1],
        json!({"type": "text", "text": "x", "state": "done"})
    );
}

#[test]
fn reasoning_parts_keep_their_id() {
    let parts = only_parts(json!([
        {"type": "reasoning-start", "id": "r"},
        {"type": "reasoning-delta", "id": "r", "delta": "think"},
        {"type": "reasoning-end", "id": "r", "providerMetadata": {"p": {}}},
    ]));
    assert_eq!(
        parts,
        json!([{"type": "reasoning", "id": "r", "text": "think", "providerMetadata": {"p": {}}, "state": "done"}])
    );
    assert_eq!(
        rejection(json!([{"type": "reasoning-end", "id": "r"}])),
        Some(Rejected::OutOfSequence)
    );
}

#[test]
fn steps_push_step_start_but_trailing_ones_are_not_in_the_snapshot() {
    let parts = only_parts(json!([
        {"type": "start-step"},
        {"type": "text-start", "id": "t"},
        {"type": "finish-step"},
        {"type": "start-step"},
    ]));
    assert_eq!(
        parts,
        json!([{"type": "step-start"}, {"type": "text", "text": "", "state": "streaming"}])
    );
    // Nothing yields a snapshot: no message at all.
    assert_eq!(
        run(
            json!([{"type": "start"}, {"type": "start-step"}, {"type": "finish-step"}, {"type": "finish"}])
        ),
        (json!([]), 0)
    );
}

#[test]
fn files_sources_and_custom_parts() {
    let parts = only_parts(json!([
        {"type": "file", "url": "data:,x", "mediaType": "text/plain", "filename": "dropped-key"},
        {"type": "reasoning-file", "url": "u", "mediaType": "image/png", "providerMetadata": {"p": {}}},
        {"type": "source-url", "sourceId": "s1", "url": "https://a", "extra": 1},
        {"type": "source-document", "sourceId": "s2", "mediaType": "application/pdf", "title": "T", "filename": "f.pdf"},
        {"type": "custom", "kind": "acme.widget", "payload": 1},
    ]));
    assert_eq!(
        parts,
        json!([
            {"type": "file", "mediaType": "text/plain", "url": "data:,x"},
            {"type": "reasoning-file", "mediaType": "image/png", "url": "u", "providerMetadata": {"p": {}}},
            {"type": "source-url", "sourceId": "s1", "url": "https://a"},
            {"type": "source-document", "sourceId": "s2", "mediaType": "application/pdf", "title": "T", "filename": "f.pdf"},
            {"type": "custom", "kind": "acme.widget"},
        ])
    );
}

#[test]
fn data_parts_replace_by_type_and_id_and_skip_transient() {
    let parts = only_parts(json!([
        {"type": "data-weather", "id": "w", "data": {"t": 1}, "extra": true},
        {"type": "data-other", "id": "w", "data": 2},
        {"type": "data-weather", "data": "no id"},
        {"type": "data-weather", "id": "w", "data": {"t": 2}},
        {"type": "data-weather", "id": "gone", "data": 3, "transient": true},
        {"type": "data-weather", "id": "kept", "data": 4, "transient": false},
    ]));
    assert_eq!(
        parts,
        json!([
            {"type": "data-weather", "id": "w", "data": {"t": 2}, "extra": true},
            {"type": "data-other", "id": "w", "data": 2},
            {"type": "data-weather", "data": "no id"},
            {"type": "data-weather", "id": "kept", "data": 4, "transient": false},
        ])
    );
}

#[test]
fn static_tool_lifecycle_with_partial_input() {
    let parts = only_parts(json!([
        {"type": "tool-input-start", "toolCallId": "c1", "toolName": "search", "title": "Search"},
        {"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": "{\"q\":\"ru"},
    ]));
    assert_eq!(
        parts,
        json!([{
            "type": "tool-search", "toolCallId": "c1", "state": "input-streaming", "title": "Search",
            "input": {"q": "ru"}, "rawInput": "{\"q\":\"ru"
        }])
    );

    let parts = only_parts(json!([
        {"type": "tool-input-start", "toolCallId": "c1", "toolName": "search", "providerExecuted": true},
        {"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": "{\"q\":1"},
        {"type": "tool-input-available", "toolCallId": "c1", "toolName": "search", "input": {"q": 1}},
        {"type": "tool-output-available", "toolCallId": "c1", "output": "p", "preliminary": true},
        {"type": "tool-output-available", "toolCallId": "c1", "output": "r", "providerMetadata": {"p": {}}},
    ]));
    assert_eq!(
        parts,
        json!([{
            "type": "tool-search", "toolCallId": "c1", "state": "output-available",
            "input": {"q": 1}, "output": "r", "providerExecuted": true, "resultProviderMetadata": {"p": {}}
        }])
    );
}

#[test]
fn text_encoded_tool_input_is_the_raw_text() {
    let parts = only_parts(json!([
        {"type": "tool-input-start", "toolCallId": "c", "toolName": "sh", "inputEncoding": "text"},
        {"type": "tool-input-delta", "toolCallId": "c", "inputTextDelta": "ls -"},
        {"type": "tool-input-delta", "toolCallId": "c", "inputTextDelta": "la"},
    ]));
    assert_eq!(parts[0]["input"], "ls -la");
    assert_eq!(parts[0]["rawInput"], "ls -la");
    assert_eq!(parts[0]["inputEncoding"], "text");
}

#[test]
fn tool_errors() {
    let parts = only_parts(json!([
        {"type": "tool-input-start", "toolCallId": "c", "toolName": "t"},
        {"type": "tool-input-delta", "toolCallId": "c", "inputTextDelta": "{"},
        {"type": "tool-output-error", "toolCallId": "c", "errorText": "boom"},
    ]));
    // A static part keeps its raw input on output-error.
    assert_eq!(
        parts,
        json!([{"type": "tool-t", "toolCallId": "c", "state": "output-error", "input": {}, "rawInput": "{", "errorText": "boom"}])
    );
    let parts = only_parts(json!([
        {"type": "tool-input-error", "toolCallId": "d", "toolName": "t", "input": "bad", "errorText": "invalid", "dynamic": true},
    ]));
    assert_eq!(
        parts,
        json!([{"type": "dynamic-tool", "toolName": "t", "toolCallId": "d", "state": "output-error", "input": "bad", "errorText": "invalid"}])
    );
}

#[test]
fn dynamic_tool_parts() {
    let parts = only_parts(json!([
        {"type": "tool-input-start", "toolCallId": "c", "toolName": "mcp", "dynamic": true, "toolMetadata": {"a": 1}},
        {"type": "tool-input-delta", "toolCallId": "c", "inputTextDelta": "[1,"},
        {"type": "tool-input-available", "toolCallId": "c", "toolName": "mcp", "input": [1, 2], "dynamic": true},
        {"type": "tool-output-available", "toolCallId": "c", "output": {"ok": true}},
    ]));
    assert_eq!(
        parts,
        json!([{
            "type": "dynamic-tool", "toolName": "mcp", "toolCallId": "c", "state": "output-available",
            "input": [1, 2], "output": {"ok": true}, "toolMetadata": {"a": 1}
        }])
    );
}

#[test]
fn approvals_and_denial() {
    let parts = only_parts(json!([
        {"type": "tool-input-available", "toolCallId": "c", "toolName": "rm", "input": {}},
        {"type": "tool-approval-request", "approvalId": "a1", "toolCallId": "c", "reason": "destructive", "isAutomatic": false},
        {"type": "tool-approval-response", "approvalId": "a1", "approved": false, "reason": "no"},
        {"type": "tool-output-denied", "toolCallId": "c"},
    ]));
    assert_eq!(
        parts,
        json!([{
            "type": "tool-rm", "toolCallId": "c", "state": "output-denied", "input": {},
            "approval": {"id": "a1", "requestReason": "destructive", "approved": false, "reason": "no"}
        }])
    );
    assert_eq!(
        rejection(
            json!([{"type": "tool-approval-response", "approvalId": "zz", "approved": true}])
        ),
        Some(Rejected::OutOfSequence)
    );
    assert_eq!(
        rejection(
            json!([{"type": "tool-approval-request", "approvalId": "a", "toolCallId": "nope"}])
        ),
        Some(Rejected::OutOfSequence)
    );
    assert_eq!(
        rejection(json!([{"type": "tool-output-denied", "toolCallId": "nope"}])),
        Some(Rejected::OutOfSequence)
    );
    assert_eq!(
        rejection(
            json!([{"type": "tool-input-delta", "toolCallId": "nope", "inputTextDelta": "x"}])
        ),
        Some(Rejected::OutOfSequence)
    );
}

#[test]
fn tool_lookup_prefers_the_current_step() {
    let parts = only_parts(json!([
        {"type": "start-step"},
        {"type": "tool-input-available", "toolCallId": "c", "toolName": "a", "input": 1},
        {"type": "start-step"},
        {"type": "tool-input-available", "toolCallId": "c", "toolName": "a", "input": 2},
        {"type": "tool-output-available", "toolCallId": "c", "output": "second"},
    ]));
    assert_eq!(parts[1]["state"], "input-available");
    assert_eq!(parts[3]["output"], "second");
    // Outside the current step, output goes to the last part with that id.
    let parts = only_parts(json!([
        {"type": "tool-input-available", "toolCallId": "c", "toolName": "a", "input": 1},
        {"type": "start-step"},
        {"type": "tool-output-available", "toolCallId": "c", "output": "late"},
    ]));
    assert_eq!(parts[0]["output"], "late");
}

#[test]
fn metadata_merges_across_start_finish_and_message_metadata() {
    let (messages, dropped) = run(json!([
        {"type": "start", "messageId": "m", "messageMetadata": {"a": 1, "n": {"x": 1}}},
        {"type": "message-metadata", "messageMetadata": {"n": {"y": 2}}},
        {"type": "message-metadata", "messageMetadata": null},
        {"type": "finish", "finishReason": "stop", "messageMetadata": {"a": 2}},
    ]));
    assert_eq!(dropped, 0);
    assert_eq!(
        messages,
        json!([{"id": "m", "metadata": {"a": 2, "n": {"x": 1, "y": 2}}, "role": "assistant", "parts": []}])
    );
    // Merging keys into a primitive throws in the SDK: dropped.
    let (messages, dropped) = run(json!([
        {"type": "message-metadata", "messageMetadata": "s"},
        {"type": "message-metadata", "messageMetadata": {"k": 1}},
    ]));
    assert_eq!(dropped, 1);
    assert_eq!(messages[0]["metadata"], "s");
}

#[test]
fn message_ids_split_messages_in_order_of_first_appearance() {
    let (messages, dropped) = run(json!([
        {"type": "text-start", "id": "t"},
        {"type": "start", "messageId": "a"},
        {"type": "text-start", "id": "t"},
        {"type": "start", "messageId": "b"},
        {"type": "text-delta", "id": "t", "delta": "lost"},
        {"type": "start", "messageId": "a", "messageMetadata": {"again": true}},
        {"type": "start"},
    ]));
    assert_eq!(dropped, 1);
    assert_eq!(
        messages,
        json!([
            {"id": "", "role": "assistant", "parts": [{"type": "text", "text": "", "state": "streaming"}]},
            {"id": "a", "metadata": {"again": true}, "role": "assistant", "parts": []},
            {"id": "b", "role": "assistant", "parts": []},
        ])
    );
}

#[test]
fn undefined_and_malformed_parts_are_dropped() {
    let cases = [
        (
            json!([{"type": "steering-message", "id": "s", "parts": []}]),
            Rejected::UndefinedType,
        ),
        (json!([{"type": "reset-step"}]), Rejected::UndefinedType),
        (json!([{"type": "tool-input-foo"}]), Rejected::UndefinedType),
        (json!([{"type": "text-start"}]), Rejected::Schema),
        (
            json!([{"type": "start", "messageId": null}]),
            Rejected::Schema,
        ),
        (json!([{"type": "data-x"}]), Rejected::Schema),
        (json!([null]), Rejected::Malformed),
        (json!([{"type": 3}]), Rejected::Malformed),
        (json!(["text-start"]), Rejected::Malformed),
    ];
    for (parts, reason) in cases {
        assert_eq!(rejection(parts.clone()), Some(reason), "{parts}");
    }
    let (messages, dropped) = run(
        json!([{"type": "reset-step"}, {"type": "bogus"}, {"type": "abort"}, {"type": "error", "errorText": "e"}]),
    );
    assert_eq!((messages, dropped), (json!([]), 2));
}

#[test]
fn ten_thousand_parts_assemble_in_linear_time() {
    let mut parts = vec![json!({"type": "start", "messageId": "m"})];
    for step in 0..500 {
        parts.push(json!({"type": "start-step"}));
        parts.push(json!({"type": "text-start", "id": format!("t{step}")}));
        for _ in 0..8 {
            parts.push(json!({"type": "text-delta", "id": format!("t{step}"), "delta": "word "}));
        }
        parts.push(json!({"type": "text-end", "id": format!("t{step}")}));
        parts.push(
            json!({"type": "tool-input-start", "toolCallId": format!("c{step}"), "toolName": "t"}),
        );
        for i in 0..6 {
            let lead = if i == 0 { "{" } else { "," };
            parts.push(json!({"type": "tool-input-delta", "toolCallId": format!("c{step}"), "inputTextDelta": format!("{lead}\"k{i}\":{i}")}));
        }
        parts.push(json!({"type": "data-progress", "id": "p", "data": step}));
        parts.push(json!({"type": "finish-step"}));
    }
    assert!(parts.len() >= 10_000);
    let started = std::time::Instant::now();
    let assembly = assemble(&parts);
    let elapsed = started.elapsed();
    assert_eq!(assembly.dropped, 0);
    let message_parts = &assembly.messages[0]["parts"];
    assert_eq!(message_parts.as_array().map(Vec::len), Some(500 * 3 + 1));
    assert_eq!(message_parts[2]["input"]["k5"], 5);
    assert_eq!(message_parts[3]["data"], 499);
    // Generous for debug builds; the release figure is in docs/streams.md.
    assert!(elapsed.as_millis() < 2_000, "took {elapsed:?}");
}
