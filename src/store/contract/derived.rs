//! Protocol 3's derived reads (build digests, state events), each also against
//! a scan of a whole generated log.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::harness::{Harness, T0, build, envelopes, listed};
use crate::protocol::{ResourceKind, ResourceRef};
use crate::store::api::{NewEvent, Store};
use crate::store::error::{StoreError, StoreResult};
use crate::store::rows::Listing;
use crate::store::{BuildDigest, LogSpan};

fn typed(event_type: &str, n: i64) -> NewEvent {
    NewEvent {
        actor_json: r#"{"kind":"kernel"}"#.into(),
        type_json: Value::String(event_type.into()).to_string(),
        payload_json: json!({ "n": n }).to_string(),
    }
}

/// A small deterministic generator (the cases must not depend on a seed
/// nobody recorded).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

fn build_in(repo: &str) -> Map<String, Value> {
    let mut attrs = Map::new();
    attrs.insert("repo".into(), repo.into());
    attrs
}

/// The digest of one build's whole log, computed here from every envelope
/// (the ground truth the store's indexed derivation must equal).
fn digest_by_scan(slug: &str, envelopes: &[String]) -> Value {
    let (mut terminal, mut merged, mut observations) = (None, None, Vec::new());
    for text in envelopes {
        let e: Value = serde_json::from_str(text).unwrap();
        match e["type"].as_str().unwrap() {
            "build.completed" => terminal = Some("done"),
            "build.aborted" => terminal = Some("aborted"),
            "pr.merged" => merged = Some(e["ts"].clone()),
            "observation.recorded" => {
                observations.push(json!({ "seq": e["seq"], "ts": e["ts"] }));
            }
            _ => {}
        }
    }
    let mut out = json!({ "slug": slug, "observations": observations });
    if let Some(t) = terminal {
        out["terminal"] = t.into();
    }
    if let Some(m) = merged {
        out["merged"] = m;
    }
    out
}

async fn digests_json(s: &Arc<dyn Store>, repo: &str) -> Vec<Value> {
    let digests = s.build_digests(repo).await.unwrap();
    digests
        .iter()
        .map(|d| serde_json::to_value(d).unwrap())
        .collect()
}

/// A repository journal's types, in sequence order, as state events reads it.
async fn state_types(s: &Arc<dyn Store>, repo: &str) -> StoreResult<Vec<String>> {
    let listing = Listing::StateEvents {
        repo: repo.to_owned(),
        until: None,
    };
    Ok(listed(s, listing)
        .await?
        .iter()
        .map(|e| format!("{}:{}", e["seq"], e["type"].as_str().unwrap()))
        .collect())
}

/// Whether a repository type is durable (protocol 3's partition).
fn durable(ty: &str) -> bool {
    ty.starts_with("harvest.")
        || ty.starts_with("orchestrator.sandbox.")
        || matches!(
            ty,
            "dispatcher.intake-set" | "dispatcher.pause-set" | "dispatcher.auto-merge-default-set"
        )
}

