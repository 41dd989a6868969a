//! Single-flight queries for woken held reads: when one append wakes many
//! readers of the same resource and `since`, one query serves them all.
//!
//! Freshness is measured in the notifier's epoch ([`Notifier::epoch`]), which
//! every wake-up advances after its write committed. A reader reads the epoch
//! right after subscribing and joins a flight whose query started at that
//! epoch or later. Any write the flight's query missed committed after the
//! query started, so its wake-up advanced the epoch past the reader's and
//! reaches the reader's subscription: the reader waits again instead of
//! missing it. Readers woken by one append read the same epoch, so they all
//! share one query (a per-reader tick, as before, let almost none share: each
//! woken reader subscribed after the previous one's flight had started).
//!
//! [`Notifier::epoch`]: crate::notify::Notifier::epoch

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

use crate::protocol::ResourceRef;
use crate::store::StoreError;

type Shared<T> = Result<T, Arc<StoreError>>;

struct Flight<T> {
    started: u64,
    result: Arc<OnceCell<Shared<T>>>,
}

pub(super) struct Flights<T> {
    flights: Mutex<HashMap<(ResourceRef, i64), Flight<T>>>,
}

impl<T: Clone> Default for Flights<T> {
    fn default() -> Self {
        Flights {
            flights: Mutex::new(HashMap::new()),
        }
    }
}

impl<T: Clone> Flights<T> {
    /// The result of `query` for `(resource, since)`, shared with every
    /// caller whose `subscribed` epoch (read after subscribing) is not past
    /// the epoch the flight started at. A new flight starts at the caller's
    /// own `subscribed` epoch: its query runs after that read, so it is at
    /// least that fresh.
    pub(super) async fn share<F, Fut>(
        &self,
        resource: &ResourceRef,
        since: i64,
        subscribed: u64,
        query: F,
    ) -> Result<T, StoreError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let key = (resource.clone(), since);
        let cell = {
            let mut flights = self.lock();
            match flights.get(&key) {
                Some(flight) if flight.started >= subscribed => flight.result.clone(),
                _ => {
                    let cell = Arc::new(OnceCell::new());
                    flights.insert(
                        key.clone(),
                        Flight {
                            started: subscribed,
                            result: cell.clone(),
                        },
                    );
                    cell
                }
            }
        };
        let shared = cell
            .get_or_init(|| async { query().await.map_err(Arc::new) })
            .await
            .clone();
        {
            // The flight is done; later wakes start a new one.
            let mut flights = self.lock();
            if flights
                .get(&key)
                .is_some_and(|flight| Arc::ptr_eq(&flight.result, &cell))
            {
                flights.remove(&key);
            }
        }
        shared.map_err(|err| match &*err {
            StoreError::NotFound(resource) => StoreError::NotFound(resource.clone()),
            StoreError::Unavailable => StoreError::Unavailable,
            StoreError::Busy(bound) => StoreError::Busy(bound),
            StoreError::Full(detail) => StoreError::Full(detail.clone()),
            other => StoreError::Aborted(other.to_string()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(ResourceRef, i64), Flight<T>>> {
        self.flights
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ResourceKind;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn waiters_of_one_epoch_share_one_flight() {
        let flights: Arc<Flights<usize>> = Arc::new(Flights::default());
        let r = ResourceRef::new(ResourceKind::Build, "b");
        let calls = Arc::new(AtomicUsize::new(0));
        let subscribed = 7;
        let (gate_tx, gate_rx) = tokio::sync::watch::channel(false);
        let mut readers = Vec::new();
        for _ in 0..10 {
            let (flights, r, calls, mut gate) =
                (flights.clone(), r.clone(), calls.clone(), gate_rx.clone());
            readers.push(tokio::spawn(async move {
                flights
                    .share(&r, 0, subscribed, || async move {
                        let _ = gate.wait_for(|open| *open).await;
                        Ok(calls.fetch_add(1, Ordering::SeqCst))
                    })
                    .await
                    .unwrap()
            }));
        }
        tokio::task::yield_now().await;
        gate_tx.send(true).unwrap();
        for reader in readers {
            reader.await.unwrap();
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1, "one query for all ten");
    }

    #[tokio::test]
    async fn a_subscriber_of_a_later_epoch_never_joins_an_older_flight() {
        let flights: Flights<usize> = Flights::default();
        let r = ResourceRef::new(ResourceKind::Build, "b");
        let (release, hold) = tokio::sync::oneshot::channel::<()>();
        let early = 3;
        let first = flights.share(&r, 0, early, || async move {
            let _ = hold.await;
            Ok(1)
        });
        tokio::pin!(first);
        assert!(futures_poll(first.as_mut()).is_none());
        // Subscribed after a wake-up advanced the epoch: its own query.
        let late = early + 1;
        assert_eq!(
            flights
                .share(&r, 0, late, || async { Ok(2) })
                .await
                .unwrap(),
            2
        );
        release.send(()).unwrap();
        assert_eq!(first.await.unwrap(), 1);
    }

    fn futures_poll<F: Future>(f: std::pin::Pin<&mut F>) -> Option<F::Output> {
        match f.poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        }
    }
}
