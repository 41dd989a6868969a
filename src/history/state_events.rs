//! The state-events cache (issue 36, item 5): a protocol-3 dashboard frame
//! and dispatcher tick read `GET /repos/{repo}/state-events`, every durable
//! event of the journal and its tail from the latest run. On a young store
//! that answer is megabytes (3.8 MB on the 10,000-event journal the frame
//! benchmark seeds) and was read, rendered and compressed afresh on every
//! frame, although it changes only when the journal grows (a few times a
//! minute under Autobuild's dispatcher, against frames twice a second).
//!
//! The answer as the journal stood at sequence `n` can never change: events
//! are never changed or deleted and a journal's committed sequences are a
//! contiguous prefix. So each repository's last answer is kept with the tail
//! it was read at; a read first asks the journal's tail (one primary-key
//! lookup), answers from the entry when the tail is the same, and otherwise
//! reads the answer as of that tail and replaces the entry. The zstd form is
//! made from the text the first time a client asks for it, at the
//! compression layer's level, so a miss costs what the uncached read cost.
//! The answer is correct on every replica: whichever server read the tail,
//! the text for that tail is the same.
//!
//! Entries are bounded by bytes (text and zstd); the least recently read
//! repository goes first. An answer larger than a quarter of the capacity is
//! not kept: its tail is remembered, so the next read at the same tail
//! streams it straight away instead of trying to collect it again.

use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;

use super::kept::KeptAnswer;
use crate::bounded::{Bounded, Weighed};
use crate::store::StoreError;

/// The state-events answers of recently read repositories.
pub struct StateEventsCache {
    capacity: usize,
    by_repo: Mutex<Bounded<String, Arc<StateAnswer>>>,
}

/// One repository's answer at one tail of its journal.
pub struct StateAnswer {
    /// The journal's last sequence the answer was read at.
    pub tail: i64,
    /// The whole answer, `[`…`]`; `None` when it was too large to keep.
    pub kept: Option<KeptAnswer>,
}

impl Weighed for Arc<StateAnswer> {
    fn bytes(&self) -> usize {
        self.kept.as_ref().map_or(0, KeptAnswer::held_bytes)
    }
}

impl StateAnswer {
    /// The answer as one zstd frame, compressed the first time it is asked
    /// for (`None` when the text was not kept).
    pub fn zstd(&self, cache: &StateEventsCache, repo: &str) -> Result<Option<Bytes>, StoreError> {
        let Some(kept) = &self.kept else {
            return Ok(None);
        };
        let (frame, made) = kept.zstd()?;
        if made {
            cache.lock().reweigh(repo);
        }
        Ok(Some(frame))
    }
}

impl StateEventsCache {
    /// At most `capacity` bytes of answers (at least 1).
    pub fn new(capacity: usize) -> Self {
        StateEventsCache {
            capacity: capacity.max(1),
            by_repo: Mutex::new(Bounded::new(
                capacity.max(1),
                usize::MAX,
                "abstore_state_events_cache_bytes",
            )),
        }
    }

    /// The largest answer kept: a quarter of the capacity, so one large
    /// repository cannot push every other one out.
    pub fn max_answer_bytes(&self) -> usize {
        (self.capacity / 4).max(1)
    }

    /// `repo`'s answer when it was read at `tail`.
    pub fn get(&self, repo: &str, tail: i64) -> Option<Arc<StateAnswer>> {
        let mut by_repo = self.lock();
        let answer = by_repo.get(repo)?;
        (answer.tail == tail).then(|| answer.clone())
    }

    /// Keep `repo`'s answer at `tail` (`text` `None`: too large to keep),
    /// replacing an older one, then evict down to the capacity.
    pub fn insert(&self, repo: &str, tail: i64, text: Option<Bytes>) -> Arc<StateAnswer> {
        let answer = Arc::new(StateAnswer {
            tail,
            kept: text.map(KeptAnswer::new),
        });
        let mut by_repo = self.lock();
        match by_repo.get(repo) {
            // A concurrent read already kept a later tail: keep it.
            Some(kept) if kept.tail > tail => return answer,
            _ => {}
        }
        by_repo.insert(repo.to_owned(), answer.clone());
        answer
    }

    /// The bytes the entries hold now.
    pub fn bytes(&self) -> usize {
        self.lock().bytes()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Bounded<String, Arc<StateAnswer>>> {
        self.by_repo.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(n: usize) -> Option<Bytes> {
        Some(Bytes::from(vec![b'x'; n]))
    }

    #[test]
    fn an_answer_serves_only_its_own_tail() {
        let cache = StateEventsCache::new(1000);
        cache.insert("r", 5, text(10));
        assert!(cache.get("r", 5).is_some());
        assert!(cache.get("r", 6).is_none());
        assert!(cache.get("other", 5).is_none());
        // A later tail replaces the entry and its bytes.
        cache.insert("r", 6, text(20));
        assert!(cache.get("r", 5).is_none());
        assert_eq!(cache.bytes(), 20);
        // A slower read of an older tail does not replace a newer one.
        cache.insert("r", 4, text(30));
        assert!(cache.get("r", 6).is_some());
        assert_eq!(cache.bytes(), 20);
    }

    #[test]
    fn the_least_recently_read_goes_first_and_bytes_stay_bounded() {
        let cache = StateEventsCache::new(100);
        cache.insert("a", 1, text(40));
        cache.insert("b", 1, text(40));
        assert!(cache.get("a", 1).is_some()); // b is now the least recent
        cache.insert("c", 1, text(40));
        assert!(cache.get("b", 1).is_none());
        assert!(cache.get("a", 1).is_some() && cache.get("c", 1).is_some());
        assert_eq!(cache.bytes(), 80);
    }

    #[test]
    fn the_zstd_form_is_made_once_counted_and_decodes_to_the_text() {
        let cache = StateEventsCache::new(1 << 20);
        let json = Bytes::from(format!("[{}]", vec!["{\"seq\":1}"; 500].join(",")));
        let answer = cache.insert("r", 1, Some(json.clone()));
        let frame = answer.zstd(&cache, "r").unwrap().unwrap();
        assert_eq!(zstd::decode_all(&frame[..]).unwrap(), json);
        assert_eq!(cache.bytes(), json.len() + frame.len());
        let again = answer.zstd(&cache, "r").unwrap().unwrap();
        assert_eq!(again, frame);
        assert_eq!(cache.bytes(), json.len() + frame.len());
        // A too-large answer keeps its tail, and has no zstd form.
        let large = cache.insert("big", 3, None);
        assert!(large.zstd(&cache, "big").unwrap().is_none());
        assert!(cache.get("big", 3).unwrap().kept.is_none());
    }
}
