//! Bearer tokens of section 7 ("Token encoding"), minted by the suite itself
//! from the server's secret:
//!
//! ```text
//! base64url_nopad(UTF-8 JSON scope) + "." + base64url_nopad(HMAC-SHA256(secret, payloadSegment))
//! ```
//!
//! The HMAC input is the first segment exactly as encoded. [`mint_text`] signs
//! any text, so checks can build malformed-but-signed tokens (non-JSON scopes,
//! unknown keys, wrong types) whose only defect is the one under test.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};

type HmacSha256 = Hmac<sha2::Sha256>;

/// Unpadded base64url.
pub fn b64url(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// `base64url_nopad(HMAC-SHA256(secret, segment))`.
pub fn sign(secret: &str, segment: &str) -> String {
    // HMAC takes keys of any length, so this cannot fail.
    let mut mac = match HmacSha256::new_from_slice(secret.as_bytes()) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC accepts keys of any length"),
    };
    mac.update(segment.as_bytes());
    b64url(&mac.finalize().into_bytes())
}

/// A token whose payload segment is `segment` verbatim, correctly signed.
pub fn sign_segment(secret: &str, segment: &str) -> String {
    format!("{segment}.{}", sign(secret, segment))
}

/// A token for an arbitrary scope text (need not be JSON), correctly signed.
pub fn mint_text(secret: &str, scope_text: &str) -> String {
    sign_segment(secret, &b64url(scope_text.as_bytes()))
}

/// A token for a scope document.
pub fn mint(secret: &str, scope: &Value) -> String {
    mint_text(secret, &scope.to_string())
}

/// The admin scope: `{"build":"*","session":"*","exp":…}`.
pub fn admin_scope(exp: i64) -> Value {
    json!({"build": "*", "session": "*", "exp": exp})
}

/// An explicit resource scope (`kind` is `build`, `repo` or `session`).
pub fn resource_scope(kind: &str, id: &str, session: &str, exp: i64) -> Value {
    json!({"resource": {"kind": kind, "id": id}, "session": session, "exp": exp})
}

/// The deployment scope: `{"operator":true,"session":"*","exp":…}`.
pub fn deployment_scope(exp: i64) -> Value {
    json!({"operator": true, "session": "*", "exp": exp})
}

/// True when `v` is a well-formed `via` marker (`{"kind":"session","id"}` or
/// `{"kind":"mcp","client"}` with a nonempty string and no other key).
pub fn is_via(v: &Value) -> bool {
    let Some(o) = v.as_object() else {
        return false;
    };
    let key = match o.get("kind").and_then(Value::as_str) {
        Some("session") => "id",
        Some("mcp") => "client",
        _ => return false,
    };
    o.len() == 2
        && o.get(key)
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vector() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
        let t = sign("Jefe", "what do ya want for nothing?");
        let hex: String = URL_SAFE_NO_PAD
            .decode(t)
            .unwrap_or_default()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn matches_abstore_token_mint() {
        // `abstore token mint --secret S --admin|--repo acme/widgets
        //  --agent-session hs_1 --now 2026-07-15T12:00:00.000Z --ttl 1h`
        let s = "0123456789abcdef0123456789abcdef0123456789abcdef";
        let exp = 1_784_120_400_000;
        assert_eq!(
            mint(s, &admin_scope(exp)),
            "eyJidWlsZCI6IioiLCJzZXNzaW9uIjoiKiIsImV4cCI6MTc4NDEyMDQwMDAwMH0.FWfQ0i1_URRGV6mnz1SfAuqIjTzkutB3v8Heouj78VM"
        );
        assert_eq!(
            mint(s, &resource_scope("repo", "acme/widgets", "hs_1", exp)),
            "eyJyZXNvdXJjZSI6eyJraW5kIjoicmVwbyIsImlkIjoiYWNtZS93aWRnZXRzIn0sInNlc3Npb24iOiJoc18xIiwiZXhwIjoxNzg0MTIwNDAwMDAwfQ.4YnImvYIeNn0IFYuJEZ0VbFs29tVlN0O0Ydi5dQZMX8"
        );
    }

    #[test]
    fn shape() {
        let t = mint("s", &admin_scope(5));
        let (p, s) = t.split_once('.').unwrap_or_default();
        assert_eq!(
            URL_SAFE_NO_PAD.decode(p).unwrap_or_default(),
            br#"{"build":"*","session":"*","exp":5}"#
        );
        assert_eq!(s, sign("s", p));
        assert!(!t.contains('='));
    }
}
