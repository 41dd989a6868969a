//! Single-flight queries for woken held reads: when one append wakes many
//! readers of the same resource and `since`, one query serves them all.
//!
//! Freshness: a reader joins only a flight that started after it subscribed,
//! so it never receives a result older than its subscription (and so never
//! misses the append that woke it); otherwise it starts a new flight.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

use crate::protocol::ResourceRef;
use crate::store::StoreError;

type Shared<T> = Result<T, Arc<StoreError>>;

struct Flight<T> {
    started: u64,
    result: Arc<OnceCell<Shared<T>>>,
}

pub struct Flights<T> {
    ticks: AtomicU64,
    flights: Mutex<HashMap<(ResourceRef, i64), Flight<T>>>,
}

impl<T: Clone> Default for Flights<T> {
    fn default() -> Self {
        Flights {
            ticks: AtomicU64::new(0),
            flights: Mutex::new(HashMap::new()),
        }
    }
}

impl<T: Clone> Flights<T> {
    /// A point in this map's order of events; take it right after subscribing.
    pub fn now(&self) -> u64 {
        self.ticks.fetch_add(1, Ordering::SeqCst)
    }

    /// The result of `fetch` for `(resource, since)`, shared with every
    /// caller whose `subscribed` tick precedes the flight's start.
    pub async fn fetch<F, Fut>(
        &self,
        resource: &ResourceRef,
        since: i64,
        subscribed: u64,
        fetch: F,
    ) -> Result<T, StoreError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let key = (resource.clone(), since);
        let cell = {
            let mut flights = self.lock();
            match flights.get(&key) {
                Some(flight) if flight.started > subscribed => flight.result.clone(),
                _ => {
                    let cell = Arc::new(OnceCell::new());
                    flights.insert(
                        key.clone(),
                        Flight {
                            started: self.now(),
                            result: cell.clone(),
                        },
                    );
                    cell
                }
            }
        };
        let shared = cell
            .get_or_init(|| async { fetch().await.map_err(Arc::new) })
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
            StoreError::NotFound => StoreError::NotFound,
            StoreError::Unavailable => StoreError::Unavailable,
            other => StoreError::Corrupt(other.to_string()),
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
    use std::sync::atomic::AtomicUsize;

    #[tokio::test]
    async fn waiters_share_a_flight_that_started_after_them() {
        let flights: Arc<Flights<usize>> = Arc::new(Flights::default());
        let r = ResourceRef::new(ResourceKind::Build, "b");
        let calls = Arc::new(AtomicUsize::new(0));
        let subscribed = flights.now();
        let (gate_tx, gate_rx) = tokio::sync::watch::channel(false);
        let mut readers = Vec::new();
        for _ in 0..10 {
            let (flights, r, calls, mut gate) =
                (flights.clone(), r.clone(), calls.clone(), gate_rx.clone());
            readers.push(tokio::spawn(async move {
                flights
                    .fetch(&r, 0, subscribed, || async move {
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
        assert!(
            calls.load(Ordering::SeqCst) < 10,
            "the readers shared flights"
        );
    }

    #[tokio::test]
    async fn a_later_subscriber_never_joins_an_older_flight() {
        let flights: Flights<usize> = Flights::default();
        let r = ResourceRef::new(ResourceKind::Build, "b");
        let (release, hold) = tokio::sync::oneshot::channel::<()>();
        let early = flights.now();
        let first = flights.fetch(&r, 0, early, || async move {
            let _ = hold.await;
            Ok(1)
        });
        tokio::pin!(first);
        assert!(futures_poll(first.as_mut()).is_none());
        // Subscribed after the first flight started: must run its own query.
        let late = flights.now();
        assert_eq!(
            flights
                .fetch(&r, 0, late, || async { Ok(2) })
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
