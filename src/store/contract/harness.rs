//! What every contract case shares: the stores it runs on (SQLite in
//! memory, SQLite on disk, a fresh PostgreSQL database), their options and
//! clock, and the small builders and readers the cases use.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::clock::TestClock;
use crate::notify::Notifier;
use crate::protocol::{ResourceKind, ResourceRef};
use crate::store::api::{CloseOutcome, NewArtifact, NewEvent, Store};
use crate::store::engine::Engine;
use crate::store::error::StoreResult;
use crate::store::options::StoreOptions;
use crate::store::postgres::PgBackend;
use crate::store::records::StreamRecord;
use crate::store::retention::{Retention, RetentionPolicy};
use crate::store::rows::Listing;
use crate::store::url::{DatabaseUrl, Location};

pub(super) const T0: i64 = 1_784_116_800_000; // 2026-07-15T12:00:00.000Z

/// The contract's retention: `kept` keeps its latest 3 revisions, every
/// `cfg-*` kind its latest 2; at most 4 revisions pruned per write. Every
/// other kind the cases use (`plan`, `notes`, `stream:*`) is never pruned.
pub(super) fn options() -> StoreOptions {
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
pub(super) async fn open(
    url: &str,
    options: &StoreOptions,
    clock: Arc<dyn crate::clock::Clock>,
    notifier: Arc<Notifier>,
) -> anyhow::Result<Arc<dyn Store>> {
    DatabaseUrl::parse(url)?
        .open(options, clock, notifier, &crate::store::Progress::default())
        .await
}

/// Which database a harness runs on.
#[derive(Clone, Copy)]
enum Backend {
    SqliteMemory,
    SqliteFile,
    Postgres,
}

pub(super) struct Harness {
    backend: Backend,
    pub(super) store: Arc<dyn Store>,
    pub(super) clock: Arc<TestClock>,
    /// The store's notifier: what its writes announce after their commit.
    pub(super) notifier: Arc<Notifier>,
    _dir: Option<tempfile::TempDir>,
    pub(super) pg_database: Option<abstore_testkit::scratch_pg::ScratchDb>,
}

impl Harness {
    pub(super) async fn sqlite_memory(options: StoreOptions) -> Harness {
        let clock = Arc::new(TestClock::new(T0));
        let notifier = Arc::new(Notifier::new());
        let store = open("sqlite::memory:", &options, clock.clone(), notifier.clone())
            .await
            .expect("open sqlite memory");
        Harness {
            backend: Backend::SqliteMemory,
            store,
            clock,
            notifier,
            _dir: None,
            pg_database: None,
        }
    }

    pub(super) async fn sqlite_file(options: StoreOptions) -> Harness {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!(
            "sqlite://{}",
            dir.path().join("nested/abstore.db").display()
        );
        let clock = Arc::new(TestClock::new(T0));
        let notifier = Arc::new(Notifier::new());
        let store = open(&url, &options, clock.clone(), notifier.clone())
            .await
            .expect("open sqlite file");
        Harness {
            backend: Backend::SqliteFile,
            store,
            clock,
            notifier,
            _dir: Some(dir),
            pg_database: None,
        }
    }

    /// `None` (with a loud note) when no PostgreSQL is configured; a panic in
    /// CI, where PostgreSQL is required.
    pub(super) async fn postgres(options: StoreOptions) -> Option<Harness> {
        let db =
            abstore_testkit::scratch_pg::for_test("PostgreSQL store contract", "abstore_contract")
                .await?;
        let url = db.url.clone();
        let clock = Arc::new(TestClock::new(T0));
        let notifier = Arc::new(Notifier::new());
        let store = open(url.as_str(), &options, clock.clone(), notifier.clone())
            .await
            .expect("open postgres");
        Some(Harness {
            backend: Backend::Postgres,
            store,
            clock,
            notifier,
            _dir: None,
            pg_database: Some(db),
        })
    }

    /// A fresh, empty store on the same kind of database, on this harness's
    /// clock, whose every write takes the transaction path (PostgreSQL's
    /// fast paths switched off; SQLite has none): what a case holds the
    /// fast paths against.
    pub(super) async fn twin_without_fast_paths(&self, options: StoreOptions) -> Harness {
        match self.backend {
            Backend::SqliteMemory => Harness::sqlite_memory(options).await,
            Backend::SqliteFile => Harness::sqlite_file(options).await,
            Backend::Postgres => {
                let db = abstore_testkit::scratch_pg::for_test(
                    "PostgreSQL store contract",
                    "abstore_contract",
                )
                .await
                .expect("the twin of a PostgreSQL harness");
                let url = DatabaseUrl::parse(db.url.as_str()).expect("a PostgreSQL URL");
                let Location::Postgres(connect) = url.location() else {
                    panic!("a PostgreSQL URL names PostgreSQL");
                };
                let notifier = Arc::new(Notifier::new());
                let clock: Arc<dyn crate::clock::Clock> = self.clock.clone();
                let backend = PgBackend::connect(
                    connect,
                    &options,
                    clock,
                    notifier.clone(),
                    &crate::store::Progress::default(),
                )
                .await
                .expect("open postgres")
                .without_fast_paths();
                let store =
                    Engine::new(backend, options.retention, options.bounds, notifier.clone());
                Harness {
                    backend: Backend::Postgres,
                    store: Arc::new(store),
                    clock: self.clock.clone(),
                    notifier,
                    _dir: None,
                    pg_database: Some(db),
                }
            }
        }
    }

    pub(super) async fn finish(self) {
        let Harness {
            store, pg_database, ..
        } = self;
        drop(store);
        if let Some(db) = pg_database {
            let _ = db.drop_db().await;
        }
    }
}

pub(super) fn build(slug: &str) -> ResourceRef {
    ResourceRef::new(ResourceKind::Build, slug)
}

pub(super) fn attrs() -> Map<String, Value> {
    let mut attrs = Map::new();
    attrs.insert("repo".into(), "acme/widgets".into());
    attrs
}

pub(super) fn event(n: i64) -> NewEvent {
    NewEvent {
        actor_json: r#"{"kind":"kernel"}"#.into(),
        type_json: r#""observation.recorded""#.into(),
        payload_json: json!({ "n": n }).to_string(),
    }
}

pub(super) fn artifact(kind: &str, bytes: &[u8]) -> NewArtifact {
    NewArtifact {
        kind: kind.into(),
        blob_ref: crate::blobs::blob_ref(bytes),
        size: bytes.len() as i64,
        metadata: Map::new(),
    }
}

pub(super) fn seq_of(envelope: &str) -> i64 {
    serde_json::from_str::<Value>(envelope).expect("envelope json")["seq"]
        .as_i64()
        .expect("seq")
}

/// A streamed listing read whole, as JSON values.
pub(super) async fn listed(s: &Arc<dyn Store>, listing: Listing) -> StoreResult<Vec<Value>> {
    let (text, ()) = s.read(listing).await?.collect().await?;
    Ok(serde_json::from_str(&text).expect("a JSON array"))
}

/// A resource's envelopes after `since`, streamed, as their exact texts.
pub(super) async fn envelopes(
    s: &Arc<dyn Store>,
    resource: &ResourceRef,
    since: i64,
) -> StoreResult<Vec<String>> {
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

pub(super) fn artifact_listing(resource: &ResourceRef, kind: Option<&str>) -> Listing {
    Listing::Artifacts {
        resource: resource.clone(),
        kind: kind.map(str::to_owned),
    }
}

/// The revisions of `kind` the listing shows, in order.
pub(super) async fn revisions(s: &Arc<dyn Store>, r: &ResourceRef, kind: &str) -> Vec<i64> {
    listed(s, artifact_listing(r, Some(kind)))
        .await
        .unwrap()
        .iter()
        .map(|m| m["revision"].as_i64().unwrap())
        .collect()
}

pub(super) async fn futures_join<T: Send + 'static>(
    handles: impl Iterator<Item = tokio::task::JoinHandle<T>>,
) -> Vec<T> {
    let mut out = Vec::new();
    for handle in handles.collect::<Vec<_>>() {
        out.push(handle.await.expect("task panicked"));
    }
    out
}

pub(super) fn stream_artifact(id: &str) -> NewArtifact {
    artifact(&format!("stream:{id}"), b"[]")
}

pub(super) async fn close(s: &Arc<dyn Store>, id: &str) -> StreamRecord {
    let last = s.get_stream(id).await.unwrap().unwrap().last_seq;
    match s
        .close_stream(id, "completed", last, stream_artifact(id))
        .await
        .unwrap()
    {
        CloseOutcome::Closed(record) => record,
        other => panic!("close of {id}: {other:?}"),
    }
}
