//! `json` lines: one object a line with the members tracing-subscriber's
//! JSON format writes:
//!
//! ```text
//! {"timestamp":"2026-12-04T23:51:39.123456Z","level":"INFO","fields":{"message":"request","status":200,"latency_ms":0.085},"target":"abstore::http::middleware","span":{"request_id":"…","method":"GET","route":"/health","scope":"open","name":"request"},"spans":[{…,"name":"request"}]}
//! ```
//!
//! `span` is the innermost span and `spans` every span from the outermost;
//! an event outside any span has neither. Numbers and booleans are JSON
//! numbers and booleans (a float that is not finite is `null`), text and
//! anything else shown by `Debug` are strings (128-bit integers too, as
//! tracing-subscriber writes them).
//!
//! A span's fields are kept as JSON members (`"a":1,"b":"x"`) when the span
//! is made, and copied into each line; tracing-subscriber keeps them as an
//! object's text and parses it back for every line. A span's members are in
//! the order they were recorded (tracing-subscriber sorts them by name).

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_log::NormalizeEvent as _;
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormattedFields};
use tracing_subscriber::registry::{LookupSpan, SpanRef};

use super::{clock, shown_name};

/// The event format of `json` lines.
pub struct JsonLine;

/// The field format of `json` lines: JSON object members, without braces.
pub struct JsonFields;

impl<S> FormatEvent<S, JsonFields> for JsonLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonFields>,
        mut out: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        // An event from the `log` crate carries its own level and target.
        let normalized = event.normalized_metadata();
        let meta = normalized.as_ref().unwrap_or_else(|| event.metadata());
        out.write_str("{\"timestamp\":\"")?;
        clock::write(&mut out, std::time::SystemTime::now())?;
        out.write_str(match *meta.level() {
            Level::TRACE => "\",\"level\":\"TRACE\",\"fields\":{",
            Level::DEBUG => "\",\"level\":\"DEBUG\",\"fields\":{",
            Level::INFO => "\",\"level\":\"INFO\",\"fields\":{",
            Level::WARN => "\",\"level\":\"WARN\",\"fields\":{",
            Level::ERROR => "\",\"level\":\"ERROR\",\"fields\":{",
        })?;
        // The event's own fields, `log.*` included, as tracing-subscriber
        // writes them.
        let mut visitor = JsonVisitor::new(out.by_ref(), true);
        event.record(&mut visitor);
        visitor.result?;
        out.write_str("},\"target\":")?;
        string(&mut out, meta.target())?;
        let innermost = event
            .parent()
            .and_then(|id| ctx.span(id))
            .or_else(|| ctx.lookup_current());
        if let Some(innermost) = innermost {
            out.write_str(",\"span\":")?;
            span(&mut out, &innermost)?;
            out.write_str(",\"spans\":[")?;
            for (i, each) in innermost.scope().from_root().enumerate() {
                if i > 0 {
                    out.write_char(',')?;
                }
                span(&mut out, &each)?;
            }
            out.write_char(']')?;
        }
        out.write_str("}\n")
    }
}

/// One span as an object: its fields, then its `name`.
fn span<S>(out: &mut Writer<'_>, span: &SpanRef<'_, S>) -> fmt::Result
where
    S: for<'a> LookupSpan<'a>,
{
    out.write_char('{')?;
    let extensions = span.extensions();
    if let Some(fields) = extensions.get::<FormattedFields<JsonFields>>()
        && !fields.is_empty()
    {
        out.write_str(fields)?;
        out.write_char(',')?;
    }
    out.write_str("\"name\":")?;
    string(out, span.name())?;
    out.write_char('}')
}

impl<'writer> FormatFields<'writer> for JsonFields {
    fn format_fields<R: RecordFields>(&self, mut out: Writer<'writer>, fields: R) -> fmt::Result {
        span_members(&mut out, fields, true)
    }

    fn add_fields(
        &self,
        current: &'writer mut FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> fmt::Result {
        // Members recorded later follow the ones before, after a comma.
        let first = current.fields.is_empty();
        span_members(&mut current.as_writer(), fields, first)
    }
}

/// A span's fields as members (`log.*` is never a span's).
fn span_members(out: &mut Writer<'_>, fields: impl RecordFields, first: bool) -> fmt::Result {
    let mut visitor = JsonVisitor::new(out.by_ref(), false);
    visitor.first = first;
    fields.record(&mut visitor);
    visitor.result
}

