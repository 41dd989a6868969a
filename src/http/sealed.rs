//! Sealed history chunks (issue 22; docs/decisions.md, 21): Autobuild's
//! dashboards and dispatcher re-read whole event logs that only grow, so
//! most of every such answer is text the server already sent, compressed,
//! many times over. An event log is cut into chunks of `chunk_events`
//! sequence numbers (chunk `i` holds `i·n < seq ≤ (i+1)·n`); once a log's
//! last sequence reaches a chunk's end the chunk is *sealed*: events are
//! never changed or deleted, and a log's committed sequences are always a
//! contiguous prefix (appends to one resource are serialised), so its text
//! can never change again. Its zstd frame is kept in a bounded LRU cache and
//! copied into every later answer that spans it.
//!
//! A `GET …/events?since=` whose client takes zstd, with no `wait`, and
//! whose range spans at least one sealed chunk is answered as a sequence of
//! zstd frames (one stream, RFC 8878 section 3.1): `[`, the live head up to
//! the first chunk boundary, the sealed chunks (from the cache, or read,
//! compressed and cached), the live tail read in one statement, `]`.
//! Every other read takes the ordinary path, compressed by the compression
//! layer as before.
//!
//! Consistency: the answer is the log as of the tail's statement. Chunks read
//! before it are sealed, so reading them earlier, in other statements, or
//! from the cache gives exactly the text that statement's snapshot holds.
//!
//! Which chunks are sealed is learnt from the reads themselves, not asked of
//! the database on every read: a read of `seq > since` that returned `c`
//! rows proves the log reached `since + c` (sequences start at 1 and have no
//! gaps), and a log never shrinks, so that bound stays true on every
//! replica. A log is answered from chunks once a read has shown it past its
//! first chunk; a read that finds it grew further teaches the next one.

use std::io::Write as _;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use hashlink::LruCache;
use tokio::sync::mpsc;

use super::AppState;
use super::rows::cut_short;
use crate::protocol::ResourceRef;
use crate::store::rows::Next;
use crate::store::{Listing, Rows, StoreError};

/// The zstd level sealed chunks are compressed at: each is compressed once
/// and sent many times, so a better ratio than the live level is worth it.
const SEALED_LEVEL: i32 = 3;
/// The level of the live head and tail: as the compression layer's fastest.
const LIVE_LEVEL: i32 = 1;

/// The cache of sealed chunks' zstd frames, bounded by their total size.
pub struct SealedChunks {
    chunk_events: i64,
    capacity: usize,
    /// How long a frame waits for the client to take it (the streamed
    /// reads' stall bound); then the answer is abandoned.
    stall: Duration,
    cache: Mutex<Cache>,
    /// A lower bound on the last sequence of each log known to have sealed
    /// chunks (recently read ones first).
    known: Mutex<LruCache<ResourceRef, i64>>,
}

/// How many logs' bounds [`SealedChunks`] remembers (about 100 bytes each):
/// a log it forgot is answered by the ordinary read once, which teaches it
/// again.
const KNOWN_LOGS: usize = 16_384;

struct Cache {
    frames: LruCache<(ResourceRef, i64), Bytes>,
    bytes: usize,
}

impl SealedChunks {
    /// Chunks of `chunk_events` events, at most `capacity` bytes of frames,
    /// a client given `stall` to take each frame.
    pub fn new(chunk_events: u32, capacity: usize, stall: Duration) -> Self {
        SealedChunks {
            chunk_events: i64::from(chunk_events.max(1)),
            capacity,
            stall,
            cache: Mutex::new(Cache {
                frames: LruCache::new_unbounded(),
                bytes: 0,
            }),
            known: Mutex::new(LruCache::new(KNOWN_LOGS)),
        }
    }

