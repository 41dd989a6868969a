//! Artifact retention (spec section 3) through the real binary, on SQLite
//! and (with `ABSTORE_TEST_POSTGRES_URL`) PostgreSQL: a put or deposit
//! beyond a kind's bound prunes exactly its oldest revisions; other kinds and
//! `stream:` kinds are untouched; `--retention-policy none` disables it; a bad
//! policy stops the start; readers never see a half-pruned state; `gc`
//! collects the pruned blobs; a pruned store survives export and import.

use crate::support::{self, Server, VERSION};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use abstore::blobs::{Blobs, blob_ref};
use abstore_conformance::util::b64;
use abstore_conformance::{Ctx, Res};
use serde_json::{Value, json};
use support::{export, path_text as s};

/// The policy the tests serve with: the dispatcher's effective config keeps
/// 3 revisions, every `runner-*` kind 2, `streams*` (not `stream:`) 2.
const POLICY: &str = r#"{
  "$comment": "tests/it/retention.rs",
  "rules": [
    {"kind": "dispatcher-effective-config", "keep": 3},
    {"kind": "runner-*", "keep": 2},
    {"kind": "streams*", "keep": 2}
  ]
}"#;

const KIND: &str = "dispatcher-effective-config";

fn policy_file(dir: &Path, text: &str) -> String {
    let path = dir.join(format!("policy-{}.json", rand::random::<u32>()));
    std::fs::write(&path, text).unwrap();
    s(&path).to_owned()
}

fn ctx(server: &Server) -> Ctx {
    Ctx::new(server.url(), VERSION).expect("http client")
}

/// The revisions of `kind` the artifact list shows.
async fn revisions(c: &Ctx, res: Res, id: &str, kind: &str) -> Vec<i64> {
    c.list_artifacts(
        res,
        id,
        &format!("?kind={}", abstore_conformance::util::enc(kind)),
    )
    .await
    .unwrap()
    .iter()
    .map(|m| m["revision"].as_i64().unwrap())
    .collect()
}

async fn put(c: &Ctx, res: Res, id: &str, kind: &str, bytes: &[u8]) -> i64 {
    c.put_artifact(res, id, kind, bytes, None).await.unwrap()["revision"]
        .as_i64()
        .unwrap()
}

/// A deposit of `artifacts` whose event references the first one's revision.
async fn deposit(c: &Ctx, res: Res, id: &str, artifacts: &[(&str, &[u8])]) -> Value {
    let body = json!({
        "artifacts": artifacts
            .iter()
            .map(|(kind, bytes)| json!({"kind": kind, "contentBase64": b64(bytes)}))
            .collect::<Vec<_>>(),
        "event": res.ref_event(json!({"kind": artifacts[0].0, "rev": -1})),
    });
    let r = c.deposit(res, id, &body).await.unwrap();
    assert_eq!(r.status, 201, "{}", r.text);
    r.json_status(201).unwrap()
}

fn range(from: i64, to_inclusive: i64) -> Vec<i64> {
    (from..=to_inclusive).collect()
}

// ── pruning ─────────────────────────────────────────────────────────────────

