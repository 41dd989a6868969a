//! The overview: the repositories (a page at a time, by name) with their
//! build counts and last activity, the store's health, its version and the
//! client identities it accepts, and the way to a team's ticket board. A
//! token scoped to one resource sees a link to that resource instead.

use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse as _, Response};
use maud::html;
use serde::Deserialize;

use super::{PAGE as ROWS, segment};
use crate::auth::ScopeKind;
use crate::http::SharedState;
use crate::http::console::format;
use crate::http::console::respond::{PageResult, html_page, redirect, shell};
use crate::http::console::viewer::Sight;

const PAGE: &str = "overview";
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Deserialize)]
pub struct Paging {
    /// The last repository of the previous page.
    after: Option<String>,
}

/// `GET /console` → `/console/`.
pub async fn slash() -> Response {
    redirect("/console/", None)
}

/// `GET /console/`.
pub async fn overview(
    State(state): State<SharedState>,
    headers: HeaderMap,
    Query(paging): Query<Paging>,
) -> Response {
    render(&state, &headers, paging)
        .await
        .unwrap_or_else(|refused| refused.into_response())
}

async fn render(state: &SharedState, headers: &HeaderMap, paging: Paging) -> PageResult {
    let (_console, viewer) = super::viewer(state, headers, PAGE)?;
    let after = paging.after.unwrap_or_default();
    let repos = if viewer.may(Sight::AllRepos) {
        Some(
            state
                .store
                .repo_page(&after, ROWS)
                .await
                .map_err(|e| crate::http::console::respond::PageError::store(PAGE, e))?,
        )
    } else {
        None
    };
    let database = check(state.store.ping()).await;
    let blobs = check(state.blobs.check()).await;
    let ready = database == "ok" && blobs == "ok" && !state.shutdown.is_cancelled();
    let pool = state.store.pool_stats();
    let content = html! {
        h1 { "Overview" }
        @if let Some(repos) = &repos {
            h2 { "Repositories" }
            @if repos.is_empty() {
                p.muted { "No repositories" @if !after.is_empty() { " after this one" } "." }
            } @else {
                div.scroll { table data-repos {
                    thead { tr { th { "Repository" } th { "Builds" } th { "Last activity" } th.hide-narrow { "Created" } } }
                    tbody {
                        @for repo in repos {
                            tr data-repo=(repo.id) {
                                td { a href={ "/console/repos/" (segment(&repo.id)) } { (repo.id) } }
                                td { (repo.children) }
                                td { (format::time(repo.updated_at)) }
                                td.hide-narrow { (format::time(repo.created_at)) }
                            }
                        }
                    }
                } }
                @if repos.len() as i64 == ROWS {
                    @if let Some(last) = repos.last() {
                        p { a rel="next" href={ "/console/?after=" (segment(&last.id)) } { "Next repositories →" } }
                    }
                }
            }
        } @else if let Some((kind, id)) = viewer.own_resource() {
            h2 { "Your token's resource" }
            @let href = match kind {
                ScopeKind::Build => format!("/console/builds/{}", segment(id)),
                ScopeKind::Repo => format!("/console/repos/{}", segment(id)),
                ScopeKind::Session => format!("/console/sessions/{}", segment(id)),
            };
            p { (kind.as_str()) " " a href=(href) data-own { (id) } }
        }
        @if viewer.may(Sight::Tickets) {
            h2 { "Tickets" }
            form method="get" action="/console/tickets" data-action="open-board" {
                label for="team" { "Team key" }
                input type="text" id="team" name="team" required;
                p { button type="submit" { "Open the board" } }
            }
        }
        h2 { "Health" }
        dl.grid data-health {
            div.card { dt { "Ready" } dd data-ready=(ready) { @if ready { "yes" } @else { "no" } } }
            div.card { dt { "Database" } dd { (database) " · pool " (pool.size) "/" (pool.max) " (" (pool.idle) " idle)" } }
            div.card { dt { "Blob store" } dd { (blobs) } }
            div.card { dt { "Held reads" } dd { (state.held.in_flight()) } }
            div.card { dt { "Version" } dd data-version { "abstore " (env!("CARGO_PKG_VERSION")) } }
            div.card { dt { "Accepted clients" } dd data-clients { (state.access.clients.describe()) } }
        }
    };
    Ok(html_page(
        StatusCode::OK,
        shell(PAGE, "Overview", Some(&viewer), content),
    ))
}

/// A readiness check's word, as `/readyz` gives it.
async fn check<E: std::fmt::Display>(
    probe: impl std::future::Future<Output = Result<(), E>>,
) -> &'static str {
    match tokio::time::timeout(CHECK_TIMEOUT, probe).await {
        Ok(Ok(())) => "ok",
        Ok(Err(err)) => {
            tracing::warn!(error = %err, "console: health check failed");
            "failed"
        }
        Err(_) => "timed out",
    }
}

#[derive(Deserialize)]
pub struct TeamQuery {
    team: Option<String>,
}

/// `GET /console/tickets?team=KEY` → the team's board (the overview's form,
/// which works without script).
pub async fn team_board(Query(query): Query<TeamQuery>) -> Response {
    match query.team.as_deref().map(str::trim) {
        Some(team) if !team.is_empty() => {
            redirect(&format!("/console/tickets/{}", segment(team)), None)
        }
        _ => redirect("/console/", None),
    }
}
