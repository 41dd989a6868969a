//! A request body with a stall bound: when no data arrives for the body-read
//! timeout, reading fails (the handler answers `400 validation`, like any
//! unreadable body) instead of waiting for the request timeout's `500`.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};

pub struct StallBoundedBody {
    inner: Incoming,
    limit: Duration,
    /// Armed on the first wait, re-armed after each frame; boxed so only
    /// bodies that actually wait pay for a timer.
    timer: Option<Pin<Box<Sleep>>>,
    progressed: bool,
    stalled: bool,
}

impl StallBoundedBody {
    pub fn new(inner: Incoming, limit: Duration) -> StallBoundedBody {
        StallBoundedBody {
            inner,
            limit,
            timer: None,
            progressed: false,
            stalled: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the request body stalled for longer than the body-read timeout")]
pub struct BodyStalled;

impl http_body::Body for StallBoundedBody {
    type Data = bytes::Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        if self.stalled {
            return Poll::Ready(None);
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                self.progressed = true;
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                let limit = self.limit;
                let progressed = std::mem::take(&mut self.progressed);
                let timer = self
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                if progressed {
                    timer.as_mut().reset(Instant::now() + limit);
                }
                if timer.as_mut().poll(cx).is_ready() {
                    self.stalled = true;
                    return Poll::Ready(Some(Err(BodyStalled.into())));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.stalled || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
