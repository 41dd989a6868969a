//! `ApiError`: the only error that becomes an HTTP response, and the one
//! place the spec's `{"error": …, "kind": …}` body is built (section 9).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::protocol::ResourceRef;
use crate::protocol::ident;
use crate::protocol::wire::SchemaError;
use crate::storage_full::{self, Storage};
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400 validation: bad JSON, body schema, query grammar, path encoding.
    #[error("{0}")]
    BadRequest(String),
    /// 401 auth: missing, malformed, badly signed or expired token.
    #[error("{0}")]
    Unauthenticated(String),
    /// 403 auth: valid token, wrong scope or attribution.
    #[error("{0}")]
    Forbidden(String),
    /// 404 not-found: unknown route, method or resource.
    #[error("{0}")]
    NotFound(String),
    /// 409 conflict: identity mismatch, duplicate build.
    #[error("{0}")]
    Conflict(String),
    /// 413 validation: a ceiling was exceeded; the message names it.
    #[error("{0}")]
    TooLarge(String),
    /// 422 validation: the event catalog rejected the write (message verbatim).
    #[error("{0}")]
    Unprocessable(String),
    /// 500 internal: the detail is logged, never sent.
    #[error("internal error")]
    Internal(String),
    /// 503 internal with `Retry-After: 1`: what the server depends on (the
    /// database, the blob store) cannot be reached or written right now;
    /// the client should retry. Carries the dependency's name.
    #[error("{0} unavailable")]
    Unavailable(&'static str),
    /// 503 internal with `Retry-After: 1`: a bound on concurrent work is
    /// reached (the message names it); nothing was done.
    #[error("{0}")]
    Busy(&'static str),
    /// 503 internal with `Retry-After: 1`: the server is starting (waiting
    /// for or running a migration); the message says where the start is.
    /// Nothing was read or written.
    #[error("the server is starting ({0}); retry shortly")]
    Starting(String),
    /// 503 internal with `Retry-After: 10`: the disk under the database or
    /// the blob store is full; nothing of the write was kept, and the same
    /// write succeeds once space is freed (`crate::storage_full`).
    #[error("{}", .0.message())]
    StorageFull(Storage),
}

/// `Retry-After` of [`ApiError::Unavailable`]: an outage or a restart is
/// usually over within seconds.
const RETRY_UNAVAILABLE: &str = "1";

/// `Retry-After` of [`ApiError::StorageFull`]: space comes back when someone
/// (or some clean-up job) frees it, rarely within a second; retrying every
/// second would only add load and log lines meanwhile.
const RETRY_STORAGE_FULL: &str = "10";

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Unavailable(_)
            | ApiError::Busy(_)
            | ApiError::Starting(_)
            | ApiError::StorageFull(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The protocol's stable error kind.
    pub fn kind(&self) -> &'static str {
        match self {
            ApiError::BadRequest(_) | ApiError::TooLarge(_) | ApiError::Unprocessable(_) => {
                "validation"
            }
            ApiError::Unauthenticated(_) | ApiError::Forbidden(_) => "auth",
            ApiError::NotFound(_) => "not-found",
            ApiError::Conflict(_) => "conflict",
            ApiError::Internal(_)
            | ApiError::Unavailable(_)
            | ApiError::Busy(_)
            | ApiError::Starting(_)
            | ApiError::StorageFull(_) => "internal",
        }
    }

    /// A blob store write failed (read-only, full, deleted, credentials
    /// revoked): nothing was committed, so the client may retry. The detail
    /// may name paths or buckets: logged, never sent.
    pub fn blob_write_failed(err: object_store::Error) -> Self {
        if storage_full::in_chain(&err) {
            return Self::storage_full(Storage::Blobs, &err);
        }
        tracing::error!(error = %err, "blob write failed");
        ApiError::Unavailable("blob store")
    }

    /// A write refused because `storage` is full: counted and logged
    /// (`storage_full::refused`), answered `503`.
    pub fn storage_full(storage: Storage, detail: &dyn std::fmt::Display) -> Self {
        storage_full::refused(storage, detail);
        ApiError::StorageFull(storage)
    }

    /// `unknown build "x"` / `unknown repo "x"`.
    pub fn unknown(resource: &ResourceRef) -> Self {
        ApiError::NotFound(format!(
            "unknown {} \"{}\"",
            resource.kind.noun(),
            ident::shown(&resource.id)
        ))
    }
}

/// A store failure as the protocol answers it: the resource the store did
/// not find or could not create is named in the message.
impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::NotFound(resource) => Self::unknown(&resource),
            StoreError::Conflict(resource) => ApiError::Conflict(format!(
                "{} \"{}\" already exists",
                resource.kind.noun(),
                resource.id
            )),
            StoreError::Rejected(message) => ApiError::Unprocessable(message),
            StoreError::TooLarge(message) => ApiError::TooLarge(message),
            // A configured ceiling, as the protocol answers one (section 9).
            StoreError::OverBound(refusal) => ApiError::TooLarge(refusal.message),
            StoreError::Closed(stream) => {
                ApiError::Conflict(format!("stream \"{stream}\" is closed"))
            }
            // Logged once per outage by the store, not per request.
            StoreError::Unavailable => ApiError::Unavailable("database"),
            StoreError::Busy(bound) => ApiError::Busy(bound),
            StoreError::Full(detail) => Self::storage_full(Storage::Database, &detail),
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl From<SchemaError> for ApiError {
    fn from(err: SchemaError) -> Self {
        ApiError::BadRequest(format!("invalid request body: {}", err.0))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let message = match &self {
            ApiError::Internal(detail) => {
                // The detail may name tables or hosts: log it, send a fixed text.
                tracing::error!(error = %detail, "internal error");
                "internal error".to_owned()
            }
            other => other.to_string(),
        };
        let body = serde_json::json!({ "error": message, "kind": self.kind() });
        // Built here, not by `super::response`, whose `json` answers its own
        // failure with an `ApiError`.
        let mut response = (self.status(), body.to_string()).into_response();
        response.headers_mut().insert(
            axum::http::header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static("application/json"),
        );
        let retry_after = match self {
            ApiError::Unavailable(_) | ApiError::Busy(_) | ApiError::Starting(_) => {
                Some(RETRY_UNAVAILABLE)
            }
            ApiError::StorageFull(_) => Some(RETRY_STORAGE_FULL),
            _ => None,
        };
        if let Some(seconds) = retry_after {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static(seconds),
            );
        }
        response
    }
}
