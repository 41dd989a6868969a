//! Revoked tokens.

use super::harness::{Harness, T0, futures_join};
use crate::store::records::Revocation;

/// Revoked tokens: idempotent by digest (the first revocation stands, also
/// under concurrent revokers), listed by digest with their optional expiry
/// and note, and pruned only once their token has expired.
pub(super) async fn revocations(h: &Harness) {
    let s = &h.store;
    assert!(s.revocations().await.unwrap().is_empty());
    let revocation = |n: u8, expires_at: Option<i64>, note: Option<&str>| Revocation {
        digest: format!("{n:02x}").repeat(32),
        expires_at,
        revoked_at: T0,
        note: note.map(str::to_owned),
    };
    let expiring = revocation(0xbb, Some(T0 + 1000), Some("leaked in CI logs"));
    let forever = revocation(0xaa, None, None);
    assert!(s.revoke_token(expiring.clone()).await.unwrap());
    assert!(s.revoke_token(forever.clone()).await.unwrap());
    // Again, with another note and expiry: nothing changes.
    let again = Revocation {
        note: Some("again".into()),
        expires_at: None,
        ..expiring.clone()
    };
    assert!(!s.revoke_token(again).await.unwrap());
    assert_eq!(
        s.revocations().await.unwrap(),
        vec![forever.clone(), expiring.clone()]
    );

    // Concurrent revokers of one digest: exactly one inserts it.
    let racing = revocation(0xcc, Some(T0 + 5000), None);
    let handles = (0..8).map(|_| {
        let (s, racing) = (s.clone(), racing.clone());
        tokio::spawn(async move { s.revoke_token(racing).await.unwrap() })
    });
    let inserted = futures_join(handles).await;
    assert_eq!(inserted.iter().filter(|i| **i).count(), 1, "{inserted:?}");

    // Pruning forgets what expired by then, never a revocation without expiry.
    assert_eq!(s.prune_revocations(T0 + 999).await.unwrap(), 0);
    assert_eq!(s.prune_revocations(T0 + 1000).await.unwrap(), 1);
    let left: Vec<String> = s
        .revocations()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.digest)
        .collect();
    assert_eq!(left, vec![forever.digest.clone(), racing.digest.clone()]);
    assert_eq!(s.prune_revocations(i64::MAX).await.unwrap(), 1);
    assert_eq!(s.revocations().await.unwrap(), vec![forever]);
}
