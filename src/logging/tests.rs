//! The lines written here against the ones tracing-subscriber's own
//! formats write for the same events: `text` byte for byte (but the
//! timestamp), `json` as equal JSON values (but the timestamp).

use std::io;
use std::sync::{Arc, Mutex};

use tracing_subscriber::fmt::MakeWriter;

use super::*;

/// Collects every line a subscriber writes.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Lines {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

impl io::Write for Lines {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Lines {
    type Writer = Lines;

    fn make_writer(&'a self) -> Lines {
        self.clone()
    }
}

/// Events of every level, with fields of every kind, outside spans and
/// inside nested ones, with span fields recorded after the span was made.
fn events() {
    tracing::info!("started");
    tracing::warn!(port = 8080_u64, ratio = 0.165, ok = true, "no token secret");
    tracing::error!(delta = -3_i64, big = 1u128 << 100, "failed");
    let outer = tracing::info_span!(
        "request",
        request_id = %"c606009b-cb85-46ec-8619-42b4923cc986",
        method = %"POST",
        route = %"/builds/{id}/events",
        scope = tracing::field::Empty,
        refused = tracing::field::Empty,
    );
    let _outer = outer.enter();
    tracing::info!(status = 201_u16, latency_ms = 1.373, "request");
    outer.record("scope", tracing::field::display("build:b1"));
    tracing::info!(text = "quoted \"words\" and a \\", list = ?[1, 2], "in the span");
    let empty = tracing::info_span!("empty");
    let _empty = empty.enter();
    tracing::info!("no fields in the inner span");
    let inner = tracing::warn_span!("inner", r#type = "plan", n = 7_i64);
    let _inner = inner.enter();
    tracing::warn!(r#type = "raw", "raw identifiers lose their r#");
    tracing::info!(message = "the message as a field", after = 1_u64);
    tracing::info!(ratio = 1e-7, whole = 2.0, large = 1e16, "floats");
    let failure = Failure("cannot write", Some(&Failure("disk full", None)));
    tracing::error!(error = &failure as &dyn std::error::Error, "write failed");
    let alone = Failure("alone", None);
    tracing::error!(error = &alone as &dyn std::error::Error, "no source");
}

/// An error with an optional source.
#[derive(Debug)]
struct Failure(&'static str, Option<&'static Failure>);

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Failure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.1.map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// What `events` writes through a subscriber built by `make`.
fn written(
    events: impl FnOnce(),
    make: impl FnOnce(Lines) -> Box<dyn tracing::Subscriber + Send + Sync>,
) -> String {
    let lines = Lines::default();
    tracing::subscriber::with_default(make(lines.clone()), events);
    lines.text()
}

/// What `events` writes as our `text` lines.
fn text_lines(events: impl FnOnce()) -> String {
    written(events, |lines| {
        Box::new(
            builder(lines)
                .fmt_fields(TextFields)
                .event_format(TextLine)
                .finish(),
        )
    })
}

/// What `events` writes as our `json` lines.
fn json_lines(events: impl FnOnce()) -> String {
    written(events, |lines| {
        Box::new(
            builder(lines)
                .fmt_fields(JsonFields)
                .event_format(JsonLine)
                .finish(),
        )
    })
}

fn split(text: &str) -> Vec<String> {
    text.lines().map(str::to_owned).collect()
}

fn builder(
    lines: Lines,
) -> tracing_subscriber::fmt::SubscriberBuilder<
    tracing_subscriber::fmt::format::DefaultFields,
    tracing_subscriber::fmt::format::Format,
    tracing_subscriber::filter::LevelFilter,
    Lines,
> {
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(lines)
        .with_ansi(false)
}

/// A line's timestamp (checked to be one) and the rest of it.
fn without_timestamp(line: &str) -> &str {
    let (timestamp, rest) = line.split_once(' ').unwrap();
    check_timestamp(timestamp);
    rest
}

fn check_timestamp(timestamp: &str) {
    use time::format_description::well_known::Rfc3339;
    assert_eq!(timestamp.len(), 27, "{timestamp}");
    assert!(timestamp.ends_with('Z'), "{timestamp}");
    let at = time::OffsetDateTime::parse(timestamp, &Rfc3339).unwrap();
    let off = (time::OffsetDateTime::now_utc() - at).abs();
    assert!(off < time::Duration::minutes(5), "{timestamp}");
}

#[test]
fn text_lines_are_tracing_subscribers_full_format() {
    let ours = split(&text_lines(events));
    let theirs = split(&written(events, |lines| Box::new(builder(lines).finish())));
    assert_eq!(ours.len(), 11, "{ours:#?}");
    assert_eq!(ours.len(), theirs.len());
    for (ours, theirs) in ours.iter().zip(&theirs) {
        assert_eq!(without_timestamp(ours), without_timestamp(theirs));
    }
    assert!(
        ours[3].ends_with(
            "  INFO request{request_id=c606009b-cb85-46ec-8619-42b4923cc986 method=POST \
             route=/builds/{id}/events}: abstore::logging::tests: request status=201 \
             latency_ms=1.373"
        ),
        "{}",
        ours[3]
    );
}

#[test]
fn json_lines_are_tracing_subscribers_json_format() {
    let ours = split(&json_lines(events));
    let theirs = split(&written(events, |lines| {
        Box::new(builder(lines).json().finish())
    }));
    assert_eq!(ours.len(), 11, "{ours:#?}");
    assert_eq!(ours.len(), theirs.len());
    let parsed = |line: &str| {
        let mut value: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        check_timestamp(value["timestamp"].as_str().unwrap());
        value.as_object_mut().unwrap().remove("timestamp");
        value
    };
    for (ours, theirs) in ours.iter().zip(&theirs) {
        assert_eq!(parsed(ours), parsed(theirs), "\n{ours}\n{theirs}");
    }
    let request = parsed(&ours[4]);
    assert_eq!(request["span"]["scope"], "build:b1", "{request}");
    assert_eq!(request["fields"]["text"], "quoted \"words\" and a \\");
}

#[test]
fn control_characters_never_break_a_line() {
    let hostile = "a\nb\r\x1b[2J\u{85}\0\"\\";
    let event = || {
        let span = tracing::info_span!("request", request_id = %hostile);
        let _span = span.enter();
        tracing::warn!(value = %hostile, text = hostile, "say {hostile}");
    };
    let text = text_lines(event);
    assert_eq!(text.matches('\n').count(), 1, "{text}");
    assert!(!text.contains(['\r', '\x1b', '\u{85}', '\0']), "{text}");
    assert!(
        text.contains("request_id=a\\nb\\r\\x1b[2J\\u{85}\\x00\"\\}"),
        "{text}"
    );
    let json = json_lines(event);
    assert_eq!(json.matches('\n').count(), 1, "{json}");
    let line: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(line["span"]["request_id"], hostile);
    assert_eq!(line["fields"]["value"], hostile);
    assert_eq!(line["fields"]["text"], hostile);
    assert_eq!(line["fields"]["message"], format!("say {hostile}"));
}
