//! Writing one answer from the history cache: a task reads the live
//! segments and the chunks the cache lacks, and hands zstd frames to the
//! [`Answer`] the response's body drains, one frame at a time.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::HistoryCache;
use super::cache::Chunk;
use super::frames::{
    CHUNK_LEVEL, CLOSE, COMMA, LIVE_LEVEL, OPEN, compress, constant_frame, encoder, finish,
};
use super::plan::{Segment, plan};
use crate::protocol::ResourceRef;
use crate::store::rows::{AnswerTimes, Next};
use crate::store::{Listing, Rows, Store, StoreError};

/// The answer to `seq > since` of `resource`'s log as zstd frames, built
/// from complete chunks and prefixes; `None` when the ordinary read should
/// answer (no complete chunk or prefix known in range; an unknown resource,
/// whose `404` it gives, has none).
pub fn answer(
    store: &Arc<dyn Store>,
    cache: &Arc<HistoryCache>,
    resource: &ResourceRef,
    since: i64,
) -> Option<Answer> {
    let last = cache.known_last(resource)?;
    let n = cache.chunk_events;
    let cached = cache.cached_end(resource, last / n);
    let segments = plan(since, last, n, cached)?;
    let (tx, rx) = mpsc::channel(1);
    let (store, cache, resource) = (store.clone(), cache.clone(), resource.clone());
    tokio::spawn(async move {
        let out = Out {
            tx,
            times: cache.times,
            started: Instant::now(),
        };
        match write(&*store, &cache, &resource, segments, &out).await {
            Ok(()) => {
                let _ = out.tx.send(Frame::Done).await;
            }
            Err(Stop::Gone) => {}
            Err(Stop::Failed(err)) => {
                let _ = out.tx.send(Frame::Failed(err)).await;
            }
        }
    });
    Some(Answer { rx })
}

/// An answer's frames as its writer hands them over.
pub struct Answer {
    rx: mpsc::Receiver<Frame>,
}

impl Answer {
    /// The frames, and an error in place of a proper end unless the writer
    /// said the answer is whole, so that an answer abandoned half-way (its
    /// writer gone) can never end like a whole one.
    pub fn into_stream(self) -> impl futures_util::Stream<Item = Result<Bytes, StoreError>> + Send {
        futures_util::stream::unfold(Some(self.rx), |rx| async move {
            let mut rx = rx?;
            match rx.recv().await {
                Some(Frame::Bytes(frame)) => Some((Ok(frame), Some(rx))),
                Some(Frame::Done) => None,
                Some(Frame::Failed(err)) => Some((Err(err), None)),
                None => Some((
                    Err(StoreError::Aborted("the answer was abandoned".into())),
                    None,
                )),
            }
        })
    }
}

/// Why writing an answer stopped early.
enum Stop {
    /// The client went away.
    Gone,
    /// A read failed after the status was sent: the body is cut short.
    Failed(StoreError),
}

impl From<StoreError> for Stop {
    fn from(err: StoreError) -> Self {
        Stop::Failed(err)
    }
}

/// What the writing task hands the body.
enum Frame {
    Bytes(Bytes),
    /// The answer is whole.
    Done,
    /// The answer cannot be finished.
    Failed(StoreError),
}

/// The body's sending end.
struct Out {
    tx: mpsc::Sender<Frame>,
    times: AnswerTimes,
    started: Instant,
}

impl Out {
    /// Hand `frame` to the body; `Gone` once the client went away or left
    /// it untaken for the stall bound, or the answer reached its deadline.
    async fn send(&self, frame: Bytes) -> Result<(), Stop> {
        if frame.is_empty() {
            return Ok(());
        }
        let Some(wait) = self.times.next_wait(self.started) else {
            return Err(Stop::Gone);
        };
        match tokio::time::timeout(wait, self.tx.send(Frame::Bytes(frame))).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) | Err(_) => Err(Stop::Gone),
        }
    }
}

