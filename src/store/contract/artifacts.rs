//! Artifacts: revisions, deposits, and retention (the oldest revisions pruned
//! in the writing transaction; readers never see a half-pruned list).

use std::sync::Arc;

use super::harness::{
    Harness, artifact, artifact_listing, attrs, build, event, futures_join, listed, revisions,
    seq_of,
};
use crate::protocol::{ResourceKind, ResourceRef};
use crate::store::api::{MakeEvent, NewEvent};
use crate::store::error::{StoreError, StoreResult};
use crate::store::records::ArtifactMeta;

fn accept_any() -> MakeEvent {
    Box::new(|_: &[ArtifactMeta]| -> StoreResult<NewEvent> { Ok(event(0)) })
}

pub(super) async fn artifacts_and_deposits(h: &Harness) {
    let s = &h.store;
    let b = build("a");
    s.create_build("a", attrs()).await.unwrap();
    assert_eq!(
        s.put_artifact(&b, artifact("plan", b"one"))
            .await
            .unwrap()
            .revision,
        0
    );
    assert_eq!(
        s.put_artifact(&b, artifact("plan", b"one"))
            .await
            .unwrap()
            .revision,
        1
    );
    assert_eq!(
        s.put_artifact(&b, artifact("notes", b"x"))
            .await
            .unwrap()
            .revision,
        0
    );
    assert_eq!(
        s.get_artifact(&b, "plan", None)
            .await
            .unwrap()
            .unwrap()
            .revision,
        1
    );
    assert_eq!(
        s.get_artifact(&b, "plan", Some(0))
            .await
            .unwrap()
            .unwrap()
            .revision,
        0
    );
    assert!(s.get_artifact(&b, "plan", Some(7)).await.unwrap().is_none());
    assert!(
        s.get_artifact(&b, "plan", Some(-1))
            .await
            .unwrap()
            .is_none()
    );
    assert!(s.get_artifact(&b, "none", None).await.unwrap().is_none());
    let order: Vec<(String, i64)> = listed(s, artifact_listing(&b, None))
        .await
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["kind"].as_str().unwrap().to_owned(),
                m["revision"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        order,
        vec![("notes".into(), 0), ("plan".into(), 0), ("plan".into(), 1)]
    );

    // A rejected deposit consumes nothing.
    let reject =
        |_: &[ArtifactMeta]| -> StoreResult<NewEvent> { Err(StoreError::Rejected("no".into())) };
    let err = s
        .deposit(&b, vec![artifact("plan", b"two")], Box::new(reject))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Rejected(m) if m == "no"));
    assert_eq!(
        listed(s, artifact_listing(&b, Some("plan")))
            .await
            .unwrap()
            .len(),
        2
    );
    let accept = |metas: &[ArtifactMeta]| -> StoreResult<NewEvent> {
        assert_eq!(
            metas.iter().map(|m| m.revision).collect::<Vec<_>>(),
            vec![2, 3]
        );
        Ok(event(0))
    };
    let (env, metas) = s
        .deposit(
            &b,
            vec![artifact("plan", b"two"), artifact("plan", b"three")],
            Box::new(accept),
        )
        .await
        .unwrap();
    assert_eq!(seq_of(&env), 1);
    assert_eq!(metas.len(), 2);
    assert!(matches!(
        s.put_artifact(&build("missing"), artifact("plan", b"x"))
            .await,
        Err(StoreError::NotFound(r)) if r == build("missing")
    ));
}

