//! The texts the store writes itself, exactly as they are stored and
//! served: event envelopes (the resource member, the server-assigned `seq`
//! and `ts`, then the validated actor, type and payload) and stream chunks.
//! Each can also be had in two halves around its `seq` digits, for a
//! statement that assigns the sequence itself.

use serde_json::Value;

use super::api::NewEvent;
use crate::protocol::ResourceRef;

/// Serialise a stream chunk: `{"stream", "seq", "ts", "parts"}`.
pub(crate) fn chunk_json(stream: &str, seq: i64, ts_ms: i64, parts_json: &str) -> String {
    let (head, tail) = chunk_parts(stream, ts_ms, parts_json);
    format!("{head}{seq}{tail}")
}

/// A chunk's text before and after its `seq` digits, so that a statement
/// assigning the sequence can store the exact text.
pub(crate) fn chunk_parts(stream: &str, ts_ms: i64, parts_json: &str) -> (String, String) {
    (
        format!(
            "{{\"stream\":{id},\"seq\":",
            id = Value::String(stream.to_owned())
        ),
        format!(
            ",\"ts\":\"{ts}\",\"parts\":{parts_json}}}",
            ts = crate::protocol::time::format_iso(ts_ms),
        ),
    )
}

/// Serialise an event envelope: the resource member, server-assigned `seq`
/// and `ts`, then the validated actor, type and payload texts.
pub(crate) fn envelope_json(
    resource: &ResourceRef,
    seq: i64,
    ts_ms: i64,
    event: &NewEvent,
) -> String {
    let (head, tail) = envelope_parts(resource, ts_ms, event);
    format!("{head}{seq}{tail}")
}

/// An envelope's text before and after its `seq` digits, so that a
/// statement assigning the sequence can store the exact text.
pub(crate) fn envelope_parts(
    resource: &ResourceRef,
    ts_ms: i64,
    event: &NewEvent,
) -> (String, String) {
    (
        envelope_head(resource),
        format!(
            "{TS_MEMBER}{ts}{after}",
            ts = crate::protocol::time::format_iso(ts_ms),
            after = envelope_after_ts(event),
        ),
    )
}

/// What joins an envelope's `seq` digits to its `ts` text.
pub(crate) const TS_MEMBER: &str = ",\"ts\":\"";

/// An envelope's text before its `seq` digits.
pub(crate) fn envelope_head(resource: &ResourceRef) -> String {
    format!(
        "{{\"{key}\":{id},\"seq\":",
        key = resource.kind.wire_key(),
        id = Value::String(resource.id.clone()),
    )
}

/// An envelope's text after its `ts` text.
pub(crate) fn envelope_after_ts(event: &NewEvent) -> String {
    format!(
        "\",\"actor\":{actor},\"type\":{ty},\"payload\":{payload}}}",
        actor = event.actor_json,
        ty = event.type_json,
        payload = event.payload_json,
    )
}
