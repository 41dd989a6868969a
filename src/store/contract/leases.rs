//! Leases: the truth table, judged by the clock's own time.

use serde_json::{Value, json};

use super::harness::{Harness, T0, attrs, build, event};

pub(super) async fn leases(h: &Harness) {
    let s = &h.store;
    let b = build("l");
    s.create_build("l", attrs()).await.unwrap();
    assert!(s.claim_lease(&b, "r1", 1000).await.unwrap());
    assert!(!s.claim_lease(&b, "r2", 1000).await.unwrap());
    h.clock.set(T0 + 500);
    assert!(s.heartbeat(&b, "r1").await.unwrap());
    let rec = s.get_record(&b).await.unwrap().unwrap();
    assert_eq!(rec.lease.unwrap().expires_at, T0 + 1500);
    assert_eq!(rec.heartbeat_at, Some(T0 + 500));
    assert!(!s.heartbeat(&b, "r2").await.unwrap());
    h.clock.set(T0 + 1500);
    assert!(
        !s.heartbeat(&b, "r1").await.unwrap(),
        "expiresAt <= now is expired"
    );
    assert!(s.claim_lease(&b, "r2", 0).await.unwrap());
    assert!(
        s.claim_lease(&b, "r3", 10).await.unwrap(),
        "a zero TTL is immediately expired"
    );
    s.release_lease(&b, "r2").await.unwrap();
    assert_eq!(
        s.get_record(&b)
            .await
            .unwrap()
            .unwrap()
            .lease
            .unwrap()
            .holder,
        "r3"
    );
    s.release_lease(&b, "r3").await.unwrap();
    assert!(s.get_record(&b).await.unwrap().unwrap().lease.is_none());
}

/// Spec section 10: leases are judged and extended by the clock's own time,
/// even when it stepped back behind the resource's `updatedAt`; event `ts`
/// and `updatedAt` stay nondecreasing.
pub(super) async fn leases_by_the_clock(h: &Harness) {
    let s = &h.store;
    let b = build("lc");
    s.create_build("lc", attrs()).await.unwrap();
    h.clock.set(T0 + 1_000);
    assert!(s.claim_lease(&b, "r1", 1_000).await.unwrap());
    h.clock.set(T0 + 5_000);
    s.append(&b, event(1), None).await.unwrap();
    // The clock steps back: the lease (expiring at T0+2000) is still held.
    h.clock.set(T0 + 1_500);
    assert!(!s.claim_lease(&b, "r2", 1_000).await.unwrap());
    assert!(
        s.heartbeat(&b, "r1").await.unwrap(),
        "held by the clock's own time"
    );
    let rec = s.get_record(&b).await.unwrap().unwrap();
    assert_eq!(
        rec.lease.unwrap().expires_at,
        T0 + 2_500,
        "now + ttl by the clock"
    );
    assert_eq!(rec.heartbeat_at, Some(T0 + 1_500));
    assert_eq!(rec.updated_at, T0 + 5_000, "updatedAt never runs backwards");
    let envelope = s.append(&b, event(2), None).await.unwrap().unwrap();
    let ts = serde_json::from_str::<Value>(&envelope).unwrap()["ts"].clone();
    assert_eq!(ts, json!(crate::protocol::time::format_iso(T0 + 5_000)));
    // Expiry by the clock: expiresAt <= now.
    h.clock.set(T0 + 2_500);
    assert!(!s.heartbeat(&b, "r1").await.unwrap());
    assert!(s.claim_lease(&b, "r2", 1_000).await.unwrap());
    assert_eq!(
        s.get_record(&b)
            .await
            .unwrap()
            .unwrap()
            .lease
            .unwrap()
            .expires_at,
        T0 + 3_500
    );
    s.release_lease(&b, "r1").await.unwrap();
    assert!(
        s.get_record(&b).await.unwrap().unwrap().lease.is_some(),
        "not r1's to release"
    );
    s.release_lease(&b, "r2").await.unwrap();
    assert!(s.get_record(&b).await.unwrap().unwrap().lease.is_none());
}