    /// A read of `resource`'s events after `since` returned `rows` rows:
    /// its log has reached `since + rows`. Only logs past their first chunk
    /// are remembered; the rest are answered the ordinary way.
    pub fn learn(&self, resource: &ResourceRef, since: i64, rows: u64) {
        let reached = since
            .max(0)
            .saturating_add(i64::try_from(rows).unwrap_or(i64::MAX));
        if rows == 0 || reached < self.chunk_events {
            return;
        }
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        match known.get_mut(resource) {
            Some(last) => *last = (*last).max(reached),
            None => {
                known.insert(resource.clone(), reached);
            }
        }
    }

    /// The last sequence `resource`'s log is known to have reached.
    fn known_last(&self, resource: &ResourceRef) -> Option<i64> {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        known.get(resource).copied()
    }

    fn get(&self, key: &(ResourceRef, i64)) -> Option<Bytes> {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        cache.frames.get(key).cloned()
    }

    /// Keep `frame`, evicting the least recently used frames to make room.
    /// A frame larger than an eighth of the cache is not kept: one huge
    /// chunk must not flush everything else.
    fn put(&self, key: (ResourceRef, i64), frame: Bytes) {
        if frame.len() > self.capacity / 8 {
            return;
        }
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(old) = cache.frames.insert(key, frame.clone()) {
            cache.bytes -= old.len();
        }
        cache.bytes += frame.len();
        while cache.bytes > self.capacity {
            match cache.frames.remove_lru() {
                Some((_, evicted)) => cache.bytes -= evicted.len(),
                None => break,
            }
        }
        metrics::gauge!("abstore_history_cache_bytes").set(cache.bytes as f64);
    }
}

/// One part of an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Segment {
    /// Read now, compressed now, never cached: `since < seq ≤ until`.
    Live { since: i64, until: Option<i64> },
    /// The sealed chunk of this index.
    Sealed(i64),
}

/// The segments answering `seq > since` of a log whose last sequence is
/// `last`, in chunks of `n`; `None` when the range spans no sealed chunk.
fn plan(since: i64, last: i64, n: i64) -> Option<Vec<Segment>> {
    let since = since.max(0);
    let first = (since + n - 1) / n;
    let sealed_end = last / n;
    if first >= sealed_end {
        return None;
    }
    let mut segments = Vec::with_capacity((sealed_end - first + 2) as usize);
    if since < first * n {
        segments.push(Segment::Live {
            since,
            until: Some(first * n),
        });
    }
    segments.extend((first..sealed_end).map(Segment::Sealed));
    segments.push(Segment::Live {
        since: sealed_end * n,
        until: None,
    });
    Some(segments)
}

/// The answer to `seq > since` of `resource`'s log in zstd, built from
/// sealed chunks; `None` when the ordinary read should answer (no sealed
/// chunk known in range; an unknown resource, whose `404` it gives, has
/// none).
pub fn answer(
    state: &Arc<AppState>,
    sealed: &Arc<SealedChunks>,
    resource: &ResourceRef,
    since: i64,
) -> Option<Response> {
    let last = sealed.known_last(resource)?;
    let segments = plan(since, last, sealed.chunk_events)?;
    let (tx, rx) = mpsc::channel(1);
    let (state, sealed, resource) = (state.clone(), sealed.clone(), resource.clone());
    tokio::spawn(async move {
        let out = Out {
            tx,
            stall: sealed.stall,
        };
        match write(&state, &sealed, &resource, segments, &out).await {
            Ok(()) => {
                let _ = out.tx.send(Frame::Done).await;
            }
            Err(Stop::Gone) => {}
            Err(Stop::Failed(err)) => {
                let _ = out.tx.send(Frame::Failed(cut_short(err))).await;
            }
        }
    });
    let mut response = Response::new(Body::from_stream(body(rx)));
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("zstd"));
    headers.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    Some(response)
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
    Failed(std::io::Error),
}

