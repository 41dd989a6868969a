//! The history cache's state: chunk frames in an LRU bounded by bytes, and
//! a lower bound on each recently read log's last sequence.

use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use hashlink::LruCache;

use super::gzip::Deflated;
use crate::bounded::{Bounded, Weighed};
use crate::protocol::ResourceRef;
use crate::store::rows::AnswerTimes;

/// The history cache: chunks' zstd frames, bounded by their total size, and
/// what reads have taught of each log's length.
pub struct HistoryCache {
    pub(super) chunk_events: i64,
    capacity: usize,
    /// How long a frame waits for the client to take it, and the whole
    /// answer may take (the streamed reads' bounds); then the answer is
    /// abandoned.
    pub(super) times: AnswerTimes,
    frames: Mutex<Bounded<(ResourceRef, i64), Chunk>>,
    /// A lower bound on the last sequence of each log a read has seen
    /// (recently read ones first).
    known: Mutex<LruCache<ResourceRef, i64>>,
}

/// How many logs' bounds [`HistoryCache`] remembers (about 100 bytes each):
/// a log it forgot is answered by the ordinary read once, which teaches it
/// again.
const KNOWN_LOGS: usize = 16_384;

/// A chunk's frame: its events from its start up to `end`, a sequence the
/// log had committed. The chunk is complete when `end` is the chunk's end.
/// Its text deflated for gzip answers, or as a brotli stream, is kept too
/// once an answer needed it.
#[derive(Clone)]
pub(super) struct Chunk {
    pub(super) end: i64,
    pub(super) frame: Bytes,
    pub(super) deflated: Option<Deflated>,
    pub(super) brotli: Option<Bytes>,
}

/// A chunk's text in another coding, made from its frame.
pub(super) enum Recoded {
    Deflated(Deflated),
    Brotli(Bytes),
}

impl Chunk {
    /// A chunk of `frame` alone.
    pub(super) fn new(end: i64, frame: Bytes) -> Chunk {
        Chunk {
            end,
            frame,
            deflated: None,
            brotli: None,
        }
    }

    /// The bytes it holds.
    fn size(&self) -> usize {
        self.frame.len()
            + self.deflated.as_ref().map_or(0, |d| d.bytes.len())
            + self.brotli.as_ref().map_or(0, Bytes::len)
    }
}

impl Weighed for Chunk {
    fn bytes(&self) -> usize {
        self.size()
    }
}

impl HistoryCache {
    /// Chunks of `chunk_events` events, at most `capacity` bytes of frames,
    /// a client given `times` to take each frame and the whole answer.
    pub fn new(chunk_events: u32, capacity: usize, times: AnswerTimes) -> Self {
        HistoryCache {
            chunk_events: i64::from(chunk_events.max(1)),
            capacity,
            times,
            frames: Mutex::new(Bounded::new(
                capacity,
                usize::MAX,
                "abstore_history_cache_bytes",
            )),
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

    /// Whether `resource`'s log is known to span a whole chunk: too long for
    /// the short-log cache to try (its whole answer is streamed, or nearly).
    pub fn known_long(&self, resource: &ResourceRef) -> bool {
        self.known_last(resource)
            .is_some_and(|last| last >= self.chunk_events)
    }

    /// The last sequence `resource`'s log is known to have reached.
    pub(super) fn known_last(&self, resource: &ResourceRef) -> Option<i64> {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        known.get(resource).copied()
    }

    pub(super) fn get(&self, key: &(ResourceRef, i64)) -> Option<Chunk> {
        self.frames().get(key).cloned()
    }

    /// Where the cached frame of `resource`'s chunk `index` ends, without
    /// touching its place in the LRU order.
    pub(super) fn cached_end(&self, resource: &ResourceRef, index: i64) -> Option<i64> {
        self.frames()
            .peek(&(resource.clone(), index))
            .map(|chunk| chunk.end)
    }

    /// Keep `chunk`, evicting the least recently used frames to make room.
    /// A chunk larger than an eighth of the cache is not kept: one huge
    /// chunk must not flush everything else.
    pub(super) fn put(&self, key: (ResourceRef, i64), chunk: Chunk) {
        if self.too_large(chunk.size()) {
            return;
        }
        self.frames().insert(key, chunk);
    }

    /// Keep `recoded` beside the cached frame it was made from (`key`'s,
    /// ending at `end`), if that frame is still the one cached and has no
    /// such coding yet.
    pub(super) fn keep_recoded(&self, key: &(ResourceRef, i64), end: i64, recoded: Recoded) {
        self.frames().change(key, |chunk| {
            let (added, held) = match &recoded {
                Recoded::Deflated(deflated) => (deflated.bytes.len(), chunk.deflated.is_some()),
                Recoded::Brotli(stream) => (stream.len(), chunk.brotli.is_some()),
            };
            if chunk.end != end || held || self.too_large(chunk.size() + added) {
                return;
            }
            match recoded {
                Recoded::Deflated(deflated) => chunk.deflated = Some(deflated),
                Recoded::Brotli(stream) => chunk.brotli = Some(stream),
            }
        });
    }

    /// Whether a chunk of `size` bytes is too large to keep: over an eighth
    /// of the cache, so that one huge chunk cannot flush everything else.
    fn too_large(&self, size: usize) -> bool {
        size > self.capacity / 8
    }

    fn frames(&self) -> std::sync::MutexGuard<'_, Bounded<(ResourceRef, i64), Chunk>> {
        self.frames.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ResourceKind;

    #[test]
    fn a_log_is_known_once_a_read_shows_an_event() {
        let cache = HistoryCache::new(10, 800, AnswerTimes::default());
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
        let cache = HistoryCache::new(10, 800, AnswerTimes::default());
        let r = ResourceRef::new(ResourceKind::Build, "b");
        let chunk = |size| Chunk::new(10, Bytes::from(vec![0u8; size]));
        for i in 0..10 {
            cache.put((r.clone(), i), chunk(100));
        }
        let held = (0..10).filter(|i| cache.get(&(r.clone(), *i)).is_some());
        assert_eq!(held.collect::<Vec<_>>(), vec![2, 3, 4, 5, 6, 7, 8, 9]);
        // Too large for the cache (over an eighth): sent, never kept.
        cache.put((r.clone(), 99), chunk(101));
        assert!(cache.get(&(r.clone(), 99)).is_none());
    }
}
