//! The short-log cache (issue 36, item 5): Autobuild's dashboards re-read the
//! whole log of every build (about 50–140 events) every frame, twice a
//! second, and most of those logs have not changed since the last frame. On a
//! SQLite file, each such read was a hop to a reader thread and a statement
//! (about half of the request's CPU, `docs/benchmarks.md`); the answer is now
//! kept, whole, and served from memory until the log is written again.
//!
//! Exactness rests on one fact: on a SQLite file this process is the only
//! writer of event logs (the store's lock on the database file keeps other
//! servers out, whatever path names the file;
//! `abstore import` only adds resources that do not exist or are identical;
//! no command deletes events or resources), and every write to a log is
//! announced by the notifier after its commit and before its client is
//! answered ([`crate::store`]'s `AfterCommit`). So:
//!
//! - a write announced drops the log's entry ([`ShortLogCache::forget`]);
//! - a read that misses first marks the log *being read* with a fresh ticket
//!   ([`ShortLogCache::begin`]), then reads; it keeps its answer only if the
//!   mark is still its own ([`ShortLogCache::finish`]): a write announced
//!   meanwhile removed it, so an answer that may predate that write is never
//!   kept;
//! - a write acknowledged before a read began was announced before it too,
//!   and is in that read's snapshot, which starts after the mark.
//!
//! On PostgreSQL another replica's append reaches this process's notifier
//! only through LISTEN, after that append was acknowledged: the cache is not
//! used there.
//!
//! Only whole-log reads (`since` ≤ 0, no `wait`) of answers complete in one
//! piece are kept; a log the history cache knows to be long is not tried.
//! Entries are bounded by bytes (text and zstd), least recently read first.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;

use super::kept::KeptAnswer;
use crate::bounded::{Bounded, Weighed};
use crate::protocol::ResourceRef;
use crate::store::StoreError;

/// At most this many logs have a slot (kept or being read): a read whose
/// client left before it ended leaves its mark until a write or eviction.
const MAX_SLOTS: usize = 65_536;

pub struct ShortLogCache {
    inner: Mutex<Inner>,
}

struct Inner {
    slots: Bounded<ResourceRef, Slot>,
    next_ticket: u64,
}

enum Slot {
    /// A read that missed is under way; its ticket.
    Reading(u64),
    Kept(Arc<KeptAnswer>),
}

impl Weighed for Slot {
    fn bytes(&self) -> usize {
        match self {
            Slot::Reading(_) => 0,
            Slot::Kept(kept) => kept.held_bytes(),
        }
    }
}

/// A missed read's claim to keep its answer.
pub struct Ticket(u64);

impl ShortLogCache {
    /// At most `capacity` bytes of answers (at least 1).
    pub fn new(capacity: usize) -> Self {
        ShortLogCache {
            inner: Mutex::new(Inner {
                slots: Bounded::new(capacity.max(1), MAX_SLOTS, "abstore_short_log_cache_bytes"),
                next_ticket: 0,
            }),
        }
    }

    /// `resource`'s whole log, when kept.
    pub fn get(&self, resource: &ResourceRef) -> Option<Arc<KeptAnswer>> {
        match self.lock().slots.get(resource)? {
            Slot::Kept(kept) => Some(kept.clone()),
            Slot::Reading(_) => None,
        }
    }

    /// A read of `resource`'s whole log is about to start.
    pub fn begin(&self, resource: &ResourceRef) -> Ticket {
        let mut inner = self.lock();
        inner.next_ticket += 1;
        let ticket = inner.next_ticket;
        inner.slots.insert(resource.clone(), Slot::Reading(ticket));
        Ticket(ticket)
    }

    /// The read `ticket` began ended with `text`, the whole log: kept when
    /// no write to it was announced since [`begin`](Self::begin).
    pub fn finish(&self, resource: &ResourceRef, ticket: Ticket, text: Bytes) -> Arc<KeptAnswer> {
        let kept = Arc::new(KeptAnswer::new(text));
        self.lock().slots.change(resource, |slot| {
            if matches!(slot, Slot::Reading(t) if *t == ticket.0) {
                *slot = Slot::Kept(kept.clone());
            }
        });
        kept
    }

