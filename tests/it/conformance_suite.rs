//! Runs the black-box conformance suite (`conformance/`) against the real
//! `abstore` binary on every storage backend, plus restart continuity.
//!
//! - SQLite in memory, SQLite in a temp file: always.
//! - Each backend twice: in open mode, and in authenticated mode (`--secret`
//!   with a random 48-character secret, passed to the runner, which mints an
//!   admin token for every check and runs the section 7 checks).
//! - PostgreSQL: when `ABSTORE_TEST_POSTGRES_URL` names a server we may create
//!   databases on (e.g. `postgres://postgres@127.0.0.1:5432/postgres`); each test
//!   creates `abstore_conf_<random>` and drops it afterwards. Unset: fails under
//!   `CI=true`, otherwise prints a loud banner and returns.

use crate::support;

use std::path::Path;

use abstore_conformance::checks::is_mode_skip;
use abstore_conformance::util::{b64, random_hex};
use abstore_conformance::{
    Ctx, Outcome, Report, Res, all_checks, authenticate, checks_for, introduced_by, run_checks,
};
use serde_json::{Value, json};

use crate::support::{Server, VERSION, bin};

/// A fresh 48-character signing secret.
fn random_secret() -> String {
    (0..4).map(|_| random_hex()).collect()
}

/// Every identity the embedded catalogs serve: the released client, a client
/// built from Autobuild's main branch (0.8.0 speaking protocol 3) and the
/// next release. The suite's servers accept them all; the first is what
/// `/health` reports.
const EVERY_IDENTITY: [(&str, &str); 3] = [("0.8.0", "2"), ("0.8.0", "3"), ("0.9.0", "3")];

async fn start(database: &str, blobs: &str) -> Server {
    start_with(database, blobs, None).await
}

async fn start_with(database: &str, blobs: &str, secret: Option<&str>) -> Server {
    start_first(database, blobs, secret, EVERY_IDENTITY[0]).await
}

/// A server accepting every identity, `first` first (the one `/health`
/// reports, which the runner's section 11 checks expect to be its own).
async fn start_first(
    database: &str,
    blobs: &str,
    secret: Option<&str>,
    first: (&str, &str),
) -> Server {
    let mut server = Server::builder()
        .database(database)
        .blobs(blobs)
        .test_clock();
    let others = EVERY_IDENTITY
        .into_iter()
        .filter(|identity| *identity != first);
    for (version, protocol) in std::iter::once(first).chain(others) {
        server = server.flag("--accept-client", &format!("{version}/{protocol}"));
    }
    if let Some(secret) = secret {
        server = server.secret(secret);
    }
    server.start().await
}

/// Runs every check against `server`: the shipped protocol's as an 0.8.0
/// client, then protocol 3's as [`support::PROTOCOL3_CLIENT`]; panics
/// listing the failures (and the server's stderr tail) if any failed.
async fn run_all(label: &str, server: &Server, secret: Option<&str>) {
    let ctx = ctx_as(label, server, secret, (VERSION, support::PROTOCOL)).await;
    let mut report = run_checks(&ctx, all_checks(), None, 8, |_, _| {}).await;
    let (version, protocol) = support::PROTOCOL3_CLIENT;
    let p3 = ctx_as(label, server, secret, (version, protocol)).await;
    let p3_checks = introduced_by(3);
    assert!(!p3_checks.is_empty(), "no protocol-3 checks registered");
    let p3_report = run_checks(&p3, p3_checks, None, 8, |_, _| {}).await;
    report.results.extend(p3_report.results);
    assert_passed(label, server, &report);
}

/// The whole runner as one client identity: every check of its protocol and
/// the earlier ones, with the catalog fixtures of the set the server serves
/// it (`checks_for`), as `abstore-conformance --client VERSION/PROTOCOL`
/// runs them.
async fn run_whole_as(label: &str, server: &Server, secret: Option<&str>, client: (&str, &str)) {
    let (version, protocol) = client;
    let label = format!("{label}, as {version}/{protocol}");
    let ctx = ctx_as(&label, server, secret, client).await;
    let checks = checks_for(version, protocol);
    assert!(
        checks.iter().any(|c| c.min_protocol == 3),
        "a protocol-{protocol} run has no protocol-3 checks"
    );
    let report = run_checks(&ctx, checks, None, 8, |_, _| {}).await;
    assert_passed(&label, server, &report);
}