/// Writes one set of fields as JSON members between commas.
struct JsonVisitor<'a> {
    out: Writer<'a>,
    first: bool,
    /// Whether `log.*` fields are written (an event's are, as
    /// tracing-subscriber writes them).
    log_fields: bool,
    result: fmt::Result,
}

impl<'a> JsonVisitor<'a> {
    fn new(out: Writer<'a>, log_fields: bool) -> Self {
        Self {
            out,
            first: true,
            log_fields,
            result: Ok(()),
        }
    }

    /// Starts a member: the comma before it, its name and the colon.
    /// `false` for what is not written.
    fn start(&mut self, field: &Field) -> bool {
        let name = field.name();
        if self.result.is_err() || (!self.log_fields && name.starts_with("log.")) {
            return false;
        }
        if !std::mem::take(&mut self.first) {
            self.result = self.out.write_char(',');
        }
        self.result = self
            .result
            .and_then(|()| string(&mut self.out, shown_name(name)))
            .and_then(|()| self.out.write_char(':'));
        self.result.is_ok()
    }

    /// A value whose `Display` is its JSON: an integer or a boolean.
    fn unquoted(&mut self, field: &Field, value: impl fmt::Display) {
        if self.start(field) {
            self.result = write!(self.out, "{value}");
        }
    }
}

impl Visit for JsonVisitor<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        if !self.start(field) {
            return;
        }
        self.result = if value.is_finite() {
            // `Debug` writes the shortest text that reads back as the same
            // float, with a fraction or exponent: a JSON number.
            write!(self.out, "{value:?}")
        } else {
            // JSON has no NaN or infinity; serde_json writes `null`.
            self.out.write_str("null")
        };
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.unquoted(field, value);
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.unquoted(field, value);
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.unquoted(field, value);
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if self.start(field) {
            self.result = string(&mut self.out, value);
        }
    }

    fn record_bytes(&mut self, field: &Field, value: &[u8]) {
        // An array of numbers, as serde writes a byte slice.
        if !self.start(field) {
            return;
        }
        self.result = (|| {
            self.out.write_char('[')?;
            for (i, byte) in value.iter().enumerate() {
                if i > 0 {
                    self.out.write_char(',')?;
                }
                write!(self.out, "{byte}")?;
            }
            self.out.write_char(']')
        })();
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if !self.start(field) {
            return;
        }
        self.result = self
            .out
            .write_char('"')
            .and_then(|()| write!(JsonEscaped(&mut self.out), "{value:?}"))
            .and_then(|()| self.out.write_char('"'));
    }
}

/// `text` as a JSON string.
fn string(out: &mut impl fmt::Write, text: &str) -> fmt::Result {
    out.write_char('"')?;
    JsonEscaped(out).write_str(text)?;
    out.write_char('"')
}

/// Passes text through escaped as the inside of a JSON string (RFC 8259,
/// section 7: the quote, the backslash and C0 controls).
///
/// Hand-written: serde_json escapes into an `io::Write` of bytes, and a
/// line is a `fmt::Write` of text; going through bytes would copy every
/// string once more and check it is UTF-8 again.
struct JsonEscaped<'a, W>(&'a mut W);

impl<W: fmt::Write> fmt::Write for JsonEscaped<'_, W> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        let mut clean = 0;
        for (at, byte) in text.bytes().enumerate() {
            let escape = match byte {
                b'"' => "\\\"",
                b'\\' => "\\\\",
                b'\n' => "\\n",
                b'\r' => "\\r",
                b'\t' => "\\t",
                0x08 => "\\b",
                0x0c => "\\f",
                0..0x20 => "",
                _ => continue,
            };
            // Every byte escaped is ASCII, so `at` is a character boundary.
            self.0.write_str(&text[clean..at])?;
            if escape.is_empty() {
                write!(self.0, "\\u{byte:04x}")?;
            } else {
                self.0.write_str(escape)?;
            }
            clean = at + 1;
        }
        self.0.write_str(&text[clean..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped_as_json_reads_them_back() {
        for text in [
            "",
            "plain",
            "\"quoted\" and \\ back",
            "lines\nand\r\ttabs\u{8}\u{c}",
            "\0\u{1}\u{1f}\u{7f}\u{85} é 🦀",
        ] {
            let mut out = String::new();
            string(&mut out, text).unwrap();
            let back: String = serde_json::from_str(&out).unwrap();
            assert_eq!(back, text, "{out}");
            assert_eq!(out, serde_json::to_string(text).unwrap());
        }
    }
}
