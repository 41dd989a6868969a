//! The console's pages, one file each, and what they share: the console's
//! state, the viewer, paging links.

pub mod build;
pub mod operator;
pub mod overview;
pub mod repo;
pub mod session;
pub mod sign_in;
pub mod ticket;
pub mod tickets;

use std::sync::Arc;

use axum::http::HeaderMap;

use super::Console;
use super::respond::PageError;
use super::viewer::{self, Sight, Viewer};
use crate::http::SharedState;

/// The console of a server that has one (its routes exist only then).
pub(super) fn console(state: &SharedState, page: &'static str) -> Result<Arc<Console>, PageError> {
    state
        .console
        .clone()
        .ok_or_else(|| PageError::not_found(page))
}

/// The console and the viewer of a request, or the sign-in redirect.
pub(super) fn viewer(
    state: &SharedState,
    headers: &HeaderMap,
    page: &'static str,
) -> Result<(Arc<Console>, Viewer), PageError> {
    let console = console(state, page)?;
    match viewer::resolve(state, &console, headers) {
        Ok(viewer) => Ok((console, viewer)),
        Err(_) => Err(PageError::sign_in(page)),
    }
}

/// A state-changing request: its console and viewer, `404` unless the
/// viewer may see `sight`, then the Origin and CSRF checks and its form.
pub(super) async fn posted(
    state: &SharedState,
    headers: &HeaderMap,
    body: axum::body::Body,
    sight: Option<Sight<'_>>,
    page: &'static str,
) -> Result<(Arc<Console>, Viewer, super::guard::Form), PageError> {
    let (console, viewer) = viewer(state, headers, page)?;
    if let Some(sight) = sight {
        require(&viewer, sight, page)?;
    }
    let limit = state.limits.max_json_body_bytes;
    let form = super::guard::checked_form(page, &console, &viewer, headers, body, limit).await?;
    Ok((console, viewer, form))
}

/// `404` unless the viewer may see `sight`.
pub(super) fn require(
    viewer: &Viewer,
    sight: Sight<'_>,
    page: &'static str,
) -> Result<(), PageError> {
    if viewer.may(sight) {
        Ok(())
    } else {
        Err(PageError::not_found(page))
    }
}

/// A path segment of a console link, percent-encoded (ids may hold any
/// character the protocol allows).
pub(super) fn segment(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// The page size of event timelines and listings.
pub const PAGE: i64 = 50;
