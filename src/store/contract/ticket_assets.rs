//! Ticket assets (protocol 3) on every backend: revisions, tombstones, the
//! list's two views, the answer check's veto, and revisions under
//! concurrent writers.

use std::sync::Arc;

use serde_json::Value;

use super::harness::{Harness, T0, futures_join};
use crate::protocol::ticket_assets::Layout;
use crate::store::api::Store;
use crate::store::assets::{AnswerCheck, AssetEntry, AssetKey, NewTicketAsset, TicketAssetMeta};
use crate::store::error::StoreError;
use crate::store::rows::Listing;

pub(super) fn key(ticket: &str, kind: &str, name: &str) -> AssetKey {
    AssetKey {
        repo: "acme/widgets".into(),
        ticket_id: ticket.into(),
        kind: kind.into(),
        name: name.into(),
    }
}

/// A tree of one file (`n` bytes, a made-up address) and one directory.
pub(super) fn tree(key: &AssetKey, n: u64) -> NewTicketAsset {
    NewTicketAsset {
        key: key.clone(),
        layout: Layout::Tree,
        entries: vec![
            AssetEntry::File {
                path: "index.html".into(),
                size: n,
                blob_ref: format!("{n:064x}"),
            },
            AssetEntry::Dir {
                path: "img/empty".into(),
            },
        ],
    }
}

pub(super) fn accept() -> AnswerCheck {
    Box::new(|_| Ok(()))
}

pub(super) async fn put(s: &Arc<dyn Store>, asset: NewTicketAsset) -> TicketAssetMeta {
    s.put_ticket_asset(asset, accept()).await.unwrap()
}

pub(super) async fn get(s: &Arc<dyn Store>, key: &AssetKey, rev: Option<i64>) -> Option<i64> {
    s.get_ticket_asset(key, rev)
        .await
        .unwrap()
        .map(|m| m.summary.revision)
}

/// A ticket's list as served: its summaries' JSON.
pub(super) async fn summaries(s: &Arc<dyn Store>, ticket: &str, revisions: bool) -> Vec<Value> {
    let listing = Listing::TicketAssets {
        repo: "acme/widgets".into(),
        ticket_id: ticket.into(),
        revisions,
    };
    let (text, ()) = s.read(listing).await.unwrap().collect().await.unwrap();
    serde_json::from_str(&text).unwrap()
}

/// `(kind, name, revision)` of a ticket's list.
pub(super) async fn listed(
    s: &Arc<dyn Store>,
    ticket: &str,
    revisions: bool,
) -> Vec<(String, String, i64)> {
    summaries(s, ticket, revisions)
        .await
        .into_iter()
        .map(|m| {
            (
                m["kind"].as_str().unwrap().to_owned(),
                m["name"].as_str().unwrap().to_owned(),
                m["revision"].as_i64().unwrap(),
            )
        })
        .collect()
}

fn rows(items: &[(&str, &str, i64)]) -> Vec<(String, String, i64)> {
    items
        .iter()
        .map(|(k, n, r)| ((*k).to_owned(), (*n).to_owned(), *r))
        .collect()
}