/// A context sending `client`'s identity, authenticated with `secret`.
async fn ctx_as(label: &str, server: &Server, secret: Option<&str>, client: (&str, &str)) -> Ctx {
    let (version, protocol) = client;
    let mut ctx = Ctx::new(server.url(), version).expect("http client");
    ctx.protocol_version = protocol.to_owned();
    if let Err(e) = authenticate(&mut ctx, secret, None).await {
        panic!("conformance [{label}]: setting up authenticated mode as {version}/{protocol}: {e}");
    }
    ctx
}

/// Panics listing the failures (and the server's stderr tail) if any
/// check failed, or if one skipped for another reason than the mode.
fn assert_passed(label: &str, server: &Server, report: &Report) {
    eprintln!("conformance [{label}]: {}", report.summary());
    let failures = report.failures();
    if !failures.is_empty() {
        let stderr = server.stderr();
        let tail: String = stderr
            .chars()
            .rev()
            .take(4000)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        panic!(
            "conformance [{label}]: {} of {} checks failed:\n{}\n--- server stderr (tail) ---\n{tail}",
            failures.len(),
            report.results.len(),
            failures.join("\n")
        );
    }
    // Only the other mode's checks may skip (open-mode checks when
    // authenticated, section 7 checks when open); nothing else, since the
    // test clock is on.
    let unexpected: Vec<String> = report
        .results
        .iter()
        .filter(|(_, o)| matches!(o, Outcome::Skip(why) if !is_mode_skip(why)))
        .map(|(id, o)| o.line(id))
        .collect();
    assert!(
        unexpected.is_empty(),
        "conformance [{label}]: checks were skipped with --test-clock on:\n{}",
        unexpected.join("\n")
    );
}

fn sqlite_file_url(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("abstore.db").display())
}

fn blob_dir_url(dir: &Path) -> String {
    format!("file://{}", dir.join("blobs").display())
}

// ── the suite on each backend ───────────────────────────────────────────────

async fn suite_sqlite_memory(secret: Option<String>) {
    let secret = secret.as_deref();
    let mut server = start_with("sqlite::memory:", "memory://", secret).await;
    run_all(&label("sqlite::memory:", secret), &server, secret).await;
    server.stop().await.ok();
}

async fn suite_sqlite_file(secret: Option<String>) {
    let secret = secret.as_deref();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = start_with(
        &sqlite_file_url(dir.path()),
        &blob_dir_url(dir.path()),
        secret,
    )
    .await;
    run_all(&label("sqlite file", secret), &server, secret).await;
    server.stop().await.ok();
}

async fn suite_postgres(secret: Option<String>) {
    support::with_pg("conf", |url| async move {
        let secret = secret.as_deref();
        let dir = tempfile::tempdir().expect("tempdir");
        let mut server = start_with(&url, &blob_dir_url(dir.path()), secret).await;
        run_all(&label("postgres", secret), &server, secret).await;
        server.stop().await.ok();
    })
    .await;
}