/// Spec section 3 retention: a put or deposit beyond a kind's bound deletes
/// exactly the oldest revisions, in its own transaction; a pruned revision
/// reads as absent; other kinds, other resources and `stream:` kinds are
/// untouched; revision numbers keep counting up.
pub(super) async fn retention(h: &Harness) {
    let s = &h.store;
    let b = build("ret");
    s.create_build("ret", attrs()).await.unwrap();
    for n in 0..6_i64 {
        let meta = s
            .put_artifact(&b, artifact("kept", format!("kept {n}").as_bytes()))
            .await
            .unwrap();
        assert_eq!(meta.revision, n);
        s.put_artifact(&b, artifact("plan", format!("plan {n}").as_bytes()))
            .await
            .unwrap();
        s.put_artifact(&b, artifact(&format!("stream:st_{n}"), b"[]"))
            .await
            .unwrap();
        s.put_artifact(&b, artifact("stream:same", format!("{n}").as_bytes()))
            .await
            .unwrap();
        let oldest = (n - 2).max(0);
        assert_eq!(
            revisions(s, &b, "kept").await,
            (oldest..=n).collect::<Vec<_>>(),
            "after put {n}"
        );
    }
    assert_eq!(revisions(s, &b, "plan").await, (0..6).collect::<Vec<_>>());
    assert_eq!(
        revisions(s, &b, "stream:same").await,
        (0..6).collect::<Vec<_>>()
    );
    for n in 0..6 {
        assert_eq!(revisions(s, &b, &format!("stream:st_{n}")).await, vec![0]);
    }
    // A pruned revision reads as absent; the latest is the newest.
    for rev in 0..3 {
        assert!(
            s.get_artifact(&b, "kept", Some(rev))
                .await
                .unwrap()
                .is_none()
        );
    }
    let latest = s.get_artifact(&b, "kept", None).await.unwrap().unwrap();
    assert_eq!(latest.revision, 5);
    assert_eq!(latest.blob_ref, crate::blobs::blob_ref(b"kept 5"));
    assert_eq!(
        s.get_artifact(&b, "kept", Some(3))
            .await
            .unwrap()
            .unwrap()
            .blob_ref,
        crate::blobs::blob_ref(b"kept 3")
    );

    // A deposit prunes in its transaction; a rejected one prunes nothing.
    let reject =
        |_: &[ArtifactMeta]| -> StoreResult<NewEvent> { Err(StoreError::Rejected("no".into())) };
    let err = s
        .deposit(
            &b,
            vec![artifact("kept", b"r1"), artifact("kept", b"r2")],
            Box::new(reject),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Rejected(_)));
    assert_eq!(revisions(s, &b, "kept").await, vec![3, 4, 5]);
    let (_, metas) = s
        .deposit(
            &b,
            vec![
                artifact("kept", b"d6"),
                artifact("plan", b"d"),
                artifact("kept", b"d7"),
            ],
            accept_any(),
        )
        .await
        .unwrap();
    let assigned: Vec<(String, i64)> = metas.into_iter().map(|m| (m.kind, m.revision)).collect();
    assert_eq!(
        assigned,
        vec![("kept".into(), 6), ("plan".into(), 6), ("kept".into(), 7)]
    );
    assert_eq!(revisions(s, &b, "kept").await, vec![5, 6, 7]);
    assert_eq!(revisions(s, &b, "plan").await, (0..7).collect::<Vec<_>>());

    // One deposit of more revisions than the bound keeps only its newest.
    let (_, metas) = s
        .deposit(
            &b,
            (0..4).map(|n| artifact("kept", &[n])).collect(),
            accept_any(),
        )
        .await
        .unwrap();
    assert_eq!(
        metas.iter().map(|m| m.revision).collect::<Vec<_>>(),
        vec![8, 9, 10, 11]
    );
    assert_eq!(revisions(s, &b, "kept").await, vec![9, 10, 11]);

    // Prefix rules: each matching kind is bounded on its own.
    for n in 0..4 {
        s.put_artifact(&b, artifact("cfg-a", &[n])).await.unwrap();
        if n % 2 == 0 {
            s.put_artifact(&b, artifact("cfg-b", &[n])).await.unwrap();
        }
    }
    assert_eq!(revisions(s, &b, "cfg-a").await, vec![2, 3]);
    assert_eq!(revisions(s, &b, "cfg-b").await, vec![0, 1]);

    // Retention is per resource: another build's revisions are its own, and
    // a repository's artifacts are bounded the same way.
    let other = build("ret-other");
    s.create_build("ret-other", attrs()).await.unwrap();
    s.put_artifact(&other, artifact("kept", b"o"))
        .await
        .unwrap();
    assert_eq!(revisions(s, &other, "kept").await, vec![0]);
    assert_eq!(revisions(s, &b, "kept").await, vec![9, 10, 11]);
    s.ensure_repo("acme/ret").await.unwrap();
    let repo = ResourceRef::new(ResourceKind::Repo, "acme/ret");
    for n in 0..5 {
        s.put_artifact(&repo, artifact("kept", &[n])).await.unwrap();
    }
    assert_eq!(revisions(s, &repo, "kept").await, vec![2, 3, 4]);

    // The per-write bound: a deposit leaving 6 revisions past the bound
    // prunes only 4 (the oldest); the next write prunes the rest.
    let bounded = build("ret-bounded");
    s.create_build("ret-bounded", attrs()).await.unwrap();
    s.deposit(
        &bounded,
        (0..9).map(|n| artifact("kept", &[n])).collect(),
        accept_any(),
    )
    .await
    .unwrap();
    assert_eq!(
        revisions(s, &bounded, "kept").await,
        (4..9).collect::<Vec<_>>()
    );
    s.put_artifact(&bounded, artifact("kept", b"9"))
        .await
        .unwrap();
    assert_eq!(revisions(s, &bounded, "kept").await, vec![7, 8, 9]);
}

