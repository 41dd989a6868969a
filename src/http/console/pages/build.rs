//! A build: its event timeline a page at a time by seq (payloads
//! pretty-printed, clipped, folded when long), growing live on its last
//! page (`crate::http::console::live`); its artifacts with their downloads; its
//! streams with their UI-message transcript as text; its lease. The
//! timeline is read a page at a time (`events_page`): no page ever holds a
//! whole history.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse as _, Response};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::Value;

use super::{PAGE as ROWS, require, segment};
use crate::http::SharedState;
use crate::http::console::format;
use crate::http::console::respond::{PageError, PageResult, html_page, shell};
use crate::http::console::viewer::Sight;
use crate::protocol::{ResourceKind, ResourceRef};
use crate::store::StreamRecord;

const PAGE: &str = "build";

/// A payload longer than this is folded under its first line.
const FOLD_CHARS: usize = 400;
/// A payload is shown at most this long (a page stays ≤ 100 KB).
const PAYLOAD_CHARS: usize = 1500;
/// Streams listed, and transcripts shown, per page.
const STREAMS: i64 = 20;
const TRANSCRIPTS: usize = 5;
/// A transcript is assembled from at most this many chunks and shown at
/// most this long.
const TRANSCRIPT_CHUNKS: i64 = 200;
const TRANSCRIPT_CHARS: usize = 6000;
/// Artifact revisions listed.
const ARTIFACTS: i64 = 100;

#[derive(Deserialize, Default)]
pub struct EventsQuery {
    /// The timeline page starts after this seq.
    after: Option<String>,
}

impl EventsQuery {
    pub fn after(&self) -> i64 {
        self.after
            .as_deref()
            .and_then(|a| a.parse().ok())
            .unwrap_or(0i64)
            .max(0)
    }
}

/// One event as a timeline shows it.
pub struct ShownEvent {
    pub seq: i64,
    pub ts: String,
    pub actor: String,
    pub kind: String,
    pub payload: Value,
}

/// The envelopes of a page, as shown (an envelope that does not parse is
/// shown as its clipped text).
pub fn parse_events(envelopes: &[String]) -> Vec<ShownEvent> {
    envelopes
        .iter()
        .map(|text| match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(mut envelope)) => ShownEvent {
                seq: envelope.get("seq").and_then(Value::as_i64).unwrap_or(0),
                ts: envelope.get("ts").map(format::text).unwrap_or_default(),
                actor: envelope.get("actor").map(actor).unwrap_or_default(),
                kind: envelope.get("type").map(format::text).unwrap_or_default(),
                payload: envelope.remove("payload").unwrap_or(Value::Null),
            },
            _ => ShownEvent {
                seq: 0,
                ts: String::new(),
                actor: String::new(),
                kind: String::new(),
                payload: Value::String(format::clipped(text, PAYLOAD_CHARS)),
            },
        })
        .collect()
}

/// An actor as `kind:id` (and `via …`), or its JSON when it is another shape.
fn actor(value: &Value) -> String {
    let kind = value.get("kind").and_then(Value::as_str);
    // Who acted, by the member each actor kind names itself with: a
    // human's `user`, an agent's `role`, others' `id` or `name`.
    let who = ["user", "role", "id", "name"]
        .iter()
        .find_map(|member| value.get(*member).and_then(Value::as_str));
    match (kind, who) {
        (Some(kind), Some(who)) => {
            let via = value
                .get("via")
                .map(|v| format!(" via {v}"))
                .unwrap_or_default();
            format!("{kind}:{who}{via}")
        }
        (Some(kind), None) => kind.to_owned(),
        _ => format::text(value),
    }
}

/// The rows of a timeline, as the page and its live updates draw them.
pub fn rows(events: &[ShownEvent]) -> Markup {
    html! {
        @for event in events {
            tr data-seq=(event.seq) {
                td { (event.seq) }
                td.hide-narrow { (event.ts) }
                td { (event.actor) }
                td { (event.kind) }
                td { (payload(&event.payload)) }
            }
        }
    }
}

