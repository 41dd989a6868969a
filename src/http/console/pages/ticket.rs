//! A ticket's page: its body (Markdown, sanitized: `crate::http::console::markdown`),
//! labels, blockers, comments and history; and the forms that edit it
//! (title, body, labels), move it to another state, comment, block and
//! unblock, each one hosted ticket operation recorded under the viewer.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse as _, Response};
use maud::{PreEscaped, html};
use serde_json::Value;

use super::tickets::{labels, run};
use super::{require, segment};
use crate::http::SharedState;
use crate::http::console::format;
use crate::http::console::markdown;
use crate::http::console::respond::{PageError, PageResult, html_page, redirect, shell};
use crate::http::console::viewer::Sight;
use crate::tickets::{Patch, TicketAnswer, TicketOp};

const PAGE: &str = "ticket";
/// History entries and comments shown.
const HISTORY: i64 = 200;
const COMMENTS: i64 = 200;

/// `GET /console/tickets/{team}/{ticket}`.
pub async fn ticket(
    State(state): State<SharedState>,
    headers: HeaderMap,
    Path((team, id)): Path<(String, String)>,
) -> Response {
    render(&state, &headers, &team, &id)
        .await
        .unwrap_or_else(|refused| refused.into_response())
}

async fn render(state: &SharedState, headers: &HeaderMap, team: &str, id: &str) -> PageResult {
    let (_console, viewer) = super::viewer(state, headers, PAGE)?;
    require(&viewer, Sight::Tickets, PAGE)?;
    let answer = run(
        state,
        &viewer,
        team,
        TicketOp::Get { id: id.to_owned() },
        PAGE,
    )
    .await?;
    let ticket: Value = match answer {
        TicketAnswer::Ticket(Some(json)) => serde_json::from_str(&json).unwrap_or(Value::Null),
        _ => return Err(PageError::not_found(PAGE)),
    };
    let history = state
        .store
        .ticket_history(team, id, 0, HISTORY)
        .await
        .map_err(|e| PageError::store(PAGE, e))?
        .unwrap_or_default();
    let comments = state
        .store
        .comment_page(team, id, COMMENTS)
        .await
        .map_err(|e| PageError::store(PAGE, e))?;
    let text = |name: &str| ticket.get(name).map(format::text).unwrap_or_default();
    let title = text("title");
    let body = text("body");
    let current = text("state");
    let tags: Vec<String> = ticket
        .get("labels")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(format::text)
        .collect();
    let blockers: Vec<String> = ticket
        .get("blockedBy")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(format::text)
        .collect();
    let base = format!("/console/tickets/{}/{}", segment(team), segment(id));
    let board = format!("/console/tickets/{}", segment(team));
    let csrf = html! { input type="hidden" name="csrf" value=(viewer.csrf); };
    let content = html! {
        p { a href=(board) { "← Board of " (team) } }
        h1 data-ticket-title { (title) }
        p.muted { (id) " · " span data-ticket-state { (current) } }
        div { @for label in &tags { span.pill data-label { (label) } } }
        h2 { "Body" }
        div.body data-ticket-body { (PreEscaped(markdown::render(&body))) }
        h2 { "Blockers" }
        @if blockers.is_empty() { p.muted { "None." } }
        ul data-blockers {
            @for blocker in &blockers {
                li {
                    a href={ (board) "/" (segment(blocker)) } { (blocker) }
                    " "
                    form.inline method="post" action={ (base) "/unblock" } data-action="unblock" {
                        (csrf) input type="hidden" name="blocker" value=(blocker);
                        button type="submit" { "Unblock" }
                    }
                }
            }
        }
        form method="post" action={ (base) "/block" } data-action="block" {
            (csrf)
            label for="blocker" { "Blocked by (ticket id)" }
            input type="text" id="blocker" name="blocker" required;
            p { button type="submit" { "Block" } }
        }
        h2 { "Comments" }
        @if comments.is_empty() { p.muted { "No comments." } }
        @for comment in &comments {
            article.card data-comment=(comment.seq) {
                p.muted { "#" (comment.seq) " · " (format::time(comment.created_at)) }
                div.body { (PreEscaped(markdown::render(&comment.body))) }
            }
        }
        form method="post" action={ (base) "/comment" } data-action="comment" {
            (csrf)
            label for="text" { "Comment (Markdown)" }
            textarea id="text" name="text" required {}
            p { button type="submit" { "Comment" } }
        }
        h2 { "Move" }
        form method="post" action={ (base) "/move" } data-action="move" {
            (csrf)
            label for="state" { "State" }
            select id="state" name="state" {
                @for column in state.tickets.lifecycle.states() {
                    option value=(column) selected[column == current] { (column) }
                }
            }
            p { button type="submit" { "Move" } }
        }
        h2 { "Edit" }
        form method="post" action={ (base) "/edit" } data-action="edit" {
            (csrf)
            label for="edit-title" { "Title" }
            input type="text" id="edit-title" name="title" value=(title) required;
            label for="edit-body" { "Body (Markdown)" }
            textarea id="edit-body" name="body" { (body) }
            label for="edit-labels" { "Labels (comma-separated)" }
            input type="text" id="edit-labels" name="labels" value=(tags.join(", "));
            p { button type="submit" { "Save" } }
        }
        h2 { "History" }
        ol data-ticket-history {
            @for entry in &history {
                li data-history=(entry.seq) {
                    span.muted { (format::time(entry.at)) } " "
                    strong data-actor { (entry.actor) } " "
                    (crate::tickets::history::describe_change(&entry.change_json))
                }
            }
        }
    };
    Ok(html_page(
        StatusCode::OK,
        shell(PAGE, &title, Some(&viewer), content),
    ))
}