/// The body: the frames, and an error in place of a proper end unless the
/// writer said the answer is whole, so that an answer abandoned half-way
/// (its writer gone) can never end like a whole one: hyper then closes the
/// connection instead.
fn body(
    rx: mpsc::Receiver<Frame>,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send {
    futures_util::stream::unfold(Some(rx), |rx| async move {
        let mut rx = rx?;
        match rx.recv().await {
            Some(Frame::Bytes(frame)) => Some((Ok(frame), Some(rx))),
            Some(Frame::Done) => None,
            Some(Frame::Failed(err)) => Some((Err(err), None)),
            None => Some((Err(std::io::Error::other("the answer was abandoned")), None)),
        }
    })
}

/// The body's sending end.
struct Out {
    tx: mpsc::Sender<Frame>,
    stall: Duration,
}

impl Out {
    /// Hand `frame` to the body; `Gone` once the client went away or left
    /// it untaken for the stall bound.
    async fn send(&self, frame: Bytes) -> Result<(), Stop> {
        if frame.is_empty() {
            return Ok(());
        }
        match tokio::time::timeout(self.stall, self.tx.send(Frame::Bytes(frame))).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) | Err(_) => Err(Stop::Gone),
        }
    }
}

async fn write(
    state: &AppState,
    sealed: &SealedChunks,
    resource: &ResourceRef,
    segments: Vec<Segment>,
    out: &Out,
) -> Result<(), Stop> {
    let n = sealed.chunk_events;
    out.send(constant_frame(&OPEN, b"[")).await?;
    // Whether a row was written: the next one needs a comma first.
    let mut any = false;
    for segment in segments {
        match segment {
            Segment::Sealed(index) => {
                let key = (resource.clone(), index);
                let frame = match sealed.get(&key) {
                    Some(frame) => {
                        metrics::counter!("abstore_history_chunks_total", "source" => "cache")
                            .increment(1);
                        frame
                    }
                    None => {
                        let listing = events(resource, index * n, Some((index + 1) * n));
                        let frame = seal(state.store.read(listing).await?).await?;
                        metrics::counter!("abstore_history_chunks_total", "source" => "database")
                            .increment(1);
                        sealed.put(key, frame.clone());
                        frame
                    }
                };
                if any {
                    out.send(constant_frame(&COMMA, b",")).await?;
                }
                out.send(frame).await?;
                any = true;
            }
            Segment::Live { since, until } => {
                let mut rows = state.store.read(events(resource, since, until)).await?;
                any |= live(&mut rows, any, out).await?;
                if until.is_none() {
                    // The tail shows how far the log has grown since.
                    sealed.learn(resource, since, rows.count().unwrap_or(0));
                }
            }
        }
    }
    out.send(constant_frame(&CLOSE, b"]")).await
}

fn events(resource: &ResourceRef, since: i64, until: Option<i64>) -> Listing {
    Listing::Events {
        resource: resource.clone(),
        since,
        until,
    }
}