fn payload(value: &Value) -> Markup {
    let text = format::payload(value, PAYLOAD_CHARS);
    if text.len() <= FOLD_CHARS && text.lines().count() <= 8 {
        return html! { pre { (text) } };
    }
    let first = text.lines().next().unwrap_or_default();
    html! {
        details {
            summary { (format::clipped(first, 80)) " … (" (text.lines().count()) " lines)" }
            pre { (text) }
        }
    }
}

/// A timeline table; `live` is the URL of its held read when it is the
/// log's last page.
pub fn event_rows(events: &[ShownEvent], after: i64, live: Option<&str>) -> Markup {
    html! {
        div.scroll {
            table data-events data-after=(after) data-live=[live] {
                thead { tr { th { "Seq" } th.hide-narrow { "Time" } th { "Actor" } th { "Type" } th { "Payload" } } }
                tbody { (rows(events)) }
            }
        }
        @if live.is_some() { p.live data-live-status { "Reload to see new events (the page updates itself with script on)." } }
        @if events.is_empty() && live.is_none() { p.muted { "No events." } }
    }
}

/// `GET /console/builds/{id}`.
pub async fn build(
    State(state): State<SharedState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(query): Query<EventsQuery>,
) -> Response {
    render(
        &state,
        &headers,
        ResourceRef::new(ResourceKind::Build, &id),
        query.after(),
    )
    .await
    .unwrap_or_else(|refused| refused.into_response())
}

/// A build's or a session's page (`page` says which: the two differ only in
/// a build's lease and repository).
pub async fn render(
    state: &SharedState,
    headers: &HeaderMap,
    resource: ResourceRef,
    after: i64,
) -> PageResult {
    let is_build = resource.kind == ResourceKind::Build;
    let page = if is_build { PAGE } else { "session" };
    let (_console, viewer) = super::viewer(state, headers, page)?;
    let sight = if is_build {
        Sight::Build(&resource.id)
    } else {
        Sight::Session(&resource.id)
    };
    require(&viewer, sight, page)?;
    let store = &state.store;
    let failed = |e| PageError::store(page, e);
    let record = store
        .get_record(&resource)
        .await
        .map_err(failed)?
        .ok_or_else(|| PageError::not_found(page))?;
    let envelopes = store
        .events_page(&resource, after, ROWS)
        .await
        .map_err(failed)?;
    let events = parse_events(&envelopes);
    let artifacts = store
        .artifact_page(&resource, ARTIFACTS)
        .await
        .map_err(failed)?;
    let streams = store
        .stream_page(&resource, STREAMS)
        .await
        .map_err(failed)?;
    let mut transcripts = Vec::new();
    for stream in streams.iter().take(TRANSCRIPTS) {
        transcripts.push(transcript(state, stream).await);
    }
    let family = if is_build { "builds" } else { "sessions" };
    let base = format!("/console/{family}/{}", segment(&resource.id));
    let live = format!("/console/live/{family}/{}", segment(&resource.id));
    let last_page = (events.len() as i64) < ROWS;
    let repo = record.attrs.get("repo").and_then(Value::as_str);
    let noun = if is_build { "Build" } else { "Session" };
    let content = html! {
        h1 { (noun) " " (resource.id) }
        dl.grid {
            @if let Some(repo) = repo {
                div.card { dt { "Repository" } dd {
                    @if viewer.may(Sight::Repo(repo)) { a href={ "/console/repos/" (segment(repo)) } { (repo) } } @else { (repo) }
                } }
            }
            @for (key, value) in record.attrs.iter().filter(|(k, _)| k.as_str() != "repo") {
                div.card { dt { (key) } dd { (format::clipped(&format::text(value), 300)) } }
            }
            div.card { dt { "Created" } dd { (format::time(record.created_at)) } }
            div.card { dt { "Updated" } dd { (format::time(record.updated_at)) } }
            @if is_build {
                div.card data-lease { dt { "Lease" } dd {
                    @if let Some(lease) = &record.lease {
                        (lease.holder) br; span.muted { "until " (format::time(lease.expires_at)) }
                        @if let Some(at) = record.heartbeat_at { br; span.muted { "heartbeat " (format::time(at)) } }
                    } @else { "none" }
                } }
            }
        }
        h2 { "Events" }
        @if after > 0 {
            p { a href=(base) { "← First events" } }
        }
        (event_rows(&events, after, last_page.then_some(live.as_str())))
        @if !last_page {
            @if let Some(last) = events.last() {
                p { a rel="next" href={ (base) "?after=" (last.seq) } { "Later events →" } }
            }
        }
        h2 { "Artifacts" }
        @if artifacts.is_empty() { p.muted { "No artifacts." } } @else {
            div.scroll { table data-artifacts {
                thead { tr { th { "Kind" } th { "Revision" } th { "Size" } th.hide-narrow { "Created" } th { "" } } }
                tbody { @for artifact in &artifacts {
                    tr data-artifact=(artifact.kind) {
                        td { (artifact.kind) } td { (artifact.revision) } td { (format::size(artifact.size)) }
                        td.hide-narrow { (format::time(artifact.created_at)) }
                        td { a download href={ (base) "/artifacts/" (segment(&artifact.kind)) "/" (artifact.revision) } { "Download" } }
                    }
                } }
            } }
        }
        h2 { "Streams" }
        @if streams.is_empty() { p.muted { "No streams." } }
        @for (at, stream) in streams.iter().enumerate() {
            section.card data-stream=(stream.id) {
                strong { (stream.label) } " " span.muted { (stream.id) }
                p.muted {
                    @if stream.closed { "closed" @if let Some(o) = &stream.outcome { " (" (o) ")" } } @else { "open" }
                    " · " (stream.last_seq) " chunks · created " (format::time(stream.created_at))
                }
                @if let Some(text) = transcripts.get(at) {
                    details { summary { "Transcript" } pre data-transcript { (text) } }
                }
            }
        }
    };
    Ok(html_page(
        StatusCode::OK,
        shell(page, &resource.id, Some(&viewer), content),
    ))
}

