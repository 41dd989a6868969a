//! Request ids: the client's (or proxy's) `x-request-id` when it sent one,
//! else a fresh UUID v4 from the thread-local generator (no system call per
//! request, unlike a `getrandom` per id).

use axum::http::{HeaderName, HeaderValue, Request};

pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The request's id: the one it carries, or a new one.
pub fn of<B>(request: &Request<B>) -> HeaderValue {
    match request.headers().get(X_REQUEST_ID) {
        Some(sent) => sent.clone(),
        None => fresh(),
    }
}

fn fresh() -> HeaderValue {
    let text = uuid_v4(rand::random());
    // Hex digits and hyphens only: always a valid header value.
    HeaderValue::from_bytes(&text).unwrap_or(HeaderValue::from_static("-"))
}

/// `random` laid out as a UUID version 4 (RFC 9562) in its hyphenated form.
fn uuid_v4(random: u128) -> [u8; 36] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut bytes = random.to_be_bytes();
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let mut text = [b'-'; 36];
    let mut at = 0;
    for (i, byte) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            at += 1;
        }
        text[at] = HEX[usize::from(byte >> 4)];
        text[at + 1] = HEX[usize::from(byte & 0x0f)];
        at += 2;
    }
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_are_version_4_uuids() {
        let text = super::uuid_v4(u128::MAX);
        assert_eq!(&text, b"ffffffff-ffff-4fff-bfff-ffffffffffff");
        let text = super::uuid_v4(0);
        assert_eq!(&text, b"00000000-0000-4000-8000-000000000000");
    }
}
