//! The backend contract suite: every case runs against SQLite in memory,
//! SQLite on disk and, when `ABSTORE_TEST_POSTGRES_URL` names a server, a
//! fresh PostgreSQL database. Protocol behaviour is also checked over HTTP
//! by the conformance suite; these cases pin the store's own guarantees,
//! concurrency above all.

mod bounds;
mod ticket_assets;

use std::sync::Arc;

use bounds::{
    artifact_revision_bound, artifact_revision_bound_under_concurrent_deposits, event_bound,
    event_bound_under_concurrent_writers, stream_bounds_under_concurrent_appends,
    stream_byte_bound, stream_chunk_bound, ticket_asset_live_bound,
    ticket_asset_live_bound_under_concurrent_puts, ticket_asset_revision_bound,
};
use serde_json::{Map, Value, json};
use ticket_assets::{
    ticket_asset_concurrency, ticket_asset_refused_answers, ticket_asset_revisions,
    ticket_asset_tombstones,
};

use super::retention::{Retention, RetentionPolicy};
use super::{Listing, NewArtifact, NewEvent, Revocation, Store, StoreError, StoreOptions};
use crate::clock::TestClock;
use crate::notify::Notifier;
use crate::protocol::{ResourceKind, ResourceRef};

const T0: i64 = 1_784_116_800_000; // 2026-07-15T12:00:00.000Z

/// The contract's retention: `kept` keeps its latest 3 revisions, every
/// `cfg-*` kind its latest 2; at most 4 revisions pruned per write. Every
/// other kind the cases use (`plan`, `notes`, `stream:*`) is never pruned.
fn options() -> StoreOptions {
    let policy = RetentionPolicy::parse(
        r#"{"rules": [{"kind": "kept", "keep": 3}, {"kind": "cfg-*", "keep": 2}]}"#,
        "contract",
    )
    .expect("contract policy");
    StoreOptions {
        retention: Retention {
            policy: Arc::new(policy),
            prune_limit: 4,
        },
        ..StoreOptions::default()
    }
}

/// The store `url` names, parsed and opened as the server does.
async fn open(
    url: &str,
    options: &StoreOptions,
    clock: Arc<dyn crate::clock::Clock>,
    notifier: Arc<Notifier>,
) -> anyhow::Result<Arc<dyn Store>> {
    super::DatabaseUrl::parse(url)?
        .open(options, clock, notifier)
        .await
}

struct Harness {
    store: Arc<dyn Store>,
    clock: Arc<TestClock>,
    _dir: Option<tempfile::TempDir>,
    pg_database: Option<abstore_testkit::scratch_pg::ScratchDb>,
}

impl Harness {
    async fn sqlite_memory(options: StoreOptions) -> Harness {
        let clock = Arc::new(TestClock::new(T0));
        let store = open(
            "sqlite::memory:",
            &options,
            clock.clone(),
            Arc::new(Notifier::new()),
        )
        .await
        .expect("open sqlite memory");
        Harness {
            store,
            clock,
            _dir: None,
            pg_database: None,
        }
    }

    async fn sqlite_file(options: StoreOptions) -> Harness {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!(
            "sqlite://{}",
            dir.path().join("nested/abstore.db").display()
        );
        let clock = Arc::new(TestClock::new(T0));
        let store = open(&url, &options, clock.clone(), Arc::new(Notifier::new()))
            .await
            .expect("open sqlite file");
        Harness {
            store,
            clock,
            _dir: Some(dir),
            pg_database: None,
        }
    }

    /// `None` (with a loud note) when no PostgreSQL is configured; a panic in
    /// CI, where PostgreSQL is required.
    async fn postgres(options: StoreOptions) -> Option<Harness> {
        let db =
            abstore_testkit::scratch_pg::for_test("PostgreSQL store contract", "abstore_contract")
                .await?;
        let url = db.url.clone();
        let clock = Arc::new(TestClock::new(T0));
        let store = open(
            url.as_str(),
            &options,
            clock.clone(),
            Arc::new(Notifier::new()),
        )
        .await
        .expect("open postgres");
        Some(Harness {
            store,
            clock,
            _dir: None,
            pg_database: Some(db),
        })
    }

