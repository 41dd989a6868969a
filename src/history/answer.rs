//! Writing one answer from the history cache: a task reads the live
//! segments and the chunks the cache lacks, and hands the answer to the
//! [`Answer`] the response's body drains, one piece at a time. In zstd the
//! pieces are frames; in gzip one member put together from deflated pieces
//! (`super::gzip`), each cached chunk's deflated once and kept; in brotli
//! one stream put together from catable streams (`super::brotli`), each
//! cached chunk's compressed once and kept; as text
//! ([`Form::Text`], any other client) a cached chunk is its frame
//! decompressed, in pieces of 64 KiB. Decompressing a sealed
//! chunk costs a fraction of reading its rows again (over TLS from
//! PostgreSQL most of all), so a whole-history read is served from the same
//! frames whatever its client takes.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::HistoryCache;
use super::brotli;
use super::cache::{Chunk, Recoded};
use super::frames::{
    CHUNK_LEVEL, CLOSE, COMMA, LIVE_LEVEL, OPEN, compress, constant_frame, encoder, finish,
    text_pieces,
};
use super::gzip::{self, Member};
use super::plan::{Segment, plan};
use super::seams::Seams;
use crate::protocol::ResourceRef;
use crate::store::rows::{AnswerTimes, Next};
use crate::store::{Listing, Rows, Store, StoreError};

/// How an answer is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// zstd frames, copied from the cache where it has them.
    Zstd,
    /// One gzip member, the cached chunks' deflated text copied.
    Gzip,
    /// One brotli stream, the cached chunks' streams copied.
    Brotli,
    /// The JSON text itself (which the compression layer compresses, if
    /// the client asks, as any answer).
    Text,
}

/// Pieces of text the writer may have ready before the body takes them.
/// Decompressing is several times faster than the compression layer's gzip
/// or brotli, and that layer flushes its encoder whenever the body has
/// nothing ready (async-compression's `bufread` encoder, on `Pending`): with
/// a single piece in hand it flushed once a piece, which cost a gzip answer
/// a quarter more CPU than the ordinary read's. At most this many pieces
/// (256 KiB) an answer.
const TEXT_AHEAD: usize = 4;

