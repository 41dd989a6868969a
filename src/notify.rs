//! Wake-ups keyed by resource: how a held read wakes. Writers call
//! [`Notifier::notify`] and nothing else: the store after each commit, and
//! the PostgreSQL LISTEN connection for writes by any replica. The waiter
//! side (subscribing, the epoch, the sweep's view) is for [`crate::held`].
//! It knows only resource references, so the store, below held reads, can
//! wake them without knowing them.
//!
//! A held read subscribes *before* its second query, so no append is missed
//! between query and wait, and no held read ever polls the database on its
//! own.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio::sync::futures::Notified;

use crate::protocol::ResourceRef;

#[derive(Default)]
struct Entry {
    notify: Arc<Notify>,
    /// The `since` of each current waiter (value → count): the sweep wakes
    /// the resource once its tail passes the smallest.
    sinces: BTreeMap<i64, usize>,
}

#[derive(Default)]
pub struct Notifier {
    waiters: Mutex<HashMap<ResourceRef, Entry>>,
    /// Advanced by every wake-up, before it wakes anyone (and so after the
    /// write it announces committed): how held reads tell whether a shared
    /// query is fresh enough for them (flights.rs).
    epoch: AtomicU64,
    /// Told of every write [`notify`](Self::notify) announces, before its
    /// held reads wake (the short-log cache, `crate::history`).
    on_write: std::sync::OnceLock<WriteObserver>,
}

/// What [`Notifier::observe_writes`] calls with each written resource.
pub type WriteObserver = Box<dyn Fn(&ResourceRef) + Send + Sync>;

/// A waiter's registration; dropping it unregisters.
pub(crate) struct Subscription<'a> {
    notifier: &'a Notifier,
    resource: ResourceRef,
    since: i64,
    notify: Arc<Notify>,
}

impl Notifier {
    pub fn new() -> Self {
        Self::default()
    }

    /// The current wake-up epoch; a held read reads it right after
    /// subscribing.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    fn advance(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }

    /// Have `observer` told of every write announced from now on (once;
    /// a second observer is refused and returned).
    pub fn observe_writes(&self, observer: WriteObserver) -> Result<(), WriteObserver> {
        self.on_write.set(observer)
    }

    /// A write to `resource` committed: tell the observer, then wake every
    /// held read waiting on it.
    pub fn notify(&self, resource: &ResourceRef) {
        if let Some(observer) = self.on_write.get() {
            observer(resource);
        }
        self.advance();
        let notify = self.lock().get(resource).map(|entry| entry.notify.clone());
        if let Some(notify) = notify {
            notify.notify_waiters();
        }
    }

    /// Register a waiter for rows of `resource` past `since`.
    pub(crate) fn subscribe(&self, resource: &ResourceRef, since: i64) -> Subscription<'_> {
        let mut map = self.lock();
        let entry = map.entry(resource.clone()).or_default();
        *entry.sinces.entry(since).or_default() += 1;
        Subscription {
            notifier: self,
            resource: resource.clone(),
            since,
            notify: entry.notify.clone(),
        }
    }

    /// Every awaited resource with the smallest `since` among its waiters.
    pub(crate) fn awaited(&self) -> Vec<(ResourceRef, i64)> {
        self.lock()
            .iter()
            .filter_map(|(resource, entry)| {
                entry
                    .sinces
                    .keys()
                    .next()
                    .map(|since| (resource.clone(), *since))
            })
            .collect()
    }

    /// Wake the resources whose tail (`last_seq`) has passed a waiter's `since`.
    pub(crate) fn wake_past(&self, tails: &[(ResourceRef, i64)]) -> usize {
        let mut woken = 0;
        for (resource, tail) in tails {
            let notify = self
                .lock()
                .get(resource)
                .filter(|e| e.sinces.keys().next().is_some_and(|s| tail > s))
                .map(|e| e.notify.clone());
            if let Some(notify) = notify {
                self.advance();
                notify.notify_waiters();
                woken += 1;
            }
        }
        woken
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<ResourceRef, Entry>> {
        // A panic while holding this lock cannot leave the map inconsistent.
        self.waiters
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Subscription<'_> {
    /// The next wake-up of this resource: enable it before the query that
    /// decides whether to wait, so a wake in between is kept.
    pub(crate) fn notified(&self) -> Notified<'_> {
        self.notify.notified()
    }
}

impl Drop for Subscription<'_> {
    fn drop(&mut self) {
        let mut map = self.notifier.lock();
        if let Some(entry) = map.get_mut(&self.resource) {
            if let Some(count) = entry.sinces.get_mut(&self.since) {
                *count -= 1;
                if *count == 0 {
                    entry.sinces.remove(&self.since);
                }
            }
            if entry.sinces.is_empty() {
                map.remove(&self.resource);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ResourceKind;

    fn r(id: &str) -> ResourceRef {
        ResourceRef::new(ResourceKind::Build, id)
    }

    #[tokio::test]
    async fn wakes_a_subscriber_and_cleans_up() {
        let notifier = Notifier::new();
        {
            let sub = notifier.subscribe(&r("b"), 3);
            let notified = sub.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            notifier.notify(&r("b"));
            notified.await;
            assert_eq!(notifier.awaited(), vec![(r("b"), 3)]);
        }
        assert!(notifier.awaited().is_empty());
    }

    #[tokio::test]
    async fn every_wake_advances_the_epoch_before_it_wakes() {
        let notifier = Arc::new(Notifier::new());
        let sub = notifier.subscribe(&r("b"), 0);
        let seen = notifier.epoch();
        let notified = sub.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        notifier.notify(&r("b"));
        notified.await;
        // A woken reader always reads a later epoch than it subscribed at.
        assert!(notifier.epoch() > seen);
        let before_sweep = notifier.epoch();
        assert_eq!(notifier.wake_past(&[(r("b"), 1)]), 1);
        assert!(notifier.epoch() > before_sweep);
        // A sweep that wakes nobody leaves it alone.
        let idle = notifier.epoch();
        assert_eq!(notifier.wake_past(&[(r("b"), 0)]), 0);
        assert_eq!(notifier.epoch(), idle);
    }

    #[tokio::test]
    async fn sweep_wakes_only_resources_past_their_smallest_since() {
        let notifier = Notifier::new();
        let low = notifier.subscribe(&r("a"), 2);
        let _high = notifier.subscribe(&r("a"), 9);
        let other = notifier.subscribe(&r("b"), 5);
        {
            let (a, b) = (low.notified(), other.notified());
            tokio::pin!(a, b);
            a.as_mut().enable();
            b.as_mut().enable();
            assert_eq!(
                notifier.wake_past(&[(r("a"), 3), (r("b"), 5), (r("gone"), 100)]),
                1
            );
            a.await;
            assert!(
                futures_poll_once(b.as_mut()).is_none(),
                "b's tail has not passed 5"
            );
        }
        drop(low);
        assert_eq!(
            notifier
                .awaited()
                .iter()
                .find(|(res, _)| *res == r("a"))
                .map(|(_, s)| *s),
            Some(9)
        );
    }

    fn futures_poll_once<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> Option<F::Output> {
        let waker = std::task::Waker::noop();
        match f.poll(&mut std::task::Context::from_waker(waker)) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        }
    }
}
