//! JSON responses: the one place a handler's answer gets its
//! `Content-Type: application/json`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::error::ApiError;

/// A response whose body is already JSON text.
pub fn json_response(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A JSON response from bytes already serialised.
pub fn json_response_bytes(status: StatusCode, body: bytes::Bytes) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// `200` with a JSON answer the server compressed itself, as one zstd
/// stream (the compression layer leaves an encoded answer alone).
pub fn zstd_response(frames: bytes::Bytes) -> Response {
    let mut response = json_response_bytes(StatusCode::OK, frames);
    mark_encoded(response.headers_mut(), "zstd");
    response
}

/// The headers of an answer encoded by the server itself in `coding`,
/// which another `Accept-Encoding` would have had otherwise.
pub fn mark_encoded(headers: &mut axum::http::HeaderMap, coding: &'static str) {
    headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static(coding));
    headers.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
}

/// Serialise `value` as a JSON response.
pub fn json(status: StatusCode, value: &impl serde::Serialize) -> Response {
    // Straight into a byte buffer, not through `Display`'s formatter; a
    // value that cannot be JSON (none of ours) is an internal error.
    match serde_json::to_string(value) {
        Ok(body) => json_response(status, body),
        Err(err) => ApiError::Internal(format!("serialising a response: {err}")).into_response(),
    }
}
