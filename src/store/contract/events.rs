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

/// PostgreSQL's one-statement append (`events/fast_append.rs`) restates the
/// append rule (`events/mod.rs`) in SQL. Driven with the same inputs as a
/// twin store whose every append takes the rule's transaction, at each of
/// the rule's checks' edges (a stale expected sequence either side of the
/// tail, the bound on events exactly at and over, the clock behind the last
/// write by as much as the fast path covers and by one millisecond more, a
/// resource that does not exist), it must answer exactly as the rule does
/// and leave the same log. On SQLite both stores take the rule: the case
/// then pins the rule's own answers at those edges. Run with the bounded
/// contract's bounds (4 events per log).
pub(super) async fn fast_append_agrees_with_the_rule(h: &Harness) {
    use crate::protocol::time::format_iso;
    use crate::store::events::fast_append::SKEW_MS;

    let twin = h.twin_without_fast_paths(super::bounds::options()).await;
    let at = |ms: i64| {
        h.clock.set(ms);
        twin.clock.set(ms);
    };
    let b = build("fa");
    for s in [&h.store, &twin.store] {
        s.create_build("fa", attrs()).await.unwrap();
    }
    let last_write = T0 + 10;
    // (clock, resource, expected sequence, the rule's answer)
    let steps: [(i64, &ResourceRef, Option<i64>, &str); 13] = [
        (last_write, &b, Some(1), "stale"),
        (last_write, &b, Some(0), "seq 1"),
        (last_write, &b, Some(0), "stale"),
        // Behind the last write: its time, never earlier.
        (last_write - (SKEW_MS - 1), &b, None, "seq 2"),
        (last_write - SKEW_MS, &b, Some(2), "seq 3"),
        (last_write - 1000, &b, Some(2), "stale"),
        // The last event the bound allows, then over it.
        (last_write + 5, &b, Some(3), "seq 4"),
        (last_write + 6, &b, None, "over"),
        (last_write + 6, &b, Some(4), "over"),
        // Stale first, full or not.
        (last_write + 6, &b, Some(3), "stale"),
        (last_write + 6, &b, Some(5), "stale"),
        (last_write + 6, &build("none"), None, "not found"),
        (last_write + 6, &build("none"), Some(0), "not found"),
    ];
    let outcome = |answer: StoreResult<Option<String>>| match answer {
        Ok(Some(envelope)) => envelope,
        Ok(None) => "stale".to_owned(),
        Err(StoreError::OverBound(refusal)) => format!("over: {}", refusal.message),
        Err(StoreError::NotFound(r)) => format!("not found: {r:?}"),
        Err(other) => panic!("an append failed: {other}"),
    };
    let mut ts_of_seq = std::collections::HashMap::new();
    for (n, (clock, r, expected, rule)) in steps.into_iter().enumerate() {
        at(clock);
        let fast = outcome(h.store.append(r, event(n as i64), expected).await);
        let slow = outcome(twin.store.append(r, event(n as i64), expected).await);
        assert_eq!(fast, slow, "step {n}: the fast path and the rule disagree");
        match rule {
            "stale" => assert_eq!(fast, "stale", "step {n}"),
            "over" => assert!(fast.starts_with("over: "), "step {n}: {fast}"),
            "not found" => assert!(fast.starts_with("not found: "), "step {n}: {fast}"),
            seq => {
                let value: Value = serde_json::from_str(&fast).expect("an envelope");
                assert_eq!(format!("seq {}", value["seq"]), seq, "step {n}");
                ts_of_seq.insert(value["seq"].as_i64().unwrap(), value["ts"].clone());
            }
        }
    }
    // Never before the last write: the clock's steps back kept its time.
    for seq in 1..=3 {
        assert_eq!(ts_of_seq[&seq], json!(format_iso(last_write)), "seq {seq}");
    }
    assert_eq!(ts_of_seq[&4], json!(format_iso(last_write + 5)));
    assert_eq!(
        envelopes(&h.store, &b, 0).await.unwrap(),
        envelopes(&twin.store, &b, 0).await.unwrap()
    );
    let record = |s: &std::sync::Arc<dyn crate::store::api::Store>| {
        let s = s.clone();
        let b = b.clone();
        async move { s.get_record(&b).await.unwrap().unwrap().to_json() }
    };
    assert_eq!(record(&h.store).await, record(&twin.store).await);
    twin.finish().await;
}
