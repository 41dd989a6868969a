//! The one byte-bounded LRU behind the history, state-events, build-digests,
//! short-log and build-record caches: entries in least-recently-used order (hashlink's [`LruCache`]),
//! each counted at the bytes it holds, evicted least recent first until the
//! total is within the capacity (and the entries within a count, where one
//! is set).
//!
//! Not a concurrent cache crate (quick_cache's weighted cache, say): those
//! evict by CLOCK-Pro or S3-FIFO rather than recency, fix an entry's weight
//! when it is inserted (a kept answer grows when its zstd form is first
//! made), and cannot check and replace an entry under one lock, which the
//! short-log cache's tickets need. The callers hold this behind their own
//! mutex instead.

use std::borrow::Borrow;
use std::hash::Hash;

use hashlink::LruCache;

/// What an entry holds, as the bound counts it.
pub(crate) trait Weighed {
    fn bytes(&self) -> usize;
}

pub(crate) struct Bounded<K: Hash + Eq, V> {
    /// Each entry with the bytes it was counted at.
    entries: LruCache<K, (V, usize)>,
    bytes: usize,
    capacity: usize,
    max_entries: usize,
    /// The gauge that follows `bytes`.
    gauge: &'static str,
}

impl<K: Hash + Eq, V: Weighed> Bounded<K, V> {
    /// At most `capacity` bytes in at most `max_entries` entries; `gauge`
    /// reports the bytes held.
    pub(crate) fn new(capacity: usize, max_entries: usize, gauge: &'static str) -> Self {
        Bounded {
            entries: LruCache::new_unbounded(),
            bytes: 0,
            capacity,
            max_entries,
            gauge,
        }
    }

    /// `key`'s entry, now the most recently used.
    pub(crate) fn get<Q: Hash + Eq + ?Sized>(&mut self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.entries.get(key).map(|(value, _)| value)
    }

    /// `key`'s entry, leaving its place in the order.
    pub(crate) fn peek<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.entries.peek(key).map(|(value, _)| value)
    }

    /// Keep `value` as `key`'s entry (the most recently used), then evict
    /// down to the bound; the entry it replaced, if any.
    pub(crate) fn insert(&mut self, key: K, value: V) -> Option<V> {
        let bytes = value.bytes();
        let old = self
            .entries
            .insert(key, (value, bytes))
            .map(|(old, counted)| {
                self.bytes -= counted;
                old
            });
        self.bytes += bytes;
        self.evict();
        old
    }

    /// Change `key`'s entry in place (it becomes the most recently used),
    /// count it again and evict down to the bound; what `change` returned,
    /// or `None` when there is no such entry.
    pub(crate) fn change<Q: Hash + Eq + ?Sized, R>(
        &mut self,
        key: &Q,
        change: impl FnOnce(&mut V) -> R,
    ) -> Option<R>
    where
        K: Borrow<Q>,
    {
        let (value, counted) = self.entries.get_mut(key)?;
        let out = change(value);
        let bytes = value.bytes();
        self.bytes = self.bytes - *counted + bytes;
        *counted = bytes;
        self.evict();
        Some(out)
    }

    /// Count `key`'s entry again: what it holds grew behind a shared
    /// reference (a kept answer's zstd form, made once).
    pub(crate) fn reweigh<Q: Hash + Eq + ?Sized>(&mut self, key: &Q)
    where
        K: Borrow<Q>,
    {
        if let Some((value, counted)) = self.entries.peek_mut(key) {
            let bytes = value.bytes();
            self.bytes = self.bytes - *counted + bytes;
            *counted = bytes;
            self.evict();
        }
    }

    /// Drop `key`'s entry.
    pub(crate) fn remove<Q: Hash + Eq + ?Sized>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        let (old, counted) = self.entries.remove(key)?;
        self.bytes -= counted;
        metrics::gauge!(self.gauge).set(self.bytes as f64);
        Some(old)
    }

    /// Whether an entry of `bytes` more would fit without evicting any.
    pub(crate) fn has_room_for(&self, bytes: usize) -> bool {
        self.bytes.saturating_add(bytes) <= self.capacity && self.entries.len() < self.max_entries
    }

    /// The bytes the entries hold now.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    fn evict(&mut self) {
        while self.bytes > self.capacity || self.entries.len() > self.max_entries {
            let Some((_, (_, counted))) = self.entries.remove_lru() else {
                break;
            };
            self.bytes -= counted;
        }
        metrics::gauge!(self.gauge).set(self.bytes as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Held(usize);

    impl Weighed for Held {
        fn bytes(&self) -> usize {
            self.0
        }
    }

    #[test]
    fn the_least_recently_used_go_first_until_bytes_and_count_fit() {
        let mut cache = Bounded::new(100, 3, "test_bounded_bytes");
        cache.insert("a", Held(40));
        cache.insert("b", Held(40));
        assert!(cache.get(&"a").is_some()); // b is now the least recent
        cache.insert("c", Held(40));
        assert!(cache.peek(&"b").is_none());
        assert_eq!(cache.bytes(), 80);
        // The count bound: three entries at most, whatever their bytes.
        cache.insert("d", Held(0));
        cache.insert("e", Held(0));
        assert!(cache.peek(&"a").is_none(), "the least recent went");
        assert_eq!(cache.bytes(), 40);
        // A replaced entry's bytes go with it.
        assert_eq!(cache.insert("c", Held(10)).map(|old| old.0), Some(40));
        assert_eq!(cache.bytes(), 10);
        assert_eq!(cache.remove(&"c").map(|old| old.0), Some(10));
        assert_eq!(cache.bytes(), 0);
    }

    #[test]
    fn an_entry_that_grows_is_counted_again_and_may_push_others_out() {
        let mut cache = Bounded::new(100, usize::MAX, "test_bounded_bytes");
        cache.insert("a", Held(30));
        cache.insert("b", Held(30));
        assert_eq!(cache.change(&"b", |held| held.0 = 50), Some(()));
        assert_eq!(cache.bytes(), 80);
        assert_eq!(cache.change(&"b", |held| held.0 = 80), Some(()));
        assert!(cache.peek(&"a").is_none());
        assert_eq!(cache.bytes(), 80);
        assert!(cache.change(&"gone", |held| held.0 = 1).is_none());
        cache.reweigh(&"gone");
        assert_eq!(cache.bytes(), 80);
    }
}
