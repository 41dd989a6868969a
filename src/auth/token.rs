//! The token format (spec section 7, "Token encoding"):
//!
//! ```text
//! base64url(UTF-8 JSON scope) + "." + base64url(HMAC-SHA256(secret, payloadSegment))
//! ```
//!
//! The HMAC input is the first segment *as encoded*, so the signature covers the
//! exact bytes the client sent. Both segments are unpadded base64url (RFC 4648
//! §5 without `=`), which is what Autobuild's minter emits (Node's `base64url`
//! encoding never pads). Padded segments are refused: accepting them would give
//! one signed scope several spellings (the signature segment is not itself
//! signed), no conforming minter produces them, and refusing costs nothing.
//! Decoding is canonical too (non-zero trailing bits are refused), for the same
//! one-spelling reason.
//!
//! Verification order: length bound, shape, signature (constant time), then
//! decoding and strict scope parsing, then expiry. Nothing about the payload is
//! looked at before the signature has been checked. Every failure is the same
//! opaque [`InvalidToken`] to a client; the server itself learns which kind it
//! was ([`Refusal`], from [`check`]) for its metrics.
//!
//! A token is named by the SHA-256 of its text ([`digest`]): revocations
//! store that, never the token.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::scope::Scope;

type HmacSha256 = Hmac<Sha256>;

/// Longest token accepted, in bytes; anything longer is refused before any
/// decoding or hashing. Real scopes are a few hundred bytes.
pub const MAX_TOKEN_LEN: usize = 8 * 1024;

/// Shortest secret the CLI and server accept without an explicit opt-in
/// (`--allow-weak-secret`): 32 bytes, the HMAC-SHA256 output size.
pub const MIN_SECRET_LEN: usize = 32;

/// A token failed verification. Deliberately carries no detail: malformed,
/// badly signed, unparseable and expired tokens all answer the same 401.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid or expired token")]
pub struct InvalidToken;

/// Why a token failed verification: the server's own accounting
/// (`abstore_auth_failures_total`), never shown to a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Too long, malformed, not signed with the secret, or a signed payload
    /// that is not a valid scope.
    Malformed,
    /// Correctly signed and well-formed, but `exp <= now`.
    Expired,
}

/// The SHA-256 of a token's text: what names it in a revocation.
pub fn digest(token: &str) -> [u8; 32] {
    use sha2::Digest as _;
    Sha256::digest(token.as_bytes()).into()
}

/// Sign `scope` with `secret`.
pub fn mint(secret: &[u8], scope: &Scope) -> String {
    let payload = URL_SAFE_NO_PAD.encode(scope.to_json_string());
    let signature = URL_SAFE_NO_PAD.encode(signer(secret, &payload).finalize().into_bytes());
    format!("{payload}.{signature}")
}

/// Verify `token` against `secret` at `now_ms` (Unix epoch milliseconds) and
/// return its scope. A token is expired when `exp <= now_ms`.
pub fn verify(secret: &[u8], token: &str, now_ms: i64) -> Result<Scope, InvalidToken> {
    check(secret, token, now_ms).map_err(|_| InvalidToken)
}

/// [`verify`], saying why a token failed (for the server's accounting only).
pub fn check(secret: &[u8], token: &str, now_ms: i64) -> Result<Scope, Refusal> {
    use Refusal::Malformed;
    if token.len() > MAX_TOKEN_LEN {
        return Err(Malformed);
    }
    let (payload, signature) = token.split_once('.').ok_or(Malformed)?;
    if payload.is_empty() || signature.is_empty() || signature.contains('.') {
        return Err(Malformed);
    }
    let signature = URL_SAFE_NO_PAD.decode(signature).map_err(|_| Malformed)?;
    // `verify_slice` compares in constant time (it is built on `subtle`); a
    // length mismatch is rejected up front, which reveals nothing secret.
    signer(secret, payload)
        .verify_slice(&signature)
        .map_err(|_| Malformed)?;

    let json = URL_SAFE_NO_PAD.decode(payload).map_err(|_| Malformed)?;
    // `from_slice` rejects invalid UTF-8 as well as invalid JSON.
    let value: serde_json::Value = serde_json::from_slice(&json).map_err(|_| Malformed)?;
    let scope = Scope::from_json(&value).map_err(|_| Malformed)?;
    if scope.exp() <= now_ms {
        return Err(Refusal::Expired);
    }
    Ok(scope)
}

