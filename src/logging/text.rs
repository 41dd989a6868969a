//! `text` lines, as tracing-subscriber's default (`Full`) format writes
//! them without colours:
//!
//! ```text
//! 2026-12-04T23:51:39.123456Z  INFO request{request_id=… method=GET route=/health scope=open}: abstore::http::middleware: request status=200 latency_ms=0.085
//! ```
//!
//! One difference, on purpose: control characters in a message or a value
//! are escaped (`\n`, `\r`, `\x1b`, `\u{85}`), so one event is one line and a
//! client's text cannot draw on an operator's terminal. tracing-subscriber
//! escapes the terminal's escapes in messages only.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_log::NormalizeEvent as _;
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

use super::{clock, shown_name};

/// The event format of `text` lines.
pub struct TextLine;

/// The field format of `text` lines: `name=value` pairs between spaces,
/// the message bare.
pub struct TextFields;

impl<S> FormatEvent<S, TextFields> for TextLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, TextFields>,
        mut out: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        // An event from the `log` crate carries its own level and target.
        let normalized = event.normalized_metadata();
        let meta = normalized.as_ref().unwrap_or_else(|| event.metadata());
        clock::write(&mut out, std::time::SystemTime::now())?;
        out.write_str(match *meta.level() {
            Level::TRACE => " TRACE ",
            Level::DEBUG => " DEBUG ",
            Level::INFO => "  INFO ",
            Level::WARN => "  WARN ",
            Level::ERROR => " ERROR ",
        })?;
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                out.write_str(span.name())?;
                let extensions = span.extensions();
                if let Some(fields) = extensions.get::<FormattedFields<TextFields>>()
                    && !fields.is_empty()
                {
                    out.write_char('{')?;
                    out.write_str(fields)?;
                    out.write_char('}')?;
                }
                out.write_char(':')?;
            }
            out.write_char(' ')?;
        }
        out.write_str(meta.target())?;
        out.write_str(": ")?;
        let mut visitor = TextVisitor::new(out.by_ref());
        event.record(&mut visitor);
        visitor.result?;
        out.write_char('\n')
    }
}

impl<'writer> FormatFields<'writer> for TextFields {
    fn format_fields<R: RecordFields>(&self, out: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = TextVisitor::new(out);
        fields.record(&mut visitor);
        visitor.result
    }
}

/// Writes one set of fields: `name=value` between spaces, the message bare
/// and first where the macro put it.
struct TextVisitor<'a> {
    out: Writer<'a>,
    first: bool,
    result: fmt::Result,
}

impl<'a> TextVisitor<'a> {
    fn new(out: Writer<'a>) -> Self {
        Self {
            out,
            first: true,
            result: Ok(()),
        }
    }

    /// Starts a field: the space before it and, but for the message, its
    /// name. `false` for what a line does not show.
    fn start(&mut self, field: &Field) -> bool {
        let name = field.name();
        // Metadata of an event from the `log` crate, shown in the line's head.
        if self.result.is_err() || name.starts_with("log.") {
            return false;
        }
        if !std::mem::take(&mut self.first) {
            self.result = self.out.write_char(' ');
        }
        if name != "message" {
            self.result = self
                .result
                .and_then(|()| self.out.write_str(shown_name(name)))
                .and_then(|()| self.out.write_char('='));
        }
        self.result.is_ok()
    }
}

impl Visit for TextVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if !self.start(field) {
            return;
        }
        let mut out = ControlsEscaped(&mut self.out);
        // The message as written; any other text quoted, as `Debug` does.
        self.result = if field.name() == "message" {
            out.write_str(value)
        } else {
            write!(out, "{value:?}")
        };
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.start(field) {
            self.result = write!(ControlsEscaped(&mut self.out), "{value:?}");
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        if !self.start(field) {
            return;
        }
        // The error, then what caused it: `err=… err.sources=[…, …]`.
        let mut out = ControlsEscaped(&mut self.out);
        self.result = write!(out, "{value}");
        let Some(mut source) = value.source() else {
            return;
        };
        let name = shown_name(field.name());
        self.result = self
            .result
            .and_then(|()| write!(out, " {name}.sources=[{source}"));
        while let Some(next) = source.source() {
            self.result = self.result.and_then(|()| write!(out, ", {next}"));
            source = next;
        }
        self.result = self.result.and_then(|()| out.write_char(']'));
    }
}

/// Passes text through with its control characters escaped: C0 (but the
/// tab), DEL and C1.
///
/// Hand-written: the escaping tracing-subscriber uses is private to it, and
/// `str::escape_debug` would also escape quotes, backslashes and
/// non-printable letters a line keeps as they are.
struct ControlsEscaped<'a, W>(&'a mut W);

impl<W: fmt::Write> fmt::Write for ControlsEscaped<'_, W> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        // Most text has none: one scan, one copy. 0xC2 starts the UTF-8 of
        // C1 controls (and of other Latin-1 characters, which the slow path
        // keeps).
        if !text
            .bytes()
            .any(|b| (b < 0x20 && b != b'\t') || b == 0x7f || b == 0xc2)
        {
            return self.0.write_str(text);
        }
        for ch in text.chars() {
            match ch {
                '\n' => self.0.write_str("\\n")?,
                '\r' => self.0.write_str("\\r")?,
                '\t' => self.0.write_char('\t')?,
                '\0'..='\x1f' | '\x7f' => write!(self.0, "\\x{:02x}", u32::from(ch))?,
                '\u{80}'..='\u{9f}' => write!(self.0, "\\u{{{:x}}}", u32::from(ch))?,
                _ => self.0.write_char(ch)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(text: &str) -> String {
        let mut out = String::new();
        ControlsEscaped(&mut out).write_str(text).unwrap();
        out
    }

    #[test]
    fn control_characters_are_escaped_and_nothing_else() {
        assert_eq!(
            escaped("plain \"text\" \\ é ¡ 🦀"),
            "plain \"text\" \\ é ¡ 🦀"
        );
        assert_eq!(escaped("tab\tstays"), "tab\tstays");
        assert_eq!(
            escaped("a\nb\r\x1b[31mc\x07\x7f\u{85}\u{9f}\0"),
            "a\\nb\\r\\x1b[31mc\\x07\\x7f\\u{85}\\u{9f}\\x00"
        );
    }
}