/// What a ticket form asks for.
#[derive(Clone, Copy, Debug)]
pub enum Action {
    Edit,
    Move,
    Comment,
    Block,
    Unblock,
}

/// `POST /console/tickets/{team}/{ticket}/{action}`.
pub async fn act(
    State(state): State<SharedState>,
    headers: HeaderMap,
    Path((team, id, action)): Path<(String, String, String)>,
    body: Body,
) -> Response {
    let action = match action.as_str() {
        "edit" => Action::Edit,
        "move" => Action::Move,
        "comment" => Action::Comment,
        "block" => Action::Block,
        "unblock" => Action::Unblock,
        _ => return PageError::not_found(PAGE).into_response(),
    };
    perform(&state, &headers, &team, &id, action, body)
        .await
        .unwrap_or_else(|refused| refused.into_response())
}

async fn perform(
    state: &SharedState,
    headers: &HeaderMap,
    team: &str,
    id: &str,
    action: Action,
    body: Body,
) -> PageResult {
    let (_console, viewer, form) =
        super::posted(state, headers, body, Some(Sight::Tickets), PAGE).await?;
    let field = |name: &str| form.get(name).cloned().unwrap_or_default();
    let id = id.to_owned();
    let op = match action {
        Action::Edit => TicketOp::Update {
            id,
            patch: Patch {
                title: Some(field("title")),
                body: Some(field("body")),
                labels: Some(labels(&form)),
            },
        },
        Action::Move => TicketOp::Transition {
            id,
            state: field("state"),
        },
        Action::Comment => TicketOp::Comment {
            id,
            body: field("text"),
        },
        Action::Block => TicketOp::AddBlocker {
            id,
            blocker_id: field("blocker").trim().to_owned(),
        },
        Action::Unblock => TicketOp::RemoveBlocker {
            id,
            blocker_id: field("blocker").trim().to_owned(),
        },
    };
    let ticket_id = match &op {
        TicketOp::Update { id, .. }
        | TicketOp::Transition { id, .. }
        | TicketOp::Comment { id, .. }
        | TicketOp::AddBlocker { id, .. }
        | TicketOp::RemoveBlocker { id, .. } => id.clone(),
        _ => String::new(),
    };
    run(state, &viewer, team, op, PAGE).await?;
    Ok(redirect(
        &format!("/console/tickets/{}/{}", segment(team), segment(&ticket_id)),
        None,
    ))
}
