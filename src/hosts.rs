//! The DNS-rebinding defence of open mode on loopback.
//!
//! An open-mode server on `127.0.0.1` trusts whoever can reach it, and a web
//! page can: it rebinds its own DNS name to `127.0.0.1`, and the browser then
//! sends the page's requests to the server as same-origin requests, reading
//! the answers. What the browser cannot change is the `Host` header, which
//! still names the page's domain. So such a server answers only requests
//! whose `Host` is a loopback name (`localhost`, `*.localhost`, a `127.0.0.0/8`
//! literal, `[::1]`, with or without a port) or a name the operator allowed
//! (`--allow-host`), and refuses the rest with `403 auth` before anything
//! else, `/health` included: one rule for every route.
//!
//! Only open mode on a loopback address is guarded. With a secret, a
//! rebinding page has no token and gets `401`. With `--open` on a network
//! address, anyone who reaches the port is already trusted by choice, so the
//! `Host` adds nothing. A request with no `Host` at all is served: a browser
//! always sends one, so such a request does not come from a page.

use axum::extract::Request;
use axum::http::header::HOST;

use super::error::ApiError;
use crate::auth::Failure;

/// A `--allow-host` name: lowercase, without a port or a final dot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowedHost(String);

impl AllowedHost {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for AllowedHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for AllowedHost {
    type Err = String;

    /// A DNS name or an IP literal (IPv6 in brackets), without a port:
    /// letters, digits, `-`, `.` (and `:` inside brackets).
    fn from_str(text: &str) -> Result<AllowedHost, String> {
        let name = text.trim().trim_end_matches('.').to_ascii_lowercase();
        let valid = if let Some(inner) = name.strip_prefix('[') {
            inner
                .strip_suffix(']')
                .is_some_and(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok())
        } else {
            !name.is_empty()
                && name.len() <= 253
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.'))
        };
        if valid {
            Ok(AllowedHost(name))
        } else {
            Err(format!(
                "{text:?} is not a host name: give a DNS name or an IP address without a port \
                 (IPv6 in brackets), e.g. abstore.internal or [fd00::1]"
            ))
        }
    }
}

/// The `Host` names an open-mode loopback server answers.
#[derive(Clone, Debug, Default)]
pub struct HostCheck {
    allowed: Vec<AllowedHost>,
}

impl HostCheck {
    pub fn new(allowed: &[AllowedHost]) -> HostCheck {
        HostCheck {
            allowed: allowed.to_vec(),
        }
    }

    /// `403 auth` (counted) unless `request` names a loopback or an allowed
    /// host. The authority of an absolute-form target wins over `Host`, as
    /// HTTP says it does.
    pub fn admit(&self, request: &Request) -> Result<(), ApiError> {
        let sent = match request.uri().authority() {
            Some(authority) => Some(authority.as_str().as_bytes()),
            None => request.headers().get(HOST).map(|v| v.as_bytes()),
        };
        let Some(sent) = sent else {
            return Ok(());
        };
        let name = std::str::from_utf8(sent)
            .ok()
            .and_then(host_name)
            .map(|name| name.trim_end_matches('.').to_ascii_lowercase());
        if let Some(name) = &name
            && (is_loopback_name(name) || self.allowed.iter().any(|a| a.as_str() == name))
        {
            return Ok(());
        }
        crate::metrics::record_auth_failure(Failure::Host);
        Err(ApiError::Forbidden(refusal(sent, name.as_deref())))
    }
}

/// The message: the host as sent (bounded, escaped), and the way out.
fn refusal(sent: &[u8], name: Option<&str>) -> String {
    const SHOWN: usize = 100;
    let text = String::from_utf8_lossy(&sent[..sent.len().min(SHOWN)]);
    let more = if sent.len() > SHOWN { "…" } else { "" };
    // The name itself only when it is one the flag would take, and short.
    let flag = match name.filter(|n| n.len() <= SHOWN && n.parse::<AllowedHost>().is_ok()) {
        Some(name) => format!("--allow-host {name}"),
        None => "--allow-host NAME".to_owned(),
    };
    format!(
        "host {text:?}{more} is not a loopback name: this open-mode server answers only \
         localhost, 127.0.0.1 and [::1] (a page whose DNS name points here must not reach it); \
         to serve it under that name, start it with {flag} (ABSTORE_ALLOW_HOSTS), or give it \
         a secret"
    )
}

/// The name of a `Host` value (`name`, `name:port`, `[v6]`, `[v6]:port`),
/// brackets kept for IPv6; `None` when it is not of that form.
fn host_name(host: &str) -> Option<&str> {
    let (name, rest) = if host.starts_with('[') {
        host.split_at(host.find(']')? + 1)
    } else {
        host.split_at(host.find(':').unwrap_or(host.len()))
    };
    let port_ok = match rest.strip_prefix(':') {
        Some(digits) => !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()),
        None => rest.is_empty(),
    };
    (!name.is_empty() && port_ok).then_some(name)
}

