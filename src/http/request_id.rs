//! Request ids: the client's (or proxy's) `x-request-id` when it sent a
//! usable one, else a fresh UUID v4 from the thread-local generator (no
//! system call per request, unlike a `getrandom` per id).
//!
//! A client's id is echoed in every response and written into every log line
//! of its request, so only a short, printable one is kept
//! ([`MAX_REQUEST_ID_BYTES`] of visible ASCII, no spaces): proxies' ids
//! (nginx's 32 hex digits, UUIDs, ULIDs) fit, while a 64 KiB header or one
//! carrying control characters would bloat or forge log lines. Any other is
//! replaced by a fresh id, and never logged.

use axum::http::{HeaderName, HeaderValue, Request};

pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The longest client-sent id kept, in bytes.
pub const MAX_REQUEST_ID_BYTES: usize = 128;

/// The request's id: the one it carries when usable ([`usable`]), or a new one.
pub fn of<B>(request: &Request<B>) -> HeaderValue {
    match request.headers().get(X_REQUEST_ID) {
        Some(sent) if usable(sent.as_bytes()) => sent.clone(),
        _ => fresh(),
    }
}

/// 1 to [`MAX_REQUEST_ID_BYTES`] bytes of visible ASCII (`!` to `~`): no
/// spaces, no control characters, nothing a log line could be split on.
fn usable(id: &[u8]) -> bool {
    !id.is_empty() && id.len() <= MAX_REQUEST_ID_BYTES && id.iter().all(|b| b.is_ascii_graphic())
}

fn fresh() -> HeaderValue {
    let text = crate::protocol::uuid::uuid_v4(rand::random());
    // Hex digits and hyphens only: always a valid header value.
    HeaderValue::from_bytes(&text).unwrap_or(HeaderValue::from_static("-"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_short_printable_ids_are_kept() {
        let request = |id: &[u8]| {
            Request::builder()
                .header(X_REQUEST_ID, HeaderValue::from_bytes(id).unwrap())
                .body(())
                .unwrap()
        };
        for kept in [
            b"abc".to_vec(),
            b"0f5c2c8e4b6a4a1e9d1f3a7b2c4d6e8f".to_vec(),
            vec![b'x'; MAX_REQUEST_ID_BYTES],
            b"!~{}[]".to_vec(),
        ] {
            assert_eq!(of(&request(&kept)).as_bytes(), kept.as_slice());
        }
        for replaced in [
            vec![b'x'; MAX_REQUEST_ID_BYTES + 1],
            b"two words".to_vec(),
            b"tab\there".to_vec(),
            "caf\u{e9}".as_bytes().to_vec(),
            b"".to_vec(),
        ] {
            let id = of(&request(&replaced));
            assert_ne!(id.as_bytes(), replaced.as_slice());
            assert_eq!(id.len(), 36, "a fresh UUID");
        }
        let none = Request::builder().body(()).unwrap();
        assert_eq!(of(&none).len(), 36);
    }
}