pub(super) async fn ticket_asset_revisions(h: &Harness) {
    let s = &h.store;
    let home = key("AUT-1", "design", "home");
    // No repository record is needed.
    let first = put(s, tree(&home, 5)).await;
    assert_eq!(first.summary.revision, 0);
    assert_eq!(first.summary.created_at, T0);
    assert_eq!((first.summary.file_count, first.summary.dir_count), (1, 1));
    assert_eq!(first.summary.size, 5);
    h.clock.set(T0 + 10);
    let second = put(s, tree(&home, 7)).await;
    assert_eq!(second.summary.revision, 1);
    assert_eq!(second.summary.created_at, T0 + 10);
    // A clock stepping back does not make a revision older than the last.
    h.clock.set(T0 + 5);
    let third = put(s, tree(&home, 9)).await;
    assert_eq!(
        (third.summary.revision, third.summary.created_at),
        (2, T0 + 10)
    );

    // Reads: the latest, and any revision by number, with its manifest.
    let latest = s.get_ticket_asset(&home, None).await.unwrap().unwrap();
    assert_eq!(latest, third);
    let old = s.get_ticket_asset(&home, Some(0)).await.unwrap().unwrap();
    assert_eq!(old, first);
    assert_eq!(old.entries().unwrap(), tree(&home, 5).entries);
    for missing in [3, -1, i64::MAX] {
        assert_eq!(get(s, &home, Some(missing)).await, None, "rev {missing}");
    }
    assert_eq!(get(s, &key("AUT-1", "design", "nope"), None).await, None);
    assert_eq!(get(s, &key("AUT-2", "design", "home"), None).await, None);

    // The list: by kind, name, revision; the latest of each by default.
    let mut other_repo = key("AUT-1", "a", "z");
    other_repo.repo = "acme/other".into();
    put(s, tree(&other_repo, 1)).await;
    put(s, tree(&key("AUT-1", "a", "z"), 1)).await;
    put(s, tree(&key("AUT-1", "a", "b"), 1)).await;
    put(s, tree(&key("AUT-2", "a", "a"), 1)).await;
    put(s, tree(&key("AUT-1", "Z", "a"), 1)).await;
    assert_eq!(
        listed(s, "AUT-1", false).await,
        rows(&[
            ("Z", "a", 0),
            ("a", "b", 0),
            ("a", "z", 0),
            ("design", "home", 2)
        ])
    );
    assert_eq!(
        listed(s, "AUT-1", true).await,
        rows(&[
            ("Z", "a", 0),
            ("a", "b", 0),
            ("a", "z", 0),
            ("design", "home", 0),
            ("design", "home", 1),
            ("design", "home", 2)
        ])
    );
    assert_eq!(listed(s, "AUT-3", false).await, rows(&[]));
    let summary = &summaries(s, "AUT-1", false).await[3];
    assert_eq!(summary.to_string(), third.summary.to_json_text());
}

pub(super) async fn ticket_asset_tombstones(h: &Harness) {
    let s = &h.store;
    let home = key("AUT-1", "design", "home");
    let other = key("AUT-1", "design", "other");
    put(s, tree(&home, 1)).await;
    let live = put(s, tree(&home, 2)).await;
    put(s, tree(&other, 3)).await;

    // Removal answers the latest live revision and writes a tombstone as 2.
    h.clock.set(T0 + 20);
    let removed = s.remove_ticket_asset(&home, accept()).await.unwrap();
    assert_eq!(removed, Some(live));
    assert_eq!(get(s, &home, None).await, None, "removed: no latest");
    assert_eq!(
        get(s, &home, Some(1)).await,
        Some(1),
        "a pinned revision stays"
    );
    assert_eq!(get(s, &home, Some(0)).await, Some(0));
    assert_eq!(get(s, &home, Some(2)).await, None, "the tombstone itself");
    assert_eq!(
        listed(s, "AUT-1", false).await,
        rows(&[("design", "other", 0)])
    );
    assert_eq!(
        listed(s, "AUT-1", true).await,
        rows(&[
            ("design", "home", 0),
            ("design", "home", 1),
            ("design", "other", 0)
        ])
    );

    // Removing again (and removing what never existed) writes nothing:
    // the next put is 3, not 4.
    assert_eq!(s.remove_ticket_asset(&home, accept()).await.unwrap(), None);
    let never = key("AUT-1", "design", "never");
    assert_eq!(s.remove_ticket_asset(&never, accept()).await.unwrap(), None);
    let again = put(s, tree(&home, 4)).await;
    assert_eq!(
        again.summary.revision, 3,
        "re-attaching skips the tombstone"
    );
    assert_eq!(again.summary.created_at, T0 + 20);
    assert_eq!(get(s, &home, None).await, Some(3));
    assert_eq!(put(s, tree(&never, 1)).await.summary.revision, 0);
    assert_eq!(
        listed(s, "AUT-1", false).await,
        rows(&[
            ("design", "home", 3),
            ("design", "never", 0),
            ("design", "other", 0)
        ])
    );
    assert_eq!(
        listed(s, "AUT-1", true)
            .await
            .into_iter()
            .filter(|r| r.1 == "home")
            .map(|r| r.2)
            .collect::<Vec<_>>(),
        [0, 1, 3]
    );
}

