//! What every console page is drawn in: the page shell, error pages and
//! redirects, each with the security headers of [`super::headers`].

use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

use super::assets;
use super::headers::secured;
use super::viewer::Viewer;

/// A rendered page: `200` HTML with the console's headers.
pub fn html_page(status: StatusCode, markup: Markup) -> Response {
    secured(
        (
            status,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            markup.into_string(),
        )
            .into_response(),
    )
}

/// `303 See Other` to `location` (a console path), with more headers.
pub fn redirect(location: &str, set_cookie: Option<String>) -> Response {
    let mut response = (
        StatusCode::SEE_OTHER,
        [(header::LOCATION, location.to_owned())],
    )
        .into_response();
    if let Some(cookie) = set_cookie
        && let Ok(value) = HeaderValue::from_str(&cookie)
    {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    secured(response)
}

/// The shell every page is drawn in: the stylesheet and script by their
/// hashed names, a header naming the viewer with the sign-out form, and
/// `<main data-page=…>` around the page's own content.
pub fn shell(page: &str, title: &str, viewer: Option<&Viewer>, content: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · abstore" }
                link rel="stylesheet" href=(assets::style_path());
                script src=(assets::script_path()) defer {}
            }
            body {
                header.bar {
                    a.brand href="/console/" { "abstore" }
                    @if let Some(viewer) = viewer {
                        nav {
                            a href="/console/" { "Overview" }
                            @if viewer.may(super::viewer::Sight::Operator) {
                                a href="/console/operator" { "Operator" }
                            }
                        }
                        span.who data-viewer { (viewer.label()) }
                        @if viewer.signed_in.is_some() {
                            form.inline method="post" action="/console/sign-out" data-action="sign-out" {
                                input type="hidden" name="csrf" value=(viewer.csrf);
                                button type="submit" { "Sign out" }
                            }
                        }
                    }
                }
                main data-page=(page) { (content) }
            }
        }
    }
}

/// Why a console request was not answered with its page.
#[derive(Debug)]
pub struct PageError {
    /// The page kind it was for (`data-page`).
    pub page: &'static str,
    pub status: StatusCode,
    pub message: String,
    /// `429`'s wait.
    pub retry_after: Option<Duration>,
    /// No session (or one that ended): answered `303` to the sign-in page.
    pub sign_in: bool,
}

impl PageError {
    pub fn new(page: &'static str, status: StatusCode, message: impl Into<String>) -> PageError {
        PageError {
            page,
            status,
            message: message.into(),
            retry_after: None,
            sign_in: false,
        }
    }

    /// Sign in first (`303` to the sign-in page).
    pub fn sign_in(page: &'static str) -> PageError {
        PageError {
            sign_in: true,
            ..PageError::new(page, StatusCode::SEE_OTHER, "Sign in first.")
        }
    }

    /// `404`: missing, or beyond the viewer's scope (indistinguishable).
    pub fn not_found(page: &'static str) -> PageError {
        PageError::new(
            page,
            StatusCode::NOT_FOUND,
            "Nothing here, or not for this token.",
        )
    }

    pub fn forbidden(page: &'static str, why: &str) -> PageError {
        PageError::new(page, StatusCode::FORBIDDEN, why)
    }

    pub fn bad_request(page: &'static str, why: impl Into<String>) -> PageError {
        PageError::new(page, StatusCode::BAD_REQUEST, why)
    }

    /// A store failure: logged, shown only as its status.
    pub fn store(page: &'static str, error: crate::store::StoreError) -> PageError {
        if let crate::store::StoreError::NotFound(_) = error {
            return PageError::not_found(page);
        }
        tracing::warn!(error = %error, "console page failed");
        PageError::new(
            page,
            StatusCode::INTERNAL_SERVER_ERROR,
            "The store could not answer; see the server's log.",
        )
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        if self.sign_in {
            return redirect("/console/sign-in", None);
        }
        let title = self.status.canonical_reason().unwrap_or("Error");
        let body = html! {
            section.error data-error=(self.status.as_u16()) {
                h1 { (self.status.as_u16()) " " (title) }
                p { (self.message) }
                p { a href="/console/" { "Back to the overview" } }
            }
        };
        let mut response = html_page(self.status, shell(self.page, title, None, body));
        // The page keeps its kind and says the status (the contract's hooks).
        if let Some(wait) = self.retry_after
            && let Ok(value) = HeaderValue::from_str(&wait.as_secs().max(1).to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        response
    }
}

pub type PageResult = Result<Response, PageError>;
