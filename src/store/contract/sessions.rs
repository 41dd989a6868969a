//! Sessions: creation with their first event, and their listing.

use serde_json::Map;

use super::harness::{Harness, envelopes, event, listed, seq_of};
use crate::protocol::{ResourceKind, ResourceRef};
use crate::store::api::NewEvent;
use crate::store::error::{StoreError, StoreResult};
use crate::store::rows::Listing;

fn sessions_of(repo: &str) -> Listing {
    Listing::Sessions {
        repo: repo.to_owned(),
    }
}

pub(super) async fn sessions(h: &Harness) {
    let s = &h.store;
    let first = || -> StoreResult<NewEvent> { Ok(event(1)) };
    let mut attrs = Map::new();
    attrs.insert("repo".into(), "acme/w".into());
    attrs.insert("operator".into(), "alice".into());
    assert!(matches!(
        s.create_session("acme/w", "os_1", attrs.clone(), Box::new(first))
            .await,
        Err(StoreError::NotFound(r)) if r == ResourceRef::new(ResourceKind::Repo, "acme/w")
    ));
    s.ensure_repo("acme/w").await.unwrap();
    // A rejected session.created leaves no record and no event.
    let reject = || -> StoreResult<NewEvent> { Err(StoreError::Rejected("no".into())) };
    assert!(matches!(
        s.create_session("acme/w", "os_0", attrs.clone(), Box::new(reject))
            .await,
        Err(StoreError::Rejected(_))
    ));
    let session = |id: &str| ResourceRef::new(ResourceKind::Session, id);
    assert!(s.get_record(&session("os_0")).await.unwrap().is_none());
    // Same millisecond: creation order still holds.
    for id in ["os_b", "os_a", "os_c"] {
        s.create_session("acme/w", id, attrs.clone(), Box::new(first))
            .await
            .unwrap();
    }
    let order: Vec<String> = listed(s, sessions_of("acme/w"))
        .await
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(order, vec!["os_b", "os_a", "os_c"]);
    let events = envelopes(s, &session("os_a"), 0).await.unwrap();
    assert_eq!(events.len(), 1);
    assert!(
        events[0].starts_with(r#"{"session":"os_a","seq":1,"#),
        "{}",
        events[0]
    );
    assert_eq!(
        seq_of(
            &s.append(&session("os_a"), event(2), None)
                .await
                .unwrap()
                .unwrap()
        ),
        2
    );
    assert!(matches!(
        listed(s, sessions_of("missing")).await,
        Err(StoreError::NotFound(r)) if r == ResourceRef::new(ResourceKind::Repo, "missing")
    ));
    assert!(
        listed(s, sessions_of("acme/w"))
            .await
            .unwrap()
            .iter()
            .all(|r| r["operator"] == "alice")
    );
}

/// Creating a session writes its log (`session.created` as sequence 1), so
/// it is announced after its commit like every other write to a log: the
/// short-log cache drops what a whole-log read that raced the creation may
/// have found (no rows, then the session: two statements on a SQLite
/// file) instead of keeping `[]` for a log that has an event (issue 49).
pub(super) async fn session_creation_is_announced(h: &Harness) {
    let announced = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = announced.clone();
    assert!(
        h.notifier
            .observe_writes(Box::new(move |r: &ResourceRef| {
                seen.lock().unwrap().push(r.clone());
            }))
            .is_ok()
    );
    h.store.ensure_repo("acme/w").await.unwrap();
    let mut attrs = Map::new();
    attrs.insert("repo".into(), "acme/w".into());
    attrs.insert("operator".into(), "alice".into());
    let first = || -> StoreResult<NewEvent> { Ok(event(1)) };
    h.store
        .create_session("acme/w", "os_announced", attrs, Box::new(first))
        .await
        .unwrap();
    let session = ResourceRef::new(ResourceKind::Session, "os_announced");
    assert!(
        announced.lock().unwrap().contains(&session),
        "the creation was not announced: {:?}",
        announced.lock().unwrap()
    );
    assert_eq!(
        envelopes(&h.store, &session, 0).await.unwrap().len(),
        1,
        "announced after its commit: the event is there"
    );
}
