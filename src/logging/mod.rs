//! Log lines on stderr: `--log-format text` (the default) or `json`.
//!
//! Every request logs one line, so the line's cost is part of every
//! request's cost. tracing-subscriber's own formatters took about 19k
//! instructions a request for text (the span's fields and the line, much of
//! it in nu_ansi_term's styling, which runs even with colours off) and about
//! 66k for JSON, which stores each span's fields as JSON text and parses
//! them back with serde_json for every line (docs/benchmarks.md, "Issue 36,
//! seventh pass"). The formatters here write the same lines (`text`: the
//! same bytes, but that control characters are escaped; `json`: the same
//! members and values) straight into the line's buffer; tracing-subscriber
//! still does the rest (filtering, the span registry, the buffer, the
//! write). A terminal gets tracing-subscriber's coloured text unchanged:
//! colours are for a person, and a person reads few lines.
//!
//! - `clock`: the line's timestamp.
//! - `text`: `text` lines.
//! - `json`: `json` lines.

mod clock;
mod json;
mod text;

#[cfg(test)]
mod tests;

use std::io::IsTerminal as _;

use tracing_subscriber::EnvFilter;

pub use json::{JsonFields, JsonLine};
pub use text::{TextFields, TextLine};

/// The form of the log lines (`--log-format`, read by `crate::cli`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineFormat {
    Text,
    Json,
}

/// Installs the process's logger: `RUST_LOG` filters (default `info`),
/// lines go to stderr in `format`.
pub fn init(format: LineFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LineFormat::Json => builder
            .with_ansi(false)
            .fmt_fields(JsonFields)
            .event_format(JsonLine)
            .init(),
        LineFormat::Text if std::io::stderr().is_terminal() => builder.with_ansi(true).init(),
        LineFormat::Text => builder
            .with_ansi(false)
            .fmt_fields(TextFields)
            .event_format(TextLine)
            .init(),
    }
}

/// A field's name as lines show it: a raw identifier's `r#` dropped.
fn shown_name(name: &str) -> &str {
    name.strip_prefix("r#").unwrap_or(name)
}
