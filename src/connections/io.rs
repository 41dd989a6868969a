//! The socket as the HTTP library sees it: reads tell the connection's
//! [`Activity`] that bytes arrived, writes whether the client is taking the
//! answer, and the library's own rejections are given the protocol's JSON
//! error body.
//!
//! hyper answers a request it cannot parse (a malformed request line or
//! header, a too-long target, too-large headers) itself, before any service
//! runs, with an empty body, and offers no hook to change it. Its answer is
//! recognisable on the way out: one of those statuses with
//! `content-length: 0`, written while no request of ours is in progress.
//! Every response this server builds carries a JSON body, so that shape is
//! never one of ours; it is replaced by the same status with a JSON body.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::activity::Activity;

pub struct WatchedStream {
    stream: TcpStream,
    activity: Arc<Activity>,
    /// A replacement response being written, and how many of hyper's bytes
    /// to report written once it is out.
    replacing: Option<Replacement>,
}

struct Replacement {
    bytes: Vec<u8>,
    written: usize,
    reported: usize,
}

impl WatchedStream {
    pub fn new(stream: TcpStream, activity: Arc<Activity>) -> WatchedStream {
        WatchedStream {
            stream,
            activity,
            replacing: None,
        }
    }

    /// Write out a pending replacement; then report hyper's bytes as written.
    fn poll_replacement(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<usize>>> {
        let Some(replacement) = self.replacing.as_mut() else {
            return Poll::Ready(Ok(None));
        };
        while replacement.written < replacement.bytes.len() {
            let rest = &replacement.bytes[replacement.written..];
            let n = ready!(Pin::new(&mut self.stream).poll_write(cx, rest))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            replacement.written += n;
        }
        let reported = replacement.reported;
        self.replacing = None;
        Poll::Ready(Ok(Some(reported)))
    }

    /// Tell the connection's activity whether the socket took the bytes
    /// (a client not reading shows as writes that stay pending).
    fn watch_write(&self, polled: &Poll<io::Result<usize>>) {
        match polled {
            Poll::Pending => self.activity.on_write_blocked(),
            Poll::Ready(Ok(n)) if *n > 0 => self.activity.on_write(),
            Poll::Ready(_) => {}
        }
    }

    /// Start replacing `head` if it is one of hyper's empty rejections.
    fn intercept(&mut self, head: &[u8]) -> bool {
        if self.activity.in_flight() {
            return false;
        }
        match rejection_replacement(head) {
            Some(bytes) => {
                self.replacing = Some(Replacement {
                    bytes,
                    written: 0,
                    reported: head.len(),
                });
                true
            }
            None => false,
        }
    }
}

/// The statuses hyper answers on its own, and what the client is told.
const REJECTIONS: [(&str, &str, &str); 3] = [
    ("400", "Bad Request", "malformed HTTP request"),
    ("414", "URI Too Long", "request target too long"),
    (
        "431",
        "Request Header Fields Too Large",
        "request header fields too large",
    ),
];

/// The JSON-bodied response replacing `head`, when `head` is a complete
/// empty-bodied rejection written by hyper.
fn rejection_replacement(head: &[u8]) -> Option<Vec<u8>> {
    // Cheap first look: this runs on ordinary responses' writes too.
    let code = head.get(9..12)?;
    if !head.starts_with(b"HTTP/1.") || !REJECTIONS.iter().any(|(c, _, _)| c.as_bytes() == code) {
        return None;
    }
    let text = std::str::from_utf8(head).ok()?;
    let status_line = text.split("\r\n").next()?;
    let (_, _, message) = REJECTIONS.iter().find(|(code, reason, _)| {
        status_line.get(9..) == Some(format!("{code} {reason}").as_str())
    })?;
    let empty = text.ends_with("\r\n\r\n")
        && text
            .split("\r\n")
            .any(|line| line.eq_ignore_ascii_case("content-length: 0"));
    if !empty {
        return None;
    }
    let body = serde_json::json!({ "error": message, "kind": "validation" }).to_string();
    Some(
        format!(
            "{status_line}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

impl AsyncRead for WatchedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.on_read();
        }
        polled
    }
}

impl AsyncWrite for WatchedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.replacing.is_none() && !this.intercept(buf) {
            let polled = Pin::new(&mut this.stream).poll_write(cx, buf);
            this.watch_write(&polled);
            return polled;
        }
        let reported = ready!(this.poll_replacement(cx))?;
        Poll::Ready(Ok(reported.unwrap_or(0)))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let first = bufs.iter().find(|b| !b.is_empty()).map_or(&[][..], |b| b);
        if this.replacing.is_none() && !this.intercept(first) {
            let polled = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
            this.watch_write(&polled);
            return polled;
        }
        let reported = ready!(this.poll_replacement(cx))?;
        Poll::Ready(Ok(reported.unwrap_or(0)))
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_replacement(cx))?;
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_replacement(cx))?;
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::rejection_replacement;

    #[test]
    fn only_empty_library_rejections_are_replaced() {
        let hyper =
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        let text = String::from_utf8(rejection_replacement(hyper).unwrap()).unwrap();
        assert!(text.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"));
        assert!(
            text.ends_with(r#"{"error":"request header fields too large","kind":"validation"}"#)
        );
        let ours = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 50\r\n\r\n";
        assert!(rejection_replacement(ours).is_none());
        assert!(rejection_replacement(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").is_none());
    }
}
