//! A team's ticket board: one column per configured lifecycle state
//! (`--ticket-*-state`), each ticket a card with its labels and blockers;
//! and the form that files a new ticket. Every read and write goes through
//! the hosted ticket operations (`crate::tickets`, the store's `tickets`),
//! exactly as `POST /tickets/{operation}` runs them, recorded in the
//! ticket's history under the signed-in person.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse as _, Response};
use maud::{Markup, html};
use serde_json::Value;

use super::{require, segment};
use crate::http::SharedState;
use crate::http::console::format;
use crate::http::console::guard::Form;
use crate::http::console::respond::{PageError, PageResult, html_page, redirect, shell};
use crate::http::console::viewer::{Sight, Viewer};
use crate::tickets::{Context, Draft, Refusal, TicketAnswer, TicketCall, TicketOp};

const PAGE: &str = "board";
/// Cards drawn per column at most; a column holding more says how many.
const CARDS: usize = 200;
/// Bytes of cards a board draws at most, shared by its columns, so that a
/// page stays under 100 KB whatever the titles and labels hold.
const CARD_BYTES: usize = 64 * 1024;
const TITLE_CHARS: usize = 200;

/// Run one ticket operation as the viewer.
pub(super) async fn run(
    state: &SharedState,
    viewer: &Viewer,
    team: &str,
    op: TicketOp,
    page: &'static str,
) -> Result<TicketAnswer, PageError> {
    let call = TicketCall {
        settings: state.tickets.clone(),
        context: Context {
            team_key: team.to_owned(),
            claimed_state: None,
            create_state: None,
        },
        op,
        actor: viewer.actor(),
    };
    match state.store.tickets(call).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(refusal)) => Err(refused(page, refusal)),
        Err(err) => Err(PageError::store(page, err)),
    }
}

fn refused(page: &'static str, refusal: Refusal) -> PageError {
    let status = match refusal {
        Refusal::Invalid(_) => StatusCode::BAD_REQUEST,
        Refusal::Unknown(_) => StatusCode::NOT_FOUND,
        Refusal::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
    };
    PageError::new(page, status, refusal.message())
}