/// A stream's UI-message transcript as text: assembled from its first
/// chunks (kept while it is open, and for its scope's latest closed
/// stream), clipped.
async fn transcript(state: &SharedState, stream: &StreamRecord) -> String {
    let chunks = match state
        .store
        .chunks_page(&stream.id, 0, Some(TRANSCRIPT_CHUNKS))
        .await
    {
        Ok((_, chunks)) => chunks,
        Err(err) => return format!("(could not read the stream: {err})"),
    };
    if chunks.is_empty() {
        return if stream.closed {
            "(its chunks were pruned; download its artifact for the document)".to_owned()
        } else {
            "(no chunks yet)".to_owned()
        };
    }
    let mut assembling = crate::streams::assemble::Assembling::default();
    for chunk in &chunks {
        if let Ok(Value::Object(mut chunk)) = serde_json::from_str::<Value>(chunk)
            && let Some(Value::Array(parts)) = chunk.remove("parts")
        {
            for part in &parts {
                assembling.push(part);
            }
        }
    }
    let messages = assembling.finish().messages;
    let mut out = String::new();
    for message in messages.as_array().into_iter().flatten() {
        let role = message.get("role").map(format::text).unwrap_or_default();
        out.push_str(&format!("── {role}\n"));
        for part in message
            .get("parts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let kind = part.get("type").map(format::text).unwrap_or_default();
            match part.get("text").and_then(Value::as_str) {
                Some(text) if kind == "text" => out.push_str(text),
                Some(text) => out.push_str(&format!("[{kind}] {text}")),
                None => {
                    let mut shown = part.clone();
                    if let Some(object) = shown.as_object_mut() {
                        object.remove("type");
                    }
                    out.push_str(&format!(
                        "[{kind}] {}",
                        format::clipped(&shown.to_string(), 400)
                    ));
                }
            }
            out.push('\n');
        }
        if out.len() > TRANSCRIPT_CHARS {
            break;
        }
    }
    format::clipped(&out, TRANSCRIPT_CHARS)
}

