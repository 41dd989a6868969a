//! Responses whose body is a store read's rows ([`Rows`]): the JSON framing
//! (`[` … `]`, or a chunk read's object) around the rows' pieces, written as
//! the store produces them. A complete answer (everything arrived with the
//! first message) is sent whole, with a `Content-Length`; a streamed one is
//! sent chunked, one piece at a time, so its memory stays a few pieces
//! whatever the history's size. A producer failing mid-way can only cut the
//! body short: the status has gone.

use std::future::Future;
use std::pin::Pin;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt as _;

use super::response::json_response_bytes;
use crate::store::rows::Next;
use crate::store::{Rows, StoreError};

/// What closes the JSON text after the rows, computed once they have all
/// been sent (a chunk read's stream status is read after its chunks).
pub type Suffix = Pin<Box<dyn Future<Output = Result<Bytes, StoreError>> + Send>>;

/// A suffix known in advance.
pub fn fixed_suffix(text: &'static str) -> Suffix {
    Box::pin(std::future::ready(Ok(Bytes::from_static(text.as_bytes()))))
}

/// `200` with `prefix`, the rows, then the suffix.
pub async fn rows_response(
    rows: Rows,
    prefix: &'static str,
    suffix: Suffix,
) -> Result<Response, StoreError> {
    counted_rows_response(rows, prefix, suffix, |_| {}).await
}

/// [`rows_response`], telling `counted` how many rows the answer held once
/// the store has produced them all (not called when the read fails or its
/// client leaves first).
pub async fn counted_rows_response(
    mut rows: Rows,
    prefix: &'static str,
    suffix: Suffix,
    counted: impl FnOnce(u64) + Send + 'static,
) -> Result<Response, StoreError> {
    if !rows.is_streamed() {
        // Everything is here: one buffer with its length.
        let mut body = BytesMut::from(prefix.as_bytes());
        while let Some(step) = rows.next().await {
            match step? {
                Next::Piece(piece) => body.extend_from_slice(&piece),
                Next::End(()) => break,
            }
        }
        body.extend_from_slice(&suffix.await?);
        counted(rows.count().unwrap_or(0));
        return Ok(json_response_bytes(StatusCode::OK, body.freeze()));
    }
    let counted: Counted = Box::new(counted);
    let pieces = futures_util::stream::unfold(
        Stage::Prefix(rows, prefix, suffix, counted),
        |stage| async move {
            match stage {
                Stage::Prefix(rows, prefix, suffix, counted) => Some((
                    Ok(Bytes::from_static(prefix.as_bytes())),
                    Stage::Rows(rows, suffix, counted),
                )),
                Stage::Rows(mut rows, suffix, counted) => match rows.next().await {
                    Some(Ok(Next::Piece(piece))) => {
                        Some((Ok(piece), Stage::Rows(rows, suffix, counted)))
                    }
                    Some(Ok(Next::End(()))) | None => {
                        if let Some(count) = rows.count() {
                            counted(count);
                        }
                        match suffix.await {
                            Ok(text) => Some((Ok(text), Stage::Done)),
                            Err(err) => Some((Err(cut_short(err)), Stage::Done)),
                        }
                    }
                    Some(Err(err)) => Some((Err(cut_short(err)), Stage::Done)),
                },
                Stage::Done => None,
            }
        },
    );
    Ok(json_response_body(
        StatusCode::OK,
        // Fused: the compression layer's reader polls again after the end.
        Body::from_stream(pieces.fuse().boxed()),
    ))
}

/// What learns an answer's row count.
type Counted = Box<dyn FnOnce(u64) + Send>;

enum Stage {
    Prefix(Rows, &'static str, Suffix, Counted),
    Rows(Rows, Suffix, Counted),
    Done,
}

/// A whole-history answer from the history cache, streamed as its writer
/// hands it over (cut short like any streamed answer): zstd frames or a
/// gzip member or a brotli stream, marked so, or text, which the compression layer treats as
/// any answer.
pub fn history_response(answer: crate::history::Answer, form: crate::history::Form) -> Response {
    use futures_util::TryStreamExt as _;
    // Fused: the compression layer's reader polls again after the end.
    let body = Body::from_stream(answer.into_stream().map_err(cut_short).fuse());
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    match form {
        crate::history::Form::Zstd => super::response::mark_encoded(headers, "zstd"),
        crate::history::Form::Gzip => super::response::mark_encoded(headers, "gzip"),
        crate::history::Form::Brotli => super::response::mark_encoded(headers, "br"),
        crate::history::Form::Text => {}
    }
    response
}

/// A failure after the status was sent: logged, and the body ends early
/// (hyper then closes the connection, so the client cannot take a cut
/// answer for a whole one).
pub(super) fn cut_short(err: StoreError) -> std::io::Error {
    match &err {
        // The client stopped reading for longer than the stall bound.
        StoreError::Aborted(_) => {
            tracing::warn!(error = %err, "a streamed answer was abandoned; its response is cut short");
        }
        _ => {
            tracing::error!(error = %err, "a streamed read failed mid-answer; its response is cut short")
        }
    }
    std::io::Error::other(err.to_string())
}

fn json_response_body(status: StatusCode, body: Body) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    response
}