/// The answer to `seq > since` of `resource`'s log in `form`, built from
/// complete chunks and prefixes; `None` when the ordinary read should
/// answer (no complete chunk or prefix known in range, or as text no
/// complete chunk; an unknown resource, whose `404` it gives, has none).
pub(super) fn answer(
    store: &Arc<dyn Store>,
    cache: &Arc<HistoryCache>,
    resource: &ResourceRef,
    since: i64,
    form: Form,
) -> Option<Answer> {
    let last = cache.known_last(resource)?;
    let n = cache.chunk_events;
    let cached = cache.cached_end(resource, last / n);
    let segments = plan(since, last, n, cached)?;
    // Other than zstd, a prefix alone saves nothing: its rows are one short
    // read (or kept whole, `short_logs`), where a frame must be decoded.
    if form != Form::Zstd && !segments.iter().any(|s| matches!(s, Segment::Complete(_))) {
        return None;
    }
    let (tx, rx) = mpsc::channel(match form {
        Form::Zstd | Form::Brotli => 1,
        Form::Gzip | Form::Text => TEXT_AHEAD,
    });
    let (store, cache, resource) = (store.clone(), cache.clone(), resource.clone());
    tokio::spawn(async move {
        let out = Out {
            tx,
            times: cache.times,
            started: Instant::now(),
            form,
            member: Mutex::new(None),
            seams: Mutex::new(Seams::default()),
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
    form: Form,
    /// A gzip answer's member, from its start to its end (a lock only to
    /// be shared by `&self` across awaits; never contended).
    member: Mutex<Option<Member>>,
    /// Where a zstd answer's chunks are cut (`super::seams`; locked as
    /// `member` is).
    seams: Mutex<Seams>,
}

impl Out {
    /// Hand `frame` to the body (a zstd answer's through its seams, so
    /// that no chunk but the last ends where a frame does); `Gone` once the
    /// client went away or left it untaken for the stall bound, or the
    /// answer reached its deadline.
    async fn send(&self, frame: Bytes) -> Result<(), Stop> {
        if self.form != Form::Zstd {
            return self.deliver(frame).await;
        }
        let ready = self.seams().push(frame);
        for chunk in ready.into_iter().flatten() {
            self.deliver(chunk).await?;
        }
        Ok(())
    }

    /// Hand `chunk` to the body as it is.
    async fn deliver(&self, chunk: Bytes) -> Result<(), Stop> {
        if chunk.is_empty() {
            return Ok(());
        }
        let Some(wait) = self.times.next_wait(self.started) else {
            return Err(Stop::Gone);
        };
        match tokio::time::timeout(wait, self.tx.send(Frame::Bytes(chunk))).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) | Err(_) => Err(Stop::Gone),
        }
    }

    /// What a gzip answer starts with.
    async fn start(&self) -> Result<(), Stop> {
        if self.form != Form::Gzip {
            return Ok(());
        }
        let (member, header) = Member::start();
        *self.member() = Some(member);
        self.send(header).await
    }

    /// What a gzip or brotli answer ends with, or a zstd answer's last
    /// chunk.
    async fn end(&self) -> Result<(), Stop> {
        match self.form {
            Form::Brotli => return self.send(Bytes::from_static(brotli::END)).await,
            Form::Zstd => {
                let last = self.seams().finish();
                return self.deliver(last).await;
            }
            Form::Gzip | Form::Text => {}
        }
        let member = self.member().take();
        match member {
            Some(member) => self.send(member.finish()).await,
            None => Ok(()),
        }
    }

    fn member(&self) -> std::sync::MutexGuard<'_, Option<Member>> {
        self.member.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn seams(&self) -> std::sync::MutexGuard<'_, Seams> {
        self.seams.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Text read now, in the answer's form (not zstd: the live segments
    /// make their own frames).
    async fn text(&self, text: Bytes) -> Result<(), Stop> {
        if self.form == Form::Brotli {
            return self.send(brotli::text(&text)?).await;
        }
        let deflated = match self.member().as_mut() {
            Some(member) => Some(member.text(&text)?),
            None => None,
        };
        self.send(deflated.unwrap_or(text)).await
    }

    /// A fixed piece of JSON framing in the answer's form.
    async fn constant(
        &self,
        cell: &'static OnceLock<Bytes>,
        text: &'static [u8],
    ) -> Result<(), Stop> {
        match self.form {
            Form::Zstd => self.send(constant_frame(cell, text)).await,
            Form::Brotli => self.send(brotli::constant(text)).await,
            Form::Gzip | Form::Text => self.text(Bytes::from_static(text)).await,
        }
    }

    /// A cached chunk (`key`'s) in the answer's form: its frame copied, its
    /// deflated text or brotli stream copied (made and kept by the first
    /// answer that needs it), or its frame decompressed piece by piece.
    async fn chunk(
        &self,
        cache: &HistoryCache,
        key: &(ResourceRef, i64),
        chunk: Chunk,
    ) -> Result<(), Stop> {
        match self.form {
            Form::Zstd => return self.send(chunk.frame).await,
            Form::Gzip => {
                let deflated = match chunk.deflated {
                    Some(deflated) => deflated,
                    None => {
                        let deflated = gzip::deflate_frame(&chunk.frame)?;
                        let kept = Recoded::Deflated(deflated.clone());
                        cache.keep_recoded(key, chunk.end, kept);
                        deflated
                    }
                };
                if let Some(member) = self.member().as_mut() {
                    member.chunk(&deflated);
                }
                return self.send(deflated.bytes).await;
            }
            Form::Brotli => {
                let stream = match chunk.brotli {
                    Some(stream) => stream,
                    None => {
                        let stream = brotli::compress_frame(&chunk.frame)?;
                        let kept = Recoded::Brotli(stream.clone());
                        cache.keep_recoded(key, chunk.end, kept);
                        stream
                    }
                };
                return self.send(stream).await;
            }
            Form::Text => {}
        }
        for piece in text_pieces(&chunk.frame)? {
            self.send(Bytes::from(piece?)).await?;
        }
        Ok(())
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
    out.start().await?;
    out.constant(&OPEN, b"[").await?;
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
        if any {
            out.constant(&COMMA, b",").await?;
        }
        let key = (resource.clone(), index);
        match cached(cache, &key, end) {
            Some(chunk) => out.chunk(cache, &key, chunk).await?,
            None => read_chunk(store, cache, resource, index, end, out).await?,
        }
        any = true;
    }
    out.constant(&CLOSE, b"]").await?;
    out.end().await
}

/// The chunk `key` up to `end` when the cache holds exactly that.
fn cached(cache: &HistoryCache, key: &(ResourceRef, i64), end: i64) -> Option<Chunk> {
    let chunk = cache.get(key).filter(|chunk| chunk.end == end)?;
    metrics::counter!("abstore_history_chunks_total", "source" => "cache").increment(1);
    Some(chunk)
}

/// `resource`'s chunk `index` up to `end`, which the cache lacks: read,
/// compressed and kept, and sent in the answer's form (as text or gzip,
/// each piece as it is read; in brotli, compressed beside the frame and
/// kept too).
async fn read_chunk(
    store: &dyn Store,
    cache: &HistoryCache,
    resource: &ResourceRef,
    index: i64,
    end: i64,
    out: &Out,
) -> Result<(), Stop> {
    let start = index * cache.chunk_events;
    let mut rows = store.read(events(resource, start, Some(end))).await?;
    let mut encoder = encoder(CHUNK_LEVEL);
    let mut stream = (out.form == Form::Brotli).then(brotli::Stream::catable);
    while let Some(step) = rows.next().await {
        match step? {
            Next::Piece(piece) => {
                compress(&mut encoder, &piece)?;
                match stream.as_mut() {
                    Some(stream) => stream.write(&piece)?,
                    None if out.form != Form::Zstd => out.text(piece).await?,
                    None => {}
                }
            }
            Next::End(()) => break,
        }
    }
    // Fewer rows than the log was known to hold would mean the store lost
    // committed events (replaced under a running server): nothing is
    // kept, the answer is cut.
    let got = rows.count().unwrap_or(0);
    let expected = end - start;
    if i64::try_from(got).ok() != Some(expected) {
        return Err(Stop::Failed(StoreError::Corrupt(format!(
            "a history chunk expected to hold {expected} committed events read {got}"
        ))));
    }
    let frame = finish(encoder)?;
    metrics::counter!("abstore_history_chunks_total", "source" => "database").increment(1);
    let mut chunk = Chunk::new(end, frame.clone());
    chunk.brotli = stream.map(brotli::Stream::finish);
    let brotli = chunk.brotli.clone();
    cache.put((resource.clone(), index), chunk);
    match (out.form, brotli) {
        (Form::Zstd, _) => out.send(frame).await,
        (_, Some(stream)) => out.send(stream).await,
        _ => Ok(()),
    }
}

fn events(resource: &ResourceRef, since: i64, until: Option<i64>) -> Listing {
    Listing::Events {
        resource: resource.clone(),
        since,
        until,
    }
}

/// A live segment's rows, sent as they come (preceded by a comma when rows
/// came before): in zstd as one frame, sent as it fills, else in the
/// answer's form; whether it had any row.
async fn live(rows: &mut Rows, after_rows: bool, out: &Out) -> Result<bool, Stop> {
    let mut frame = (out.form == Form::Zstd).then(|| encoder(LIVE_LEVEL));
    let mut any = false;
    while let Some(step) = rows.next().await {
        let piece = match step? {
            Next::Piece(piece) => piece,
            Next::End(()) => break,
        };
        let comma = !any && after_rows;
        any = true;
        match frame.as_mut() {
            Some(encoder) => {
                if comma {
                    compress(encoder, b",")?;
                }
                compress(encoder, &piece)?;
                let ready = std::mem::take(encoder.get_mut());
                out.send(Bytes::from(ready)).await?;
            }
            None => {
                if comma {
                    out.constant(&COMMA, b",").await?;
                }
                out.text(piece).await?;
            }
        }
    }
    if let Some(encoder) = frame.filter(|_| any) {
        out.send(finish(encoder)?).await?;
    }
    Ok(any)
}
