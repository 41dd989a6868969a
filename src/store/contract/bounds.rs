//! The collection bounds (issue 33) on every backend, each at its edge: the
//! last write the bound allows succeeds, the next is refused with the
//! bound's error and writes nothing (no sequence or revision consumed,
//! nothing readable), also under concurrent writers, where PostgreSQL's
//! one-statement fast paths must not write past a bound.

use std::sync::Arc;

use serde_json::json;

use super::harness::{
    Harness, T0, artifact, artifact_listing, attrs, build, close, envelopes, event, futures_join,
    listed as listed_rows, revisions, seq_of,
};
use super::ticket_assets::{accept, get, key, listed, put, tree};
use crate::protocol::{ResourceKind, ResourceRef};
use crate::store::api::{MakeEvent, NewEvent, Store};
use crate::store::assets::AssetKey;
use crate::store::bounds::{Bound, Bounds};
use crate::store::envelope::chunk_json;
use crate::store::error::{StoreError, StoreResult};
use crate::store::options::StoreOptions;
use crate::store::records::ArtifactMeta;

/// The bounded contract: the contract's retention (`kept` keeps 3, `cfg-*`
/// 2) and small bounds.
pub(super) fn options() -> StoreOptions {
    StoreOptions {
        bounds: Bounds {
            max_stream_chunks: 3,
            max_stream_bytes: STREAM_BYTES,
            max_events_per_log: 4,
            max_artifact_revisions: 3,
            max_ticket_asset_revisions: 3,
            max_ticket_assets: 2,
        },
        ..super::harness::options()
    }
}

const STREAM_BYTES: i64 = 1000;

/// Which bound refused `result`, if one did.
fn refused_by<T: std::fmt::Debug>(result: StoreResult<T>) -> Bound {
    match result {
        Err(StoreError::OverBound(refusal)) => {
            assert!(
                refusal.message.contains(refusal.bound.flag()),
                "{}",
                refusal.message
            );
            refusal.bound
        }
        other => panic!("expected a bound's refusal, got {other:?}"),
    }
}

fn ok_event() -> MakeEvent {
    Box::new(|_: &[ArtifactMeta]| -> StoreResult<NewEvent> { Ok(event(0)) })
}

/// A batch whose chunk, stored as sequence `seq` of `id` at the harness's
/// time, is exactly `bytes` long.
fn batch_of(id: &str, seq: i64, bytes: usize) -> String {
    let around = chunk_json(id, seq, T0, "").len();
    let empty = r#"[{"type":"x","p":""}]"#.len();
    let pad = bytes - around - empty;
    let parts = json!([{"type": "x", "p": "a".repeat(pad)}]).to_string();
    assert_eq!(chunk_json(id, seq, T0, &parts).len(), bytes);
    parts
}

async fn chunk_count(s: &Arc<dyn Store>, id: &str) -> usize {
    s.chunks_page(id, 0, None).await.unwrap().1.len()
}