async fn write(
    store: &dyn Store,
    cache: &HistoryCache,
    resource: &ResourceRef,
    segments: Vec<Segment>,
    out: &Out,
) -> Result<(), Stop> {
    let n = cache.chunk_events;
    out.send(constant_frame(&OPEN, b"[")).await?;
    // Whether a row was written: the next one needs a comma first.
    let mut any = false;
    for segment in segments {
        let (index, end) = match segment {
            Segment::Live { since, until } => {
                let mut rows = store.read(events(resource, since, until)).await?;
                any |= live(&mut rows, any, out).await?;
                if until.is_none() {
                    // The tail shows how far the log has grown since.
                    cache.learn(resource, since, rows.count().unwrap_or(0));
                }
                continue;
            }
            Segment::Complete(index) => (index, (index + 1) * n),
            Segment::Prefix { index, end } => (index, end),
        };
        let frame = cached_or_read(store, cache, resource, index, end).await?;
        if any {
            out.send(constant_frame(&COMMA, b",")).await?;
        }
        out.send(frame).await?;
        any = true;
    }
    out.send(constant_frame(&CLOSE, b"]")).await
}

/// The frame of `resource`'s chunk `index` up to `end`: from the cache when
/// it holds exactly that, else read, compressed and kept.
async fn cached_or_read(
    store: &dyn Store,
    cache: &HistoryCache,
    resource: &ResourceRef,
    index: i64,
    end: i64,
) -> Result<Bytes, Stop> {
    let key = (resource.clone(), index);
    if let Some(chunk) = cache.get(&key).filter(|chunk| chunk.end == end) {
        metrics::counter!("abstore_history_chunks_total", "source" => "cache").increment(1);
        return Ok(chunk.frame);
    }
    let start = index * cache.chunk_events;
    let rows = store.read(events(resource, start, Some(end))).await?;
    let frame = chunk_frame(rows, end - start).await?;
    metrics::counter!("abstore_history_chunks_total", "source" => "database").increment(1);
    cache.put(
        key,
        Chunk {
            end,
            frame: frame.clone(),
        },
    );
    Ok(frame)
}

fn events(resource: &ResourceRef, since: i64, until: Option<i64>) -> Listing {
    Listing::Events {
        resource: resource.clone(),
        since,
        until,
    }
}

/// A chunk's rows, `expected` of them, as one zstd frame. Fewer rows than
/// the log was known to hold would mean the store lost committed events
/// (replaced under a running server): nothing is kept, the answer is cut.
async fn chunk_frame(mut rows: Rows, expected: i64) -> Result<Bytes, Stop> {
    let mut encoder = encoder(CHUNK_LEVEL);
    while let Some(step) = rows.next().await {
        match step? {
            Next::Piece(piece) => compress(&mut encoder, &piece)?,
            Next::End(()) => break,
        }
    }
    let got = rows.count().unwrap_or(0);
    if i64::try_from(got).ok() != Some(expected) {
        return Err(Stop::Failed(StoreError::Corrupt(format!(
            "a history chunk expected to hold {expected} committed events read {got}"
        ))));
    }
    Ok(finish(encoder)?)
}

/// A live segment's rows as one zstd frame, sent as it fills (preceded by a
/// comma when rows came before); whether it had any row.
async fn live(rows: &mut Rows, after_rows: bool, out: &Out) -> Result<bool, Stop> {
    let mut encoder = encoder(LIVE_LEVEL);
    let mut any = false;
    while let Some(step) = rows.next().await {
        match step? {
            Next::Piece(piece) => {
                if !any && after_rows {
                    compress(&mut encoder, b",")?;
                }
                any = true;
                compress(&mut encoder, &piece)?;
                let ready = std::mem::take(encoder.get_mut());
                out.send(Bytes::from(ready)).await?;
            }
            Next::End(()) => break,
        }
    }
    if any {
        out.send(finish(encoder)?).await?;
    }
    Ok(any)
}
