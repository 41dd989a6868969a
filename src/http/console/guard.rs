//! The checks of a state-changing console request, before it does anything:
//! it comes from the console's own origin (its `Origin` header names the
//! host the request was sent to, or `--public-url`'s), and it carries the
//! session's CSRF token. Either failing is `403`. Its form body is bounded
//! by `--max-json-body-bytes`.

use std::collections::HashMap;

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};

use super::Console;
use super::respond::PageError;
use super::viewer::Viewer;

/// A form body's fields (the last of a repeated name wins).
pub type Form = HashMap<String, String>;

/// Whether the request's `Origin` is the console's own: the same host and
/// port the request was addressed to (`Host`), or `--public-url`'s origin.
pub fn same_origin(console: &Console, headers: &HeaderMap) -> bool {
    let Some(origin) = headers
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| url::Url::parse(v).ok())
    else {
        return false;
    };
    if let Some(public) = &console.settings.public_url
        && public.origin() == origin.origin()
    {
        return true;
    }
    let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let Some(origin_host) = origin.host_str() else {
        return false;
    };
    let origin_authority = match origin.port() {
        Some(port) => format!("{origin_host}:{port}"),
        None => origin_host.to_owned(),
    };
    matches!(origin.scheme(), "http" | "https") && origin_authority.eq_ignore_ascii_case(host)
}

/// Read a form body of at most `limit` bytes.
pub async fn read_form(page: &'static str, body: Body, limit: usize) -> Result<Form, PageError> {
    let bytes = axum::body::to_bytes(body, limit).await.map_err(|_| {
        PageError::new(
            page,
            StatusCode::PAYLOAD_TOO_LARGE,
            "The form is larger than this server accepts.",
        )
    })?;
    // Browsers send a textarea's line breaks as CRLF (the HTML form
    // encoding's rule); what a person typed is stored with LF, as the
    // protocol's clients write it.
    Ok(url::form_urlencoded::parse(&bytes)
        .map(|(name, value)| (name.into_owned(), value.replace("\r\n", "\n")))
        .collect())
}

/// The Origin and CSRF checks (403), then the form.
pub async fn checked_form(
    page: &'static str,
    console: &Console,
    viewer: &Viewer,
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<Form, PageError> {
    if !same_origin(console, headers) {
        return Err(PageError::forbidden(page, "Cross-origin request refused."));
    }
    let form = read_form(page, body, limit).await?;
    let sent = form.get("csrf").map(String::as_bytes).unwrap_or_default();
    if !constant_time_eq(sent, viewer.csrf.as_bytes()) {
        return Err(PageError::forbidden(
            page,
            "The form is stale or was not sent by this console; reload the page and try again.",
        ));
    }
    Ok(form)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_textarea_s_crlf_line_breaks_arrive_as_lf() {
        let form = read_form("t", Body::from("body=one%0D%0Atwo%0Athree&title=x"), 1024)
            .await
            .unwrap();
        assert_eq!(form["body"], "one\ntwo\nthree");
        assert_eq!(form["title"], "x");
    }

    fn headers(origin: Option<&str>, host: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, host.parse().unwrap());
        if let Some(origin) = origin {
            h.insert(header::ORIGIN, origin.parse().unwrap());
        }
        h
    }

    #[test]
    fn only_the_consoles_own_origin_passes() {
        let console = Console::new(super::super::ConsoleSettings::default());
        assert!(same_origin(
            &console,
            &headers(Some("http://127.0.0.1:8080"), "127.0.0.1:8080")
        ));
        assert!(!same_origin(
            &console,
            &headers(Some("http://evil.example"), "127.0.0.1:8080")
        ));
        assert!(!same_origin(
            &console,
            &headers(Some("null"), "127.0.0.1:8080")
        ));
        assert!(!same_origin(&console, &headers(None, "127.0.0.1:8080")));
        let console = Console::new(super::super::ConsoleSettings {
            public_url: Some("https://store.example/".parse().unwrap()),
            ..super::super::ConsoleSettings::default()
        });
        assert!(same_origin(
            &console,
            &headers(Some("https://store.example"), "10.0.0.2:80")
        ));
    }

    #[test]
    fn csrf_comparison() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"ab", b"abc"));
    }
}
