//! Package and protocol identity (spec section 1): every `/builds`, `/repos`
//! and `/sessions` request must send the server's exact Autobuild version and
//! protocol version, checked before authentication, body or lookup. The
//! top-level `/streams` routes carry the identity of the family that owns
//! the stream, so they are checked the same way.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{ApiError, PROTOCOL_VERSION, SharedState};

pub const VERSION_HEADER: &str = "x-autobuild-version";
pub const PROTOCOL_HEADER: &str = "x-autobuild-protocol-version";

/// True for the machine route families the identity check guards.
pub fn is_machine_route(path: &str) -> bool {
    ["/builds", "/repos", "/sessions", "/streams"]
        .iter()
        .any(|family| {
            path.strip_prefix(family)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })
}

pub async fn check(State(state): State<SharedState>, request: Request, next: Next) -> Response {
    if is_machine_route(request.uri().path()) {
        // Every copy of a repeated header must match: letting the first one
        // win would accept `0.8.0` followed by `9.9.9`.
        let header = |name: &str| -> (Option<String>, bool) {
            let mut values = request
                .headers()
                .get_all(name)
                .iter()
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
            let first = values.next();
            let agree = values.all(|v| Some(&v) == first.as_ref());
            (first, agree)
        };
        let ((version, versions_agree), (protocol, protocols_agree)) =
            (header(VERSION_HEADER), header(PROTOCOL_HEADER));
        if !versions_agree
            || !protocols_agree
            || version.as_deref() != Some(state.autobuild_version.as_str())
            || protocol.as_deref() != Some(PROTOCOL_VERSION)
        {
            let shown = |v: &Option<String>, agree: bool| match v {
                None => "(missing)".to_owned(),
                Some(_) if !agree => "(repeated with differing values)".to_owned(),
                Some(v) => format!("\"{v}\""),
            };
            return ApiError::Conflict(format!(
                "autobuild version mismatch: client package {} protocol {}, server package \"{}\" protocol \"{}\"",
                shown(&version, versions_agree),
                shown(&protocol, protocols_agree),
                state.autobuild_version,
                PROTOCOL_VERSION,
            ))
            .into_response();
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    #[test]
    fn guards_exactly_the_machine_families() {
        for path in [
            "/builds",
            "/builds/x",
            "/repos",
            "/repos/a%2Fb/events",
            "/sessions/os_1",
            "/streams/st_1",
        ] {
            assert!(super::is_machine_route(path), "{path}");
        }
        for path in ["/health", "/buildsx", "/_test/clock", "/", "/streamsx"] {
            assert!(!super::is_machine_route(path), "{path}");
        }
    }
}
