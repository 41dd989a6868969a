//! The security headers every console answer carries: a strict
//! Content-Security-Policy with no inline script or style, nosniff, a
//! same-origin referrer, no framing, and no caching of pages that hold a
//! CSRF token (assets set their own immutable caching first).

use axum::http::{HeaderValue, header};
use axum::response::Response;

/// The policy issue 51 names, exactly.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'";

/// Add the headers every console answer carries.
pub fn secured(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}
