//! The chunk schema of `ai@7.0.173` (`uiMessageChunkSchema` in
//! `src/ui-message-stream/ui-message-chunks.ts`), for the part types the
//! protocol names.
//!
//! Every entry is a zod `looseObject`: extra keys pass, `z.optional(x)` allows a
//! missing key but rejects `null`, and `z.unknown()` requires the key (any value,
//! `null` included). `providerMetadata` is an object of objects, `toolMetadata`
//! an object; any JSON value is a valid `jsonValueSchema` value.

use serde_json::{Map, Value};

type Part = Map<String, Value>;

fn is_str(v: &Value) -> bool {
    v.is_string()
}

fn is_bool(v: &Value) -> bool {
    v.is_boolean()
}

fn is_object(v: &Value) -> bool {
    v.is_object()
}

fn is_provider_metadata(v: &Value) -> bool {
    v.as_object()
        .is_some_and(|m| m.values().all(Value::is_object))
}

fn one_of(allowed: &'static [&'static str]) -> impl Fn(&Value) -> bool {
    move |v| v.as_str().is_some_and(|s| allowed.contains(&s))
}

/// `z.number().check(z.int()).check(z.nonnegative())`: a safe integer ≥ 0.
fn is_index(v: &Value) -> bool {
    const MAX_SAFE: f64 = 9_007_199_254_740_991.0;
    v.as_f64()
        .is_some_and(|n| n.fract() == 0.0 && (0.0..=MAX_SAFE).contains(&n))
}

fn req(p: &Part, key: &str, check: impl Fn(&Value) -> bool) -> bool {
    p.get(key).is_some_and(check)
}

fn opt(p: &Part, key: &str, check: impl Fn(&Value) -> bool) -> bool {
    p.get(key).is_none_or(check)
}

fn present(p: &Part, key: &str) -> bool {
    p.contains_key(key)
}

fn pm(p: &Part) -> bool {
    opt(p, "providerMetadata", is_provider_metadata)
}

/// `citationSchema` (a `z.object`, which strips unknown keys rather than rejecting them).
fn is_citation(v: &Value) -> bool {
    let Some(c) = v.as_object() else { return false };
    let source_ok = c.get("source").and_then(Value::as_object).is_some_and(|s| {
        let common = req(s, "type", |t| t == "source") && req(s, "id", is_str) && pm(s);
        match s.get("sourceType").and_then(Value::as_str) {
            Some("url") => common && req(s, "url", is_str) && opt(s, "title", is_str),
            Some("document") => {
                common
                    && req(s, "mediaType", is_str)
                    && req(s, "title", is_str)
                    && opt(s, "filename", is_str)
            }
            _ => false,
        }
    });
    source_ok
        && opt(c, "startIndex", is_index)
        && opt(c, "endIndex", is_index)
        && opt(c, "citedText", is_str)
}

fn is_citations(v: &Value) -> bool {
    v.as_array()
        .is_some_and(|items| items.iter().all(is_citation))
}

/// The optional keys shared by the tool-input and tool-output chunks.
fn tool_common(p: &Part) -> bool {
    opt(p, "providerExecuted", is_bool)
        && pm(p)
        && opt(p, "toolMetadata", is_object)
        && opt(p, "dynamic", is_bool)
}

const FINISH_REASONS: &[&str] = &[
    "stop",
    "length",
    "content-filter",
    "tool-calls",
    "error",
    "interrupted",
    "other",
];

