//! A repository: its builds newest first (slug, created, last event type
//! and time, event count, lease holder and expiry), a page at a time and
//! filtered by slug; its journal (the repository's own event log) as a
//! timeline; its sessions.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse as _, Response};
use maud::{Markup, html};
use serde::Deserialize;

use super::build::{event_rows, parse_events};
use super::{PAGE as ROWS, require, segment};
use crate::http::SharedState;
use crate::http::console::format;
use crate::http::console::respond::{PageError, PageResult, html_page, shell};
use crate::http::console::viewer::{Sight, Viewer};
use crate::protocol::{ResourceKind, ResourceRef};
use crate::store::ResourceSummary;

const PAGE: &str = "repo";

#[derive(Deserialize, Default)]
pub struct RepoQuery {
    /// Only builds whose slug contains this.
    slug: Option<String>,
    /// The builds page's cursor: `<created ms>.<slug>` of the last row shown.
    before: Option<String>,
    /// The journal page's cursor: the last seq shown.
    after: Option<String>,
}

/// `GET /console/repos/{repo}`.
pub async fn repo(
    State(state): State<SharedState>,
    headers: HeaderMap,
    Path(repo): Path<String>,
    Query(query): Query<RepoQuery>,
) -> Response {
    render(&state, &headers, &repo, query)
        .await
        .unwrap_or_else(|refused| refused.into_response())
}

/// A listing cursor `<created ms>.<id>`.
pub(super) fn cursor(text: Option<&str>) -> Option<(i64, String)> {
    let (at, id) = text?.split_once('.')?;
    Some((at.parse().ok()?, id.to_owned()))
}

async fn render(
    state: &SharedState,
    headers: &HeaderMap,
    repo: &str,
    query: RepoQuery,
) -> PageResult {
    let (_console, viewer) = super::viewer(state, headers, PAGE)?;
    require(&viewer, Sight::Repo(repo), PAGE)?;
    let store = &state.store;
    let resource = ResourceRef::new(ResourceKind::Repo, repo);
    let record = store
        .get_record(&resource)
        .await
        .map_err(|e| PageError::store(PAGE, e))?
        .ok_or_else(|| PageError::not_found(PAGE))?;
    let slug = query.slug.unwrap_or_default();
    let before = cursor(query.before.as_deref());
    let builds = store
        .child_page(ResourceKind::Build, repo, before, &slug, ROWS)
        .await
        .map_err(|e| PageError::store(PAGE, e))?;
    let sessions = store
        .child_page(ResourceKind::Session, repo, None, "", ROWS)
        .await
        .map_err(|e| PageError::store(PAGE, e))?;
    let after = query
        .after
        .and_then(|a| a.parse().ok())
        .unwrap_or(0i64)
        .max(0);
    let journal = store
        .events_page(&resource, after, ROWS)
        .await
        .map_err(|e| PageError::store(PAGE, e))?;
    let journal = parse_events(&journal);
    let base = format!("/console/repos/{}", segment(repo));
    let content = html! {
        h1 { "Repository " (repo) }
        p.muted { "Created " (format::time(record.created_at)) " · updated " (format::time(record.updated_at)) }
        h2 { "Builds" }
        form method="get" action=(base) data-action="filter" {
            label for="slug" { "Slug contains" }
            input type="text" id="slug" name="slug" value=(slug);
            p { button type="submit" { "Filter" } }
        }
        (children(&viewer, &builds, ResourceKind::Build))
        @if builds.len() as i64 == ROWS {
            @if let Some(last) = builds.last() {
                p { a rel="next" href={ (base) "?slug=" (segment(&slug)) "&before=" (last.created_at) "." (segment(&last.id)) } { "Older builds →" } }
            }
        }
        h2 { "Journal" }
        (event_rows(&journal, after, None))
        @if journal.len() as i64 == ROWS {
            @if let Some(last) = journal.last() {
                p { a rel="next" href={ (base) "?after=" (last.seq) } { "Later journal events →" } }
            }
        }
        h2 { "Sessions" }
        (children(&viewer, &sessions, ResourceKind::Session))
    };
    Ok(html_page(
        StatusCode::OK,
        shell(PAGE, repo, Some(&viewer), content),
    ))
}

/// A table of builds or sessions; each links to its page when the viewer
/// may open it (a repository token may not open its builds, as on the
/// protocol routes).
fn children(viewer: &Viewer, rows: &[ResourceSummary], kind: ResourceKind) -> Markup {
    let sessions = kind == ResourceKind::Session;
    if rows.is_empty() {
        return html! { p.muted { "No " @if sessions { "sessions" } @else { "builds" } "." } };
    }
    html! {
        div.scroll { table {
            thead { tr {
                th { @if sessions { "Session" } @else { "Slug" } }
                th.hide-narrow { "Created" } th { "Last event" } th { "Events" }
                @if !sessions { th.hide-narrow { "Lease" } }
            } }
            tbody {
                @for row in rows {
                    @if sessions {
                        tr data-session=(row.id) { (cells(viewer, row, kind)) }
                    } @else {
                        tr data-build=(row.id) { (cells(viewer, row, kind)) }
                    }
                }
            }
        } }
    }
}

fn cells(viewer: &Viewer, row: &ResourceSummary, kind: ResourceKind) -> Markup {
    let (sight, base) = match kind {
        ResourceKind::Session => (Sight::Session(&row.id), "/console/sessions/"),
        _ => (Sight::Build(&row.id), "/console/builds/"),
    };
    html! {
        td {
            @if viewer.may(sight) {
                a href={ (base) (segment(&row.id)) } { (row.id) }
            } @else { (row.id) }
        }
        td.hide-narrow { (format::time(row.created_at)) }
        td { (row.last_type.as_deref().unwrap_or("—")) br; span.muted { (row.last_ts.as_deref().unwrap_or("")) } }
        td { (row.last_seq) }
        @if kind != ResourceKind::Session {
            td.hide-narrow {
                @if let (Some(holder), Some(until)) = (&row.lease_holder, row.lease_expires_at) {
                    (holder) br; span.muted { "until " (format::time(until)) }
                } @else { "—" }
            }
        }
    }
}
