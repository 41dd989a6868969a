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
///
/// Written piece by piece into one buffer of the right size: it runs on
/// SQLite's writer thread for every append, where `format!` and the two
/// halves it joined cost 7,300 instructions of the job's 74,000 (callgrind,
/// issue 52).
pub(crate) fn envelope_json(
    resource: &ResourceRef,
    seq: i64,
    ts_ms: i64,
    event: &NewEvent,
) -> String {
    let mut out = String::with_capacity(
        64 + resource.id.len()
            + event.actor_json.len()
            + event.type_json.len()
            + event.payload_json.len(),
    );
    push_envelope_head(&mut out, resource);
    out.push_str(itoa::Buffer::new().format(seq));
    out.push_str(TS_MEMBER);
    out.push_str(&crate::protocol::time::format_iso(ts_ms));
    push_envelope_after_ts(&mut out, event);
    out
}

/// What joins an envelope's `seq` digits to its `ts` text.
pub(crate) const TS_MEMBER: &str = ",\"ts\":\"";

/// An envelope's text before its `seq` digits.
pub(crate) fn envelope_head(resource: &ResourceRef) -> String {
    let mut out = String::new();
    push_envelope_head(&mut out, resource);
    out
}

/// An envelope's text after its `ts` text.
pub(crate) fn envelope_after_ts(event: &NewEvent) -> String {
    let mut out = String::new();
    push_envelope_after_ts(&mut out, event);
    out
}

/// [`envelope_head`] onto `out`: the one spelling of it, whole envelopes'
/// and PostgreSQL's halves alike.
fn push_envelope_head(out: &mut String, resource: &ResourceRef) {
    // Serialising a string cannot fail; the id is JSON-escaped as
    // `serde_json` writes every stored text.
    let id = serde_json::to_string(&resource.id).unwrap_or_else(|_| "\"\"".to_owned());
    for piece in ["{\"", resource.kind.wire_key(), "\":", &id, ",\"seq\":"] {
        out.push_str(piece);
    }
}

/// [`envelope_after_ts`] onto `out`.
fn push_envelope_after_ts(out: &mut String, event: &NewEvent) {
    for piece in [
        "\",\"actor\":",
        &event.actor_json,
        ",\"type\":",
        &event.type_json,
        ",\"payload\":",
        &event.payload_json,
        "}",
    ] {
        out.push_str(piece);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ResourceKind;

    /// The envelope written piece by piece is the halves around its `seq`
    /// joined, as PostgreSQL's one-statement append stores it, for
    /// ids that need escaping and every sequence and time extreme.
    #[test]
    fn an_envelope_is_its_halves_joined() {
        let event = NewEvent {
            actor_json: r#"{"kind":"agent","role":"implement","session":"s_1"}"#.into(),
            type_json: r#""observation.recorded""#.into(),
            payload_json: r#"{"summary":"a \"quoted\" line\n"}"#.into(),
        };
        for kind in [
            ResourceKind::Build,
            ResourceKind::Repo,
            ResourceKind::Session,
        ] {
            for id in ["b-1", "acme/x", "a\"b\\c\u{7}", "ünï"] {
                let r = ResourceRef::new(kind, id.to_owned());
                for (seq, ts) in [(1, 0), (i64::MAX, 8_640_000_000_000_000), (0, -1)] {
                    let joined = format!(
                        "{}{seq}{TS_MEMBER}{}{}",
                        envelope_head(&r),
                        crate::protocol::time::format_iso(ts),
                        envelope_after_ts(&event)
                    );
                    assert_eq!(envelope_json(&r, seq, ts, &event), joined);
                    // Spelled apart from the pieces both share.
                    let spelled = format!(
                        "{{\"{}\":{},\"seq\":{seq},\"ts\":\"{}\",\"actor\":{},\"type\":{},\"payload\":{}}}",
                        kind.wire_key(),
                        Value::String(id.to_owned()),
                        crate::protocol::time::format_iso(ts),
                        event.actor_json,
                        event.type_json,
                        event.payload_json
                    );
                    assert_eq!(joined, spelled);
                    let parsed: Value = serde_json::from_str(&joined).unwrap();
                    assert_eq!(parsed[kind.wire_key()], id);
                }
            }
        }
    }
}