/// An answer the check refuses (the response ceiling) leaves nothing: no
/// revision, no tombstone, no counter bump.
pub(super) async fn ticket_asset_refused_answers(h: &Harness) {
    let s = &h.store;
    let home = key("AUT-1", "design", "home");
    let refuse = || -> AnswerCheck {
        Box::new(|meta| {
            Err(StoreError::TooLarge(format!(
                "no {}",
                meta.summary.revision
            )))
        })
    };
    let err = s
        .put_ticket_asset(tree(&home, 1), refuse())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::TooLarge(m) if m == "no 0"),
        "{err:?}"
    );
    assert_eq!(get(s, &home, None).await, None);
    assert_eq!(put(s, tree(&home, 1)).await.summary.revision, 0);
    let err = s.remove_ticket_asset(&home, refuse()).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::TooLarge(m) if m == "no 0"),
        "{err:?}"
    );
    assert_eq!(get(s, &home, None).await, Some(0), "no tombstone");
    assert_eq!(put(s, tree(&home, 1)).await.summary.revision, 1);
    // The check sees exactly the answer.
    let seen = Arc::new(std::sync::Mutex::new(None));
    let record = seen.clone();
    let check: AnswerCheck = Box::new(move |meta| {
        *record.lock().unwrap() = Some(meta.to_json_text());
        Ok(())
    });
    let meta = s.put_ticket_asset(tree(&home, 2), check).await.unwrap();
    assert_eq!(seen.lock().unwrap().take(), Some(meta.to_json_text()));
}

/// Concurrent puts of one asset get distinct revisions 0..n; of racing
/// removals of one live revision exactly one removes it.
pub(super) async fn ticket_asset_concurrency(h: &Harness) {
    let s = h.store.clone();
    let home = key("AUT-1", "design", "home");
    let puts = (0..16u64).map(|n| {
        let (s, home) = (s.clone(), home.clone());
        tokio::spawn(async move { put(&s, tree(&home, n)).await.summary.revision })
    });
    let mut revisions = futures_join(puts).await;
    revisions.sort_unstable();
    assert_eq!(revisions, (0..16).collect::<Vec<_>>());
    let removals = (0..8).map(|_| {
        let (s, home) = (s.clone(), home.clone());
        tokio::spawn(async move { s.remove_ticket_asset(&home, accept()).await.unwrap() })
    });
    let removed: Vec<_> = futures_join(removals).await.into_iter().flatten().collect();
    assert_eq!(removed.len(), 1, "{removed:?}");
    assert_eq!(removed[0].summary.revision, 15);
    assert_eq!(get(&s, &home, None).await, None);
    assert_eq!(put(&s, tree(&home, 0)).await.summary.revision, 17);
    // Puts and removals interleaved: every answer a distinct revision.
    let mixed = (0..12u64).map(|n| {
        let (s, home) = (s.clone(), home.clone());
        tokio::spawn(async move {
            if n % 3 == 0 {
                s.remove_ticket_asset(&home, accept())
                    .await
                    .unwrap()
                    .map(|_| -1)
            } else {
                Some(put(&s, tree(&home, n)).await.summary.revision)
            }
        })
    });
    let mut put_revisions: Vec<i64> = futures_join(mixed)
        .await
        .into_iter()
        .flatten()
        .filter(|r| *r >= 0)
        .collect();
    put_revisions.sort_unstable();
    put_revisions.dedup();
    assert_eq!(put_revisions.len(), 8);
    let all = summaries(&s, "AUT-1", true).await;
    assert_eq!(all.len(), 16 + 1 + 8);
}