fn signer(secret: &[u8], payload: &str) -> HmacSha256 {
    // HMAC is defined for keys of any length (long keys are hashed, short ones
    // padded), so this constructor cannot fail.
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC accepts keys of any length");
    mac.update(payload.as_bytes());
    mac
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::scope::{ScopeKind, Via};

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";
    const NOW: i64 = 1_784_116_800_000;

    fn legacy(exp: i64) -> Scope {
        Scope::Legacy {
            build: "b-1".into(),
            session: "s_1".into(),
            exp,
        }
    }

    /// A token over arbitrary payload text, correctly signed.
    fn signed(payload_json: &str) -> String {
        let payload = URL_SAFE_NO_PAD.encode(payload_json);
        let sig = URL_SAFE_NO_PAD.encode(signer(SECRET, &payload).finalize().into_bytes());
        format!("{payload}.{sig}")
    }

    #[test]
    fn round_trips_every_scope_shape() {
        let scopes = [
            legacy(NOW + 1),
            Scope::Legacy {
                build: "*".into(),
                session: "*".into(),
                exp: NOW + 1,
            },
            Scope::Resource {
                kind: ScopeKind::Repo,
                id: "acme/widgets".into(),
                session: "hs_1".into(),
                via: Some(Via::Mcp {
                    client: "claude-code".into(),
                }),
                exp: NOW + 60_000,
            },
            Scope::Deployment {
                session: "*".into(),
                via: None,
                exp: i64::MAX,
            },
            Scope::Operator {
                user: "alice".into(),
                via: Some(Via::Session { id: "os_1".into() }),
                exp: NOW + 1,
            },
        ];
        for scope in scopes {
            let token = mint(SECRET, &scope);
            assert!(!token.contains('='), "{token}");
            assert_eq!(token.matches('.').count(), 1);
            assert_eq!(verify(SECRET, &token, NOW), Ok(scope));
        }
    }

    #[test]
    fn matches_the_reference_encoding() {
        // Node: Buffer.from(JSON.stringify(scope)).toString('base64url') + '.' +
        // createHmac('sha256', secret).update(payload).digest('base64url').
        let token = mint(SECRET, &legacy(1_784_116_800_000));
        let (payload, signature) = token.split_once('.').unwrap();
        assert_eq!(
            URL_SAFE_NO_PAD.decode(payload).unwrap(),
            br#"{"build":"b-1","session":"s_1","exp":1784116800000}"#
        );
        assert_eq!(signature.len(), 43); // 32 bytes, unpadded
    }

    #[test]
    fn expiry_is_exclusive_of_now() {
        assert_eq!(
            verify(SECRET, &mint(SECRET, &legacy(NOW)), NOW),
            Err(InvalidToken)
        );
        assert_eq!(
            verify(SECRET, &mint(SECRET, &legacy(NOW - 1)), NOW),
            Err(InvalidToken)
        );
        assert!(verify(SECRET, &mint(SECRET, &legacy(NOW + 1)), NOW).is_ok());
    }

    #[test]
    fn rejects_tampering_and_wrong_secrets() {
        let token = mint(SECRET, &legacy(NOW + 1));
        let (payload, signature) = token.split_once('.').unwrap();

        // Payload swapped for another scope, original signature kept.
        let other = URL_SAFE_NO_PAD.encode(br#"{"build":"*","session":"*","exp":1784116800001}"#);
        assert_eq!(
            verify(SECRET, &format!("{other}.{signature}"), NOW),
            Err(InvalidToken)
        );

        // One payload character changed.
        let mut bytes = payload.as_bytes().to_vec();
        bytes[3] = if bytes[3] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(bytes).unwrap();
        assert_eq!(
            verify(SECRET, &format!("{tampered}.{signature}"), NOW),
            Err(InvalidToken)
        );

        // Forged signatures: all zeros, truncated, extended, flipped bit.
        let zeros = URL_SAFE_NO_PAD.encode([0u8; 32]);
        assert_eq!(
            verify(SECRET, &format!("{payload}.{zeros}"), NOW),
            Err(InvalidToken)
        );
        let mut raw = URL_SAFE_NO_PAD.decode(signature).unwrap();
        let short = URL_SAFE_NO_PAD.encode(&raw[..31]);
        assert_eq!(
            verify(SECRET, &format!("{payload}.{short}"), NOW),
            Err(InvalidToken)
        );
        let mut long = raw.clone();
        long.push(0);
        let long = URL_SAFE_NO_PAD.encode(&long);
        assert_eq!(
            verify(SECRET, &format!("{payload}.{long}"), NOW),
            Err(InvalidToken)
        );
        raw[0] ^= 1;
        let flipped = URL_SAFE_NO_PAD.encode(&raw);
        assert_eq!(
            verify(SECRET, &format!("{payload}.{flipped}"), NOW),
            Err(InvalidToken)
        );

        // Signed with another secret; signed over the decoded JSON instead of the segment.
        assert_eq!(verify(b"another secret", &token, NOW), Err(InvalidToken));
        assert_eq!(
            verify(SECRET, &mint(b"another secret", &legacy(NOW + 1)), NOW),
            Err(InvalidToken)
        );
        let json = URL_SAFE_NO_PAD.decode(payload).unwrap();
        let mut mac = HmacSha256::new_from_slice(SECRET).unwrap();
        mac.update(&json);
        let over_json = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
        assert_eq!(
            verify(SECRET, &format!("{payload}.{over_json}"), NOW),
            Err(InvalidToken)
        );
    }

    #[test]
    fn refuses_padded_segments() {
        // A 47-byte payload: padded base64 would end in one `=`; minted form has none.
        let scope = Scope::Legacy {
            build: "b".into(),
            session: "s".into(),
            exp: NOW + 1,
        };
        let token = mint(SECRET, &scope);
        let (payload, signature) = token.split_once('.').unwrap();
        // The signature (32 bytes) always needs one '=' when padded.
        assert_eq!(
            verify(SECRET, &format!("{payload}.{signature}="), NOW),
            Err(InvalidToken)
        );
        // A padded payload segment, correctly signed as padded, is still refused.
        let json = scope.to_json_string();
        let padded = base64::engine::general_purpose::URL_SAFE.encode(&json);
        assert!(padded.ends_with('='), "{padded}");
        let sig = URL_SAFE_NO_PAD.encode(signer(SECRET, &padded).finalize().into_bytes());
        assert_eq!(
            verify(SECRET, &format!("{padded}.{sig}"), NOW),
            Err(InvalidToken)
        );
        // Standard-alphabet or non-canonical signature spellings are refused too.
        let std_sig = base64::engine::general_purpose::STANDARD_NO_PAD
            .encode(URL_SAFE_NO_PAD.decode(signature).unwrap());
        if std_sig != signature {
            assert_eq!(
                verify(SECRET, &format!("{payload}.{std_sig}"), NOW),
                Err(InvalidToken)
            );
        }
        let last = signature.chars().last().unwrap();
        // 32 bytes leave 2 trailing bits in the final character; set one.
        let alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let index = alphabet.find(last).unwrap();
        let non_canonical = alphabet.as_bytes()[index | 1] as char;
        if non_canonical != last {
            let forged = format!(
                "{payload}.{}{non_canonical}",
                &signature[..signature.len() - 1]
            );
            assert_eq!(verify(SECRET, &forged, NOW), Err(InvalidToken));
        }
    }

    #[test]
    fn rejects_malformed_tokens() {
        let good = mint(SECRET, &legacy(NOW + 1));
        let (payload, signature) = good.split_once('.').unwrap();
        let cases = [
            String::new(),
            ".".into(),
            payload.to_string(),
            format!("{payload}."),
            format!(".{signature}"),
            format!("{payload}.{signature}."),
            format!("{payload}.{signature}.{signature}"),
            format!("{payload}..{signature}"),
            format!("{payload}.{signature} "),
            format!(" {payload}.{signature}"),
            format!("{payload}.{}", &signature[..signature.len() - 1]),
            format!("{payload}.!!{}", &signature[2..]),
            format!("{payload}+.{signature}"),
            "not a token".into(),
        ];
        for token in cases {
            assert_eq!(verify(SECRET, &token, NOW), Err(InvalidToken), "{token:?}");
        }
    }

    #[test]
    fn an_integral_exp_is_accepted_however_written() {
        // JavaScript (and so Autobuild's verifier) reads all three as the
        // integer 1784116800001.
        for exp in ["1784116800001", "1784116800001.0", "1.784116800001e12"] {
            let payload = format!(r#"{{"build":"b","session":"s","exp":{exp}}}"#);
            let scope = verify(SECRET, &signed(&payload), NOW)
                .unwrap_or_else(|error| panic!("{payload}: {error}"));
            assert_eq!(scope.exp(), 1_784_116_800_001, "{payload}");
        }
        let expired = signed(r#"{"build":"b","session":"s","exp":1784116800000.0}"#);
        assert_eq!(
            verify(SECRET, &expired, 1_784_116_800_000),
            Err(InvalidToken)
        );
    }

    #[test]
    fn rejects_signed_but_malformed_payloads() {
        let cases = [
            "",
            "not json",
            "{\"build\":\"b\",\"session\":\"s\",\"exp\":1784116800001",
            "[]",
            "null",
            "\"scope\"",
            "1784116800001",
            r#"{"build":"b","session":"s","exp":1784116800001,"extra":true}"#,
            r#"{"build":"b","session":"s","exp":"1784116800001"}"#,
            r#"{"build":"b","session":"s","exp":1784116800001.5}"#,
            r#"{"build":"b","session":"s","exp":1.7841168000015e12}"#,
            r#"{"build":"b","session":"s","exp":1e300}"#,
            r#"{"build":"","session":"s","exp":1784116800001}"#,
            r#"{"build":"b","session":"","exp":1784116800001}"#,
            r#"{"resource":{"kind":"repo","id":""},"session":"s","exp":1784116800001}"#,
            r#"{"resource":{"kind":"team","id":"t"},"session":"s","exp":1784116800001}"#,
            r#"{"operator":true,"session":"s_1","exp":1784116800001}"#,
            r#"{"operator":{"user":" "},"exp":1784116800001}"#,
        ];
        for payload in cases {
            assert_eq!(
                verify(SECRET, &signed(payload), NOW),
                Err(InvalidToken),
                "{payload}"
            );
        }
        // Invalid UTF-8 inside a JSON string.
        let payload =
            URL_SAFE_NO_PAD.encode(b"{\"build\":\"\xff\",\"session\":\"s\",\"exp\":1784116800001}");
        let sig = URL_SAFE_NO_PAD.encode(signer(SECRET, &payload).finalize().into_bytes());
        assert_eq!(
            verify(SECRET, &format!("{payload}.{sig}"), NOW),
            Err(InvalidToken)
        );
        // Sanity: the helper does produce accepted tokens.
        assert!(
            verify(
                SECRET,
                &signed(r#"{"build":"b","session":"s","exp":1784116800001}"#),
                NOW
            )
            .is_ok()
        );
        // Whitespace inside the JSON is fine: it is signed as sent.
        assert!(
            verify(
                SECRET,
                &signed(r#"{ "exp" : 1784116800001, "build" : "b", "session" : "s" }"#),
                NOW
            )
            .is_ok()
        );
    }

    #[test]
    fn bounds_token_length_before_work() {
        // A correctly signed token just over the bound is refused.
        let id = "x".repeat(MAX_TOKEN_LEN);
        let big = Scope::Resource {
            kind: ScopeKind::Build,
            id,
            session: "s".into(),
            via: None,
            exp: NOW + 1,
        };
        let token = mint(SECRET, &big);
        assert!(token.len() > MAX_TOKEN_LEN);
        assert_eq!(verify(SECRET, &token, NOW), Err(InvalidToken));
        // And one comfortably under it is accepted.
        let id = "x".repeat(MAX_TOKEN_LEN / 2);
        let fits = Scope::Resource {
            kind: ScopeKind::Build,
            id,
            session: "s".into(),
            via: None,
            exp: NOW + 1,
        };
        let token = mint(SECRET, &fits);
        assert!(token.len() <= MAX_TOKEN_LEN);
        assert_eq!(verify(SECRET, &token, NOW), Ok(fits));
    }

    #[test]
    fn error_is_opaque() {
        assert_eq!(InvalidToken.to_string(), "invalid or expired token");
    }

    #[test]
    fn refusals_say_why_to_the_server() {
        let good = mint(SECRET, &legacy(NOW + 1));
        assert!(check(SECRET, &good, NOW).is_ok());
        assert_eq!(check(SECRET, &good, NOW + 1), Err(Refusal::Expired));
        assert_eq!(
            check(b"another secret", &good, NOW),
            Err(Refusal::Malformed)
        );
        assert_eq!(check(SECRET, "not a token", NOW), Err(Refusal::Malformed));
        // Expiry is judged only once the signature and scope check out.
        let signed_junk = signed(r#"{"build":"b","session":"s","exp":1}"#);
        assert_eq!(check(SECRET, &signed_junk, NOW), Err(Refusal::Expired));
        let signed_bad_scope = signed(r#"{"build":"","session":"s","exp":1}"#);
        assert_eq!(
            check(SECRET, &signed_bad_scope, NOW),
            Err(Refusal::Malformed)
        );
    }

    #[test]
    fn digests_are_the_sha256_of_the_text() {
        // `printf %s abc | sha256sum`
        assert_eq!(
            hex::encode(digest("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
