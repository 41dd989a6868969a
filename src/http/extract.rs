//! Request parsing with the protocol's own rejections: strictly
//! percent-decoded path segments (read by [`ResourcePath`](super::path::ResourcePath)), size-bounded JSON bodies, and the raw query
//! values the `since`/`rev`/`wait`/`kind` grammars read.

use axum::body::Body;
use axum::http::Uri;
use serde_json::Value;

use super::ApiError;
use crate::protocol::ident;

/// Decode one path segment as JavaScript `decodeURIComponent` would: every
/// `%` must start a two-hex-digit escape and the bytes must be UTF-8.
/// (The `percent-encoding` crate passes malformed escapes through unchanged,
/// which the spec makes a 400, hence the explicit check.)
pub fn decode_segment(raw: &str) -> Result<String, ApiError> {
    let bytes = raw.as_bytes();
    let malformed = bytes.iter().enumerate().any(|(i, &b)| {
        b == b'%'
            && !(bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
    });
    if malformed {
        return Err(ApiError::BadRequest(format!(
            "malformed path segment encoding: {raw}"
        )));
    }
    percent_encoding::percent_decode_str(raw)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| ApiError::BadRequest(format!("malformed path segment encoding: {raw}")))
}

/// A decoded path id about to be looked up: one the identifier rule
/// ([`ident`]) would have refused at creation cannot exist, so it answers
/// `unknown(id)` (a 404) without reaching the store, whose text columns
/// would refuse it on PostgreSQL.
pub fn lookup_id(id: String, unknown: impl FnOnce(&str) -> ApiError) -> Result<String, ApiError> {
    if ident::fits(&id) {
        Ok(id)
    } else {
        Err(unknown(&id))
    }
}

/// The first value of query parameter `name`, decoded as `URLSearchParams` does.
pub fn query_param(uri: &Uri, name: &str) -> Option<String> {
    let query = uri.query()?;
    url::form_urlencoded::parse(query.as_bytes())
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
}

/// Read a JSON body of at most `limit` bytes.
pub async fn json_body(body: Body, limit: usize) -> Result<Value, ApiError> {
    let bytes = axum::body::to_bytes(body, limit).await.map_err(|err| {
        if std::error::Error::source(&err)
            .is_some_and(|s| s.is::<http_body_util::LengthLimitError>())
        {
            ApiError::TooLarge(format!("request body exceeds the {limit}-byte limit"))
        } else {
            ApiError::BadRequest("request body could not be read".into())
        }
    })?;
    serde_json::from_slice(&bytes)
        .map_err(|_| ApiError::BadRequest("request body is not valid JSON".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_single_segments_strictly() {
        assert_eq!(decode_segment("acme%2Fwidgets").unwrap(), "acme/widgets");
        assert_eq!(decode_segment("plain-slug").unwrap(), "plain-slug");
        assert_eq!(decode_segment("caf%C3%A9").unwrap(), "café");
        for bad in ["%", "%2", "%ZZ", "a%2", "%C3", "%FF"] {
            assert!(decode_segment(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn query_values_decode_like_url_search_params() {
        let uri: Uri = "/x?since=%201%20&kind=a+b&kind=second&rev="
            .parse()
            .unwrap();
        assert_eq!(query_param(&uri, "since").as_deref(), Some(" 1 "));
        assert_eq!(query_param(&uri, "kind").as_deref(), Some("a b"));
        assert_eq!(query_param(&uri, "rev").as_deref(), Some(""));
        assert_eq!(query_param(&uri, "wait"), None);
    }
}
