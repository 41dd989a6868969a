//! Streams: creation, chunks, closing, chunk retention, and concurrent chunk
//! appends.

use super::harness::{
    Harness, T0, attrs, build, close, futures_join, listed, seq_of, stream_artifact,
};
use crate::protocol::{ResourceKind, ResourceRef};
use crate::store::api::CloseOutcome;
use crate::store::error::StoreError;
use crate::store::rows::Listing;

pub(super) async fn streams(h: &Harness) {
    let s = &h.store;
    let b = build("s");
    s.create_build("s", attrs()).await.unwrap();
    assert!(matches!(
        s.create_stream(&build("missing"), "st_x", "l").await,
        Err(StoreError::NotFound(r)) if r == build("missing")
    ));
    let one = s.create_stream(&b, "st_1", "one").await.unwrap();
    assert!(!one.closed);
    assert_eq!(
        s.append_chunk("st_1", r#"[{"type":"start"}]"#)
            .await
            .unwrap(),
        format!(
            r#"{{"stream":"st_1","seq":1,"ts":"{}","parts":[{{"type":"start"}}]}}"#,
            crate::protocol::time::format_iso(T0)
        )
    );
    s.append_chunk("st_1", r#"[{"type":"finish"}]"#)
        .await
        .unwrap();
    assert!(matches!(
        s.append_chunk("st_missing", "[]").await,
        Err(StoreError::NotFound(r)) if r.kind == ResourceKind::Stream && r.id == "st_missing"
    ));

    // A close that raced an append assembles again; a second close is a no-op.
    assert!(matches!(
        s.close_stream("st_1", "completed", 1, stream_artifact("st_1"))
            .await
            .unwrap(),
        CloseOutcome::Moved
    ));
    let closed = close(s, "st_1").await;
    assert_eq!(
        (
            closed.outcome.as_deref(),
            closed.artifact.as_ref().map(|a| a.revision)
        ),
        (Some("completed"), Some(0))
    );
    assert!(
        matches!(s.close_stream("st_1", "aborted", 2, stream_artifact("st_1")).await.unwrap(), CloseOutcome::AlreadyClosed(r) if r.outcome.as_deref() == Some("completed"))
    );
    assert!(matches!(
        s.append_chunk("st_1", r#"[{"type":"x"}]"#).await,
        Err(StoreError::Closed(id)) if id == "st_1"
    ));
    assert_eq!(
        s.get_artifact(&b, "stream:st_1", None)
            .await
            .unwrap()
            .unwrap()
            .revision,
        0
    );

    // Retention: creating a stream prunes closed streams' chunks except the
    // most recently closed one; open streams keep theirs.
    s.create_stream(&b, "st_2", "two").await.unwrap();
    s.append_chunk("st_2", r#"[{"type":"a"}]"#).await.unwrap();
    h.clock.set(T0 + 1);
    close(s, "st_2").await;
    s.create_stream(&b, "st_open", "open").await.unwrap();
    s.append_chunk("st_open", r#"[{"type":"a"}]"#)
        .await
        .unwrap();
    s.create_stream(&b, "st_3", "three").await.unwrap();
    assert!(
        s.chunks_page("st_1", 0, None).await.unwrap().1.is_empty(),
        "older closed stream pruned"
    );
    assert_eq!(
        s.chunks_page("st_2", 0, None).await.unwrap().1.len(),
        1,
        "most recently closed kept"
    );
    assert_eq!(
        s.chunks_page("st_open", 0, None).await.unwrap().1.len(),
        1,
        "open streams never pruned"
    );
    assert!(
        s.get_stream("st_1")
            .await
            .unwrap()
            .unwrap()
            .artifact
            .is_some(),
        "the record and artifact stay"
    );
    assert_eq!(s.chunks_page("st_2", 0, None).await.unwrap().0.last_seq, 1);

    // Creation order, same millisecond included.
    let ids: Vec<String> = listed(s, Listing::Streams { scope: b.clone() })
        .await
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, vec!["st_1", "st_2", "st_open", "st_3"]);
    assert!(matches!(
        listed(s, Listing::Streams { scope: build("missing") }).await,
        Err(StoreError::NotFound(r)) if r == build("missing")
    ));

    // Stream tails for the sweep: a closed stream reports the largest tail.
    let stream = |id: &str| ResourceRef::new(ResourceKind::Stream, id);
    let mut tails = s
        .tails(&[stream("st_open"), stream("st_2"), stream("nope"), b.clone()])
        .await
        .unwrap();
    tails.sort_by(|x, y| x.0.id.cmp(&y.0.id));
    assert_eq!(
        tails,
        vec![
            (b.clone(), 0),
            (stream("st_2"), i64::MAX),
            (stream("st_open"), 1)
        ]
    );
}

pub(super) async fn concurrent_chunks(h: &Harness) {
    let s = h.store.clone();
    s.create_build("cc", attrs()).await.unwrap();
    s.create_stream(&build("cc"), "st_cc", "l").await.unwrap();
    let appends = (0..32).map(|_| {
        let s = s.clone();
        tokio::spawn(
            async move { seq_of(&s.append_chunk("st_cc", r#"[{"type":"x"}]"#).await.unwrap()) },
        )
    });
    let mut seqs = futures_join(appends).await;
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=32).collect::<Vec<_>>());
}