/// Puts and deposits beyond the bound prune exactly the oldest revisions;
/// pruned revisions read as `null` and leave the list; the latest ones,
/// other kinds, other resources and `stream:` kinds are untouched; the
/// counter names how many were pruned.
async fn prunes_the_oldest(database: &str, blobs: &str, dir: &Path) {
    let policy = policy_file(dir, POLICY);
    let server = Server::builder()
        .database(database)
        .blobs(blobs)
        .flag("--retention-policy", &policy)
        .metrics()
        .start()
        .await;
    let c = ctx(&server);
    let (repo, _) = c.new_repo().await.unwrap();
    for n in 0..5_i64 {
        let content = format!("{{\"capacity\":{n}}}");
        assert_eq!(put(&c, Res::Repo, &repo, KIND, content.as_bytes()).await, n);
        put(&c, Res::Repo, &repo, "notes", content.as_bytes()).await;
        put(&c, Res::Repo, &repo, "stream:manual", content.as_bytes()).await;
        put(&c, Res::Repo, &repo, "streams-log", content.as_bytes()).await;
        assert_eq!(
            revisions(&c, Res::Repo, &repo, KIND).await,
            range((n - 2).max(0), n),
            "after put {n}"
        );
    }
    assert_eq!(revisions(&c, Res::Repo, &repo, "notes").await, range(0, 4));
    assert_eq!(
        revisions(&c, Res::Repo, &repo, "stream:manual").await,
        range(0, 4),
        "a stream: kind was pruned"
    );
    assert_eq!(
        revisions(&c, Res::Repo, &repo, "streams-log").await,
        range(3, 4)
    );
    let query = |rev: &str| format!("?kind={KIND}{rev}");
    for rev in ["&rev=0", "&rev=1"] {
        assert_eq!(
            c.get_artifact(Res::Repo, &repo, &query(rev)).await.unwrap(),
            Value::Null,
            "{rev}"
        );
    }
    let latest = c.get_artifact(Res::Repo, &repo, &query("")).await.unwrap();
    assert_eq!(latest["meta"]["revision"], json!(4));
    assert_eq!(latest["contentBase64"], json!(b64(b"{\"capacity\":4}")));
    let kept = c
        .get_artifact(Res::Repo, &repo, &query("&rev=2"))
        .await
        .unwrap();
    assert_eq!(kept["contentBase64"], json!(b64(b"{\"capacity\":2}")));

    // A deposit: the event references the new revision, the oldest goes.
    let answer = deposit(
        &c,
        Res::Repo,
        &repo,
        &[(KIND, b"{\"capacity\":5}"), ("notes", b"n")],
    )
    .await;
    assert_eq!(
        answer["event"]["payload"]["artifact"],
        json!({"kind": KIND, "rev": 5})
    );
    assert_eq!(revisions(&c, Res::Repo, &repo, KIND).await, range(3, 5));
    assert_eq!(revisions(&c, Res::Repo, &repo, "notes").await, range(0, 5));
    // A rejected deposit (its event is invalid) prunes nothing.
    let rejected = json!({
        "artifacts": [{"kind": KIND, "contentBase64": b64(b"x")}],
        "event": Res::Repo.ref_event(json!({"kind": KIND, "rev": -2})),
    });
    let r = c.deposit(Res::Repo, &repo, &rejected).await.unwrap();
    assert_eq!(r.status, 422, "{}", r.text);
    assert_eq!(revisions(&c, Res::Repo, &repo, KIND).await, range(3, 5));

    // Builds too, by prefix; another build keeps its own revisions.
    let (slug, _) = c.new_build().await.unwrap();
    let (other, _) = c.new_build().await.unwrap();
    for n in 0..4_u8 {
        deposit(&c, Res::Build, &slug, &[("runner-effective-config", &[n])]).await;
    }
    put(&c, Res::Build, &other, "runner-effective-config", b"o").await;
    assert_eq!(
        revisions(&c, Res::Build, &slug, "runner-effective-config").await,
        range(2, 3)
    );
    assert_eq!(
        revisions(&c, Res::Build, &other, "runner-effective-config").await,
        vec![0]
    );
    assert_eq!(
        revisions(&c, Res::Repo, &repo, KIND).await,
        range(3, 5),
        "another resource's writes pruned this one"
    );

    // Pruned: 3 of KIND on the repository, 3 of streams-log; 2 on the build.
    let scrape = reqwest::get(server.metrics_url())
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        scrape.contains("# HELP abstore_artifact_revisions_pruned_total "),
        "{scrape}"
    );
    for (family, count) in [("repo", 6), ("build", 2)] {
        let line =
            format!("abstore_artifact_revisions_pruned_total{{family=\"{family}\"}} {count}");
        assert!(
            scrape.lines().any(|l| l == line),
            "{line} missing:\n{scrape}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn puts_and_deposits_prune_the_oldest_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("r.db").display());
    prunes_the_oldest(&db, "memory://", dir.path()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn puts_and_deposits_prune_the_oldest_postgres() {
    support::with_pg("retention", |url| async move {
        let dir = tempfile::tempdir().unwrap();
        prunes_the_oldest(&url, "memory://", dir.path()).await;
    })
    .await;
}

/// The embedded default keeps the latest 100 revisions of the dispatcher and
/// build-runner configuration kinds; `none` keeps everything.
#[tokio::test(flavor = "multi_thread")]
async fn the_default_keeps_100_and_none_disables() {
    let runs: [(&[&str], i64); 2] = [(&[], 1), (&["--retention-policy", "none"], 0)];
    for (extra, kept_from) in runs {
        let server = Server::builder().args(extra).start().await;
        let c = ctx(&server);
        let (repo, _) = c.new_repo().await.unwrap();
        let (slug, _) = c.new_build().await.unwrap();
        for n in 0..101_u8 {
            put(&c, Res::Repo, &repo, "dispatcher-config", &[n]).await;
            put(&c, Res::Build, &slug, "build-runner-effective-config", &[n]).await;
        }
        put(&c, Res::Repo, &repo, "plan", b"p").await;
        assert_eq!(
            revisions(&c, Res::Repo, &repo, "dispatcher-config").await,
            range(kept_from, 100),
            "{extra:?}"
        );
        assert_eq!(
            revisions(&c, Res::Build, &slug, "build-runner-effective-config").await,
            range(kept_from, 100),
            "{extra:?}"
        );
    }
}

/// Lowering a bound leaves a backlog; `--retention-prune-limit` bounds how
/// much of it one write deletes, and later writes drain the rest.
#[tokio::test(flavor = "multi_thread")]
async fn the_prune_limit_bounds_each_write() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("limit.db").display());
    let mut server = Server::builder()
        .database(&db)
        .flag("--retention-policy", "none")
        .start()
        .await;
    let c = ctx(&server);
    let (repo, _) = c.new_repo().await.unwrap();
    for n in 0..10_u8 {
        put(&c, Res::Repo, &repo, KIND, &[n]).await;
    }
    server.stop().await.unwrap();
    let policy = policy_file(dir.path(), POLICY);
    let server = Server::builder()
        .database(&db)
        .flag("--retention-policy", &policy)
        .flag("--retention-prune-limit", "4")
        .start()
        .await;
    let c = ctx(&server);
    put(&c, Res::Repo, &repo, KIND, b"10").await;
    assert_eq!(revisions(&c, Res::Repo, &repo, KIND).await, range(4, 10));
    put(&c, Res::Repo, &repo, KIND, b"11").await;
    assert_eq!(revisions(&c, Res::Repo, &repo, KIND).await, range(8, 11));
    put(&c, Res::Repo, &repo, KIND, b"12").await;
    assert_eq!(revisions(&c, Res::Repo, &repo, KIND).await, range(10, 12));
}

/// A policy that cannot be loaded stops the start with a message naming the
/// file and the rule, before any data is created.
#[test]
fn a_bad_policy_fails_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let db_path = dir.path().join("data/never.db");
    let db = format!("sqlite://{}", db_path.display());
    let cases = [
        (
            r#"{"rules": [{"kind": "plan-*", "keep": 3}, {"kind": "stream:*", "keep": 1}]}"#,
            "rule 2 (\"stream:*\"): would select stream:* kinds",
        ),
        (
            r#"{"rules": [{"kind": "dispatcher-config", "keep": 0}]}"#,
            "rule 1 (\"dispatcher-config\"): \"keep\" must be a whole number",
        ),
        (
            r#"{"rules": [{"kind": "x", "keep": 3, "maxAge": "1d"}]}"#,
            "rule 1 (\"x\"): unknown member \"maxAge\"",
        ),
        (
            r#"{"rules": [{"kind": "", "keep": 3}]}"#,
            "rule 1 (\"\"): \"kind\" must name",
        ),
        ("not json", "is not valid JSON"),
    ];
    for (text, want) in cases {
        let file = policy_file(dir.path(), text);
        let server = Server::builder().database(&db);
        let (ok, _, stderr) = server.clone().flag("--retention-policy", &file).run();
        assert!(!ok, "{text} was accepted");
        assert!(
            stderr.contains(&format!("retention policy {file}: {want}")),
            "{text}: {stderr}"
        );
        // The same file through the environment variable.
        let (ok, _, stderr) = server.env("ABSTORE_RETENTION_POLICY", &file).run();
        assert!(!ok, "{text} was accepted from the environment");
        assert!(stderr.contains(want), "{text}: {stderr}");
    }
    let missing = dir.path().join("missing.json");
    let (ok, _, stderr) = Server::builder()
        .database(&db)
        .flag("--retention-policy", s(&missing))
        .run();
    assert!(!ok);
    assert!(stderr.contains("missing.json: cannot be read"), "{stderr}");
    let (ok, _, stderr) = Server::builder()
        .database(&db)
        .flag("--retention-prune-limit", "0")
        .run();
    assert!(!ok);
    assert!(stderr.contains("--retention-prune-limit"), "{stderr}");
    assert!(!db_path.exists(), "a failed start created the database");
}

