//! Archives, backups and blob garbage collection through the real binary:
//! stores seeded over HTTP (the whole conformance suite, for the round
//! trip), then `abstore export | verify | import | backup | gc`.
//!
//! The round trip through PostgreSQL and S3 needs `ABSTORE_TEST_POSTGRES_URL`
//! (a server we may create databases on) and `ABSTORE_TEST_S3_URL`
//! (`scripts/s3-test-server`); without them it skips loudly (and fails
//! under CI), and `scripts/test` leaves it out, counted as skipped.

use crate::support;

use std::path::{Path, PathBuf};

use abstore::blobs::{Blobs, blob_ref};
use abstore_conformance::util::{b64, enc, random_hex};
use abstore_conformance::{Ctx, Res, all_checks, run_checks};
use serde_json::{Value, json};
use sqlx::{AssertSqlSafe, Connection as _, PgConnection};
use support::{
    Server, archive_body as body, assert_same_archive_body as assert_same_body, export, import,
    path_text as s, run as abstore, run_ok as ok,
};

use crate::support::VERSION;

fn sqlite_url(path: &Path) -> String {
    format!("sqlite://{}", path.display())
}

async fn serve(database: &str, blobs: &str) -> Server {
    Server::builder()
        .database(database)
        .blobs(blobs)
        .test_clock()
        .start()
        .await
}

fn ctx(server: &Server) -> Ctx {
    Ctx::new(server.url(), VERSION).expect("http client")
}

fn lines(archive: &Path) -> Vec<Value> {
    std::fs::read_to_string(archive)
        .expect("read archive")
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect()
}

/// A small store: a build with events, an artifact and a deposit, a repo
/// with a session and a lease.
async fn seed_small(c: &Ctx) {
    let (slug, _) = c.new_build().await.unwrap();
    c.append_n(Res::Build, &slug, 3).await.unwrap();
    c.put_artifact(Res::Build, &slug, "plan", b"# Plan\n", None)
        .await
        .unwrap();
    let (repo, _) = c.new_repo().await.unwrap();
    c.append_n(Res::Repo, &repo, 2).await.unwrap();
    assert!(c.claim(Res::Repo, &repo, "worker-1", 60_000).await.unwrap());
    c.put_artifact(Res::Repo, &repo, "notes", b"notes", None)
        .await
        .unwrap();
}

// ── PostgreSQL and S3 ───────────────────────────────────────────────────────

