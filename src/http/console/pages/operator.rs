//! The operator's page (admin or deployment tokens, and open mode): the
//! revoked tokens, with a form that revokes one more by its digest (in
//! force on this server at once, on every other within its revocation
//! refresh); a summary of the metrics (requests, errors, held reads,
//! caches, auth refusals); the retention and collection settings in force.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse as _, Response};
use maud::html;

use super::require;
use crate::http::SharedState;
use crate::http::console::format;
use crate::http::console::respond::{PageError, PageResult, html_page, redirect, shell};
use crate::http::console::viewer::Sight;
use crate::store::Revocation;

const PAGE: &str = "operator";
/// Revocations listed.
const REVOCATIONS: usize = 500;

/// The metrics the summary adds up, each with what it is called there.
const SUMMED: [(&str, &str); 11] = [
    ("abstore_http_requests_total", "Requests answered"),
    ("abstore_held_reads_in_flight", "Held reads waiting"),
    ("abstore_connections_open", "Connections open"),
    ("abstore_auth_failures_total", "Token refusals"),
    ("abstore_history_cache_bytes", "History cache bytes"),
    (
        "abstore_state_events_cache_bytes",
        "State-events cache bytes",
    ),
    (
        "abstore_build_digests_cache_bytes",
        "Build-digests cache bytes",
    ),
    (
        "abstore_build_records_cache_bytes",
        "Build-records cache bytes",
    ),
    ("abstore_short_log_cache_bytes", "Short-log cache bytes"),
    ("abstore_storage_full_total", "Storage-full refusals"),
    ("abstore_revoked_tokens", "Revoked tokens"),
];

/// `(label, total)` of each `SUMMED` metric in Prometheus text, and the
/// requests answered `5xx`.
pub fn summary(text: &str) -> (Vec<(&'static str, f64)>, f64) {
    let mut totals = vec![0f64; SUMMED.len()];
    let mut errors = 0f64;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let name = series.split('{').next().unwrap_or(series);
        if let Some(at) = SUMMED.iter().position(|(metric, _)| *metric == name) {
            totals[at] += value;
        }
        if name == "abstore_http_requests_total" && series.contains("status=\"5") {
            errors += value;
        }
    }
    let labelled = SUMMED
        .iter()
        .zip(totals)
        .map(|((_, label), total)| (*label, total))
        .collect();
    (labelled, errors)
}

/// `GET /console/operator`.
pub async fn operator(State(state): State<SharedState>, headers: HeaderMap) -> Response {
    render(&state, &headers)
        .await
        .unwrap_or_else(|refused| refused.into_response())
}

async fn render(state: &SharedState, headers: &HeaderMap) -> PageResult {
    let (console, viewer) = super::viewer(state, headers, PAGE)?;
    require(&viewer, Sight::Operator, PAGE)?;
    let revocations = state
        .store
        .revocations()
        .await
        .map_err(|e| PageError::store(PAGE, e))?;
    let metrics = crate::metrics::rendered().map(|text| summary(&text));
    let content = html! {
        h1 { "Operator" }
        h2 { "Revoked tokens" }
        p.muted { (revocations.len()) " revoked. A revocation is in force here at once and on every other server of this store within its revocation refresh." }
        div.scroll { table data-revocations {
            thead { tr { th { "Digest" } th { "Revoked" } th.hide-narrow { "Token expires" } th { "Note" } } }
            tbody {
                @for revocation in revocations.iter().take(REVOCATIONS) {
                    tr data-revocation=(revocation.digest) {
                        td { code { (revocation.digest) } }
                        td { (format::time(revocation.revoked_at)) }
                        td.hide-narrow { (revocation.expires_at.map(format::time).unwrap_or_else(|| "—".into())) }
                        td { (revocation.note.as_deref().unwrap_or("")) }
                    }
                }
            }
        } }
        form method="post" action="/console/operator/revocations" data-action="revoke" {
            input type="hidden" name="csrf" value=(viewer.csrf);
            label for="digest" { "Token digest (64 hex digits, as " code { "abstore token inspect" } " prints it)" }
            input type="text" id="digest" name="digest" required pattern="[0-9a-fA-F]{64}";
            label for="note" { "Note" }
            input type="text" id="note" name="note";
            p { button type="submit" { "Revoke" } }
        }
        h2 { "Metrics" }
        @match &metrics {
            Some((totals, errors)) => {
                dl.grid data-metrics {
                    @for (label, total) in totals { div.card { dt { (label) } dd { (total) } } }
                    div.card { dt { "Requests answered 5xx" } dd { (errors) } }
                }
            }
            None => { p.muted { "No metrics recorder in this process." } }
        }
        h2 { "Retention and collection" }
        dl.grid data-settings {
            @for (name, value) in &console.settings.facts {
                div.card { dt { (name) } dd { (value) } }
            }
            div.card { dt { "Console sessions" } dd { (console.sessions.len()) } }
        }
        p.muted { "Unreferenced blobs are collected offline with " code { "abstore gc" } " (docs/operations.md)." }
    };
    Ok(html_page(
        StatusCode::OK,
        shell(PAGE, "Operator", Some(&viewer), content),
    ))
}

/// `POST /console/operator/revocations`: revoke a token by its digest.
pub async fn revoke(State(state): State<SharedState>, headers: HeaderMap, body: Body) -> Response {
    let outcome = async {
        let (_console, _viewer, form) =
            super::posted(&state, &headers, body, Some(Sight::Operator), PAGE).await?;
        let digest = form
            .get("digest")
            .map(|d| d.trim().to_ascii_lowercase())
            .unwrap_or_default();
        if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(PageError::bad_request(PAGE, "A digest is 64 hex digits."));
        }
        let note = form
            .get("note")
            .map(|n| n.trim().to_owned())
            .filter(|n| !n.is_empty());
        let revocation = Revocation {
            digest,
            expires_at: None,
            revoked_at: state.access.clock.now_ms(),
            note,
        };
        state
            .store
            .revoke_token(revocation)
            .await
            .map_err(|e| PageError::store(PAGE, e))?;
        if let Some(revocations) = &state.access.revocations {
            revocations
                .refresh(&*state.store)
                .await
                .map_err(|e| PageError::store(PAGE, e))?;
        }
        Ok::<_, PageError>(redirect("/console/operator", None))
    };
    outcome
        .await
        .unwrap_or_else(|refused| refused.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_adds_up_series_and_counts_server_errors() {
        let text = "# HELP abstore_http_requests_total x\n\
            abstore_http_requests_total{route=\"/a\",method=\"GET\",status=\"200\"} 5\n\
            abstore_http_requests_total{route=\"/a\",method=\"GET\",status=\"503\"} 2\n\
            abstore_held_reads_in_flight 3\n";
        let (totals, errors) = summary(text);
        assert_eq!(totals[0], ("Requests answered", 7.0));
        assert_eq!(totals[1], ("Held reads waiting", 3.0));
        assert_eq!(errors, 2.0);
    }
}