pub(super) async fn stream_chunk_bound(h: &Harness) {
    let s = &h.store;
    s.create_build("sc", attrs()).await.unwrap();
    s.create_stream(&build("sc"), "st_c", "l").await.unwrap();
    for n in 1..=3 {
        let chunk = s.append_chunk("st_c", r#"[{"type":"x"}]"#).await.unwrap();
        assert_eq!(seq_of(&chunk), n);
    }
    let refusal = s.append_chunk("st_c", r#"[{"type":"x"}]"#).await;
    assert_eq!(refused_by(refusal), Bound::StreamChunks);
    let stream = s.get_stream("st_c").await.unwrap().unwrap();
    assert_eq!(stream.last_seq, 3, "no sequence consumed");
    assert_eq!(chunk_count(s, "st_c").await, 3);
    // A stream at its bound still closes; then it is closed first (409).
    close(s, "st_c").await;
    assert!(matches!(
        s.append_chunk("st_c", r#"[{"type":"x"}]"#).await,
        Err(StoreError::Closed(id)) if id == "st_c"
    ));
    // Another stream of the scope has its own count.
    s.create_stream(&build("sc"), "st_d", "l").await.unwrap();
    s.append_chunk("st_d", r#"[{"type":"x"}]"#).await.unwrap();
}

pub(super) async fn stream_byte_bound(h: &Harness) {
    let s = &h.store;
    s.create_build("sb", attrs()).await.unwrap();
    s.create_stream(&build("sb"), "st_b", "l").await.unwrap();
    let first = s
        .append_chunk("st_b", &batch_of("st_b", 1, 400))
        .await
        .unwrap();
    assert_eq!(first.len(), 400);
    assert_eq!(s.get_stream("st_b").await.unwrap().unwrap().bytes, 400);
    // One byte over: refused, nothing written.
    let over = batch_of("st_b", 2, 601);
    assert_eq!(
        refused_by(s.append_chunk("st_b", &over).await),
        Bound::StreamBytes
    );
    let stream = s.get_stream("st_b").await.unwrap().unwrap();
    assert_eq!((stream.last_seq, stream.bytes), (1, 400));
    assert_eq!(chunk_count(s, "st_b").await, 1);
    // Exactly at the bound: taken, as sequence 2.
    let last = s
        .append_chunk("st_b", &batch_of("st_b", 2, 600))
        .await
        .unwrap();
    assert_eq!((seq_of(&last), last.len()), (2, 600));
    let stream = s.get_stream("st_b").await.unwrap().unwrap();
    assert_eq!((stream.last_seq, stream.bytes), (2, STREAM_BYTES));
    // Full: even the smallest batch is refused.
    assert_eq!(
        refused_by(s.append_chunk("st_b", r#"[{"type":"x"}]"#).await),
        Bound::StreamBytes
    );
    assert_eq!(chunk_count(s, "st_b").await, 2);
    // The total is the stored chunks' bytes, on every backend, also for
    // text beyond ASCII.
    s.create_stream(&build("sb"), "st_u", "l").await.unwrap();
    let wide = s
        .append_chunk("st_u", r#"[{"type":"x","t":"é€😀"}]"#)
        .await
        .unwrap();
    let chunks = s.chunks_page("st_u", 0, None).await.unwrap();
    assert_eq!(chunks.1, vec![wide.clone()]);
    assert_eq!(chunks.0.bytes, wide.len() as i64);
}

pub(super) async fn event_bound(h: &Harness) {
    let s = &h.store;
    let b = build("eb");
    s.create_build("eb", attrs()).await.unwrap();
    for n in 1..=4 {
        let envelope = s.append(&b, event(n), None).await.unwrap().unwrap();
        assert_eq!(seq_of(&envelope), n);
    }
    h.clock.set(T0 + 50);
    assert_eq!(
        refused_by(s.append(&b, event(5), None).await),
        Bound::EventsPerLog
    );
    // A stale comparison is stale first (it would write nothing anyway); a
    // current one is refused by the bound.
    assert_eq!(s.append(&b, event(5), Some(2)).await.unwrap(), None);
    assert_eq!(
        refused_by(s.append(&b, event(5), Some(4)).await),
        Bound::EventsPerLog
    );
    // A deposit appends an event: refused whole, its revision unconsumed.
    let deposit = s
        .deposit(&b, vec![artifact("plan", b"p")], ok_event())
        .await;
    assert_eq!(refused_by(deposit), Bound::EventsPerLog);
    assert!(s.get_artifact(&b, "plan", None).await.unwrap().is_none());
    assert_eq!(envelopes(s, &b, 0).await.unwrap().len(), 4);
    let record = s.get_record(&b).await.unwrap().unwrap();
    assert_eq!(record.updated_at, T0, "nothing touched");
    // Puts append no event: they are not held to it.
    let put = s.put_artifact(&b, artifact("plan", b"p")).await.unwrap();
    assert_eq!(put.revision, 0);

    // The same for the other logs: a repository's journal and a session
    // (whose `session.created` is its first event).
    let repo = ResourceRef::new(ResourceKind::Repo, "acme/eb");
    s.ensure_repo("acme/eb").await.unwrap();
    for _ in 0..4 {
        s.append(&repo, event(1), None).await.unwrap().unwrap();
    }
    assert_eq!(
        refused_by(s.append(&repo, event(5), None).await),
        Bound::EventsPerLog
    );
    let first = || -> StoreResult<NewEvent> { Ok(event(1)) };
    let mut session_attrs = serde_json::Map::new();
    session_attrs.insert("repo".into(), "acme/eb".into());
    session_attrs.insert("operator".into(), "ada".into());
    s.create_session("acme/eb", "os_eb", session_attrs, Box::new(first))
        .await
        .unwrap();
    let session = ResourceRef::new(ResourceKind::Session, "os_eb");
    for expected in 1..=3 {
        s.append(&session, event(1), Some(expected))
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(
        refused_by(s.append(&session, event(5), Some(4)).await),
        Bound::EventsPerLog
    );
    assert_eq!(envelopes(s, &session, 0).await.unwrap().len(), 4);
}

/// Many appends and deposits at once at the edge: exactly the bound's
/// number succeed, with sequences 1…bound, and the others are refused.
pub(super) async fn event_bound_under_concurrent_writers(h: &Harness) {
    let s = h.store.clone();
    s.create_build("ec", attrs()).await.unwrap();
    let b = build("ec");
    let appends = (0..16).map(|n| {
        let (s, b) = (s.clone(), b.clone());
        tokio::spawn(async move { s.append(&b, event(n), None).await })
    });
    let mut seqs = Vec::new();
    for outcome in futures_join(appends).await {
        match outcome {
            Ok(envelope) => seqs.push(seq_of(&envelope.unwrap())),
            refused => assert_eq!(refused_by(refused), Bound::EventsPerLog),
        }
    }
    seqs.sort_unstable();
    assert_eq!(seqs, vec![1, 2, 3, 4]);
    assert_eq!(envelopes(&s, &b, 0).await.unwrap().len(), 4);

    // Deposits of distinct kinds: only the events bind.
    s.create_build("ed", attrs()).await.unwrap();
    let d = build("ed");
    let deposits = (0..16).map(|n| {
        let (s, d) = (s.clone(), d.clone());
        tokio::spawn(async move {
            s.deposit(&d, vec![artifact(&format!("k{n}"), b"x")], ok_event())
                .await
        })
    });
    let mut won = 0;
    for outcome in futures_join(deposits).await {
        match outcome {
            Ok((envelope, metas)) => {
                won += 1;
                assert_eq!(metas[0].revision, 0);
                assert!((1..=4).contains(&seq_of(&envelope)));
            }
            refused => assert_eq!(refused_by(refused), Bound::EventsPerLog),
        }
    }
    assert_eq!(won, 4);
    assert_eq!(envelopes(&s, &d, 0).await.unwrap().len(), 4);
    let kinds = listed_rows(&s, artifact_listing(&d, None)).await.unwrap();
    assert_eq!(kinds.len(), 4, "the refused deposits left no metadata");
}

pub(super) async fn artifact_revision_bound(h: &Harness) {
    let s = &h.store;
    let b = build("ab");
    s.create_build("ab", attrs()).await.unwrap();
    for n in 0..3 {
        let meta = s.put_artifact(&b, artifact("plan", b"p")).await.unwrap();
        assert_eq!(meta.revision, n);
    }
    assert_eq!(
        refused_by(s.put_artifact(&b, artifact("plan", b"q")).await),
        Bound::ArtifactRevisions
    );
    assert_eq!(revisions(s, &b, "plan").await, vec![0, 1, 2]);
    assert_eq!(
        s.get_artifact(&b, "plan", None)
            .await
            .unwrap()
            .unwrap()
            .revision,
        2
    );
    // A deposit carrying the kind is refused whole: no event, and its
    // other kind's revision is not consumed.
    let deposit = s
        .deposit(
            &b,
            vec![artifact("notes", b"n"), artifact("plan", b"q")],
            ok_event(),
        )
        .await;
    assert_eq!(refused_by(deposit), Bound::ArtifactRevisions);
    assert!(envelopes(s, &b, 0).await.unwrap().is_empty());
    assert_eq!(
        s.put_artifact(&b, artifact("notes", b"n"))
            .await
            .unwrap()
            .revision,
        0
    );
    // Two revisions of one kind in one deposit count as two.
    let two = s
        .deposit(
            &b,
            vec![artifact("pair", b"1"), artifact("pair", b"2")],
            ok_event(),
        )
        .await
        .unwrap();
    assert_eq!(two.1.iter().map(|m| m.revision).collect::<Vec<_>>(), [0, 1]);
    let two_more = s
        .deposit(
            &b,
            vec![artifact("pair", b"3"), artifact("pair", b"4")],
            ok_event(),
        )
        .await;
    assert_eq!(refused_by(two_more), Bound::ArtifactRevisions);
    assert_eq!(revisions(s, &b, "pair").await, vec![0, 1]);
    // Kinds a retention rule selects are bounded by it instead.
    for n in 0..6 {
        let meta = s.put_artifact(&b, artifact("kept", b"k")).await.unwrap();
        assert_eq!(meta.revision, n);
    }
    assert_eq!(revisions(s, &b, "kept").await, vec![3, 4, 5]);
    let kept = s
        .deposit(&b, vec![artifact("cfg-a", b"c")], ok_event())
        .await;
    assert!(kept.is_ok());
}

/// Deposits of one kind at once: exactly the bound's number of revisions.
pub(super) async fn artifact_revision_bound_under_concurrent_deposits(h: &Harness) {
    let s = h.store.clone();
    s.create_build("ac", attrs()).await.unwrap();
    let b = build("ac");
    let deposits = (0..16u8).map(|n| {
        let (s, b) = (s.clone(), b.clone());
        tokio::spawn(async move {
            s.deposit(&b, vec![artifact("plan", &[n])], ok_event())
                .await
        })
    });
    let mut won = Vec::new();
    for outcome in futures_join(deposits).await {
        match outcome {
            Ok((_, metas)) => won.push(metas[0].revision),
            refused => assert_eq!(refused_by(refused), Bound::ArtifactRevisions),
        }
    }
    won.sort_unstable();
    assert_eq!(won, vec![0, 1, 2]);
    assert_eq!(revisions(&s, &b, "plan").await, vec![0, 1, 2]);
    assert_eq!(envelopes(&s, &b, 0).await.unwrap().len(), 3);
}

pub(super) async fn ticket_asset_revision_bound(h: &Harness) {
    let s = &h.store;
    let home = key("AUT-1", "design", "home");
    for n in 0..3 {
        assert_eq!(put(s, tree(&home, 1)).await.summary.revision, n);
    }
    let refusal = s.put_ticket_asset(tree(&home, 2), accept()).await;
    assert_eq!(refused_by(refusal), Bound::TicketAssetRevisions);
    // A removal is a revision too: refused at the bound as well.
    let refusal = s.remove_ticket_asset(&home, accept()).await;
    assert_eq!(refused_by(refusal), Bound::TicketAssetRevisions);
    assert_eq!(get(s, &home, None).await, Some(2));
    assert_eq!(get(s, &home, Some(3)).await, None);

    // Tombstones count: put, remove, put, and the next is over.
    let other = key("AUT-1", "design", "other");
    put(s, tree(&other, 1)).await;
    let removed = s.remove_ticket_asset(&other, accept()).await.unwrap();
    assert_eq!(removed.map(|m| m.summary.revision), Some(0));
    assert_eq!(put(s, tree(&other, 1)).await.summary.revision, 2);
    let refusal = s.put_ticket_asset(tree(&other, 3), accept()).await;
    assert_eq!(refused_by(refusal), Bound::TicketAssetRevisions);
    // Removing what is not live writes nothing, bound or not.
    let gone = key("AUT-1", "design", "gone");
    assert!(
        s.remove_ticket_asset(&gone, accept())
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        listed(s, "AUT-1", true).await,
        vec![
            ("design".into(), "home".into(), 0),
            ("design".into(), "home".into(), 1),
            ("design".into(), "home".into(), 2),
            ("design".into(), "other".into(), 0),
            ("design".into(), "other".into(), 2),
        ]
    );
}

pub(super) async fn ticket_asset_live_bound(h: &Harness) {
    let s = &h.store;
    let (a, b, c) = (
        key("AUT-2", "design", "a"),
        key("AUT-2", "design", "b"),
        key("AUT-2", "notes", "c"),
    );
    put(s, tree(&a, 1)).await;
    put(s, tree(&b, 1)).await;
    let refusal = s.put_ticket_asset(tree(&c, 1), accept()).await;
    assert_eq!(refused_by(refusal), Bound::TicketAssets);
    assert_eq!(get(s, &c, None).await, None);
    // Replacing a live asset adds none.
    assert_eq!(put(s, tree(&a, 2)).await.summary.revision, 1);
    // Other tickets and repositories count their own.
    put(s, tree(&key("AUT-3", "design", "a"), 1)).await;
    let elsewhere = AssetKey {
        repo: "acme/other".into(),
        ..c.clone()
    };
    put(s, tree(&elsewhere, 1)).await;
    // A removal makes room; the refused put consumed no revision.
    s.remove_ticket_asset(&b, accept()).await.unwrap().unwrap();
    assert_eq!(put(s, tree(&c, 1)).await.summary.revision, 0);
    // Putting back a removed asset makes it live again: over the bound.
    let refusal = s.put_ticket_asset(tree(&b, 1), accept()).await;
    assert_eq!(refused_by(refusal), Bound::TicketAssets);
    assert_eq!(
        listed(s, "AUT-2", false).await,
        vec![
            ("design".into(), "a".into(), 1),
            ("notes".into(), "c".into(), 0),
        ]
    );
}

/// Puts of new assets of one ticket at once: exactly the bound's number
/// become live (PostgreSQL serialises them on the ticket's lock).
pub(super) async fn ticket_asset_live_bound_under_concurrent_puts(h: &Harness) {
    let s = h.store.clone();
    let puts = (0..12).map(|n| {
        let s = s.clone();
        tokio::spawn(async move {
            let asset = key("AUT-4", "design", &format!("n{n}"));
            s.put_ticket_asset(tree(&asset, 1), accept()).await
        })
    });
    let mut won = 0;
    for outcome in futures_join(puts).await {
        match outcome {
            Ok(meta) => {
                won += 1;
                assert_eq!(meta.summary.revision, 0);
            }
            refused => assert_eq!(refused_by(refused), Bound::TicketAssets),
        }
    }
    assert_eq!(won, 2);
    assert_eq!(listed(&s, "AUT-4", true).await.len(), 2);
}

/// Chunk appends at once at both stream bounds: exactly the bound's number
/// are stored, with sequences 1…n and the byte total of what was stored.
pub(super) async fn stream_bounds_under_concurrent_appends(h: &Harness) {
    let s = h.store.clone();
    s.create_build("cs", attrs()).await.unwrap();
    s.create_stream(&build("cs"), "st_n", "l").await.unwrap();
    s.create_stream(&build("cs"), "st_z", "l").await.unwrap();
    let small = r#"[{"type":"x"}]"#.to_owned();
    // 400 bytes each (the seq is one digit): two fit in 1000, a third not.
    let large = batch_of("st_z", 1, 400);
    let appends = (0..24).map(|n| {
        let s = s.clone();
        let (id, parts) = if n % 2 == 0 {
            ("st_n", small.clone())
        } else {
            ("st_z", large.clone())
        };
        tokio::spawn(async move { (id, s.append_chunk(id, &parts).await) })
    });
    let mut stored: Vec<(&str, i64)> = Vec::new();
    for (id, outcome) in futures_join(appends).await {
        match outcome {
            Ok(chunk) => stored.push((id, seq_of(&chunk))),
            refused => {
                let want = if id == "st_n" {
                    Bound::StreamChunks
                } else {
                    Bound::StreamBytes
                };
                assert_eq!(refused_by(refused), want, "{id}");
            }
        }
    }
    stored.sort_unstable();
    assert_eq!(
        stored,
        vec![
            ("st_n", 1),
            ("st_n", 2),
            ("st_n", 3),
            ("st_z", 1),
            ("st_z", 2)
        ]
    );
    let (stream, chunks) = s.chunks_page("st_z", 0, None).await.unwrap();
    assert_eq!((stream.last_seq, stream.bytes), (2, 800));
    assert_eq!(chunks.iter().map(String::len).sum::<usize>(), 800);
    let (stream, chunks) = s.chunks_page("st_n", 0, None).await.unwrap();
    assert_eq!(stream.last_seq, 3);
    assert_eq!(
        stream.bytes,
        chunks.iter().map(String::len).sum::<usize>() as i64
    );
}