    /// A read that began did not end with a whole answer: clear its mark.
    pub fn abandon(&self, resource: &ResourceRef, ticket: Ticket) {
        let mut inner = self.lock();
        if matches!(inner.slots.peek(resource), Some(Slot::Reading(t)) if *t == ticket.0) {
            inner.slots.remove(resource);
        }
    }

    /// A write to `resource` committed: its kept answer (or a read's mark)
    /// goes.
    pub fn forget(&self, resource: &ResourceRef) {
        self.lock().slots.remove(resource);
    }

    /// `resource`'s kept answer `kept` in its zstd form (made now, and
    /// counted, if it was not yet).
    pub fn zstd(&self, resource: &ResourceRef, kept: &KeptAnswer) -> Result<Bytes, StoreError> {
        let (frame, made) = kept.zstd()?;
        if made {
            self.lock().slots.reweigh(resource);
        }
        Ok(frame)
    }

    /// The bytes the kept answers hold now.
    pub fn bytes(&self) -> usize {
        self.lock().slots.bytes()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ResourceKind;

    fn build(slug: &str) -> ResourceRef {
        ResourceRef::new(ResourceKind::Build, slug)
    }

    fn text(n: usize) -> Bytes {
        Bytes::from(vec![b'x'; n])
    }

    #[test]
    fn a_read_keeps_its_answer_until_the_log_is_written() {
        let cache = ShortLogCache::new(1000);
        let b = build("b");
        assert!(cache.get(&b).is_none());
        let ticket = cache.begin(&b);
        assert!(cache.get(&b).is_none(), "a read under way serves nothing");
        cache.finish(&b, ticket, text(10));
        assert_eq!(cache.get(&b).unwrap().text().len(), 10);
        assert_eq!(cache.bytes(), 10);
        cache.forget(&b);
        assert!(cache.get(&b).is_none());
        assert_eq!(cache.bytes(), 0);
    }

    #[test]
    fn a_write_during_the_read_means_its_answer_is_not_kept() {
        let cache = ShortLogCache::new(1000);
        let b = build("b");
        let ticket = cache.begin(&b);
        cache.forget(&b); // an append committed while the statement ran
        cache.finish(&b, ticket, text(10));
        assert!(cache.get(&b).is_none());
        // A later read, begun after the write, keeps its answer.
        let ticket = cache.begin(&b);
        cache.finish(&b, ticket, text(12));
        assert_eq!(cache.get(&b).unwrap().text().len(), 12);
    }

    #[test]
    fn of_two_overlapping_reads_only_the_later_keeps_its_answer() {
        let cache = ShortLogCache::new(1000);
        let b = build("b");
        let first = cache.begin(&b);
        let second = cache.begin(&b);
        cache.finish(&b, first, text(5));
        assert!(cache.get(&b).is_none());
        cache.finish(&b, second, text(6));
        assert_eq!(cache.get(&b).unwrap().text().len(), 6);
        // An abandoned read clears only its own mark.
        let third = cache.begin(&b);
        cache.abandon(&b, third);
        assert!(cache.get(&b).is_none());
        let fourth = cache.begin(&b);
        let fifth = cache.begin(&b);
        cache.abandon(&b, fourth);
        cache.finish(&b, fifth, text(7));
        assert_eq!(cache.get(&b).unwrap().text().len(), 7);
    }

    #[test]
    fn bytes_stay_bounded_zstd_included() {
        let cache = ShortLogCache::new(100);
        for slug in ["a", "b", "c"] {
            let ticket = cache.begin(&build(slug));
            cache.finish(&build(slug), ticket, text(40));
        }
        assert!(cache.get(&build("a")).is_none(), "the least recent went");
        assert_eq!(cache.bytes(), 80);
        let kept = cache.get(&build("c")).unwrap();
        let frame = cache.zstd(&build("c"), &kept).unwrap();
        assert_eq!(zstd::decode_all(&frame[..]).unwrap(), kept.text().to_vec());
        assert_eq!(cache.bytes(), 80 + frame.len());
        assert_eq!(cache.zstd(&build("c"), &kept).unwrap(), frame);
        assert_eq!(cache.bytes(), 80 + frame.len(), "counted once");
    }
}