/// `localhost`, a name under `.localhost` (RFC 6761 keeps both on
/// loopback), a `127.0.0.0/8` literal, `[::1]` or an IPv4-mapped loopback.
fn is_loopback_name(name: &str) -> bool {
    if name == "localhost" || name.ends_with(".localhost") {
        return true;
    }
    if let Some(inner) = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        return inner.parse::<std::net::Ipv6Addr>().is_ok_and(|ip| {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        });
    }
    name.parse::<std::net::Ipv4Addr>()
        .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(host: Option<&str>) -> Request {
        let mut builder = Request::builder().uri("/builds");
        if let Some(host) = host {
            builder = builder.header(HOST, host);
        }
        builder.body(axum::body::Body::empty()).unwrap()
    }

    #[test]
    fn loopback_names_pass_with_or_without_port() {
        let check = HostCheck::default();
        for host in [
            "localhost",
            "LOCALHOST:8787",
            "localhost.",
            "app.localhost",
            "a.b.localhost:1",
            "127.0.0.1",
            "127.0.0.1:8787",
            "127.1.2.3",
            "[::1]",
            "[::1]:8787",
            "[::ffff:127.0.0.1]:80",
        ] {
            assert!(check.admit(&request(Some(host))).is_ok(), "{host}");
        }
        assert!(
            check.admit(&request(None)).is_ok(),
            "no Host: not a browser"
        );
    }

    #[test]
    fn other_names_are_refused() {
        let check = HostCheck::default();
        for host in [
            "evil.example",
            "evil.example:8787",
            "localhost.evil.example",
            "127.0.0.1.evil.example",
            "localhostx",
            "notlocalhost",
            "10.0.0.1",
            "0.0.0.0",
            "[::2]",
            "[::1",
            "[::1]x",
            "localhost:",
            "localhost:80:80",
            "localhost:8o",
            "::1",
            "",
        ] {
            let refused = check.admit(&request(Some(host))).unwrap_err();
            assert!(matches!(refused, ApiError::Forbidden(_)), "{host}");
            assert_eq!(refused.kind(), "auth");
        }
    }

    #[test]
    fn allowed_names_pass_and_the_message_names_the_flag() {
        let allowed: Vec<AllowedHost> = ["Abstore.Internal.", "[fd00::1]"]
            .iter()
            .map(|h| h.parse().unwrap())
            .collect();
        assert_eq!(allowed[0].as_str(), "abstore.internal");
        let check = HostCheck::new(&allowed);
        for host in ["abstore.internal", "ABSTORE.internal:443", "[fd00::1]:8787"] {
            assert!(check.admit(&request(Some(host))).is_ok(), "{host}");
        }
        let refused = check
            .admit(&request(Some("evil.example:8787")))
            .unwrap_err()
            .to_string();
        assert!(refused.contains("\"evil.example:8787\""), "{refused}");
        assert!(refused.contains("--allow-host evil.example "), "{refused}");
        // A long host is shown bounded.
        let long = "x".repeat(5000);
        let refused = check.admit(&request(Some(&long))).unwrap_err().to_string();
        assert!(refused.len() < 600, "{refused}");
        // An absolute-form target's authority wins over Host.
        let absolute = Request::builder()
            .uri("http://evil.example/builds")
            .header(HOST, "localhost")
            .body(axum::body::Body::empty())
            .unwrap();
        assert!(check.admit(&absolute).is_err());
    }

    #[test]
    fn allowed_host_values_are_names() {
        for bad in [
            "",
            "a b",
            "host:80",
            "http://x",
            "x/y",
            "*.example",
            "[::1",
            "[x]",
        ] {
            assert!(bad.parse::<AllowedHost>().is_err(), "{bad:?}");
        }
        for good in ["example.com", "10.0.0.1", "[::1]", "a-b.c"] {
            assert!(good.parse::<AllowedHost>().is_ok(), "{good:?}");
        }
    }
}
