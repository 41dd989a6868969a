//! Package and protocol identity (spec section 1): every `/builds`, `/repos`
//! and `/sessions` request must send the server's exact Autobuild version and
//! protocol version, checked before authentication, body or lookup. The
//! top-level `/streams` routes carry the identity of the family that owns
//! the stream, so they are checked the same way.

use axum::extract::Request;
use axum::http::HeaderValue;

use super::path::ResourcePath;
use super::{ApiError, ApiResult, AppState, PROTOCOL_VERSION};

pub const VERSION_HEADER: &str = "x-autobuild-version";
pub const PROTOCOL_HEADER: &str = "x-autobuild-protocol-version";

/// 409 unless a machine route carries this server's exact identity.
pub fn check(state: &AppState, request: &Request) -> ApiResult<()> {
    if ResourcePath::family(request.uri().path()).is_none() {
        return Ok(());
    }
    // Every copy of a repeated header must match: letting the first one
    // win would accept `0.8.0` followed by `9.9.9`.
    let sent = |name: &str| -> (Option<&HeaderValue>, bool) {
        let mut values = request.headers().get_all(name).iter();
        let first = values.next();
        let agree = values.all(|v| Some(v) == first);
        (first, agree)
    };
    let ((version, versions_agree), (protocol, protocols_agree)) =
        (sent(VERSION_HEADER), sent(PROTOCOL_HEADER));
    let is = |sent: Option<&HeaderValue>, expected: &str| {
        sent.is_some_and(|v| v.as_bytes() == expected.as_bytes())
    };
    if versions_agree
        && protocols_agree
        && is(version, &state.access.autobuild_version)
        && is(protocol, PROTOCOL_VERSION)
    {
        return Ok(());
    }
    let shown = |v: Option<&HeaderValue>, agree: bool| match v {
        None => "(missing)".to_owned(),
        Some(_) if !agree => "(repeated with differing values)".to_owned(),
        Some(v) => format!("\"{}\"", String::from_utf8_lossy(v.as_bytes())),
    };
    Err(ApiError::Conflict(format!(
        "autobuild version mismatch: client package {} protocol {}, server package \"{}\" protocol \"{}\"",
        shown(version, versions_agree),
        shown(protocol, protocols_agree),
        state.access.autobuild_version,
        PROTOCOL_VERSION,
    )))
}
