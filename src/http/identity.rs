//! The identity check (spec section 1): a request to a route that clients
//! reach ([`Reach::Clients`](super::gate::Reach)) must send exactly one of the
//! accepted client identities — an Autobuild version and a protocol version,
//! each header exact — before authentication, body or lookup; otherwise
//! `409 conflict`. Which identities are accepted, and their catalogs, is
//! [`Clients`](crate::protocol::Clients)' business.

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue};

use super::error::{ApiError, ApiResult};
use crate::protocol::{Client, Clients};

pub const VERSION_HEADER: &str = "x-autobuild-version";
pub const PROTOCOL_HEADER: &str = "x-autobuild-protocol-version";

/// The accepted identity the request's headers name, or the 409 naming what
/// was sent and what is accepted.
pub fn check(clients: &Clients, headers: &HeaderMap) -> ApiResult<Arc<Client>> {
    // Every copy of a repeated header must match: letting the first one
    // win would accept `0.8.0` followed by `9.9.9`.
    let sent = |name: &str| -> (Option<&HeaderValue>, bool) {
        let mut values = headers.get_all(name).iter();
        let first = values.next();
        let agree = values.all(|v| Some(v) == first);
        (first, agree)
    };
    let ((version, versions_agree), (protocol, protocols_agree)) =
        (sent(VERSION_HEADER), sent(PROTOCOL_HEADER));
    if versions_agree
        && protocols_agree
        && let (Some(version), Some(protocol)) = (version, protocol)
        && let Some(client) = clients.find(version.as_bytes(), protocol.as_bytes())
    {
        return Ok(client.clone());
    }
    let shown = |v: Option<&HeaderValue>, agree: bool| match v {
        None => "(missing)".to_owned(),
        Some(_) if !agree => "(repeated with differing values)".to_owned(),
        Some(v) => format!("\"{}\"", String::from_utf8_lossy(v.as_bytes())),
    };
    Err(ApiError::Conflict(format!(
        "autobuild version mismatch: client package {} protocol {}, {}",
        shown(version, versions_agree),
        shown(protocol, protocols_agree),
        clients.server_side(),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ClientIdentity, Protocol};

    fn clients(accept: &[&str]) -> Clients {
        let accept: Vec<ClientIdentity> = accept.iter().map(|a| a.parse().unwrap()).collect();
        Clients::resolve(&accept, None, None).unwrap()
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    fn refusal(clients: &Clients, headers: &HeaderMap) -> String {
        match check(clients, headers) {
            Err(ApiError::Conflict(message)) => message,
            other => panic!("not a 409: {other:?}"),
        }
    }

    #[test]
    fn the_default_identity_and_its_refusal() {
        let clients = clients(&[]);
        let ok = headers(&[(VERSION_HEADER, "0.8.0"), (PROTOCOL_HEADER, "2")]);
        assert_eq!(check(&clients, &ok).unwrap().protocol, Protocol::V2);
        assert_eq!(
            refusal(&clients, &headers(&[(VERSION_HEADER, "0.9.0")])),
            "autobuild version mismatch: client package \"0.9.0\" protocol (missing), server package \"0.8.0\" protocol \"2\""
        );
    }

    #[test]
    fn crossed_pairs_and_repeated_headers_are_refused() {
        let clients = clients(&["0.8.0/2", "0.9.0/3"]);
        assert_eq!(
            refusal(
                &clients,
                &headers(&[(VERSION_HEADER, "0.8.0"), (PROTOCOL_HEADER, "3")])
            ),
            "autobuild version mismatch: client package \"0.8.0\" protocol \"3\", server accepts \
             package \"0.8.0\" protocol \"2\" or package \"0.9.0\" protocol \"3\""
        );
        let repeated = headers(&[
            (VERSION_HEADER, "0.8.0"),
            (VERSION_HEADER, "9.9.9"),
            (PROTOCOL_HEADER, "2"),
        ]);
        assert!(refusal(&clients, &repeated).contains("(repeated with differing values)"));
        let agreeing = headers(&[
            (VERSION_HEADER, "0.9.0"),
            (VERSION_HEADER, "0.9.0"),
            (PROTOCOL_HEADER, "3"),
        ]);
        assert_eq!(check(&clients, &agreeing).unwrap().protocol, Protocol::V3);
    }
}
