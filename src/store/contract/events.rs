//! Appends: conditional ones (builds and sessions), and a clock behind the last
//! write.

use serde_json::{Map, Value, json};

use super::harness::{Harness, T0, attrs, build, envelopes, event, futures_join, seq_of};
use crate::protocol::{ResourceKind, ResourceRef};
use crate::store::api::NewEvent;
use crate::store::error::{StoreError, StoreResult};

pub(super) async fn conditional_append(h: &Harness) {
    let s = &h.store;
    s.create_build("c", attrs()).await.unwrap();
    assert!(
        s.append(&build("c"), event(1), Some(0))
            .await
            .unwrap()
            .is_some()
    );
    h.clock.set(T0 + 10);
    assert!(
        s.append(&build("c"), event(2), Some(0))
            .await
            .unwrap()
            .is_none()
    );
    let rec = s.get_record(&build("c")).await.unwrap().unwrap();
    assert_eq!(
        rec.updated_at, T0,
        "a stale comparison leaves updatedAt untouched"
    );
    assert_eq!(
        seq_of(
            &s.append(&build("c"), event(2), Some(1))
                .await
                .unwrap()
                .unwrap()
        ),
        2
    );
}

/// A session's compare-and-append (protocol 3) is the build family's rule:
/// a stale sequence appends nothing and touches no time; of concurrent
/// writers expecting the same tail exactly one wins.
pub(super) async fn session_conditional_append(h: &Harness) {
    let s = h.store.clone();
    s.ensure_repo("acme/s").await.unwrap();
    let mut attrs = Map::new();
    attrs.insert("repo".into(), "acme/s".into());
    attrs.insert("operator".into(), "alice".into());
    let first = || -> StoreResult<NewEvent> { Ok(event(1)) };
    s.create_session("acme/s", "os_c", attrs, Box::new(first))
        .await
        .unwrap();
    let os = ResourceRef::new(ResourceKind::Session, "os_c");
    h.clock.set(T0 + 10);
    // `0` never matches: session.created is sequence 1.
    assert!(s.append(&os, event(2), Some(0)).await.unwrap().is_none());
    assert!(s.append(&os, event(2), Some(2)).await.unwrap().is_none());
    let rec = s.get_record(&os).await.unwrap().unwrap();
    assert_eq!(
        rec.updated_at, T0,
        "a stale comparison leaves updatedAt untouched"
    );
    assert_eq!(envelopes(&s, &os, 0).await.unwrap().len(), 1);
    let envelope = s.append(&os, event(2), Some(1)).await.unwrap().unwrap();
    assert_eq!(seq_of(&envelope), 2);
    assert!(
        envelope.starts_with(r#"{"session":"os_c","seq":2,"#),
        "{envelope}"
    );
    assert_eq!(
        s.get_record(&os).await.unwrap().unwrap().updated_at,
        T0 + 10
    );
    assert!(matches!(
        s.append(&ResourceRef::new(ResourceKind::Session, "os_missing"), event(1), Some(0)).await,
        Err(StoreError::NotFound(r)) if r.id == "os_missing"
    ));
    let racers = (0..16).map(|n| {
        let (s, os) = (s.clone(), os.clone());
        tokio::spawn(async move { s.append(&os, event(n), Some(2)).await.unwrap().is_some() })
    });
    let won = futures_join(racers)
        .await
        .into_iter()
        .filter(|w| *w)
        .count();
    assert_eq!(won, 1);
    assert_eq!(envelopes(&s, &os, 0).await.unwrap().len(), 3);
}

/// A clock a little or far behind the last write: the append takes the
/// last write's time, and the stored envelope is the text returned.
pub(super) async fn appends_behind_the_clock(h: &Harness) {
    let s = &h.store;
    let b = build("behind");
    s.create_build("behind", attrs()).await.unwrap();
    h.clock.set(T0 + 10_000);
    let mut returned = vec![s.append(&b, event(1), None).await.unwrap().unwrap()];
    for (n, behind) in [(2, 5), (3, 31), (4, 32), (5, 3_000), (6, 0)] {
        h.clock.set(T0 + 10_000 - behind);
        let envelope = s.append(&b, event(n), None).await.unwrap().unwrap();
        let ts = serde_json::from_str::<Value>(&envelope).unwrap()["ts"].clone();
        assert_eq!(
            ts,
            json!(crate::protocol::time::format_iso(T0 + 10_000)),
            "{behind} ms behind"
        );
        returned.push(envelope);
    }
    h.clock.set(T0 + 10_007);
    returned.push(s.append(&b, event(7), Some(6)).await.unwrap().unwrap());
    h.clock.set(T0 + 10_001);
    returned.push(s.append(&b, event(8), Some(7)).await.unwrap().unwrap());
    assert!(returned[7].contains(&crate::protocol::time::format_iso(T0 + 10_007)));
    assert_eq!(envelopes(s, &b, 0).await.unwrap(), returned);
    assert_eq!(
        s.get_record(&b).await.unwrap().unwrap().updated_at,
        T0 + 10_007
    );
}