/// Readers listing a retained kind while writers add revisions see, every
/// time, the state after some whole write: exactly the `min(3, n)` newest of
/// the `n` revisions assigned so far, contiguous, ending at revision `n - 1`
/// — never a window longer than the bound (inserted, not yet pruned) or
/// with a hole (partly pruned) — and one reader's newest revision never
/// goes back.
pub(super) async fn retention_under_concurrent_reads(h: &Harness) {
    const KEEP: i64 = 3;
    let s = h.store.clone();
    s.create_build("ret-c", attrs()).await.unwrap();
    let b = build("ret-c");
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers = (0..3).map(|_| {
        let (s, b, done) = (s.clone(), b.clone(), done.clone());
        tokio::spawn(async move {
            let mut listings = 0_u64;
            let mut newest_seen = -1_i64;
            loop {
                let finished = done.load(std::sync::atomic::Ordering::SeqCst);
                let revs = revisions(&s, &b, "kept").await;
                if let Some(&newest) = revs.last() {
                    let expected: Vec<i64> = ((newest - KEEP + 1).max(0)..=newest).collect();
                    assert_eq!(revs, expected, "a listing between two whole writes");
                    assert!(newest >= newest_seen, "{newest} after {newest_seen}");
                    newest_seen = newest;
                    let latest = s.get_artifact(&b, "kept", None).await.unwrap().unwrap();
                    assert!(latest.revision >= newest);
                }
                listings += 1;
                if finished {
                    return (listings, newest_seen);
                }
                tokio::task::yield_now().await;
            }
        })
    });
    let readers: Vec<_> = readers.collect();
    let writers = (0..4_u8).map(|w| {
        let (s, b) = (s.clone(), b.clone());
        tokio::spawn(async move {
            for n in 0..10_u8 {
                if n % 2 == 0 {
                    s.put_artifact(&b, artifact("kept", &[w, n])).await.unwrap();
                } else {
                    s.deposit(
                        &b,
                        vec![artifact("kept", &[w, n]), artifact("plan", &[w, n])],
                        accept_any(),
                    )
                    .await
                    .unwrap();
                }
            }
        })
    });
    futures_join(writers).await;
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    for (listings, newest) in futures_join(readers.into_iter()).await {
        assert!(listings > 0);
        assert_eq!(newest, 39, "the last listing sees every write");
    }
    assert_eq!(revisions(&s, &b, "kept").await, vec![37, 38, 39]);
    assert_eq!(revisions(&s, &b, "plan").await.len(), 20);
}
