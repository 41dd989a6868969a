//! Wake-ups for held reads (DESIGN decision 7), keyed by resource.
//!
//! Appends in this process call [`Notifier::notify`] after commit. A held
//! read subscribes, *then* re-queries, then waits, so an append landing
//! between its first query and its subscription is never missed. Entries
//! are removed when their last subscriber goes away.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::protocol::ResourceRef;

#[derive(Default)]
pub struct Notifier {
    waiters: Mutex<HashMap<ResourceRef, Arc<Notify>>>,
}

/// A registration for one resource; dropping it unregisters.
pub struct Subscription<'a> {
    notifier: &'a Notifier,
    resource: ResourceRef,
    notify: Arc<Notify>,
}

impl Notifier {
    pub fn new() -> Self {
        Self::default()
    }

    /// Wake every held read currently waiting on `resource`.
    pub fn notify(&self, resource: &ResourceRef) {
        let notify = self.lock().get(resource).cloned();
        if let Some(notify) = notify {
            notify.notify_waiters();
        }
    }

    pub fn subscribe(&self, resource: &ResourceRef) -> Subscription<'_> {
        let notify = self.lock().entry(resource.clone()).or_default().clone();
        Subscription { notifier: self, resource: resource.clone(), notify }
    }

    /// Resources with at least one held read (for sweeps and metrics).
    pub fn awaited(&self) -> Vec<ResourceRef> {
        self.lock().keys().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ResourceRef, Arc<Notify>>> {
        // A panic while holding this lock cannot leave the map inconsistent.
        self.waiters.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Subscription<'_> {
    pub fn notify(&self) -> &Notify {
        &self.notify
    }
}

impl Drop for Subscription<'_> {
    fn drop(&mut self) {
        let mut map = self.notifier.lock();
        // The map holds one reference and this subscription another.
        if Arc::strong_count(&self.notify) <= 2 {
            map.remove(&self.resource);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ResourceKind;

    #[tokio::test]
    async fn wakes_a_subscriber_and_cleans_up() {
        let notifier = Notifier::new();
        let r = ResourceRef::new(ResourceKind::Build, "b");
        {
            let sub = notifier.subscribe(&r);
            let notified = sub.notify().notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            notifier.notify(&r);
            notified.await;
            assert_eq!(notifier.awaited(), vec![r.clone()]);
        }
        assert!(notifier.awaited().is_empty());
    }
}
