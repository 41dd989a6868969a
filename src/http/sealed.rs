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
//! The same holds for the committed beginning of the log's last, unfinished
//! chunk (a finished build's whole log of ~100 events, most often): its
//! frame is kept as the chunk's *prefix* up to the sequence it reached, and
//! made again, longer, once the log has grown a quarter of a chunk past it.
//!
//! A `GET …/events?since=` whose client takes zstd, with no `wait`, and
//! whose range spans at least one sealed chunk or a chunk's prefix is
//! answered as a sequence of zstd frames (one stream, RFC 8878 section
//! 3.1): `[`, the live head up to the first chunk boundary, the sealed
//! chunks and the last chunk's prefix (from the cache, or read, compressed
//! and cached), the live tail read in one statement, `]`. Every other read
//! takes the ordinary path, compressed by the compression layer as before.
//!
//! Consistency: the answer is the log as of the tail's statement. What is
//! read before it was committed before (a known lower bound of the log), so
//! reading it earlier, in other statements, or from the cache gives exactly
//! the text that statement's snapshot holds.
//!
//! Which chunks are sealed is learnt from the reads themselves, not asked of
//! the database on every read: a read of `seq > since` that returned `c`
//! rows proves the log reached `since + c` (sequences start at 1 and have no
//! gaps), and a log never shrinks, so that bound stays true on every
//! replica. A log is answered from chunks once a read has shown it holds an
//! event; a read that finds it grew further teaches the next one.

use std::io::Write as _;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use hashlink::LruCache;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::AppState;
use super::rows::cut_short;
use crate::protocol::ResourceRef;
use crate::store::rows::{AnswerTimes, Next};
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
    /// How long a frame waits for the client to take it, and the whole
    /// answer may take (the streamed reads' bounds); then the answer is
    /// abandoned.
    times: AnswerTimes,
    cache: Mutex<Cache>,
    /// A lower bound on the last sequence of each log a read has seen
    /// (recently read ones first).
    known: Mutex<LruCache<ResourceRef, i64>>,
}

/// How many logs' bounds [`SealedChunks`] remembers (about 100 bytes each):
/// a log it forgot is answered by the ordinary read once, which teaches it
/// again.
const KNOWN_LOGS: usize = 16_384;

struct Cache {
    frames: LruCache<(ResourceRef, i64), Chunk>,
    bytes: usize,
}

/// A chunk's frame: its events from its start up to `end`, a sequence the
/// log had committed. The chunk is sealed when `end` is the chunk's end.
#[derive(Clone)]
struct Chunk {
    end: i64,
    frame: Bytes,
}

impl SealedChunks {
    /// Chunks of `chunk_events` events, at most `capacity` bytes of frames,
    /// a client given `times` to take each frame and the whole answer.
    pub fn new(chunk_events: u32, capacity: usize, times: AnswerTimes) -> Self {
        SealedChunks {
            chunk_events: i64::from(chunk_events.max(1)),
            capacity,
            times,
            cache: Mutex::new(Cache {
                frames: LruCache::new_unbounded(),
                bytes: 0,
            }),
            known: Mutex::new(LruCache::new(KNOWN_LOGS)),
        }
    }