// ── concurrent readers ──────────────────────────────────────────────────────

/// While writers put and deposit revisions of a kind kept 3 deep, readers
/// list it over HTTP. Every listing must be the state after some whole
/// write: exactly the `min(3, n)` newest of the `n` revisions assigned so
/// far — contiguous, ending at its newest revision, never longer than the
/// bound (inserted but not yet pruned) nor with a hole (partly pruned) —
/// and one reader's newest revision never goes back.
async fn readers_see_whole_writes(database: &str, dir: &Path) {
    const KEEP: i64 = 3;
    const WRITERS: u8 = 4;
    const WRITES: u8 = 12;
    let policy = policy_file(dir, POLICY);
    let server = Server::builder()
        .database(database)
        .flag("--retention-policy", &policy)
        .start()
        .await;
    let c = ctx(&server);
    let (repo, _) = c.new_repo().await.unwrap();
    let repo = Arc::new(repo);
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (c, repo, done) = (c.clone(), repo.clone(), done.clone());
            tokio::spawn(async move {
                let (mut listings, mut newest_seen) = (Vec::new(), -1_i64);
                loop {
                    let finished = done.load(Ordering::SeqCst);
                    let revs = revisions(&c, Res::Repo, &repo, KIND).await;
                    if let Some(&newest) = revs.last() {
                        assert_eq!(
                            revs,
                            range((newest - KEEP + 1).max(0), newest),
                            "a listing that is not a whole write's result"
                        );
                        assert!(newest >= newest_seen, "{newest} after {newest_seen}");
                        newest_seen = newest;
                    }
                    listings.push(newest_seen);
                    if finished {
                        return (listings, newest_seen);
                    }
                }
            })
        })
        .collect();
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (c, repo) = (c.clone(), repo.clone());
            tokio::spawn(async move {
                for n in 0..WRITES {
                    if n % 2 == 0 {
                        put(&c, Res::Repo, &repo, KIND, &[w, n]).await;
                    } else {
                        deposit(&c, Res::Repo, &repo, &[(KIND, &[w, n]), ("notes", &[n])]).await;
                    }
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let last = i64::from(WRITERS) * i64::from(WRITES) - 1;
    let mut between = 0;
    for reader in readers {
        let (listings, newest) = reader.await.unwrap();
        assert_eq!(newest, last, "the final listing sees every write");
        between += listings.iter().filter(|&&n| n >= KEEP && n < last).count();
    }
    // The invariant was checked while pruning was going on, not only before
    // or after it.
    assert!(between > 0, "no listing fell between the writes");
    assert_eq!(
        revisions(&c, Res::Repo, &repo, KIND).await,
        range(last - 2, last)
    );
    assert_eq!(
        revisions(&c, Res::Repo, &repo, "notes").await.len(),
        usize::from(WRITERS * WRITES / 2)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn readers_never_see_a_half_pruned_state_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("readers.db").display());
    readers_see_whole_writes(&db, dir.path()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn readers_never_see_a_half_pruned_state_postgres() {
    support::with_pg("retention_readers", |url| async move {
        let dir = tempfile::tempdir().unwrap();
        readers_see_whole_writes(&url, dir.path()).await;
    })
    .await;
}

// ── gc, export and import ───────────────────────────────────────────────────

/// The blob of a pruned revision is left for `gc`, which then finds it
/// unreferenced and removes it; a blob a kept revision shares is kept.
async fn gc_collects_pruned_blobs(database: &str, dir: &Path) {
    let blobs_dir = dir.join("blobs");
    let blobs = s(&blobs_dir).to_owned();
    let policy = policy_file(dir, POLICY);
    let server = Server::builder()
        .database(database)
        .blobs(&blobs)
        .flag("--retention-policy", &policy)
        .start()
        .await;
    let c = ctx(&server);
    let (repo, _) = c.new_repo().await.unwrap();
    let contents: [&[u8]; 5] = [b"cfg A", b"cfg B", b"cfg C", b"cfg D", b"cfg A"];
    for content in contents {
        put(&c, Res::Repo, &repo, KIND, content).await;
    }
    put(&c, Res::Repo, &repo, "notes", b"notes").await;
    assert_eq!(revisions(&c, Res::Repo, &repo, KIND).await, range(2, 4));
    let store = Blobs::open(&blobs).unwrap();
    let pruned = blob_ref(b"cfg B");
    assert!(
        store.head(&pruned).await.unwrap().is_some(),
        "the prune deleted the blob itself (gc's job)"
    );
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let gc = |apply: bool| {
        let mut args = vec![
            "gc",
            "--database",
            database,
            "--blobs",
            &blobs,
            "--grace-seconds",
            "1",
            "--quiet",
        ];
        if apply {
            args.push("--apply");
        }
        support::run_ok(&args)
    };
    let listed = gc(false);
    assert!(
        listed.contains(&format!("unreferenced {pruned}")),
        "{listed}"
    );
    assert!(listed.contains("1 unreferenced"), "{listed}");
    let applied = gc(true);
    assert!(applied.contains("1 deleted"), "{applied}");
    assert!(store.head(&pruned).await.unwrap().is_none());
    for kept in [&b"cfg A"[..], b"cfg C", b"cfg D", b"notes"] {
        assert!(store.head(&blob_ref(kept)).await.unwrap().is_some());
    }
    let latest = c
        .get_artifact(Res::Repo, &repo, &format!("?kind={KIND}"))
        .await
        .unwrap();
    assert_eq!(latest["contentBase64"], json!(b64(b"cfg A")));
}

#[tokio::test(flavor = "multi_thread")]
async fn gc_collects_pruned_blobs_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("gc.db").display());
    gc_collects_pruned_blobs(&db, dir.path()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn gc_collects_pruned_blobs_postgres() {
    support::with_pg("retention_gc", |url| async move {
        let dir = tempfile::tempdir().unwrap();
        gc_collects_pruned_blobs(&url, dir.path()).await;
    })
    .await;
}

/// A pruned store round-trips through export and import (into SQLite, and
/// into PostgreSQL in the `_postgres` test): the archive verifies, the
/// destination exports the same records, serves the same list and `null` for
/// pruned revisions, and keeps numbering and pruning from where the source was.
#[tokio::test(flavor = "multi_thread")]
async fn a_pruned_store_round_trips_through_export_and_import_sqlite() {
    let (dir, pruned) = pruned_archive().await;
    let dest = format!("sqlite://{}", dir.path().join("dest.db").display());
    let dest_blobs = s(&dir.path().join("dest-blobs")).to_owned();
    import_pruned(&pruned, dir.path(), dest, dest_blobs, "sqlite").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pruned_store_round_trips_through_export_and_import_postgres() {
    support::with_pg("retention_import", |url| async move {
        let (dir, pruned) = pruned_archive().await;
        let pg_blobs = s(&dir.path().join("pg-blobs")).to_owned();
        import_pruned(&pruned, dir.path(), url, pg_blobs, "postgres").await;
    })
    .await;
}

/// What [`pruned_archive`] exported: the archive, the policy file and the
/// repository whose revisions were pruned.
struct Pruned {
    archive: PathBuf,
    policy: String,
    repo: String,
}

/// A SQLite store whose repository kept revisions 4..=6 of `KIND`, exported
/// and verified.
async fn pruned_archive() -> (tempfile::TempDir, Pruned) {
    let dir = tempfile::tempdir().unwrap();
    let source = format!("sqlite://{}", dir.path().join("source.db").display());
    let source_blobs = s(&dir.path().join("source-blobs")).to_owned();
    let policy = policy_file(dir.path(), POLICY);
    let mut server = Server::builder()
        .database(&source)
        .blobs(&source_blobs)
        .flag("--retention-policy", &policy)
        .start()
        .await;
    let c = ctx(&server);
    let (repo, _) = c.new_repo().await.unwrap();
    for n in 0..6_u8 {
        put(&c, Res::Repo, &repo, KIND, &[n]).await;
    }
    deposit(&c, Res::Repo, &repo, &[(KIND, b"six"), ("notes", b"n")]).await;
    assert_eq!(revisions(&c, Res::Repo, &repo, KIND).await, range(4, 6));
    server.stop().await.unwrap();

    let archive = dir.path().join("pruned.ndjson");
    export(&source, &source_blobs, &archive);
    let verdict = support::run_ok(&["verify", s(&archive), "--quiet"]);
    assert!(verdict.contains("OK"), "{verdict}");
    let text = std::fs::read_to_string(&archive).unwrap();
    let blobs_in_archive = text
        .lines()
        .filter(|l| l.contains("\"type\":\"blob\""))
        .count();
    assert_eq!(
        blobs_in_archive, 4,
        "3 kept revisions and the notes:\n{text}"
    );
    let pruned = Pruned {
        archive,
        policy,
        repo,
    };
    (dir, pruned)
}

/// Import `pruned` into `database` and `blobs` and check what clients see.
async fn import_pruned(pruned: &Pruned, dir: &Path, database: String, blobs: String, name: &str) {
    let Pruned {
        archive,
        policy,
        repo,
    } = pruned;
    let (imported, _, stderr) = support::import(archive, &database, &blobs, true);
    assert!(imported, "{name}: import failed:\n{stderr}");
    let again = dir.join(format!("{name}.ndjson"));
    export(&database, &blobs, &again);
    assert_eq!(
        support::archive_body(archive),
        support::archive_body(&again),
        "{name}: the records differ"
    );
    let server = Server::builder()
        .database(&database)
        .blobs(&blobs)
        .flag("--retention-policy", policy)
        .start()
        .await;
    let c = ctx(&server);
    assert_eq!(revisions(&c, Res::Repo, repo, KIND).await, range(4, 6));
    assert_eq!(
        c.get_artifact(Res::Repo, repo, &format!("?kind={KIND}&rev=3"))
            .await
            .unwrap(),
        Value::Null
    );
    assert_eq!(put(&c, Res::Repo, repo, KIND, b"seven").await, 7);
    assert_eq!(revisions(&c, Res::Repo, repo, KIND).await, range(5, 7));
}