/// Rows in `table` of the database at `url`; -1 when the table does not exist.
async fn pg_count(url: &str, table: &str) -> i64 {
    let mut conn = PgConnection::connect(url).await.expect("connect");
    sqlx::query_scalar(AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
        .fetch_one(&mut conn)
        .await
        .unwrap_or(-1)
}

/// Whether `table` of the database at `url` was analyzed by a command (not
/// by autovacuum); statistics reach the view within a second or so.
async fn analyzed(url: &str, table: &str) -> bool {
    let mut conn = PgConnection::connect(url).await.expect("connect");
    for _ in 0..50 {
        let at: Option<Option<String>> = sqlx::query_scalar(
            "SELECT last_analyze::text FROM pg_stat_user_tables WHERE relname = $1",
        )
        .bind(table)
        .fetch_optional(&mut conn)
        .await
        .unwrap();
        if at.flatten().is_some() {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    false
}

/// A fresh S3 prefix; `None` (with the skip recorded) without S3.
fn s3_prefix() -> Option<String> {
    let Ok(base) = std::env::var("ABSTORE_TEST_S3_URL") else {
        abstore_testkit::skip::skipped(
            "archive round trip through S3",
            "run scripts/s3-test-server",
        );
        return None;
    };
    Some(format!(
        "{}/archive-{:016x}",
        base.trim_end_matches('/'),
        rand::random::<u64>()
    ))
}

// ── Comparing what clients see ──────────────────────────────────────────────

/// Every read route's answer for every record in `archive`, from `server`.
async fn reads(server: &Server, archive: &Path) -> Vec<(String, u16, String)> {
    let c = ctx(server);
    let mut paths = vec!["/builds".to_string()];
    for line in lines(archive) {
        let text = |name: &str| enc(line[name].as_str().unwrap_or_default());
        match line["type"].as_str() {
            Some("resource") => {
                let base = match line["kind"].as_str() {
                    Some("build") => format!("/builds/{}", text("id")),
                    Some("repo") => format!("/repos/{}", text("id")),
                    _ => format!("/sessions/{}", text("id")),
                };
                for tail in ["", "/events", "/artifact-list", "/streams"] {
                    paths.push(format!("{base}{tail}"));
                }
                if line["kind"] == "repo" {
                    paths.push(format!("{base}/sessions"));
                }
            }
            Some("artifact") => {
                let collection = match line["kind"].as_str() {
                    Some("build") => "builds",
                    Some("repo") => "repos",
                    _ => "sessions",
                };
                paths.push(format!(
                    "/{collection}/{}/artifacts?kind={}&rev={}",
                    text("resource_id"),
                    text("artifact_kind"),
                    line["revision"]
                ));
            }
            Some("stream") => {
                paths.push(format!("/streams/{}", text("id")));
                paths.push(format!("/streams/{}/chunks", text("id")));
            }
            _ => {}
        }
    }
    let mut answers = Vec::new();
    for path in paths {
        let r = c.get(&path).send().await.expect("GET");
        answers.push((path, r.status, r.text));
    }
    answers
}

fn assert_same_reads(a: &[(String, u16, String)], b: &[(String, u16, String)]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x, y, "the two stores answer {} differently", x.0);
    }
}

// ── The tests ───────────────────────────────────────────────────────────────

/// SQLite + directory blobs → archive → PostgreSQL + S3 → archive → SQLite:
/// identical archives (but for the header) and identical answers.
/// SQLite (directory blobs) → PostgreSQL (S3 blobs) → SQLite: the same
/// archive at every step, and clients see the same store.
#[tokio::test(flavor = "multi_thread")]
async fn round_trip_sqlite_postgres_s3_sqlite() {
    let Some(pg) = support::pg_database("archive").await else {
        return;
    };
    let Some(pg_blobs) = s3_prefix() else {
        support::drop_pg(pg).await;
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let source_db = sqlite_url(&dir.path().join("source.db"));
    let source_blobs = dir.path().join("source-blobs");
    let source_blobs = s(&source_blobs).to_string();
    {
        let mut server = serve(&source_db, &source_blobs).await;
        let report = run_checks(&ctx(&server), all_checks(), None, 8, |_, _| {}).await;
        assert!(report.failures().is_empty(), "{:?}", report.failures());
        seed_small(&ctx(&server)).await;
        server.stop().await.unwrap();
    }
    let first = dir.path().join("first.ndjson");
    export(&source_db, &source_blobs, &first);
    let verdict = ok(&["verify", s(&first), "--quiet"]);
    assert!(verdict.contains(": OK: sqlite archive"), "{verdict}");
    let kinds: Vec<String> = lines(&first)
        .iter()
        .map(|l| l["type"].as_str().unwrap().to_string())
        .collect();
    for kind in [
        "resource",
        "event",
        "artifact",
        "stream",
        "stream_chunk",
        "blob",
    ] {
        assert!(kinds.iter().any(|k| k == kind), "the seed has no {kind}");
    }

    // Through PostgreSQL and S3.
    let middle = {
        let blobs = pg_blobs;
        let (ok_, out, err) = import(&first, &pg.url, &blobs, false);
        assert!(ok_, "{err}");
        assert!(out.starts_with("dry run"), "{out}");
        assert_eq!(
            pg_count(&pg.url, "resources").await,
            -1,
            "a dry run created tables"
        );
        let (ok_, out, err) = import(&first, &pg.url, &blobs, true);
        assert!(ok_, "{err}");
        assert!(out.contains(" 0 already present;"), "{out}");
        let (ok_, out, err) = import(&first, &pg.url, &blobs, true);
        assert!(ok_, "{err}");
        assert!(out.contains(" 0 records new"), "re-import wrote: {out}");
        let second = dir.path().join("second.ndjson");
        export(&pg.url, &blobs, &second);
        assert_same_body(&first, &second, "SQLite and PostgreSQL archives differ");
        assert!(lines(&second)[0]["source"] == "postgres");
        let source = serve(&source_db, &source_blobs).await;
        let on_pg = serve(&pg.url, &blobs).await;
        assert_same_reads(&reads(&source, &first).await, &reads(&on_pg, &first).await);
        second
    };

    let dest_db = sqlite_url(&dir.path().join("dest.db"));
    let dest_blobs = dir.path().join("dest-blobs");
    let dest_blobs = s(&dest_blobs).to_string();
    let (ok_, _, err) = import(&middle, &dest_db, &dest_blobs, true);
    assert!(ok_, "{err}");
    let third = dir.path().join("third.ndjson");
    export(&dest_db, &dest_blobs, &third);
    assert_same_body(&first, &third, "the round trip changed the archive");

    // Clients see the same store.
    let source = serve(&source_db, &source_blobs).await;
    let dest = serve(&dest_db, &dest_blobs).await;
    assert_same_reads(&reads(&source, &first).await, &reads(&dest, &first).await);
    support::drop_pg(pg).await;
}

/// An import dry run creates nothing: not the destination's directory, its
/// database file or its blob directory (a path or a `file://` URL); it
/// reports every record and blob as new. `--apply` then creates them.
#[tokio::test(flavor = "multi_thread")]
async fn an_import_dry_run_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let source_db = sqlite_url(&dir.path().join("source.db"));
    let source_blobs = s(&dir.path().join("source-blobs")).to_string();
    {
        let mut server = serve(&source_db, &source_blobs).await;
        seed_small(&ctx(&server)).await;
        server.stop().await.unwrap();
    }
    let archive = dir.path().join("small.ndjson");
    export(&source_db, &source_blobs, &archive);
    let dest = dir.path().join("dest");
    let dest_db = sqlite_url(&dest.join("abstore.db"));
    let dest_blobs = s(&dest.join("blobs")).to_string();
    for blobs in [dest_blobs.clone(), format!("file://{dest_blobs}")] {
        let (ok_, out, err) = import(&archive, &dest_db, &blobs, false);
        assert!(ok_, "{err}");
        assert!(out.starts_with("dry run"), "{out}");
        assert!(out.contains(" 0 already present; 2 blobs new"), "{out}");
        assert!(
            !dest.exists(),
            "a dry run into {blobs} created {}",
            dest.display()
        );
    }
    let (ok_, _, err) = import(&archive, &dest_db, &dest_blobs, true);
    assert!(ok_, "{err}");
    assert!(dest.join("abstore.db").is_file() && dest.join("blobs").is_dir());
    let (ok_, out, err) = import(&archive, &dest_db, &dest_blobs, false);
    assert!(ok_, "{err}");
    assert!(
        out.contains(" 0 records new") && out.contains(" 0 blobs new"),
        "{out}"
    );
}

/// Appends and deposits keep running while exports are taken: each archive
/// is a consistent snapshot (verify checks contiguous sequences and that every
/// referenced blob is present; here also each resource's last_seq).
#[tokio::test(flavor = "multi_thread")]
async fn export_during_writes_is_a_consistent_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_url(&dir.path().join("live.db"));
    let blobs = s(&dir.path().join("blobs")).to_string();
    let server = serve(&db, &blobs).await;
    let c = ctx(&server);
    let (slug, _) = c.new_build().await.unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let writer = {
        let (c, slug, stop, done) = (c.clone(), slug.clone(), stop.clone(), done.clone());
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                c.append_n(Res::Build, &slug, 1).await.unwrap();
                // A deposit: an artifact and the event that references it.
                let body = json!({
                    "artifacts": [{"kind": "log", "contentBase64": b64(format!("artifact {n}").as_bytes())}],
                    "event": Res::Build.ref_event(json!({"kind": "log", "rev": -1})),
                });
                let r = c.deposit(Res::Build, &slug, &body).await.unwrap();
                assert!(r.status < 300, "{}", r.got());
                n += 1;
                done.store(n, std::sync::atomic::Ordering::Relaxed);
            }
            n
        })
    };
    for i in 0..3 {
        let target = 5 * (i + 1);
        while done.load(std::sync::atomic::Ordering::Relaxed) < target {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let out = dir.path().join(format!("snap{i}.ndjson"));
        let db = db.clone();
        let blobs = blobs.clone();
        let out2 = out.clone();
        tokio::task::spawn_blocking(move || export(&db, &blobs, &out2))
            .await
            .unwrap();
        ok(&["verify", s(&out), "--quiet"]);
        let records = lines(&out);
        let last_seq = records
            .iter()
            .find(|l| l["type"] == "resource" && l["id"] == slug.as_str())
            .map(|l| l["last_seq"].as_i64().unwrap())
            .unwrap();
        let events = records
            .iter()
            .filter(|l| l["type"] == "event" && l["resource_id"] == slug.as_str())
            .count() as i64;
        assert_eq!(
            events, last_seq,
            "snapshot {i}: events and last_seq disagree"
        );
        let head = records
            .iter()
            .find(|l| l["type"] == "artifact_head" && l["resource_id"] == slug.as_str());
        let artifacts = records
            .iter()
            .filter(|l| l["type"] == "artifact" && l["resource_id"] == slug.as_str())
            .count() as i64;
        if let Some(head) = head {
            assert_eq!(head["next_revision"].as_i64().unwrap(), artifacts);
        }
        // No event whose artifact is missing.
        for envelope in records.iter().filter(|l| l["type"] == "event") {
            let envelope: Value =
                serde_json::from_str(envelope["envelope"].as_str().unwrap()).unwrap();
            let reference = &envelope["payload"]["artifact"];
            if reference.is_object() {
                assert!(
                    records.iter().any(|l| l["type"] == "artifact"
                        && l["artifact_kind"] == reference["kind"]
                        && l["revision"] == reference["rev"]),
                    "snapshot {i}: event {envelope} references a missing artifact"
                );
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let written = writer.await.unwrap();
    assert!(written > 0, "no write ran during the exports");
}

/// A conflicting record fails the whole import and keeps nothing of it:
/// `dest` (which `good` was imported into) gains a repository event the
/// archive lacks, then a newer export of `source` (with one more build,
/// which sorts before the repository) is imported into it.
async fn conflicting_import_keeps_nothing(
    dir: &Path,
    (source_db, source_blobs): (&str, &str),
    good: &Path,
    (dest, dest_blobs): (&str, &str),
) {
    let repo = lines(good)
        .iter()
        .find(|l| l["type"] == "resource" && l["kind"] == "repo")
        .map(|l| l["id"].as_str().unwrap().to_string())
        .unwrap();
    let mut server = serve(dest, dest_blobs).await;
    ctx(&server).append_n(Res::Repo, &repo, 1).await.unwrap();
    server.stop().await.unwrap();
    let before = dir.join("before.ndjson");
    export(dest, dest_blobs, &before);
    let mut server = serve(source_db, source_blobs).await;
    let (new_slug, _) = ctx(&server).new_build().await.unwrap();
    server.stop().await.unwrap();
    let newer = dir.join("newer.ndjson");
    export(source_db, source_blobs, &newer);
    let (ok_, _, stderr) = import(&newer, dest, dest_blobs, true);
    assert!(!ok_, "a conflicting import passed");
    assert!(
        stderr.contains(&format!(
            "resource (repo, {repo}) already exists with different content"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was imported"), "{stderr}");
    let after = dir.join("after.ndjson");
    export(dest, dest_blobs, &after);
    assert_same_body(&before, &after, "a failed import changed the store");
    assert!(!body(&after).contains(&new_slug));
}

/// Into PostgreSQL, rows go in batches of several hundred: a store of more
/// rows than one batch imports whole, again as "already present", and a
/// record that exists with other content still fails the whole import,
/// named, with nothing of it kept.
#[tokio::test(flavor = "multi_thread")]
async fn batched_import_into_postgres_names_a_conflict_and_keeps_nothing() {
    let Some(pg) = support::pg_database("archive_batch").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_url(&dir.path().join("src.db"));
    let blobs = s(&dir.path().join("blobs")).to_string();
    let mut server = serve(&db, &blobs).await;
    seed_small(&ctx(&server)).await;
    let (slug, _) = ctx(&server).new_build().await.unwrap();
    ctx(&server)
        .append_n(Res::Build, &slug, 1200)
        .await
        .unwrap();
    server.stop().await.unwrap();
    let good = dir.path().join("good.ndjson");
    export(&db, &blobs, &good);
    let records = lines(&good).len() - 2;
    assert!(records > 1200, "{records} records: fewer than two batches");

    let pg_blobs = s(&dir.path().join("pg-blobs")).to_string();
    let (ok_, out, err) = import(&good, &pg.url, &pg_blobs, true);
    assert!(ok_, "{err}");
    assert!(out.contains(" 0 already present;"), "{out}");
    // The import leaves planner statistics behind (its own ANALYZE, not
    // autovacuum's), so the first reads are not planned for empty tables.
    for table in ["resources", "events"] {
        assert!(
            analyzed(&pg.url, table).await,
            "no ANALYZE of {table} after the import"
        );
    }
    let (ok_, out, err) = import(&good, &pg.url, &pg_blobs, true);
    assert!(ok_, "{err}");
    assert!(out.contains(" 0 records new"), "re-import wrote: {out}");
    let copy = dir.path().join("copy.ndjson");
    export(&pg.url, &pg_blobs, &copy);
    assert_same_body(&good, &copy, "the PostgreSQL import changed the archive");

    conflicting_import_keeps_nothing(dir.path(), (&db, &blobs), &good, (&pg.url, &pg_blobs)).await;
    support::drop_pg(pg).await;
}

/// Damaged archives are refused naming the place, and importing them writes
/// nothing; a record that exists with other content fails the whole import.
#[tokio::test(flavor = "multi_thread")]
async fn damaged_archives_and_conflicts_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_url(&dir.path().join("src.db"));
    let blobs = s(&dir.path().join("blobs")).to_string();
    let mut server = serve(&db, &blobs).await;
    seed_small(&ctx(&server)).await;
    server.stop().await.unwrap();
    let good = dir.path().join("good.ndjson");
    export(&db, &blobs, &good);
    let text = std::fs::read_to_string(&good).unwrap();
    let mut rows: Vec<String> = text.lines().map(str::to_string).collect();

    let flipped = {
        let mut rows = rows.clone();
        let at = rows
            .iter()
            .position(|l| l.contains("\"type\":\"blob\""))
            .unwrap();
        let line = &rows[at];
        let b64_at = line.find("\"base64\":\"").unwrap() + 10;
        let mut bytes = line.clone().into_bytes();
        bytes[b64_at] = if bytes[b64_at] == b'A' { b'B' } else { b'A' };
        rows[at] = String::from_utf8(bytes).unwrap();
        (rows.join("\n") + "\n", format!("line {}: blob", at + 1))
    };
    let reordered = {
        let mut rows = rows.clone();
        let at = rows
            .iter()
            .position(|l| l.contains("\"type\":\"event\""))
            .unwrap();
        rows.swap(at, at + 1);
        (rows.join("\n") + "\n", format!("line {}: event", at + 1))
    };
    let wrong_count = {
        let footer = rows.pop().unwrap();
        let mut value: Value = serde_json::from_str(&footer).unwrap();
        let n = value["counts"]["event"].as_u64().unwrap();
        value["counts"]["event"] = json!(n + 1);
        rows.push(value.to_string());
        (
            rows.join("\n") + "\n",
            format!("line {}: the footer counts", rows.len()),
        )
    };
    let truncated = (text[..text.len() - 40].to_string(), "truncated".to_string());
    for (name, (damaged, expected)) in [
        ("flipped", flipped),
        ("reordered", reordered),
        ("wrong-count", wrong_count),
        ("truncated", truncated),
    ] {
        let file = dir.path().join(format!("{name}.ndjson"));
        std::fs::write(&file, damaged).unwrap();
        let (ok_, stdout, stderr) = abstore(&["verify", s(&file), "--quiet"]);
        assert!(!ok_, "{name}: verify passed: {stdout}");
        assert!(stderr.contains(&expected), "{name}: {stderr}");
        assert!(stderr.contains("INVALID"), "{name}: {stderr}");
        let dest = dir.path().join(format!("{name}-dest.db"));
        let dest_blobs = dir.path().join(format!("{name}-blobs"));
        let (ok_, _, stderr) = import(&file, &sqlite_url(&dest), s(&dest_blobs), true);
        assert!(!ok_, "{name}: import passed");
        assert!(stderr.contains(&expected), "{name}: {stderr}");
        assert!(!dest.exists(), "{name}: import created the database");
        let blob_count = std::fs::read_dir(&dest_blobs).map_or(0, |d| d.count());
        assert_eq!(blob_count, 0, "{name}: import wrote blobs");
    }

    // A conflicting record: the destination's repo has an event the
    // archive's lacks; the archive also holds a new build, which sorts before
    // the repo and must not stay visible when the repo fails the import.
    let dest = sqlite_url(&dir.path().join("conflict.db"));
    let dest_blobs = s(&dir.path().join("conflict-blobs")).to_string();
    let (ok_, _, err) = import(&good, &dest, &dest_blobs, true);
    assert!(ok_, "{err}");
    conflicting_import_keeps_nothing(dir.path(), (&db, &blobs), &good, (&dest, &dest_blobs)).await;
}

/// gc lists and removes the blob of a deposit whose transaction failed,
/// never a referenced blob, never one younger than the grace period.
#[tokio::test(flavor = "multi_thread")]
async fn gc_removes_only_old_unreferenced_blobs() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_url(&dir.path().join("gc.db"));
    let blobs_dir = dir.path().join("blobs");
    let blobs = s(&blobs_dir).to_string();
    let server = serve(&db, &blobs).await;
    let c = ctx(&server);
    let (slug, _) = c.new_build().await.unwrap();
    let kept = b"referenced bytes".to_vec();
    c.put_artifact(Res::Build, &slug, "plan", &kept, None)
        .await
        .unwrap();
    // A deposit whose event fails validation inside the transaction (an
    // out-of-range placeholder is left unreplaced, so the event is invalid):
    // its blob is written, its metadata is not.
    let orphan = format!("orphan {}", random_hex()).into_bytes();
    let failed = json!({
        "artifacts": [{"kind": "plan", "contentBase64": b64(&orphan)}],
        "event": Res::Build.ref_event(json!({"kind": "plan", "rev": -2})),
    });
    let r = c.deposit(Res::Build, &slug, &failed).await.unwrap();
    assert_eq!(r.status, 422, "{}", r.text);
    let store = Blobs::open(&blobs).unwrap();
    let orphan_ref = blob_ref(&orphan);
    let kept_ref = blob_ref(&kept);
    assert!(
        store.head(&orphan_ref).await.unwrap().is_some(),
        "the failed deposit left no blob to collect"
    );
    let gc = |grace: &str, apply: bool| {
        let mut args = vec![
            "gc",
            "--database",
            &db,
            "--blobs",
            &blobs,
            "--grace-seconds",
            grace,
            "--quiet",
        ];
        if apply {
            args.push("--apply");
        }
        ok(&args)
    };
    let young = gc("3600", true);
    assert!(
        young.contains("2 younger than the grace period kept, 0 unreferenced"),
        "{young}"
    );
    assert!(
        store.head(&orphan_ref).await.unwrap().is_some(),
        "a young blob was collected"
    );
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let listed = gc("1", false);
    assert!(
        listed.contains(&format!("unreferenced {orphan_ref}")),
        "{listed}"
    );
    assert!(!listed.contains(&kept_ref), "{listed}");
    assert!(listed.contains("1 unreferenced"), "{listed}");
    assert!(
        store.head(&orphan_ref).await.unwrap().is_some(),
        "a dry run deleted"
    );
    let applied = gc("1", true);
    assert!(applied.contains("1 deleted"), "{applied}");
    assert!(store.head(&orphan_ref).await.unwrap().is_none());
    assert!(store.head(&kept_ref).await.unwrap().is_some());
    let got = c
        .get_artifact(Res::Build, &slug, "?kind=plan")
        .await
        .unwrap();
    assert_eq!(got["contentBase64"], json!(b64(&kept)), "{got}");
}

/// An online backup of a serving SQLite store serves the same answers.
#[tokio::test(flavor = "multi_thread")]
async fn backup_while_serving_restores_the_same_store() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_url(&dir.path().join("live.db"));
    let blobs = s(&dir.path().join("blobs")).to_string();
    let server = serve(&db, &blobs).await;
    seed_small(&ctx(&server)).await;
    let out: PathBuf = dir.path().join("backup.db");
    let report = ok(&[
        "backup",
        "--database",
        &db,
        "--blobs",
        &blobs,
        "--out",
        s(&out),
        "--quiet",
    ]);
    assert!(report.contains("2 blobs"), "{report}");
    let (ok_, _, err) = abstore(&[
        "backup",
        "--database",
        &db,
        "--blobs",
        &blobs,
        "--out",
        s(&out),
        "--quiet",
    ]);
    assert!(!ok_ && err.contains("--force"), "{err}");
    let archive = dir.path().join("live.ndjson");
    export(&db, &blobs, &archive);
    let restored_blobs = format!("{}.blobs", out.display());
    let restored = serve(&sqlite_url(&out), &restored_blobs).await;
    assert_same_reads(
        &reads(&server, &archive).await,
        &reads(&restored, &archive).await,
    );
}

/// An export that cannot complete names the reason and leaves no file (not
/// even its temporary one); without `--force` it never replaces a file.
#[tokio::test(flavor = "multi_thread")]
async fn failed_export_names_the_missing_blob_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_url(&dir.path().join("src.db"));
    let blobs = s(&dir.path().join("blobs")).to_string();
    let mut server = serve(&db, &blobs).await;
    seed_small(&ctx(&server)).await;
    server.stop().await.unwrap();
    let out = dir.path().join("out").join("a.ndjson");
    std::fs::create_dir(out.parent().unwrap()).unwrap();
    export(&db, &blobs, &out);
    let (ok_, _, err) = abstore(&[
        "export",
        "--database",
        &db,
        "--blobs",
        &blobs,
        "--out",
        s(&out),
        "--quiet",
    ]);
    assert!(!ok_ && err.contains("--force"), "{err}");

    let missing = blob_ref(b"# Plan\n");
    Blobs::open(&blobs).unwrap().delete(&missing).await.unwrap();
    let again = dir.path().join("out").join("b.ndjson");
    let (ok_, _, err) = abstore(&[
        "export",
        "--database",
        &db,
        "--blobs",
        &blobs,
        "--out",
        s(&again),
        "--quiet",
    ]);
    assert!(!ok_, "an export without its blob passed");
    assert!(
        err.contains(&format!(
            "blob {missing}, referenced by the store, cannot be read"
        )),
        "{err}"
    );
    let left: Vec<_> = std::fs::read_dir(out.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("a.ndjson")]);
}

/// One `--database` text names one file for every command (issue 23): the
/// store `serve` wrote at a path with a space and a `%`, addressed with
/// percent escapes, is the store `migrate`, `export`, `import`, `backup` and
/// `gc` open, and what `import` writes under such a URL is what `serve`
/// then reads. No command creates a file under the escaped spelling.
#[tokio::test(flavor = "multi_thread")]
async fn every_command_opens_the_file_a_percent_escaped_url_names() {
    let dir = tempfile::tempdir().unwrap();
    let root = s(dir.path()).to_string();
    let url = format!("sqlite://{root}/my%20store/100%25.db");
    let file = dir.path().join("my store").join("100%.db");
    let blobs = s(&dir.path().join("blobs")).to_string();
    let archive = dir.path().join("store.ndjson");
    let reads_before = {
        let mut server = serve(&url, &blobs).await;
        seed_small(&ctx(&server)).await;
        export(&url, &blobs, &archive);
        let reads = reads(&server, &archive).await;
        server.stop().await.unwrap();
        reads
    };
    assert!(file.exists(), "serve did not write {}", file.display());

    ok(&["migrate", "--database", &url]);
    let verdict = ok(&["verify", s(&archive), "--quiet"]);
    assert!(verdict.contains(": OK: sqlite archive"), "{verdict}");
    let resources = lines(&archive)
        .iter()
        .filter(|l| l["type"] == "resource")
        .count();
    assert!(resources >= 2, "the export read another (empty) store");

    // Every record is already in the store the URL names.
    let (ok_, out, err) = import(&archive, &url, &blobs, true);
    assert!(ok_, "{err}");
    assert!(out.contains(": 0 records new"), "{out}");

    let copy = dir.path().join("copy.db");
    let report = ok(&[
        "backup",
        "--database",
        &url,
        "--blobs",
        &blobs,
        "--out",
        s(&copy),
        "--quiet",
    ]);
    assert!(report.contains("2 blobs"), "{report}");
    let copied = dir.path().join("copy.ndjson");
    export(
        &sqlite_url(&copy),
        &format!("{}.blobs", copy.display()),
        &copied,
    );
    assert_same_body(&archive, &copied, "backup of the served store");

    // With no grace, every blob is judged by that store's references.
    let listing = ok(&[
        "gc",
        "--database",
        &url,
        "--blobs",
        &blobs,
        "--grace-seconds",
        "0",
        "--quiet",
    ]);
    assert!(listing.contains(" 0 unreferenced ("), "{listing}");

    // Imported under an escaped URL, served from the same text.
    let moved = format!("sqlite://{root}/moved%20store/abstore.db");
    let (ok_, _, err) = import(&archive, &moved, &blobs, true);
    assert!(ok_, "{err}");
    assert!(dir.path().join("moved store/abstore.db").exists());
    let mut server = serve(&moved, &blobs).await;
    assert_same_reads(&reads_before, &reads(&server, &archive).await);
    server.stop().await.unwrap();

    for escaped in ["my%20store", "moved%20store"] {
        assert!(!dir.path().join(escaped).exists(), "{escaped} was created");
    }
}

// ── Ticket assets ───────────────────────────────────────────────────────────

/// A protocol-3 server on `database` and `blobs` (ticket assets are served
/// to protocol-3 clients only).
async fn serve_p3(database: &str, blobs: &str) -> Server {
    Server::builder()
        .database(database)
        .blobs(blobs)
        .accept_protocol3()
        .test_clock()
        .start()
        .await
}

/// `(status, body)` of a protocol-3 request.
async fn p3(server: &Server, method: &str, path: &str, body: Option<Value>) -> (u16, String) {
    let client = support::protocol3_client();
    let mut request = client.request(method.parse().unwrap(), format!("{}{path}", server.url()));
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

const TICKET: &str = "/repos/acme%2Fassets/tickets/AUT-7";

/// Assets of two tickets: revisions, a removal (tombstone), a re-attached
/// asset, a file layout, an empty tree, and one content shared by two files.
async fn seed_assets(server: &Server) {
    let put = |kind: &str, name: &str, layout: &str, entries: Value| json!({"kind": kind, "name": name, "layout": layout, "entries": entries});
    let file = |path: &str, bytes: &[u8]| json!({"type": "file", "path": path, "contentBase64": b64(bytes)});
    let writes = [
        (
            TICKET,
            put(
                "design",
                "home",
                "tree",
                json!([file("index.html", b"<h1>v0</h1>"), {"type": "dir", "path": "img/empty"}]),
            ),
        ),
        (
            TICKET,
            put(
                "design",
                "home",
                "tree",
                json!([
                    file("index.html", b"<h1>v1</h1>"),
                    file("copy.html", b"<h1>v1</h1>")
                ]),
            ),
        ),
        (
            TICKET,
            put("notes", "spec", "file", json!([file("spec.md", b"# spec")])),
        ),
        (TICKET, put("notes", "empty", "tree", json!([]))),
        (
            "/repos/acme%2Fassets/tickets/AUT-8",
            put("design", "home", "file", json!([file("a.png", b"png")])),
        ),
    ];
    for (ticket, body) in writes {
        let (status, text) = p3(server, "POST", &format!("{ticket}/assets"), Some(body)).await;
        assert_eq!(status, 201, "{text}");
    }
    let (status, text) = p3(
        server,
        "POST",
        &format!("{TICKET}/assets/remove"),
        Some(json!({"kind": "notes", "name": "spec"})),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let (status, text) = p3(
        server,
        "POST",
        &format!("{TICKET}/assets"),
        Some(put(
            "notes",
            "spec",
            "file",
            json!([file("spec.md", b"# spec v2")]),
        )),
    )
    .await;
    assert_eq!(status, 201, "{text}");
}

/// Every ticket-asset read of the seeded store.
async fn asset_reads(server: &Server) -> Vec<(String, u16, String)> {
    let mut paths = vec![
        format!("{TICKET}/assets/list"),
        format!("{TICKET}/assets/list?revisions=1"),
        "/repos/acme%2Fassets/tickets/AUT-8/assets/list".to_owned(),
        format!("{TICKET}/assets/file?kind=design&name=home&rev=0&path=index.html"),
        format!("{TICKET}/assets/file?kind=design&name=home&path=copy.html"),
        format!("{TICKET}/assets/file?kind=notes&name=spec&rev=0&path=spec.md"),
        format!("{TICKET}/assets/file?kind=notes&name=spec&path=spec.md"),
    ];
    for (kind, name, revs) in [
        ("design", "home", 0..3),
        ("notes", "spec", 0..4),
        ("notes", "empty", 0..2),
    ] {
        paths.push(format!("{TICKET}/assets?kind={kind}&name={name}"));
        for rev in revs {
            paths.push(format!("{TICKET}/assets?kind={kind}&name={name}&rev={rev}"));
        }
    }
    let mut answers = Vec::new();
    for path in paths {
        let (status, text) = p3(server, "GET", &path, None).await;
        answers.push((path, status, text));
    }
    answers
}

/// Ticket assets travel in archives: every revision (the tombstone too),
/// the counters and the files' blobs, SQLite → archive → SQLite (and
/// PostgreSQL when configured), with the same answers after; gc counts
/// their blobs as referenced.
#[tokio::test(flavor = "multi_thread")]
async fn ticket_assets_round_trip_and_their_blobs_stay_live() {
    let dir = tempfile::tempdir().unwrap();
    let source_db = sqlite_url(&dir.path().join("source.db"));
    let source_blobs = s(&dir.path().join("source-blobs")).to_string();
    let before = {
        let mut server = serve_p3(&source_db, &source_blobs).await;
        seed_assets(&server).await;
        let reads = asset_reads(&server).await;
        server.stop().await.unwrap();
        reads
    };
    assert!(
        before
            .iter()
            .any(|(_, status, text)| *status == 200 && text == "null"),
        "the tombstone reads as null"
    );
    let first = dir.path().join("first.ndjson");
    export(&source_db, &source_blobs, &first);
    let verdict = ok(&["verify", s(&first), "--quiet"]);
    assert!(verdict.contains(": OK: sqlite archive"), "{verdict}");
    let archived = lines(&first);
    let count = |kind: &str| archived.iter().filter(|l| l["type"] == kind).count();
    assert_eq!(count("ticket_asset_head"), 4);
    // design/home 0-1, notes/spec 0-2 (1: the tombstone), notes/empty 0, AUT-8 0.
    assert_eq!(count("ticket_asset"), 7);
    assert_eq!(count("blob"), 5, "each distinct content once");
    assert!(
        archived.iter().any(|l| l["type"] == "ticket_asset"
            && l["layout"].is_null()
            && l["entries"].is_null()),
        "no tombstone archived"
    );

    // gc: every ticket-asset blob is referenced, even a removed revision's.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let gc = ok(&[
        "gc",
        "--database",
        &source_db,
        "--blobs",
        &source_blobs,
        "--grace-seconds",
        "1",
        "--apply",
        "--quiet",
    ]);
    assert!(
        gc.contains("5 blobs") && gc.contains(" 0 unreferenced ("),
        "{gc}"
    );

    let dest_db = sqlite_url(&dir.path().join("dest.db"));
    let dest_blobs = s(&dir.path().join("dest-blobs")).to_string();
    let (ok_, out, err) = import(&first, &dest_db, &dest_blobs, true);
    assert!(ok_, "{err}");
    assert!(out.contains("5 blobs new"), "{out}");
    let second = dir.path().join("second.ndjson");
    export(&dest_db, &dest_blobs, &second);
    assert_same_body(
        &first,
        &second,
        "the SQLite round trip changed ticket assets",
    );
    let mut dest = serve_p3(&dest_db, &dest_blobs).await;
    assert_eq!(asset_reads(&dest).await, before);
    // The counters came along: the next revision continues the source's.
    let (status, text) = p3(
        &dest,
        "POST",
        &format!("{TICKET}/assets"),
        Some(json!({"kind": "notes", "name": "spec", "layout": "tree", "entries": []})),
    )
    .await;
    assert_eq!(status, 201, "{text}");
    assert!(text.contains("\"revision\":3"), "{text}");
    dest.stop().await.unwrap();

    let Some(pg) = support::pg_database("archive_assets").await else {
        return;
    };
    let pg_blobs = s(&dir.path().join("pg-blobs")).to_string();
    let (ok_, _, err) = import(&first, &pg.url, &pg_blobs, true);
    assert!(ok_, "{err}");
    let third = dir.path().join("third.ndjson");
    export(&pg.url, &pg_blobs, &third);
    assert_same_body(
        &first,
        &third,
        "SQLite and PostgreSQL archives of ticket assets differ",
    );
    {
        let mut on_pg = serve_p3(&pg.url, &pg_blobs).await;
        assert_eq!(asset_reads(&on_pg).await, before);
        on_pg.stop().await.unwrap();
    }
    let gc = ok(&[
        "gc",
        "--database",
        &pg.url,
        "--blobs",
        &pg_blobs,
        "--grace-seconds",
        "0",
        "--quiet",
    ]);
    assert!(gc.contains(" 0 unreferenced ("), "{gc}");
    support::drop_pg(pg).await;
}

/// Archives of the older format versions still verify and import: version
/// 1 (before ticket assets), version 2 (before revoked tokens), version 3
/// (before hosted tickets) and version 4 (before ticket histories) have no
/// such records and no such counts in their footers.
#[tokio::test(flavor = "multi_thread")]
async fn older_archive_versions_still_verify_and_import() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_url(&dir.path().join("v1.db"));
    let blobs = s(&dir.path().join("blobs")).to_string();
    let mut server = serve(&db, &blobs).await;
    seed_small(&ctx(&server)).await;
    server.stop().await.unwrap();
    let current = dir.path().join("v5.ndjson");
    export(&db, &blobs, &current);
    assert_eq!(lines(&current)[0]["version"], 5);
    let tickets = [
        "ticket_team",
        "ticket",
        "ticket_blocker",
        "ticket_comment",
        "ticket_history",
    ];
    for (version, missing) in [
        (4, vec!["ticket_history"]),
        (3, tickets.to_vec()),
        (2, [&["revoked_token"][..], &tickets].concat()),
        (
            1,
            [
                &["ticket_asset_head", "ticket_asset", "revoked_token"][..],
                &tickets,
            ]
            .concat(),
        ),
    ] {
        let mut rows = lines(&current);
        rows[0]["version"] = json!(version);
        let footer = rows.last_mut().unwrap();
        let counts = footer["counts"].as_object_mut().unwrap();
        for member in missing {
            assert_eq!(counts.remove(member), Some(json!(0)));
        }
        let old = dir.path().join(format!("v{version}.ndjson"));
        let text: String = rows.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(&old, text).unwrap();
        let verdict = ok(&["verify", s(&old), "--quiet"]);
        assert!(verdict.contains(": OK: sqlite archive"), "{verdict}");
        let dest = sqlite_url(&dir.path().join(format!("dest{version}.db")));
        let (ok_, _, err) = import(&old, &dest, &blobs, true);
        assert!(ok_, "{err}");
        let again = dir.path().join(format!("again{version}.ndjson"));
        export(&dest, &blobs, &again);
        assert_same_body(&current, &again, &format!("a version-{version} import"));

        // An older footer with the new counts is refused: its counts are
        // those of its version's tables.
        let mut wrong = lines(&current);
        wrong[0]["version"] = json!(version);
        let text: String = wrong.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(&old, text).unwrap();
        let (ok_, _, err) = abstore(&["verify", s(&old), "--quiet"]);
        assert!(
            !ok_ && err.contains("the footer's counts are malformed"),
            "version {version}: {err}"
        );
    }
}
