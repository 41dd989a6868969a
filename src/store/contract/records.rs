//! Records and sequences: builds and their logs, `ensureRepo`, and the tails
//! the held-read sweep reads.

use super::harness::{Harness, T0, attrs, build, envelopes, event, listed, seq_of};
use crate::protocol::{ResourceKind, ResourceRef};
use crate::store::error::StoreError;
use crate::store::rows::Listing;

pub(super) async fn records_and_sequences(h: &Harness) {
    let s = &h.store;
    let rec = s.create_build("b", attrs()).await.unwrap();
    assert_eq!((rec.created_at, rec.updated_at), (T0, T0));
    assert!(matches!(
        s.create_build("b", attrs()).await,
        Err(StoreError::Conflict(r)) if r == build("b")
    ));
    s.create_build("other", attrs()).await.unwrap();
    assert_eq!(listed(s, Listing::Builds).await.unwrap().len(), 2);

    h.clock.set(T0 + 5);
    for n in 1..=3 {
        let env = s
            .append(&build("b"), event(n), None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(seq_of(&env), n);
    }
    assert_eq!(
        seq_of(
            &s.append(&build("other"), event(1), None)
                .await
                .unwrap()
                .unwrap()
        ),
        1
    );
    let since1 = envelopes(s, &build("b"), 1).await.unwrap();
    assert_eq!(
        since1.iter().map(|e| seq_of(e)).collect::<Vec<_>>(),
        vec![2, 3]
    );
    assert_eq!(
        s.get_record(&build("b")).await.unwrap().unwrap().updated_at,
        T0 + 5
    );
    assert!(matches!(
        envelopes(s, &build("missing"), 0).await,
        Err(StoreError::NotFound(r)) if r == build("missing")
    ));
    assert!(matches!(
        s.append(&build("missing"), event(1), None).await,
        Err(StoreError::NotFound(r)) if r == build("missing")
    ));

    // ensureRepo is idempotent and never resets.
    let repo = ResourceRef::new(ResourceKind::Repo, "acme/widgets");
    let first = s.ensure_repo("acme/widgets").await.unwrap();
    s.append(&repo, event(1), None).await.unwrap();
    h.clock.set(T0 + 99);
    let again = s.ensure_repo("acme/widgets").await.unwrap();
    assert_eq!(again.created_at, first.created_at);
    assert_eq!(again.updated_at, T0 + 5);
    assert_eq!(envelopes(s, &repo, 0).await.unwrap().len(), 1);
}

pub(super) async fn tails(h: &Harness) {
    let s = &h.store;
    s.create_build("t1", attrs()).await.unwrap();
    s.ensure_repo("t1").await.unwrap();
    s.append(&build("t1"), event(1), None).await.unwrap();
    s.append(&build("t1"), event(2), None).await.unwrap();
    let repo = ResourceRef::new(ResourceKind::Repo, "t1");
    let mut tails = s
        .tails(&[build("t1"), repo.clone(), build("missing")])
        .await
        .unwrap();
    tails.sort_by(|a, b| a.0.kind.tag().cmp(b.0.kind.tag()));
    assert_eq!(tails, vec![(build("t1"), 2), (repo, 0)]);
    assert!(s.tails(&[]).await.unwrap().is_empty());
}