/// Build digests (protocol 3): by slug, only the repository's builds, the
/// four types read in log order (latest terminal and merge win), absent
/// members omitted, an unknown repository empty; and on a generated log of
/// interleaved types, exactly what a scan of every envelope computes.
pub(super) async fn build_digests(h: &Harness) {
    let s = h.store.clone();
    assert!(s.build_digests("acme/none").await.unwrap().is_empty());
    for slug in ["d-b", "d-a", "d-c"] {
        s.create_build(slug, build_in("acme/d")).await.unwrap();
    }
    s.create_build("d-other", build_in("acme/other"))
        .await
        .unwrap();
    let a = build("d-a");
    let steps = [
        "build.created",
        "observation.recorded",
        "build.completed",
        "observation.recorded",
        "pr.merged",
        "build.aborted",
        "spec.revised",
        "pr.merged",
    ];
    for (n, ty) in steps.iter().enumerate() {
        h.clock.set(T0 + 1000 * (n as i64 + 1));
        s.append(&a, typed(ty, n as i64), None).await.unwrap();
    }
    s.append(&build("d-c"), typed("build.completed", 0), None)
        .await
        .unwrap();
    s.append(&build("d-other"), typed("observation.recorded", 0), None)
        .await
        .unwrap();
    let got = digests_json(&s, "acme/d").await;
    assert_eq!(
        got,
        vec![
            json!({
                "slug": "d-a",
                "terminal": "aborted",
                "observations": [
                    { "seq": 2, "ts": "2026-07-15T12:00:02.000Z" },
                    { "seq": 4, "ts": "2026-07-15T12:00:04.000Z" }
                ],
                "merged": "2026-07-15T12:00:08.000Z"
            }),
            json!({ "slug": "d-b", "observations": [] }),
            json!({ "slug": "d-c", "terminal": "done", "observations": [] }),
        ]
    );
    assert_eq!(
        serde_json::to_string(&s.build_digests("acme/d").await.unwrap()[1]).unwrap(),
        r#"{"slug":"d-b","observations":[]}"#
    );

    // Text that JSON escapes, NUL included (PostgreSQL's JSON functions
    // refuse `\u0000`), in the repository and in a payload: the digest
    // still finds the build and its events.
    let odd = "acme/\"odd\\\u{0}é";
    s.create_build("d-odd", build_in(odd)).await.unwrap();
    let mut nul = typed("observation.recorded", 0);
    nul.payload_json = json!({ "summary": "a\u{0}b \"type\":\"pr.merged\"" }).to_string();
    h.clock.set(T0 + 9000);
    s.append(&build("d-odd"), nul, None).await.unwrap();
    assert_eq!(
        digests_json(&s, odd).await,
        vec![json!({
            "slug": "d-odd",
            "observations": [{ "seq": 1, "ts": "2026-07-15T12:00:09.000Z" }]
        })]
    );

    // Ground truth: 24 builds, 600 events of digest and other types
    // interleaved across them, each digest equal to a whole-log scan.
    let types = [
        "build.completed",
        "build.aborted",
        "pr.merged",
        "observation.recorded",
        "observation.recorded",
        "spec.revised",
        "agent.step",
        "build.created",
    ];
    let slugs: Vec<String> = (0..24).map(|i| format!("g-{:02}", (i * 7) % 24)).collect();
    for slug in &slugs {
        s.create_build(slug, build_in("acme/g")).await.unwrap();
    }
    let mut rng = Lcg(24);
    for n in 0..600 {
        h.clock.set(T0 + 10_000 + n);
        let slug = &slugs[rng.below(slugs.len())];
        let ty = types[rng.below(types.len())];
        s.append(&build(slug), typed(ty, n), None).await.unwrap();
    }
    let got = digests_json(&s, "acme/g").await;
    let mut sorted = slugs.clone();
    sorted.sort();
    let mut expected = Vec::new();
    for slug in &sorted {
        let log = envelopes(&s, &build(slug), 0).await.unwrap();
        expected.push(digest_by_scan(slug, &log));
    }
    assert_eq!(got, expected);
    assert_eq!(digests_by_halves(&s, "acme/g").await, got);
    assert_eq!(
        digests_by_halves(&s, "acme/d").await,
        digests_json(&s, "acme/d").await
    );
    assert_eq!(
        digests_by_halves(&s, odd).await,
        digests_json(&s, odd).await
    );
    assert!(s.build_tails("acme/none").await.unwrap().is_empty());
    assert!(s.digest_events(Vec::new()).await.unwrap().is_empty());
}

/// The digests as the digests cache derives them (`crate::history`): the
/// builds' tails, then each build's digest events in two spans, the first
/// half of its log and the rest, folded in order; what they make must be
/// exactly what the one-statement derivation answers, in the same order.
async fn digests_by_halves(s: &Arc<dyn Store>, repo: &str) -> Vec<Value> {
    let tails = s.build_tails(repo).await.unwrap();
    let span = |(slug, tail): &(String, i64), half: bool| LogSpan {
        slug: slug.clone(),
        after: if half { 0 } else { tail / 2 },
        until: if half { tail / 2 } else { *tail },
    };
    let first = s
        .digest_events(tails.iter().map(|t| span(t, true)).collect())
        .await
        .unwrap();
    let rest = s
        .digest_events(tails.iter().map(|t| span(t, false)).collect())
        .await
        .unwrap();
    tails
        .iter()
        .map(|(slug, _)| {
            let mut digest = BuildDigest::new(slug.clone());
            for (of, (seq, ty, ts)) in first.iter().chain(&rest) {
                if of == slug {
                    digest.apply(*seq, ty, ts);
                }
            }
            serde_json::to_value(&digest).unwrap()
        })
        .collect()
}

