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
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt as _;

use super::response::{json_response_bytes, mark_encoded, zstd_response};
use crate::history::reader::{Form, Reply};
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
    mut rows: Rows,
    prefix: &'static str,
    suffix: Suffix,
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
        return Ok(json_response_bytes(StatusCode::OK, body.freeze()));
    }
    let pieces =
        futures_util::stream::unfold(Stage::Prefix(rows, prefix, suffix), |stage| async move {
            match stage {
                Stage::Prefix(rows, prefix, suffix) => Some((
                    Ok(Bytes::from_static(prefix.as_bytes())),
                    Stage::Rows(rows, suffix),
                )),
                Stage::Rows(mut rows, suffix) => match rows.next().await {
                    Some(Ok(Next::Piece(piece))) => Some((Ok(piece), Stage::Rows(rows, suffix))),
                    Some(Ok(Next::End(()))) | None => match suffix.await {
                        Ok(text) => Some((Ok(text), Stage::Done)),
                        Err(err) => Some((Err(cut_short(err)), Stage::Done)),
                    },
                    Some(Err(err)) => Some((Err(cut_short(err)), Stage::Done)),
                },
                Stage::Done => None,
            }
        });
    Ok(json_response_body(
        StatusCode::OK,
        // Fused: the compression layer's reader polls again after the end.
        Body::from_stream(pieces.fuse().boxed()),
    ))
}

enum Stage {
    Prefix(Rows, &'static str, Suffix),
    Rows(Rows, Suffix),
    Done,
}

/// `200` with a [`Reply`] of `crate::history`: a whole text with its
/// length, one zstd frame, or pieces streamed as they are written (cut
/// short like any streamed answer): zstd frames, a gzip member or a brotli
/// stream, marked so, or text, which the compression layer treats as any
/// answer.
impl IntoResponse for Reply {
    fn into_response(self) -> Response {
        use futures_util::TryStreamExt as _;
        let (pieces, form) = match self {
            Reply::Text(text) => return json_response_bytes(StatusCode::OK, text),
            Reply::Zstd(frame) => return zstd_response(frame),
            Reply::Streamed { pieces, form } => (pieces, form),
        };
        // Fused: the compression layer's reader polls again after the end.
        let mut response = json_response_body(
            StatusCode::OK,
            Body::from_stream(pieces.map_err(cut_short).fuse()),
        );
        let headers = response.headers_mut();
        match form {
            Form::Zstd => mark_encoded(headers, "zstd"),
            Form::Gzip => mark_encoded(headers, "gzip"),
            Form::Brotli => mark_encoded(headers, "br"),
            Form::Text => {}
        }
        response
    }
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
