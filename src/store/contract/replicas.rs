//! Two stores on one PostgreSQL database, standing for two replicas.

use std::sync::Arc;

use super::harness::{Harness, attrs, build, event, open, options};
use crate::notify::Notifier;
use crate::store::options::StoreOptions;

/// Two stores on one PostgreSQL database stand for two replicas: an append
/// through one wakes a waiter registered with the other's notifier, through
/// NOTIFY and the other's LISTEN connection (no sweep runs here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_notify_wakes_another_replica() {
    let Some(h) = Harness::postgres(options()).await else {
        return;
    };
    let url = h.pg_database.clone().expect("postgres harness").url;
    let other_notifier = Arc::new(Notifier::new());
    let _other = open(
        &url,
        &StoreOptions::default(),
        h.clock.clone(),
        other_notifier.clone(),
    )
    .await
    .unwrap();
    h.store.create_build("n", attrs()).await.unwrap();
    let b = build("n");
    // The LISTEN connection comes up asynchronously; append until it delivers.
    let subscription = other_notifier.subscribe(&b, 0);
    let woken = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        loop {
            let notified = subscription.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            h.store.append(&b, event(1), None).await.unwrap();
            if tokio::time::timeout(std::time::Duration::from_millis(500), notified)
                .await
                .is_ok()
            {
                return;
            }
        }
    })
    .await;
    assert!(
        woken.is_ok(),
        "no NOTIFY reached the second replica within 20 s"
    );
    drop(subscription);
    h.finish().await;
}