/// The tickets of a `list-ready` answer.
pub(super) fn listed(answer: TicketAnswer) -> Vec<Value> {
    match answer {
        TicketAnswer::Listing(json) => serde_json::from_str::<Value>(&json)
            .ok()
            .and_then(|mut v| v.get_mut("tickets").map(Value::take))
            .and_then(|v| match v {
                Value::Array(tickets) => Some(tickets),
                _ => None,
            })
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// Labels from a form field: comma-separated, blanks dropped.
pub(super) fn labels(form: &Form) -> Vec<String> {
    form.get("labels")
        .map(|text| {
            text.split(',')
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// `GET /console/tickets/{team}`.
pub async fn board(
    State(state): State<SharedState>,
    headers: HeaderMap,
    Path(team): Path<String>,
) -> Response {
    render(&state, &headers, &team)
        .await
        .unwrap_or_else(|refused| refused.into_response())
}

async fn render(state: &SharedState, headers: &HeaderMap, team: &str) -> PageResult {
    let (_console, viewer) = super::viewer(state, headers, PAGE)?;
    require(&viewer, Sight::Tickets, PAGE)?;
    let mut columns = Vec::new();
    for column in state.tickets.lifecycle.states() {
        let op = TicketOp::ListReady {
            labels: Vec::new(),
            state: Some(column.to_owned()),
        };
        columns.push((column, listed(run(state, &viewer, team, op, PAGE).await?)));
    }
    let base = format!("/console/tickets/{}", segment(team));
    // Cards are drawn until the columns' share of the page's byte budget
    // is spent: whatever the tickets say, a board stays a page.
    let budget = CARD_BYTES / columns.len().max(1);
    let drawn: Vec<(&str, usize, Vec<Markup>)> = columns
        .iter()
        .map(|(column, tickets)| {
            let mut spent = 0;
            let cards = tickets
                .iter()
                .take(CARDS)
                .map(|ticket| card(&base, ticket))
                .take_while(|card| {
                    spent += card.0.len();
                    spent <= budget
                })
                .collect();
            (*column, tickets.len(), cards)
        })
        .collect();
    let content = html! {
        h1 { "Tickets of " (team) }
        p { a href={ (base) "/new" } data-new-ticket { "New ticket" } }
        div.board {
            @for (column, total, cards) in &drawn {
                section.column data-state=(column) {
                    h2 { (column) " " span.muted { "(" (total) ")" } }
                    @for card in cards { (card) }
                    @if *total > cards.len() { p.muted { (total - cards.len()) " more not shown" } }
                }
            }
        }
    };
    Ok(html_page(
        StatusCode::OK,
        shell(PAGE, team, Some(&viewer), content),
    ))
}

/// `GET /console/tickets/{team}/new`: the form that files a ticket.
pub async fn new_form(
    State(state): State<SharedState>,
    headers: HeaderMap,
    Path(team): Path<String>,
) -> Response {
    let page = || -> PageResult {
        let (_console, viewer) = super::viewer(&state, &headers, PAGE)?;
        require(&viewer, Sight::Tickets, PAGE)?;
        let content = html! {
            h1 { "New ticket in " (team) }
            form method="post" action={ "/console/tickets/" (segment(&team)) } data-action="create" {
                input type="hidden" name="csrf" value=(viewer.csrf);
                label for="title" { "Title" }
                input type="text" id="title" name="title" required;
                label for="body" { "Body (Markdown)" }
                textarea id="body" name="body" {}
                label for="labels" { "Labels (comma-separated)" }
                input type="text" id="labels" name="labels";
                p { button type="submit" { "Create" } }
            }
        };
        Ok(html_page(
            StatusCode::OK,
            shell(PAGE, "New ticket", Some(&viewer), content),
        ))
    };
    page().unwrap_or_else(|refused| refused.into_response())
}

/// `POST /console/tickets/{team}`: create, then show the ticket.
pub async fn create(
    State(state): State<SharedState>,
    headers: HeaderMap,
    Path(team): Path<String>,
    body: Body,
) -> Response {
    let outcome = async {
        let (_console, viewer, form) =
            super::posted(&state, &headers, body, Some(Sight::Tickets), PAGE).await?;
        let draft = Draft {
            title: form.get("title").cloned().unwrap_or_default(),
            body: form.get("body").cloned().unwrap_or_default(),
            labels: labels(&form),
            blocked_by: Vec::new(),
        };
        let op = TicketOp::Create {
            draft,
            state: None,
            idempotency_key: None,
        };
        let answer = run(&state, &viewer, &team, op, PAGE).await?;
        let id = match answer {
            TicketAnswer::Created(json) => serde_json::from_str::<Value>(&json)
                .ok()
                .and_then(|v| v.get("ref")?.get("id").map(format::text)),
            _ => None,
        }
        .ok_or_else(|| {
            PageError::new(
                PAGE,
                StatusCode::INTERNAL_SERVER_ERROR,
                "The ticket has no id.",
            )
        })?;
        Ok::<_, PageError>(redirect(
            &format!("/console/tickets/{}/{}", segment(&team), segment(&id)),
            None,
        ))
    };
    outcome
        .await
        .unwrap_or_else(|refused| refused.into_response())
}

/// One ticket's card on the board.
fn card(base: &str, ticket: &Value) -> Markup {
    let id = ticket
        .get("ref")
        .and_then(|r| r.get("id"))
        .map(format::text)
        .unwrap_or_default();
    let title = ticket.get("title").map(format::text).unwrap_or_default();
    html! {
        article.card data-ticket=(id) {
            a href={ (base) "/" (segment(&id)) } { (format::clipped(&title, TITLE_CHARS)) }
            div {
                @for label in ticket.get("labels").and_then(Value::as_array).into_iter().flatten().take(20) {
                    span.pill data-label { (format::clipped(&format::text(label), 60)) }
                }
            }
            @if let Some(blockers) = ticket.get("blockedBy").and_then(Value::as_array) {
                p.muted data-blockers { "blocked by " (blockers.len()) }
            }
        }
    }
}
