//! The DNS-rebinding defence of open mode on loopback, for the server's
//! listener and the metrics listener alike.
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
//! Every authority a request names must pass: each `Host` header it carries
//! (a second one must not smuggle a name past the first) and, for an
//! absolute-form target (`GET http://localhost/builds`), the target's own
//! authority. HTTP lets a server prefer the target's authority to `Host`,
//! but a client that sends two different names is not one to guess for.
//!
//! Only open mode on a loopback address is guarded. With a secret, a
//! rebinding page has no token and gets `401`. With `--open` on a network
//! address, anyone who reaches the port is already trusted by choice, so the
//! `Host` adds nothing. The metrics listener has no tokens at all, so it is
//! guarded whenever it listens on loopback. A request with no `Host` at all
//! is served: a browser always sends one, so such a request does not come
//! from a page.

use axum::http::header::HOST;
use axum::http::{HeaderMap, Uri};

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

    /// `Ok` unless `uri` or `headers` name a host that is neither loopback
    /// nor allowed; the refusal's text names the first such host and the
    /// way out.
    pub fn admit(&self, uri: &Uri, headers: &HeaderMap) -> Result<(), HostRefused> {
        let target = uri.authority().map(|a| a.as_str().as_bytes());
        let hosts = headers.get_all(HOST).iter().map(|v| v.as_bytes());
        for sent in target.into_iter().chain(hosts) {
            let name = std::str::from_utf8(sent)
                .ok()
                .and_then(host_name)
                .map(|name| name.trim_end_matches('.').to_ascii_lowercase());
            let admitted = name.as_deref().is_some_and(|name| {
                is_loopback_name(name) || self.allowed.iter().any(|a| a.as_str() == name)
            });
            if !admitted {
                return Err(HostRefused(refusal(sent, name.as_deref())));
            }
        }
        Ok(())
    }
}

/// Why [`HostCheck::admit`] refused a request: the text its `403` says.
#[derive(Debug)]
pub struct HostRefused(pub String);

impl std::fmt::Display for HostRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
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

    /// What `check` says of a request to `uri` with these `Host` headers.
    fn admit(check: &HostCheck, uri: &str, hosts: &[&str]) -> Result<(), HostRefused> {
        let mut headers = HeaderMap::new();
        for host in hosts {
            headers.append(HOST, host.parse().unwrap());
        }
        check.admit(&uri.parse().unwrap(), &headers)
    }

    /// A request in origin form (`/builds`) with one `Host`.
    fn one(check: &HostCheck, host: &str) -> Result<(), HostRefused> {
        admit(check, "/builds", &[host])
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
            assert!(one(&check, host).is_ok(), "{host}");
        }
        assert!(
            admit(&check, "/builds", &[]).is_ok(),
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
            let refused = one(&check, host).unwrap_err();
            assert!(refused.0.contains("is not a loopback name"), "{host}");
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
            assert!(one(&check, host).is_ok(), "{host}");
        }
        let refused = one(&check, "evil.example:8787").unwrap_err().to_string();
        assert!(refused.contains("\"evil.example:8787\""), "{refused}");
        assert!(refused.contains("--allow-host evil.example "), "{refused}");
        // A long host is shown bounded.
        let long = "x".repeat(5000);
        let refused = one(&check, &long).unwrap_err().to_string();
        assert!(refused.len() < 600, "{refused}");
    }

    #[test]
    fn every_authority_a_request_names_must_pass() {
        let check = HostCheck::default();
        // An absolute-form target's authority and its Host, either way round.
        assert!(admit(&check, "http://evil.example/builds", &["localhost"]).is_err());
        let refused = admit(&check, "http://localhost/builds", &["evil.example"]).unwrap_err();
        assert!(refused.0.contains("\"evil.example\""), "{refused}");
        assert!(admit(&check, "http://localhost:8787/builds", &["127.0.0.1:8787"]).is_ok());
        // Absolute form without Host is judged by its authority alone.
        assert!(admit(&check, "http://evil.example/builds", &[]).is_err());
        assert!(admit(&check, "http://[::1]:1/health", &[]).is_ok());
        // A second Host may not smuggle a name past the first.
        assert!(admit(&check, "/builds", &["localhost", "evil.example"]).is_err());
        assert!(admit(&check, "/builds", &["evil.example", "localhost"]).is_err());
        assert!(admit(&check, "/builds", &["localhost", "127.0.0.1"]).is_ok());
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