    /// A read of `resource`'s events after `since` returned `rows` rows:
    /// its log has reached `since + rows`.
    pub fn learn(&self, resource: &ResourceRef, since: i64, rows: u64) {
        if rows == 0 {
            return;
        }
        let reached = since
            .max(0)
            .saturating_add(i64::try_from(rows).unwrap_or(i64::MAX));
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

    fn get(&self, key: &(ResourceRef, i64)) -> Option<Chunk> {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        cache.frames.get(key).cloned()
    }

    /// Where the cached frame of `resource`'s chunk `index` ends, without
    /// touching its place in the LRU order.
    fn cached_end(&self, resource: &ResourceRef, index: i64) -> Option<i64> {
        let cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        cache
            .frames
            .peek(&(resource.clone(), index))
            .map(|chunk| chunk.end)
    }

    /// Keep `chunk`, evicting the least recently used frames to make room.
    /// A frame larger than an eighth of the cache is not kept: one huge
    /// chunk must not flush everything else.
    fn put(&self, key: (ResourceRef, i64), chunk: Chunk) {
        if chunk.frame.len() > self.capacity / 8 {
            return;
        }
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        let size = chunk.frame.len();
        if let Some(old) = cache.frames.insert(key, chunk) {
            cache.bytes -= old.frame.len();
        }
        cache.bytes += size;
        while cache.bytes > self.capacity {
            match cache.frames.remove_lru() {
                Some((_, evicted)) => cache.bytes -= evicted.frame.len(),
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
    /// The chunk of this index from its start up to `end`, a sequence the
    /// log has committed: the beginning of its last, unfinished chunk.
    Prefix { index: i64, end: i64 },
}

/// The segments answering `seq > since` of a log whose last sequence is
/// at least `last`, in chunks of `n`, when the cache holds the last chunk's
/// prefix up to `cached`; `None` when the range spans no sealed chunk and no
/// prefix (the ordinary read answers).
///
/// `since` comes from the request (any `i64`, `1e300` saturating to
/// `i64::MAX`) and `last` from the log: nothing here may overflow, so the
/// first chunk is a rounded-up division that cannot wrap, and the range is
/// known to end inside the log (`first ≤ open`) before anything is
/// multiplied or allocated.
fn plan(since: i64, last: i64, n: i64, cached: Option<i64>) -> Option<Vec<Segment>> {
    let since = since.max(0);
    let last = last.max(0);
    let n = n.max(1);
    let first = since / n + i64::from(since % n != 0);
    // The chunk `last` is in, or the next one when `last` ends a chunk.
    let open = last / n;
    if first > open {
        return None;
    }
    // `open · n ≤ last` and `first ≤ open`: these products cannot overflow.
    let start = open * n;
    // The open chunk's cached prefix is used while the log has grown less
    // than a quarter of a chunk past it; then it is made again, longer.
    let prefix_end = (last > start).then(|| match cached {
        Some(end) if end > start && end.saturating_add((n / 4).max(1)) > last => end,
        _ => last,
    });
    if first == open && prefix_end.is_none() {
        return None;
    }
    // One segment per sealed chunk in range: bounded by the log's length,
    // which only real appends grow.
    let mut segments = Vec::with_capacity(usize::try_from(open - first).ok()?.saturating_add(3));
    if since < first * n {
        segments.push(Segment::Live {
            since,
            until: Some(first * n),
        });
    }
    segments.extend((first..open).map(Segment::Sealed));
    let tail_since = match prefix_end {
        Some(end) => {
            segments.push(Segment::Prefix { index: open, end });
            end
        }
        None => start,
    };
    segments.push(Segment::Live {
        since: tail_since,
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
    let n = sealed.chunk_events;
    let cached = sealed.cached_end(resource, last / n);
    let segments = plan(since, last, n, cached)?;
    let (tx, rx) = mpsc::channel(1);
    let (state, sealed, resource) = (state.clone(), sealed.clone(), resource.clone());
    tokio::spawn(async move {
        let out = Out {
            tx,
            times: sealed.times,
            started: Instant::now(),
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
        let (index, end) = match segment {
            Segment::Live { since, until } => {
                let mut rows = state.store.read(events(resource, since, until)).await?;
                any |= live(&mut rows, any, out).await?;
                if until.is_none() {
                    // The tail shows how far the log has grown since.
                    sealed.learn(resource, since, rows.count().unwrap_or(0));
                }
                continue;
            }
            Segment::Sealed(index) => (index, (index + 1) * n),
            Segment::Prefix { index, end } => (index, end),
        };
        let frame = cached_or_read(state, sealed, resource, index, end).await?;
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
    state: &AppState,
    sealed: &SealedChunks,
    resource: &ResourceRef,
    index: i64,
    end: i64,
) -> Result<Bytes, Stop> {
    let key = (resource.clone(), index);
    if let Some(chunk) = sealed.get(&key).filter(|chunk| chunk.end == end) {
        metrics::counter!("abstore_history_chunks_total", "source" => "cache").increment(1);
        return Ok(chunk.frame);
    }
    let start = index * sealed.chunk_events;
    let rows = state.store.read(events(resource, start, Some(end))).await?;
    let frame = seal(rows, end - start).await?;
    metrics::counter!("abstore_history_chunks_total", "source" => "database").increment(1);
    sealed.put(
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
async fn seal(mut rows: Rows, expected: i64) -> Result<Bytes, Stop> {
    let mut encoder = encoder(SEALED_LEVEL);
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

    use Segment::Prefix;

    fn tail(since: i64) -> Segment {
        Live { since, until: None }
    }

    #[test]
    fn a_read_is_a_live_head_sealed_chunks_and_a_live_tail() {
        // Chunks of 10: 1-10, 11-20, 21-30 sealed at last = 30.
        assert_eq!(
            plan(0, 30, 10, None),
            Some(vec![Sealed(0), Sealed(1), Sealed(2), tail(30)])
        );
        assert_eq!(
            plan(4, 30, 10, None),
            Some(vec![
                Live {
                    since: 4,
                    until: Some(10)
                },
                Sealed(1),
                Sealed(2),
                tail(30)
            ])
        );
        assert_eq!(plan(-7, 10, 10, None), Some(vec![Sealed(0), tail(10)]));
    }

    #[test]
    fn the_last_chunk_is_answered_from_its_committed_prefix() {
        // Last = 35: 31-35 is the open chunk's prefix, made now.
        assert_eq!(
            plan(0, 35, 10, None),
            Some(vec![
                Sealed(0),
                Sealed(1),
                Sealed(2),
                Prefix { index: 3, end: 35 },
                tail(35)
            ])
        );
        // A short log: its prefix alone.
        assert_eq!(
            plan(0, 7, 10, None),
            Some(vec![Prefix { index: 0, end: 7 }, tail(7)])
        );
        // A cached prefix to 33 serves while the log is less than a
        // quarter of a chunk (2 events) past it; then it is made again.
        assert_eq!(
            plan(0, 34, 10, Some(33)),
            Some(vec![
                Sealed(0),
                Sealed(1),
                Sealed(2),
                Prefix { index: 3, end: 33 },
                tail(33)
            ])
        );
        assert_eq!(
            plan(20, 35, 10, Some(33)),
            Some(vec![Sealed(2), Prefix { index: 3, end: 35 }, tail(35)])
        );
        // A cached prefix beyond what reads have taught is committed too.
        assert_eq!(
            plan(0, 5, 10, Some(8)),
            Some(vec![Prefix { index: 0, end: 8 }, tail(8)])
        );
        // A range starting inside a sealed chunk: its head, then the rest.
        assert_eq!(
            plan(25, 35, 10, Some(35)),
            Some(vec![
                Live {
                    since: 25,
                    until: Some(30)
                },
                Prefix { index: 3, end: 35 },
                tail(35)
            ])
        );
    }

    #[test]
    fn a_range_without_a_cacheable_chunk_takes_the_ordinary_read() {
        // Starting inside the open chunk: nothing before its tail is whole.
        assert_eq!(plan(1, 9, 10, None), None);
        assert_eq!(plan(21, 29, 10, Some(25)), None);
        assert_eq!(plan(35, 35, 10, None), None);
        // An empty log, or a range past a log that ends a chunk.
        assert_eq!(plan(0, 0, 10, None), None);
        assert_eq!(plan(20, 20, 10, None), None);
    }

    #[test]
    fn a_since_at_the_integers_edge_plans_nothing_and_never_overflows() {
        // `since=1e300` saturates to i64::MAX (issue 33): rounding it up to
        // a chunk used to wrap in release builds and ask for ~10^18 bytes.
        for since in [i64::MAX, i64::MAX - 1, i64::MAX - 255, i64::MAX / 2] {
            for n in [1, 8, 256, 65_536] {
                assert_eq!(plan(since, 30, n, None), None, "{since} {n}");
                // A log as long as the integers go: at most a head, the
                // last chunk's prefix and the tail, computed without wrapping.
                if since > i64::MAX - n {
                    let planned = plan(since, i64::MAX, n, Some(i64::MAX));
                    assert!(planned.is_none_or(|s| s.len() <= 3), "{since} {n}");
                }
            }
        }
        assert_eq!(plan(i64::MIN, 30, 10, None), plan(0, 30, 10, None));
    }

    #[test]
    fn a_log_is_known_once_a_read_shows_an_event() {
        let cache = SealedChunks::new(10, 800, AnswerTimes::default());
        let r = ResourceRef::new(ResourceKind::Build, "b");
        // No read yet, or one that found nothing: nothing known.
        assert_eq!(cache.known_last(&r), None);
        cache.learn(&r, 0, 0);
        assert_eq!(cache.known_last(&r), None);
        cache.learn(&r, 0, 9);
        assert_eq!(cache.known_last(&r), Some(9));
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
        let cache = SealedChunks::new(10, 800, AnswerTimes::default());
        let r = ResourceRef::new(ResourceKind::Build, "b");
        let chunk = |size| Chunk {
            end: 10,
            frame: Bytes::from(vec![0u8; size]),
        };
        for i in 0..10 {
            cache.put((r.clone(), i), chunk(100));
        }
        let held = (0..10).filter(|i| cache.get(&(r.clone(), *i)).is_some());
        assert_eq!(held.collect::<Vec<_>>(), vec![2, 3, 4, 5, 6, 7, 8, 9]);
        // Too large for the cache (over an eighth): sent, never kept.
        cache.put((r.clone(), 99), chunk(101));
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