/// A sealed chunk's rows as one zstd frame.
async fn seal(mut rows: Rows) -> Result<Bytes, Stop> {
    let mut encoder = encoder(SEALED_LEVEL);
    while let Some(step) = rows.next().await {
        match step? {
            Next::Piece(piece) => compress(&mut encoder, &piece)?,
            Next::End(()) => break,
        }
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

type Encoder = zstd::stream::write::Encoder<'static, Vec<u8>>;

fn encoder(level: i32) -> Encoder {
    // Only fails for an out-of-range level or without memory.
    Encoder::new(Vec::new(), level).expect("a zstd encoder at a valid level")
}

fn compress(encoder: &mut Encoder, text: &[u8]) -> Result<(), StoreError> {
    encoder
        .write_all(text)
        .map_err(|err| StoreError::Corrupt(format!("zstd: {err}")))
}

fn finish(encoder: Encoder) -> Result<Bytes, StoreError> {
    encoder
        .finish()
        .map(Bytes::from)
        .map_err(|err| StoreError::Corrupt(format!("zstd: {err}")))
}

static OPEN: OnceLock<Bytes> = OnceLock::new();
static COMMA: OnceLock<Bytes> = OnceLock::new();
static CLOSE: OnceLock<Bytes> = OnceLock::new();

/// The one-frame encoding of a fixed piece of JSON framing, made once.
fn constant_frame(cell: &'static OnceLock<Bytes>, text: &'static [u8]) -> Bytes {
    cell.get_or_init(|| {
        let mut encoder = encoder(LIVE_LEVEL);
        compress(&mut encoder, text)
            .and_then(|()| finish(encoder))
            .expect("compressing a constant in memory")
    })
    .clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ResourceKind;
    use Segment::{Live, Sealed};

    #[test]
    fn a_read_is_a_live_head_sealed_chunks_and_a_live_tail() {
        // Chunks of 10: 1-10, 11-20, 21-30 sealed at last = 35.
        assert_eq!(
            plan(0, 35, 10),
            Some(vec![
                Sealed(0),
                Sealed(1),
                Sealed(2),
                Live {
                    since: 30,
                    until: None
                }
            ])
        );
        assert_eq!(
            plan(4, 30, 10),
            Some(vec![
                Live {
                    since: 4,
                    until: Some(10)
                },
                Sealed(1),
                Sealed(2),
                Live {
                    since: 30,
                    until: None
                }
            ])
        );
        assert_eq!(
            plan(-7, 10, 10),
            Some(vec![
                Sealed(0),
                Live {
                    since: 10,
                    until: None
                }
            ])
        );
    }

    #[test]
    fn a_range_without_a_sealed_chunk_takes_the_ordinary_read() {
        assert_eq!(plan(0, 9, 10), None);
        assert_eq!(plan(1, 19, 10), None);
        assert_eq!(plan(20, 29, 10), None);
        assert_eq!(plan(35, 35, 10), None);
        assert_eq!(plan(0, 0, 10), None);
    }

    #[test]
    fn a_log_is_known_once_a_read_shows_it_past_its_first_chunk() {
        let cache = SealedChunks::new(10, 800, Duration::from_secs(1));
        let r = ResourceRef::new(ResourceKind::Build, "b");
        // Nine rows from the start: the first chunk is not sealed yet.
        cache.learn(&r, 0, 9);
        assert_eq!(cache.known_last(&r), None);
        // A tail read after 5 that found 7 rows: the log reached 12.
        cache.learn(&r, 5, 7);
        assert_eq!(cache.known_last(&r), Some(12));
        // A read that found nothing, or less than is known, teaches nothing.
        cache.learn(&r, 40, 0);
        cache.learn(&r, -3, 10);
        assert_eq!(cache.known_last(&r), Some(12));
        cache.learn(&r, 12, 30);
        assert_eq!(cache.known_last(&r), Some(42));
    }

    #[test]
    fn the_cache_keeps_its_bound_by_evicting_the_least_recently_used() {
        let cache = SealedChunks::new(10, 800, Duration::from_secs(1));
        let r = ResourceRef::new(ResourceKind::Build, "b");
        for i in 0..10 {
            cache.put((r.clone(), i), Bytes::from(vec![0u8; 100]));
        }
        let held = (0..10).filter(|i| cache.get(&(r.clone(), *i)).is_some());
        assert_eq!(held.collect::<Vec<_>>(), vec![2, 3, 4, 5, 6, 7, 8, 9]);
        // Too large for the cache (over an eighth): sent, never kept.
        cache.put((r.clone(), 99), Bytes::from(vec![0u8; 101]));
        assert!(cache.get(&(r.clone(), 99)).is_none());
    }

    #[test]
    fn frames_concatenate_into_one_json_text() {
        let mut body = Vec::new();
        body.extend_from_slice(&constant_frame(&OPEN, b"["));
        let mut sealed = encoder(SEALED_LEVEL);
        compress(&mut sealed, br#"{"seq":1},{"seq":2}"#).unwrap();
        body.extend_from_slice(&finish(sealed).unwrap());
        body.extend_from_slice(&constant_frame(&COMMA, b","));
        let mut live = encoder(LIVE_LEVEL);
        compress(&mut live, br#"{"seq":3}"#).unwrap();
        body.extend_from_slice(&finish(live).unwrap());
        body.extend_from_slice(&constant_frame(&CLOSE, b"]"));
        let text = zstd::decode_all(&body[..]).unwrap();
        assert_eq!(text, br#"[{"seq":1},{"seq":2},{"seq":3}]"#);
    }
}