fn label(backend: &str, secret: Option<&str>) -> String {
    match secret {
        Some(_) => format!("{backend}, authenticated"),
        None => format!("{backend}, open"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_sqlite_memory() {
    suite_sqlite_memory(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_sqlite_file() {
    suite_sqlite_file(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_postgres() {
    suite_postgres(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_sqlite_memory_authenticated() {
    suite_sqlite_memory(Some(random_secret())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_sqlite_file_authenticated() {
    suite_sqlite_file(Some(random_secret())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_postgres_authenticated() {
    suite_postgres(Some(random_secret())).await;
}

// ── the whole runner as a protocol-3 client ─────────────────────────────────

/// The identities whose whole runs follow: the next release, and a client
/// built from Autobuild's main branch before it (both served the 0.9.0
/// catalogs and protocol 3).
const NEXT_RELEASE: (&str, &str) = ("0.9.0", "3");
const MAIN_BRANCH: (&str, &str) = ("0.8.0", "3");

async fn whole_sqlite_memory(client: (&str, &str), secret: Option<String>) {
    let secret = secret.as_deref();
    let mut server = start_first("sqlite::memory:", "memory://", secret, client).await;
    run_whole_as(&label("sqlite::memory:", secret), &server, secret, client).await;
    server.stop().await.ok();
}

async fn whole_postgres(client: (&'static str, &'static str)) {
    support::with_pg("conf", |url| async move {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut server = start_first(&url, &blob_dir_url(dir.path()), None, client).await;
        run_whole_as(&label("postgres", None), &server, None, client).await;
        server.stop().await.ok();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_sqlite_memory_as_0_9_0_3() {
    whole_sqlite_memory(NEXT_RELEASE, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_sqlite_memory_authenticated_as_0_9_0_3() {
    whole_sqlite_memory(NEXT_RELEASE, Some(random_secret())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_sqlite_memory_as_0_8_0_3() {
    whole_sqlite_memory(MAIN_BRANCH, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_sqlite_memory_authenticated_as_0_8_0_3() {
    whole_sqlite_memory(MAIN_BRANCH, Some(random_secret())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_postgres_as_0_9_0_3() {
    whole_postgres(NEXT_RELEASE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_postgres_as_0_8_0_3() {
    whole_postgres(MAIN_BRANCH).await;
}

// ── restart continuity ──────────────────────────────────────────────────────

/// The servers above accept 0.8.0/3 and 0.9.0/3 beside 0.8.0/2 (for the
/// protocol-3 checks). Started with default flags (0.8.0/2 only), the server passes the
/// shipped protocol's checks exactly as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_sqlite_memory_default_identity() {
    let server = Server::builder().test_clock().start().await;
    let ctx = Ctx::new(server.url(), VERSION).expect("http client");
    let report = run_checks(&ctx, all_checks(), None, 8, |_, _| {}).await;
    let failures = report.failures();
    assert!(
        failures.is_empty(),
        "{} checks failed with default flags:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restart_continuity_sqlite_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    restart_continuity(&sqlite_file_url(dir.path()), &blob_dir_url(dir.path())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restart_continuity_postgres() {
    support::with_pg("conf", |url| async move {
        let dir = tempfile::tempdir().expect("tempdir");
        restart_continuity(&url, &blob_dir_url(dir.path())).await;
    })
    .await;
}

/// Everything observable about one resource, raw event text included.
#[derive(Debug, PartialEq)]
struct Snapshot {
    record: Value,
    events_text: String,
    artifacts: Value,
    reads: Vec<Value>,
}

async fn snapshot(ctx: &Ctx, res: Res, id: &str) -> Result<Snapshot, String> {
    let record = ctx.record(res, id).await?;
    let r = ctx.get(&format!("{}/events", res.path(id))).send().await?;
    r.json_status(200)?;
    let artifacts = Value::Array(ctx.list_artifacts(res, id, "").await?);
    let mut reads = Vec::new();
    for meta in artifacts.as_array().into_iter().flatten() {
        let q = format!(
            "?kind={}&rev={}",
            abstore_conformance::util::enc(meta["kind"].as_str().unwrap_or_default()),
            meta["revision"]
        );
        reads.push(ctx.get_artifact(res, id, &q).await?);
    }
    Ok(Snapshot {
        record,
        events_text: r.text,
        artifacts,
        reads,
    })
}

/// Writes every kind of state, kills the server, restarts it on the same
/// database and blob directory, and reads it all back unchanged.
async fn restart_continuity(database: &str, blobs: &str) {
    let mut server = start(database, blobs).await;
    let result = continuity_body(&mut server).await;
    let stderr = server.stderr();
    server.stop().await.ok();
    if let Err(e) = result {
        panic!("restart continuity on {database}: {e}\n--- server stderr ---\n{stderr}");
    }
}

async fn continuity_body(server: &mut Server) -> Result<(), String> {
    let ctx = Ctx::new(server.url(), VERSION).map_err(|e| e.to_string())?;
    let slug = format!("restart-{}", random_hex());
    let repo = format!("acme-{}/widgets", random_hex());
    ctx.post(
        "/builds",
        &json!({
            "slug": slug, "repo": repo, "repoOrigin": "https://github.com/acme/widgets",
            "ticket": {"source": "linear", "id": "AUT-9", "title": "restart"}, "branch": "ab/restart",
        }),
    )
    .send()
    .await?
    .json_status(201)?;
    ctx.post("/repos", &json!({"repo": repo}))
        .send()
        .await?
        .json_status(200)?;

    // Spread the writes over distinct instants so every timestamp differs.
    let t0 = ctx.advance(1_000).await?;
    let binary: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    for (i, res, id) in [
        (0, Res::Build, slug.as_str()),
        (1, Res::Repo, repo.as_str()),
    ] {
        ctx.set_clock(t0 + 100 * i + 1).await?;
        ctx.append(res, id, &res.simple_event()).await?;
        ctx.append(res, id, &res.other_event()).await?;
        ctx.set_clock(t0 + 100 * i + 2).await?;
        ctx.put_artifact(
            res,
            id,
            "blob",
            &binary,
            Some(json!({"nested": {"a": [1, null, "x"]}, "f": 1.5})),
        )
        .await?;
        ctx.put_artifact(res, id, "blob", b"second revision", None)
            .await?;
        ctx.set_clock(t0 + 100 * i + 3).await?;
        let dep = json!({
            "artifacts": [{"kind": "plan", "contentBase64": b64(b"# deposited plan\n"), "metadata": {"round": 1}}],
            "event": res.ref_event(json!({"kind": "plan", "rev": -1})),
        });
        ctx.deposit(res, id, &dep).await?.json_status(201)?;
        ctx.set_clock(t0 + 100 * i + 4).await?;
        if !ctx.claim(res, id, "runner-1", 3_600_000).await? {
            return Err(format!("claim on {id} returned false"));
        }
        ctx.set_clock(t0 + 100 * i + 5).await?;
        if !ctx.heartbeat(res, id, "runner-1").await? {
            return Err(format!("heartbeat on {id} returned false"));
        }
    }
    let build_cond = ctx
        .post(
            &format!(
                "/builds/{}/events/conditional",
                abstore_conformance::util::enc(&slug)
            ),
            &json!({"expectedSeq": 3, "event": Res::Build.simple_event()}),
        )
        .send()
        .await?
        .json_status(201)?;
    if build_cond["seq"] != json!(4) {
        return Err(format!(
            "conditional append before restart: expected seq 4; got {build_cond}"
        ));
    }

    let before_build = snapshot(&ctx, Res::Build, &slug).await?;
    let before_repo = snapshot(&ctx, Res::Repo, &repo).await?;
    for (label, s, want_events, want_artifacts) in
        [("build", &before_build, 4, 3), ("repo", &before_repo, 3, 3)]
    {
        let n = serde_json::from_str::<Vec<Value>>(&s.events_text)
            .map(|v| v.len())
            .unwrap_or(0);
        let a = s.artifacts.as_array().map(Vec::len).unwrap_or(0);
        if n != want_events
            || a != want_artifacts
            || s.record.get("lease").is_none()
            || s.record.get("heartbeatAt").is_none()
        {
            return Err(format!(
                "{label} state before restart is not what was written: {s:?}"
            ));
        }
    }

    server
        .restart()
        .await
        .map_err(|e| format!("restart failed: {e:#}"))?;
    let ctx = Ctx::new(server.url(), VERSION).map_err(|e| e.to_string())?;

    let after_build = snapshot(&ctx, Res::Build, &slug).await?;
    let after_repo = snapshot(&ctx, Res::Repo, &repo).await?;
    if after_build != before_build {
        return Err(format!(
            "build state changed across restart:\nbefore {before_build:?}\nafter  {after_build:?}"
        ));
    }
    if after_repo != before_repo {
        return Err(format!(
            "repository state changed across restart:\nbefore {before_repo:?}\nafter  {after_repo:?}"
        ));
    }
    let bytes = after_build
        .reads
        .iter()
        .find(|r| r["meta"]["kind"] == json!("blob") && r["meta"]["revision"] == json!(0));
    let got = bytes
        .and_then(|r| r["contentBase64"].as_str())
        .and_then(abstore_conformance::util::unb64);
    if got.as_deref() != Some(&binary[..]) {
        return Err("binary artifact bytes differ after restart".into());
    }
    let list = ctx.get("/builds").send().await?.json_status(200)?;
    if !list
        .as_array()
        .is_some_and(|a| a.iter().any(|b| b == &before_build.record))
    {
        return Err(format!(
            "GET /builds after restart lacks the record {}",
            before_build.record
        ));
    }

    // Sequences, revisions and the lease continue where they were.
    let env = ctx
        .append(Res::Build, &slug, &Res::Build.simple_event())
        .await?;
    if env["seq"] != json!(5) {
        return Err(format!(
            "first build append after restart: expected seq 5; got {env}"
        ));
    }
    let cond = ctx
        .post(
            &format!(
                "/builds/{}/events/conditional",
                abstore_conformance::util::enc(&slug)
            ),
            &json!({"expectedSeq": 5, "event": Res::Build.simple_event()}),
        )
        .send()
        .await?
        .json_status(201)?;
    if cond["seq"] != json!(6) {
        return Err(format!(
            "conditional append after restart: expected seq 6; got {cond}"
        ));
    }
    let env = ctx
        .append(Res::Repo, &repo, &Res::Repo.simple_event())
        .await?;
    if env["seq"] != json!(4) {
        return Err(format!(
            "first repository append after restart: expected seq 4; got {env}"
        ));
    }
    for (res, id) in [(Res::Build, slug.as_str()), (Res::Repo, repo.as_str())] {
        let meta = ctx.put_artifact(res, id, "blob", b"third", None).await?;
        if meta["revision"] != json!(2) {
            return Err(format!(
                "artifact put after restart on {id}: expected revision 2; got {meta}"
            ));
        }
        let dep = json!({
            "artifacts": [{"kind": "plan", "contentBase64": b64(b"again")}],
            "event": res.ref_event(json!({"kind": "plan", "rev": -1})),
        });
        let v = ctx.deposit(res, id, &dep).await?.json_status(201)?;
        if v["artifacts"][0]["revision"] != json!(1) {
            return Err(format!(
                "deposit after restart on {id}: expected plan revision 1; got {v}"
            ));
        }
        if ctx.claim(res, id, "runner-2", 1_000).await? {
            return Err(format!(
                "the lease on {id} did not survive the restart: another holder claimed it"
            ));
        }
        if !ctx.heartbeat(res, id, "runner-1").await? {
            return Err(format!(
                "the holder's heartbeat on {id} failed after restart"
            ));
        }
    }
    Ok(())
}

// ── the runner binary ───────────────────────────────────────────────────────

/// `abstore-conformance` against an authenticated server: without
/// credentials, or with a secret the server does not hold, it stops before
/// running any check and says what to pass (not `20 passed, 791 failed`);
/// with the secret it runs and ends with its three counts.
#[tokio::test]
async fn the_runner_says_what_credentials_an_authenticated_server_needs() {
    let secret = random_secret();
    let server = start_with("sqlite::memory:", "memory://", Some(&secret)).await;
    // Built beside abstore by any workspace build (`cargo nextest run --workspace`).
    let runner = Path::new(bin()).with_file_name("abstore-conformance");
    assert!(
        runner.is_file(),
        "{} is missing: build it with `cargo build -p abstore-conformance`",
        runner.display()
    );
    let run = |extra: &[&str]| {
        tokio::process::Command::new(&runner)
            .args(["--url", server.url()])
            .args(extra)
            .env_remove("ABSTORE_CONFORMANCE_SECRET")
            .env_remove("ABSTORE_CONFORMANCE_TOKEN")
            .output()
    };
    let out = run(&[]).await.unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    assert!(!stdout.contains("passed"), "checks ran: {stdout}");
    for hint in ["401", "--secret", "--token"] {
        assert!(stderr.contains(hint), "{hint} not named: {stderr}");
    }

    let wrong = random_secret();
    let out = run(&["--secret", &wrong]).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("refused the run's token"), "{stderr}");

    let out = run(&["--secret", &secret, "--filter", "s11."])
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let last = stdout.lines().last().unwrap_or_default();
    let counts: Vec<&str> = last.split(", ").collect();
    assert!(
        counts.len() == 3
            && counts[0].ends_with(" passed")
            && counts[1] == "0 failed"
            && counts[2].ends_with(" skipped"),
        "{last}"
    );
}

/// The runner binary picks the catalog fixtures by the identity it is given:
/// `abstore-conformance --client 0.8.0/3` against a server accepting it
/// (first) runs every check of protocols 2 and 3 with the 0.9.0 catalogs'
/// fixtures, and all pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_runner_as_a_main_branch_client_passes_everything() {
    let mut server = start_first("sqlite::memory:", "memory://", None, MAIN_BRANCH).await;
    let runner = Path::new(bin()).with_file_name("abstore-conformance");
    assert!(
        runner.is_file(),
        "{} is missing: build it with `cargo build -p abstore-conformance`",
        runner.display()
    );
    let out = tokio::process::Command::new(&runner)
        .args(["--url", server.url(), "--client", "0.8.0/3"])
        .env_remove("ABSTORE_CONFORMANCE_SECRET")
        .env_remove("ABSTORE_CONFORMANCE_TOKEN")
        .output()
        .await
        .unwrap();
    server.stop().await.ok();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let failed: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert!(
        out.status.success(),
        "{}\n{}",
        failed.join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );
    // The 0.9.0 catalogs' fixtures ran: a build type 0.8.0 does not have.
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("s9.fixtures.build.workspace.provision-started")),
        "no 0.9.0 fixture check ran:\n{stdout}"
    );
    // And a protocol-3 check.
    assert!(
        stdout.lines().any(|l| l.contains("p3.s4.build_digests")),
        "no protocol-3 check ran:\n{stdout}"
    );
    let last = stdout.lines().last().unwrap_or_default();
    assert!(last.contains(" passed, 0 failed, "), "{last}");
}