    async fn finish(self) {
        let Harness {
            store, pg_database, ..
        } = self;
        drop(store);
        if let Some(db) = pg_database {
            let _ = db.drop_db().await;
        }
    }
}

fn build(slug: &str) -> ResourceRef {
    ResourceRef::new(ResourceKind::Build, slug)
}

fn attrs() -> Map<String, Value> {
    let mut attrs = Map::new();
    attrs.insert("repo".into(), "acme/widgets".into());
    attrs
}

fn event(n: i64) -> NewEvent {
    NewEvent {
        actor_json: r#"{"kind":"kernel"}"#.into(),
        type_json: r#""observation.recorded""#.into(),
        payload_json: json!({ "n": n }).to_string(),
    }
}

fn artifact(kind: &str, bytes: &[u8]) -> NewArtifact {
    NewArtifact {
        kind: kind.into(),
        blob_ref: crate::blobs::blob_ref(bytes),
        size: bytes.len() as i64,
        metadata: Map::new(),
    }
}

fn seq_of(envelope: &str) -> i64 {
    serde_json::from_str::<Value>(envelope).expect("envelope json")["seq"]
        .as_i64()
        .expect("seq")
}

// ---------------------------------------------------------------- cases

async fn records_and_sequences(h: &Harness) {
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
    let since1 = events(s, &build("b"), 1).await.unwrap();
    assert_eq!(
        since1.iter().map(|e| seq_of(e)).collect::<Vec<_>>(),
        vec![2, 3]
    );
    assert_eq!(
        s.get_record(&build("b")).await.unwrap().unwrap().updated_at,
        T0 + 5
    );
    assert!(matches!(
        events(s, &build("missing"), 0).await,
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
    assert_eq!(events(s, &repo, 0).await.unwrap().len(), 1);
}

async fn conditional_append(h: &Harness) {
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

async fn artifacts_and_deposits(h: &Harness) {
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
    let order: Vec<(String, i64)> = listed(s, artifacts(&b, None))
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
    let reject = |_: &[super::ArtifactMeta]| -> super::StoreResult<NewEvent> {
        Err(StoreError::Rejected("no".into()))
    };
    let err = s
        .deposit(&b, vec![artifact("plan", b"two")], Box::new(reject))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Rejected(m) if m == "no"));
    assert_eq!(
        listed(s, artifacts(&b, Some("plan"))).await.unwrap().len(),
        2
    );
    let accept = |metas: &[super::ArtifactMeta]| -> super::StoreResult<NewEvent> {
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

async fn leases(h: &Harness) {
    let s = &h.store;
    let b = build("l");
    s.create_build("l", attrs()).await.unwrap();
    assert!(s.claim_lease(&b, "r1", 1000).await.unwrap());
    assert!(!s.claim_lease(&b, "r2", 1000).await.unwrap());
    h.clock.set(T0 + 500);
    assert!(s.heartbeat(&b, "r1").await.unwrap());
    let rec = s.get_record(&b).await.unwrap().unwrap();
    assert_eq!(rec.lease.unwrap().expires_at, T0 + 1500);
    assert_eq!(rec.heartbeat_at, Some(T0 + 500));
    assert!(!s.heartbeat(&b, "r2").await.unwrap());
    h.clock.set(T0 + 1500);
    assert!(
        !s.heartbeat(&b, "r1").await.unwrap(),
        "expiresAt <= now is expired"
    );
    assert!(s.claim_lease(&b, "r2", 0).await.unwrap());
    assert!(
        s.claim_lease(&b, "r3", 10).await.unwrap(),
        "a zero TTL is immediately expired"
    );
    s.release_lease(&b, "r2").await.unwrap();
    assert_eq!(
        s.get_record(&b)
            .await
            .unwrap()
            .unwrap()
            .lease
            .unwrap()
            .holder,
        "r3"
    );
    s.release_lease(&b, "r3").await.unwrap();
    assert!(s.get_record(&b).await.unwrap().unwrap().lease.is_none());
}

/// A session's compare-and-append (protocol 3) is the build family's rule:
/// a stale sequence appends nothing and touches no time; of concurrent
/// writers expecting the same tail exactly one wins.
async fn session_conditional_append(h: &Harness) {
    let s = h.store.clone();
    s.ensure_repo("acme/s").await.unwrap();
    let mut attrs = Map::new();
    attrs.insert("repo".into(), "acme/s".into());
    attrs.insert("operator".into(), "alice".into());
    let first = || -> super::StoreResult<NewEvent> { Ok(event(1)) };
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
    assert_eq!(events(&s, &os, 0).await.unwrap().len(), 1);
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
    assert_eq!(events(&s, &os, 0).await.unwrap().len(), 3);
}

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

/// Build digests (protocol 3): by slug, only the repository's builds, the
/// four types read in log order (latest terminal and merge win), absent
/// members omitted, an unknown repository empty; and on a generated log of
/// interleaved types, exactly what a scan of every envelope computes.
async fn build_digests(h: &Harness) {
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
        let log = events(&s, &build(slug), 0).await.unwrap();
        expected.push(digest_by_scan(slug, &log));
    }
    assert_eq!(got, expected);
}

/// A repository journal's types, in sequence order, as state events reads it.
async fn state_types(s: &Arc<dyn Store>, repo: &str) -> super::StoreResult<Vec<String>> {
    let listing = Listing::StateEvents {
        repo: repo.to_owned(),
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

/// State events (protocol 3): durable types anywhere; from the latest
/// `dispatcher.run-started` on, everything; no anchor, no tail; an
/// unknown repository `NotFound`; envelopes exactly as stored.
async fn state_events(h: &Harness) {
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
        })
        .await
        .unwrap()
        .collect()
        .await
        .unwrap()
        .0;
    let all = events(&s, &repo, 0).await.unwrap();
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
    let all: Vec<Value> = events(&s, &repo, 0)
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

async fn concurrency(h: &Harness) {
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
            let ok = |_: &[super::ArtifactMeta]| -> super::StoreResult<NewEvent> { Ok(event(0)) };
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

async fn tails(h: &Harness) {
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

fn stream_artifact(id: &str) -> NewArtifact {
    artifact(&format!("stream:{id}"), b"[]")
}

async fn close(s: &Arc<dyn Store>, id: &str) -> super::StreamRecord {
    let last = s.get_stream(id).await.unwrap().unwrap().last_seq;
    match s
        .close_stream(id, "completed", last, stream_artifact(id))
        .await
        .unwrap()
    {
        super::CloseOutcome::Closed(record) => record,
        other => panic!("close of {id}: {other:?}"),
    }
}

async fn streams(h: &Harness) {
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
        super::CloseOutcome::Moved
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
        matches!(s.close_stream("st_1", "aborted", 2, stream_artifact("st_1")).await.unwrap(), super::CloseOutcome::AlreadyClosed(r) if r.outcome.as_deref() == Some("completed"))
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

async fn concurrent_chunks(h: &Harness) {
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

async fn sessions(h: &Harness) {
    let s = &h.store;
    let first = || -> super::StoreResult<NewEvent> { Ok(event(1)) };
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
    let reject = || -> super::StoreResult<NewEvent> { Err(StoreError::Rejected("no".into())) };
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
    let events = events(s, &session("os_a"), 0).await.unwrap();
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

/// Group commit: writes that fail or change nothing, queued together with
/// writes that succeed (on SQLite they share batches), leave nothing behind
/// and consume no sequence or revision; the others all commit.
async fn mixed_batches(h: &Harness) {
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
                    let reject = |_: &[super::ArtifactMeta]| -> super::StoreResult<NewEvent> {
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
                    let ok = |_: &[super::ArtifactMeta]| -> super::StoreResult<NewEvent> {
                        Ok(event(0))
                    };
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
    let seqs: Vec<i64> = events(&s, &b, 0)
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
    let revisions: Vec<i64> = listed(&s, artifacts(&b, Some("plan")))
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

/// Spec section 10: leases are judged and extended by the clock's own time,
/// even when it stepped back behind the resource's `updatedAt`; event `ts`
/// and `updatedAt` stay nondecreasing.
async fn leases_by_the_clock(h: &Harness) {
    let s = &h.store;
    let b = build("lc");
    s.create_build("lc", attrs()).await.unwrap();
    h.clock.set(T0 + 1_000);
    assert!(s.claim_lease(&b, "r1", 1_000).await.unwrap());
    h.clock.set(T0 + 5_000);
    s.append(&b, event(1), None).await.unwrap();
    // The clock steps back: the lease (expiring at T0+2000) is still held.
    h.clock.set(T0 + 1_500);
    assert!(!s.claim_lease(&b, "r2", 1_000).await.unwrap());
    assert!(
        s.heartbeat(&b, "r1").await.unwrap(),
        "held by the clock's own time"
    );
    let rec = s.get_record(&b).await.unwrap().unwrap();
    assert_eq!(
        rec.lease.unwrap().expires_at,
        T0 + 2_500,
        "now + ttl by the clock"
    );
    assert_eq!(rec.heartbeat_at, Some(T0 + 1_500));
    assert_eq!(rec.updated_at, T0 + 5_000, "updatedAt never runs backwards");
    let envelope = s.append(&b, event(2), None).await.unwrap().unwrap();
    let ts = serde_json::from_str::<Value>(&envelope).unwrap()["ts"].clone();
    assert_eq!(ts, json!(crate::protocol::time::format_iso(T0 + 5_000)));
    // Expiry by the clock: expiresAt <= now.
    h.clock.set(T0 + 2_500);
    assert!(!s.heartbeat(&b, "r1").await.unwrap());
    assert!(s.claim_lease(&b, "r2", 1_000).await.unwrap());
    assert_eq!(
        s.get_record(&b)
            .await
            .unwrap()
            .unwrap()
            .lease
            .unwrap()
            .expires_at,
        T0 + 3_500
    );
    s.release_lease(&b, "r1").await.unwrap();
    assert!(
        s.get_record(&b).await.unwrap().unwrap().lease.is_some(),
        "not r1's to release"
    );
    s.release_lease(&b, "r2").await.unwrap();
    assert!(s.get_record(&b).await.unwrap().unwrap().lease.is_none());
}

// -------------------------------------------------------------- retention

/// A streamed listing read whole, as JSON values.
async fn listed(s: &Arc<dyn Store>, listing: Listing) -> super::StoreResult<Vec<Value>> {
    let (text, ()) = s.read(listing).await?.collect().await?;
    Ok(serde_json::from_str(&text).expect("a JSON array"))
}

/// A resource's envelopes after `since`, streamed, as their exact texts.
async fn events(
    s: &Arc<dyn Store>,
    resource: &ResourceRef,
    since: i64,
) -> super::StoreResult<Vec<String>> {
    let listing = Listing::Events {
        resource: resource.clone(),
        since,
        until: None,
    };
    let (text, ()) = s.read(listing).await?.collect().await?;
    let texts: Vec<Box<serde_json::value::RawValue>> =
        serde_json::from_str(&text).expect("a JSON array");
    Ok(texts.into_iter().map(|t| t.get().to_owned()).collect())
}

fn artifacts(resource: &ResourceRef, kind: Option<&str>) -> Listing {
    Listing::Artifacts {
        resource: resource.clone(),
        kind: kind.map(str::to_owned),
    }
}

fn sessions_of(repo: &str) -> Listing {
    Listing::Sessions {
        repo: repo.to_owned(),
    }
}

/// The revisions of `kind` the listing shows, in order.
async fn revisions(s: &Arc<dyn Store>, r: &ResourceRef, kind: &str) -> Vec<i64> {
    listed(s, artifacts(r, Some(kind)))
        .await
        .unwrap()
        .iter()
        .map(|m| m["revision"].as_i64().unwrap())
        .collect()
}

fn accept_any() -> super::MakeEvent {
    Box::new(|_: &[super::ArtifactMeta]| -> super::StoreResult<NewEvent> { Ok(event(0)) })
}

/// Spec section 3 retention: a put or deposit beyond a kind's bound deletes
/// exactly the oldest revisions, in its own transaction; a pruned revision
/// reads as absent; other kinds, other resources and `stream:` kinds are
/// untouched; revision numbers keep counting up.
async fn retention(h: &Harness) {
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
    let reject = |_: &[super::ArtifactMeta]| -> super::StoreResult<NewEvent> {
        Err(StoreError::Rejected("no".into()))
    };
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
async fn retention_under_concurrent_reads(h: &Harness) {
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

/// A clock a little or far behind the last write: the append takes the
/// last write's time, and the stored envelope is the text returned.
async fn appends_behind_the_clock(h: &Harness) {
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
    assert_eq!(events(s, &b, 0).await.unwrap(), returned);
    assert_eq!(
        s.get_record(&b).await.unwrap().unwrap().updated_at,
        T0 + 10_007
    );
}

async fn futures_join<T: Send + 'static>(
    handles: impl Iterator<Item = tokio::task::JoinHandle<T>>,
) -> Vec<T> {
    let mut out = Vec::new();
    for handle in handles.collect::<Vec<_>>() {
        out.push(handle.await.expect("task panicked"));
    }
    out
}

/// Revoked tokens: idempotent by digest (the first revocation stands, also
/// under concurrent revokers), listed by digest with their optional expiry
/// and note, and pruned only once their token has expired.
async fn revocations(h: &Harness) {
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

// ------------------------------------------------------------- bindings

/// One test per case and backend, in modules named for the backend; the
/// `@` form names the modules and the options (the bounds' cases run with
/// small bounds).
macro_rules! contract {
    ($($case:ident),* $(,)?) => {
        contract!(@ sqlite_memory, sqlite_file, postgres, super::options(); $($case),*);
    };
    (@ $memory:ident, $file:ident, $postgres:ident, $options:expr; $($case:ident),* $(,)?) => {
        mod $memory { $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)] async fn $case() { let h = super::Harness::sqlite_memory($options).await; super::$case(&h).await; h.finish().await; } )* }
        mod $file { $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)] async fn $case() { let h = super::Harness::sqlite_file($options).await; super::$case(&h).await; h.finish().await; } )* }
        mod $postgres { $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)] async fn $case() { if let Some(h) = super::Harness::postgres($options).await { super::$case(&h).await; h.finish().await; } } )* }
    };
}

contract!(
    records_and_sequences,
    conditional_append,
    session_conditional_append,
    build_digests,
    state_events,
    artifacts_and_deposits,
    leases,
    concurrency,
    tails,
    streams,
    concurrent_chunks,
    sessions,
    mixed_batches,
    leases_by_the_clock,
    retention,
    retention_under_concurrent_reads,
    appends_behind_the_clock,
    ticket_asset_revisions,
    ticket_asset_tombstones,
    ticket_asset_refused_answers,
    ticket_asset_concurrency,
    revocations
);

contract!(@ bounds_sqlite_memory, bounds_sqlite_file, bounds_postgres, super::bounds::options();
    stream_chunk_bound,
    stream_byte_bound,
    event_bound,
    event_bound_under_concurrent_writers,
    artifact_revision_bound,
    artifact_revision_bound_under_concurrent_deposits,
    ticket_asset_revision_bound,
    ticket_asset_live_bound,
    ticket_asset_live_bound_under_concurrent_puts,
    stream_bounds_under_concurrent_appends
);

/// Two stores on one PostgreSQL database stand for two replicas: an append
/// through one wakes a waiter registered with the other's notifier, through
/// NOTIFY and the other's LISTEN connection (no sweep runs here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_notify_wakes_another_replica() {
    let Some(h) = Harness::postgres(options()).await else {
        return;
    };
    let url = h.pg_database.clone().expect("postgres harness").url;
    let other_notifier = Arc::new(Notifier::new());
    let _other = open(
        &url,
        &StoreOptions::default(),
        h.clock.clone(),
        other_notifier.clone(),
    )
    .await
    .unwrap();
    h.store.create_build("n", attrs()).await.unwrap();
    let b = build("n");
    // The LISTEN connection comes up asynchronously; append until it delivers.
    let subscription = other_notifier.subscribe(&b, 0);
    let woken = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        loop {
            let notified = subscription.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            h.store.append(&b, event(1), None).await.unwrap();
            if tokio::time::timeout(std::time::Duration::from_millis(500), notified)
                .await
                .is_ok()
            {
                return;
            }
        }
    })
    .await;
    assert!(
        woken.is_ok(),
        "no NOTIFY reached the second replica within 20 s"
    );
    drop(subscription);
    h.finish().await;
}