/// `GET /console/builds/{id}/artifacts/{kind}/{revision}` (and a session's):
/// the revision's bytes as a download, never rendered inline.
pub async fn download(
    State(state): State<SharedState>,
    headers: HeaderMap,
    uri: axum::http::Uri,
    Path((id, kind, revision)): Path<(String, String, String)>,
) -> Response {
    let family = if uri.path().starts_with("/console/sessions/") {
        ResourceKind::Session
    } else {
        ResourceKind::Build
    };
    send(
        &state,
        &headers,
        ResourceRef::new(family, &id),
        &kind,
        &revision,
    )
    .await
    .unwrap_or_else(|refused| refused.into_response())
}

async fn send(
    state: &SharedState,
    headers: &HeaderMap,
    resource: ResourceRef,
    kind: &str,
    revision: &str,
) -> PageResult {
    let page = if resource.kind == ResourceKind::Build {
        PAGE
    } else {
        "session"
    };
    let (_console, viewer) = super::viewer(state, headers, page)?;
    let sight = match resource.kind {
        ResourceKind::Session => Sight::Session(&resource.id),
        _ => Sight::Build(&resource.id),
    };
    require(&viewer, sight, page)?;
    let revision: i64 = revision.parse().map_err(|_| PageError::not_found(page))?;
    let meta = state
        .store
        .get_artifact(&resource, kind, Some(revision))
        .await
        .map_err(|e| PageError::store(page, e))?
        .ok_or_else(|| PageError::not_found(page))?;
    let bytes = state.blobs.get(&meta.blob_ref).await.map_err(|err| {
        tracing::warn!(error = %err, "console: artifact blob unreadable");
        PageError::new(
            page,
            StatusCode::INTERNAL_SERVER_ERROR,
            "The artifact's blob could not be read.",
        )
    })?;
    let name = download_name(&resource.id, kind, revision);
    let response = (
        [
            (
                axum::http::header::CONTENT_TYPE,
                "application/octet-stream".to_owned(),
            ),
            (
                axum::http::header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        bytes,
    )
        .into_response();
    Ok(crate::http::console::headers::secured(response))
}

/// A download's file name: only characters safe in a header and a file
/// system (`build-kind-3.bin`).
fn download_name(id: &str, kind: &str, revision: i64) -> String {
    let safe = |text: &str| -> String {
        text.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .take(80)
            .collect()
    };
    format!("{}-{}-{revision}.bin", safe(id), safe(kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actors_are_named_by_the_member_their_kind_uses() {
        use serde_json::json;
        assert_eq!(actor(&json!({"kind": "human", "user": "ada"})), "human:ada");
        assert_eq!(
            actor(&json!({"kind": "agent", "role": "implement", "session": "s"})),
            "agent:implement"
        );
        assert_eq!(actor(&json!({"kind": "kernel"})), "kernel");
        assert_eq!(actor(&json!({"kind": "human"})), "human");
    }

    #[test]
    fn download_names_carry_nothing_a_header_could_misread() {
        assert_eq!(download_name("b1", "log", 3), "b1-log-3.bin");
        assert_eq!(download_name("b\"1", "a/b\r\n", 1), "b_1-a_b__-1.bin");
    }

    #[test]
    fn long_payloads_fold_and_hostile_text_is_escaped() {
        let events = parse_events(&[
            r#"{"build":"b","seq":1,"ts":"t","actor":{"kind":"agent","id":"<img src=x>"},"type":"x","payload":{"a":"<script>"}}"#.to_owned(),
        ]);
        let html = rows(&events).into_string();
        assert!(html.contains("data-seq=\"1\""));
        assert!(
            !html.contains("<script>") && !html.contains("<img"),
            "{html}"
        );
        let long = serde_json::json!({"text": "x".repeat(2000)});
        assert!(payload(&long).into_string().contains("<details>"));
    }
}
