//! Concurrent writers: sequences, conditional appends, deposits and claims
//! under contention, and group commit (writes that fail or change nothing,
//! batched with writes that succeed).

use super::harness::{
    Harness, artifact, artifact_listing, attrs, build, envelopes, event, futures_join, listed,
    seq_of,
};
use crate::store::api::NewEvent;
use crate::store::error::{StoreError, StoreResult};
use crate::store::records::ArtifactMeta;

pub(super) async fn concurrency(h: &Harness) {
    let s = h.store.clone();
    s.create_build("x", attrs()).await.unwrap();
    let b = build("x");

    let appends = (0..32).map(|n| {
        let (s, b) = (s.clone(), b.clone());
        tokio::spawn(async move { seq_of(&s.append(&b, event(n), None).await.unwrap().unwrap()) })
    });
    let mut seqs: Vec<i64> = futures_join(appends).await;
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=32).collect::<Vec<_>>());

    let conditionals = (0..16).map(|n| {
        let (s, b) = (s.clone(), b.clone());
        tokio::spawn(async move { s.append(&b, event(n), Some(32)).await.unwrap().is_some() })
    });
    assert_eq!(
        futures_join(conditionals)
            .await
            .into_iter()
            .filter(|won| *won)
            .count(),
        1
    );

    let deposits = (0..16).map(|n: u8| {
        let (s, b) = (s.clone(), b.clone());
        tokio::spawn(async move {
            let ok = |_: &[ArtifactMeta]| -> StoreResult<NewEvent> { Ok(event(0)) };
            s.deposit(&b, vec![artifact("plan", &[n])], Box::new(ok))
                .await
                .unwrap()
                .1[0]
                .revision
        })
    });
    let mut revisions = futures_join(deposits).await;
    revisions.sort_unstable();
    assert_eq!(revisions, (0..16).collect::<Vec<_>>());

    let claims = (0..16).map(|n| {
        let (s, b) = (s.clone(), b.clone());
        tokio::spawn(async move {
            s.claim_lease(&b, &format!("holder-{n}"), 60_000)
                .await
                .unwrap()
        })
    });
    assert_eq!(
        futures_join(claims)
            .await
            .into_iter()
            .filter(|won| *won)
            .count(),
        1
    );
}

/// Group commit: writes that fail or change nothing, queued together with
/// writes that succeed (on SQLite they share batches), leave nothing behind
/// and consume no sequence or revision; the others all commit.
pub(super) async fn mixed_batches(h: &Harness) {
    let s = h.store.clone();
    s.create_build("g", attrs()).await.unwrap();
    let b = build("g");
    let mut tasks = Vec::new();
    for n in 0..48u8 {
        let (s, b) = (s.clone(), b.clone());
        tasks.push(tokio::spawn(async move {
            match n % 6 {
                // Appends that succeed.
                0 | 1 => s
                    .append(&b, event(n.into()), None)
                    .await
                    .map(|e| e.is_some()),
                // Stale conditional appends: no-ops.
                2 => s
                    .append(&b, event(n.into()), Some(10_000))
                    .await
                    .map(|e| e.is_some()),
                // Deposits whose event is rejected.
                3 => {
                    let reject = |_: &[ArtifactMeta]| -> StoreResult<NewEvent> {
                        Err(StoreError::Rejected("no".into()))
                    };
                    match s
                        .deposit(&b, vec![artifact("plan", &[n])], Box::new(reject))
                        .await
                    {
                        Err(StoreError::Rejected(_)) => Ok(false),
                        other => panic!("a rejected deposit answered {other:?}"),
                    }
                }
                // Deposits that succeed.
                4 => {
                    let ok = |_: &[ArtifactMeta]| -> StoreResult<NewEvent> { Ok(event(0)) };
                    s.deposit(&b, vec![artifact("plan", &[n])], Box::new(ok))
                        .await
                        .map(|_| true)
                }
                // Lease claims: one wins, the others change nothing.
                _ => s.claim_lease(&b, &format!("h{n}"), 60_000).await,
            }
        }));
    }
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.expect("task").expect("store"));
    }
    let won = |kind: u8| {
        outcomes
            .iter()
            .enumerate()
            .filter(|(n, ok)| *n as u8 % 6 == kind && **ok)
            .count()
    };
    assert_eq!(
        (won(0) + won(1), won(2), won(3), won(4), won(5)),
        (16, 0, 0, 8, 1)
    );
    let seqs: Vec<i64> = envelopes(&s, &b, 0)
        .await
        .unwrap()
        .iter()
        .map(|e| seq_of(e))
        .collect();
    assert_eq!(
        seqs,
        (1..=24).collect::<Vec<_>>(),
        "no sequence consumed by a failure"
    );
    let revisions: Vec<i64> = listed(&s, artifact_listing(&b, Some("plan")))
        .await
        .unwrap()
        .iter()
        .map(|m| m["revision"].as_i64().unwrap())
        .collect();
    assert_eq!(
        revisions,
        (0..8).collect::<Vec<_>>(),
        "no revision consumed by a failure"
    );
    // The next writes continue right after.
    assert_eq!(
        seq_of(&s.append(&b, event(0), Some(24)).await.unwrap().unwrap()),
        25
    );
}