/// State events (protocol 3): durable types anywhere; from the latest
/// `dispatcher.run-started` on, everything; no anchor, no tail; an
/// unknown repository `NotFound`; envelopes exactly as stored.
pub(super) async fn state_events(h: &Harness) {
    let s = h.store.clone();
    assert!(matches!(
        state_types(&s, "acme/missing").await,
        Err(StoreError::NotFound(r)) if r == ResourceRef::new(ResourceKind::Repo, "acme/missing")
    ));
    s.ensure_repo("acme/st").await.unwrap();
    assert!(state_types(&s, "acme/st").await.unwrap().is_empty());
    let repo = ResourceRef::new(ResourceKind::Repo, "acme/st");
    let append = |ty: &'static str| {
        let (s, repo) = (s.clone(), repo.clone());
        async move { s.append(&repo, typed(ty, 0), None).await.unwrap().unwrap() }
    };
    // No anchor: durable types only (prefix look-alikes are not durable).
    for ty in [
        "dispatcher.status",
        "harvest.started",
        "harvester.noise",
        "orchestrator.sandbox.created",
        "orchestrator.sandboxes",
        "dispatcher.pause-set",
        "dispatcher.config-reloaded",
        "harvest.execution.released",
    ] {
        append(ty).await;
    }
    assert_eq!(
        state_types(&s, "acme/st").await.unwrap(),
        [
            "2:harvest.started",
            "4:orchestrator.sandbox.created",
            "6:dispatcher.pause-set",
            "8:harvest.execution.released"
        ]
    );
    // An anchor: everything from it on, durable before it.
    for ty in [
        "dispatcher.run-started",
        "dispatcher.status",
        "dispatcher.intake-set",
    ] {
        append(ty).await;
    }
    assert_eq!(
        state_types(&s, "acme/st").await.unwrap(),
        [
            "2:harvest.started",
            "4:orchestrator.sandbox.created",
            "6:dispatcher.pause-set",
            "8:harvest.execution.released",
            "9:dispatcher.run-started",
            "10:dispatcher.status",
            "11:dispatcher.intake-set"
        ]
    );
    // Several anchors: the latest decides; the earlier run's run-scoped
    // events (and the earlier anchor) drop out, its durable ones stay.
    let tail = [
        "dispatcher.run-started",
        "dispatcher.auto-merge-default-set",
        "dispatcher.config-reloaded",
    ];
    for ty in tail {
        append(ty).await;
    }
    assert_eq!(
        state_types(&s, "acme/st").await.unwrap(),
        [
            "2:harvest.started",
            "4:orchestrator.sandbox.created",
            "6:dispatcher.pause-set",
            "8:harvest.execution.released",
            "11:dispatcher.intake-set",
            "12:dispatcher.run-started",
            "13:dispatcher.auto-merge-default-set",
            "14:dispatcher.config-reloaded"
        ]
    );
    // The envelopes are the stored texts.
    let text = s
        .read(Listing::StateEvents {
            repo: "acme/st".into(),
            until: None,
        })
        .await
        .unwrap()
        .collect()
        .await
        .unwrap()
        .0;
    let all = envelopes(&s, &repo, 0).await.unwrap();
    assert!(text.contains(&all[13]), "{text}");

    // Ground truth on a generated journal: what a scan of every envelope selects.
    s.ensure_repo("acme/sg").await.unwrap();
    let repo = ResourceRef::new(ResourceKind::Repo, "acme/sg");
    let types = [
        "dispatcher.status",
        "dispatcher.status",
        "dispatcher.tick-yielded",
        "dispatcher.run-started",
        "harvest.started",
        "harvest.execution.started",
        "orchestrator.sandbox.ready",
        "dispatcher.intake-set",
        "dispatcher.config-reloaded",
    ];
    let mut rng = Lcg(7);
    for n in 0..300 {
        s.append(&repo, typed(types[rng.below(types.len())], n), None)
            .await
            .unwrap();
    }
    let all: Vec<Value> = envelopes(&s, &repo, 0)
        .await
        .unwrap()
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let anchor = all
        .iter()
        .filter(|e| e["type"] == "dispatcher.run-started")
        .map(|e| e["seq"].as_i64().unwrap())
        .max();
    let expected: Vec<String> = all
        .iter()
        .filter(|e| {
            durable(e["type"].as_str().unwrap())
                || anchor.is_some_and(|a| e["seq"].as_i64().unwrap() >= a)
        })
        .map(|e| format!("{}:{}", e["seq"], e["type"].as_str().unwrap()))
        .collect();
    assert_eq!(state_types(&s, "acme/sg").await.unwrap(), expected);
}
