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
        let header = |name: &str| {
            request
                .headers()
                .get(name)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        };
        let (version, protocol) = (header(VERSION_HEADER), header(PROTOCOL_HEADER));
        if version.as_deref() != Some(state.autobuild_version.as_str())
            || protocol.as_deref() != Some(PROTOCOL_VERSION)
        {
            let shown = |v: &Option<String>| {
                v.as_ref()
                    .map_or_else(|| "(missing)".to_owned(), |v| format!("\"{v}\""))
            };
            return ApiError::Conflict(format!(
                "autobuild version mismatch: client package {} protocol {}, server package \"{}\" protocol \"{}\"",
                shown(&version),
                shown(&protocol),
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