/// Whether a part whose `type` is `ty` passes the SDK's chunk schema. Types the
/// protocol does not name (including the SDK's `steering-message` and
/// `reset-step`) never conform.
pub(super) fn conforms(ty: &str, p: &Part) -> bool {
    match ty {
        "text-start" | "reasoning-start" | "reasoning-end" => req(p, "id", is_str) && pm(p),
        "text-delta" | "reasoning-delta" => {
            req(p, "id", is_str) && req(p, "delta", is_str) && pm(p)
        }
        "text-end" => req(p, "id", is_str) && opt(p, "citations", is_citations) && pm(p),
        "error" => req(p, "errorText", is_str),
        "tool-input-start" => {
            req(p, "toolCallId", is_str)
                && req(p, "toolName", is_str)
                && opt(p, "inputEncoding", one_of(&["json", "text"]))
                && tool_common(p)
                && opt(p, "title", is_str)
        }
        "tool-input-delta" => req(p, "toolCallId", is_str) && req(p, "inputTextDelta", is_str),
        "tool-input-available" => {
            req(p, "toolCallId", is_str)
                && req(p, "toolName", is_str)
                && present(p, "input")
                && tool_common(p)
                && opt(p, "title", is_str)
        }
        "tool-input-error" => {
            req(p, "toolCallId", is_str)
                && req(p, "toolName", is_str)
                && present(p, "input")
                && tool_common(p)
                && req(p, "errorText", is_str)
                && opt(p, "title", is_str)
        }
        "tool-approval-request" => {
            req(p, "approvalId", is_str)
                && req(p, "toolCallId", is_str)
                && opt(p, "reason", is_str)
                && opt(p, "isAutomatic", is_bool)
                && opt(p, "signature", is_str)
        }
        "tool-approval-response" => {
            req(p, "approvalId", is_str)
                && req(p, "approved", is_bool)
                && opt(p, "reason", is_str)
                && opt(p, "providerExecuted", is_bool)
                && pm(p)
        }
        "tool-output-available" => {
            req(p, "toolCallId", is_str)
                && present(p, "output")
                && tool_common(p)
                && opt(p, "preliminary", is_bool)
        }
        "tool-output-error" => {
            req(p, "toolCallId", is_str) && req(p, "errorText", is_str) && tool_common(p)
        }
        "tool-output-denied" => req(p, "toolCallId", is_str),
        "custom" => req(p, "kind", is_str) && pm(p),
        "source-url" => {
            req(p, "sourceId", is_str) && req(p, "url", is_str) && opt(p, "title", is_str) && pm(p)
        }
        "source-document" => {
            req(p, "sourceId", is_str)
                && req(p, "mediaType", is_str)
                && req(p, "title", is_str)
                && opt(p, "filename", is_str)
                && pm(p)
        }
        "file" | "reasoning-file" => req(p, "url", is_str) && req(p, "mediaType", is_str) && pm(p),
        "abort" => opt(p, "reason", is_str),
        "start-step" | "finish-step" => true,
        "start" => opt(p, "messageId", is_str),
        "finish" => opt(p, "finishReason", one_of(FINISH_REASONS)),
        "message-metadata" => present(p, "messageMetadata"),
        _ if ty.starts_with("data-") => {
            opt(p, "id", is_str) && present(p, "data") && opt(p, "transient", is_bool)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(v: Value) -> bool {
        let map = v.as_object().cloned().unwrap_or_default();
        let ty = map
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        conforms(&ty, &map)
    }

    #[test]
    fn matches_observed_sdk_verdicts() {
        // Verdicts observed with uiMessageChunkSchema of ai@7.0.173.
        assert!(!check(json!({"type": "data-x"})));
        assert!(check(json!({"type": "data-x", "data": null})));
        assert!(check(json!({"type": "data-", "data": 1})));
        assert!(!check(
            json!({"type": "tool-input-available", "toolCallId": "a", "toolName": "b"})
        ));
        assert!(!check(json!({"type": "message-metadata"})));
        assert!(!check(json!({"type": "start", "messageId": null})));
        assert!(check(json!({"type": "start", "messageMetadata": null})));
        assert!(check(json!({"type": "custom", "kind": "nodot"})));
        assert!(!check(
            json!({"type": "text-start", "id": "a", "providerMetadata": {"x": 1}})
        ));
        assert!(check(
            json!({"type": "text-start", "id": "a", "providerMetadata": {"x": {}}})
        ));
        assert!(!check(
            json!({"type": "text-start", "id": "a", "providerMetadata": []})
        ));
        assert!(check(
            json!({"type": "tool-input-start", "toolCallId": "a", "toolName": "b", "toolMetadata": {"x": 1}})
        ));
        assert!(!check(
            json!({"type": "tool-input-start", "toolCallId": "a", "toolName": "b", "toolMetadata": [1]})
        ));
        assert!(!check(json!({"type": "text-end", "id": "a", "citations": [
            {"source": {"type": "source", "sourceType": "url", "id": "s", "url": "u", "extra": 1}, "startIndex": 1.5}
        ]})));
        assert!(check(json!({"type": "text-end", "id": "a", "citations": [
            {"source": {"type": "source", "sourceType": "url", "id": "s", "url": "u", "extra": 1}, "startIndex": 1}
        ]})));
        assert!(!check(json!({"type": "abort", "reason": null})));
        assert!(check(json!({"type": "finish", "finishReason": "stop"})));
        assert!(!check(json!({"type": "finish", "finishReason": "done"})));
        assert!(!check(json!({"type": "reset-step"})));
        assert!(!check(
            json!({"type": "steering-message", "id": "s", "parts": []})
        ));
        assert!(!check(json!({"type": "tool-input-foo", "toolCallId": "a"})));
    }
}
