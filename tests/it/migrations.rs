//! Many replicas on one PostgreSQL database (issue 53), through the
//! release binary: replicas started together on an empty database, or on
//! one a schema version behind, all come up and serve, every time; a
//! replica waiting for another's migration answers `/readyz` 503 saying
//! what it waits for, and gives up after `--migration-wait-seconds` naming
//! the migration lock's holder; replicas of the previous version keep
//! serving appends and reads, without an error, while a new one migrates
//! the database under them; `abstore migrate` shares the lock and prints
//! each migration it applied. SQLite's path is unchanged: `abstore
//! migrate` refuses a file another process serves.
//!
//! The previous version's binary (the commit before the newest change to
//! `migrations/postgres`) is built once by `scripts/previous-release` and
//! named in `ABSTORE_PREVIOUS_BIN`; the tests that need it carry
//! `previous_version` in their names.
//!
//! No assertion depends on timing beyond generous deadlines.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sqlx::{AssertSqlSafe, Connection as _, PgConnection};

use crate::support::{self, PgDb, Server, ServerBuilder};

/// The migration lock's key (src/store/postgres/migrate/lock.rs).
const LOCK_KEY: i64 = 0x6162_7374_6f72_656d;

/// Replicas started at once, and how many times (issue 53's "done when").
const REPLICAS: usize = 5;
const ROUNDS: usize = 10;

fn observation(n: usize) -> Value {
    json!({"actor": {"kind": "kernel"}, "type": "observation.recorded",
           "payload": {"id": format!("o{n}"), "kind": "followup", "summary": "migration test"}})
}

/// `POST /builds`: the status.
async fn create_build(c: &reqwest::Client, base: &str, slug: &str) -> Result<u16, String> {
    c.post(format!("{base}/builds"))
        .json(&json!({"slug": slug, "repo": "acme/w"}))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .map_err(|e| format!("POST /builds: {e}"))
}

/// One append: the status, or the body of an unexpected one.
async fn append(c: &reqwest::Client, base: &str, slug: &str, n: usize) -> Result<(), String> {
    let reply = c
        .post(format!("{base}/builds/{slug}/events"))
        .json(&observation(n))
        .send()
        .await
        .map_err(|e| format!("append to {slug}: {e}"))?;
    match reply.status().as_u16() {
        201 => Ok(()),
        status => Err(format!(
            "append to {slug}: {status} {}",
            reply.text().await.unwrap_or_default()
        )),
    }
}

/// A build's whole log.
async fn events(c: &reqwest::Client, base: &str, slug: &str) -> Result<Vec<Value>, String> {
    let reply = c
        .get(format!("{base}/builds/{slug}/events"))
        .send()
        .await
        .map_err(|e| format!("read {slug}: {e}"))?;
    match reply.status().as_u16() {
        200 => reply
            .json::<Vec<Value>>()
            .await
            .map_err(|e| format!("read {slug}: {e}")),
        status => Err(format!(
            "read {slug}: {status} {}",
            reply.text().await.unwrap_or_default()
        )),
    }
}

/// Start `REPLICAS` copies of `replica` at the same moment; every one must
/// come up (the failures' stderr otherwise).
async fn start_together(replica: &ServerBuilder, what: &str, round: usize) -> Vec<Server> {
    let starts: Vec<_> = (0..REPLICAS)
        .map(|_| tokio::spawn(replica.clone().try_start()))
        .collect();
    let mut servers = Vec::new();
    let mut failures = Vec::new();
    for (i, start) in starts.into_iter().enumerate() {
        match start.await.unwrap() {
            Ok(server) => servers.push(server),
            Err(failure) => failures.push(format!("replica {i}: {failure}")),
        }
    }
    assert!(
        failures.is_empty(),
        "round {round} on {what}: {} of {REPLICAS} replicas started together did not come up:\n{}",
        failures.len(),
        failures.join("\n---\n")
    );
    servers
}

/// Every replica is ready and serves: a build created and appended to
/// through each is read back whole through every other.
async fn every_replica_serves(servers: &[Server], round: usize) {
    let c = support::client();
    for (i, server) in servers.iter().enumerate() {
        support::await_readiness(server.url(), 200).await;
        let slug = format!("r{round}-{i}");
        assert_eq!(create_build(&c, server.url(), &slug).await, Ok(201));
        append(&c, server.url(), &slug, 1).await.unwrap();
    }
    for server in servers {
        for i in 0..servers.len() {
            let slug = format!("r{round}-{i}");
            let log = events(&c, server.url(), &slug).await.unwrap();
            assert_eq!(log.len(), 1, "{slug} through {}: {log:?}", server.url());
        }
    }
}

/// A database created from `template` (the previous version's schema and
/// events), dropped like any scratch database. The template's last
/// connections may take a moment to close after its server stopped.
async fn clone_database(template: &PgDb, round: usize) -> PgDb {
    let name = format!("{}_r{round}", template.name);
    let mut url = url_with_database(&template.url, &name);
    let mut admin = PgConnection::connect(&template.admin_url).await.unwrap();
    let sql = format!("CREATE DATABASE {name} TEMPLATE {}", template.name);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match sqlx::raw_sql(AssertSqlSafe(sql.clone()))
            .execute(&mut admin)
            .await
        {
            Ok(_) => break,
            Err(err) if Instant::now() < deadline => {
                eprintln!("{sql}: {err}; trying again");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(err) => panic!("{sql}: {err}"),
        }
    }
    admin.close().await.ok();
    url.shrink_to_fit();
    PgDb {
        admin_url: template.admin_url.clone(),
        name,
        url,
    }
}

fn url_with_database(url: &str, database: &str) -> String {
    let (base, _) = url.rsplit_once('/').expect("a database URL");
    format!("{base}/{database}")
}

/// A database at the previous version's schema, with builds and events
/// its server wrote: the previous binary migrates it and serves the
/// appends.
async fn previous_version_store(previous: &ServerBuilder, prefix: &str) -> Option<PgDb> {
    let db = support::pg_database(prefix).await?;
    let server = previous.clone().database(&db.url).start().await;
    let c = support::client();
    let writers: Vec<_> = (0..4)
        .map(|b| {
            let (c, base) = (c.clone(), server.url().to_owned());
            tokio::spawn(async move {
                let slug = format!("old-{b}");
                assert_eq!(create_build(&c, &base, &slug).await, Ok(201));
                for n in 0..60 {
                    append(&c, &base, &slug, n).await.unwrap();
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    drop(server);
    Some(db)
}

/// A connection holding the migration lock, as another process migrating
/// would, named `holder`.
async fn hold_migration_lock(db: &PgDb, holder: &str) -> (PgConnection, i32) {
    let options: sqlx::postgres::PgConnectOptions = db.url.parse().unwrap();
    let mut conn = PgConnection::connect_with(&options.application_name(holder))
        .await
        .unwrap();
    let took: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(LOCK_KEY)
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert!(took, "the migration lock was free");
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    (conn, pid)
}

/// `GET url` with the identity headers: (status, Retry-After, body).
async fn get(url: &str) -> (u16, Option<String>, Value) {
    let reply = support::client().get(url).send().await.unwrap();
    let status = reply.status().as_u16();
    let retry = reply
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (status, retry, reply.json().await.unwrap_or(Value::Null))
}

/// Poll `/readyz` on `base` until `done(body)`, for at most 60 s.
async fn readyz_until(base: &str, done: impl Fn(u16, &Value) -> bool) -> (u16, Value) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(reply) = reqwest::get(format!("{base}/readyz")).await {
            let status = reply.status().as_u16();
            let body = reply.json().await.unwrap_or(Value::Null);
            if done(status, &body) {
                return (status, body);
            }
            assert!(Instant::now() < deadline, "/readyz still {status} {body}");
        } else {
            assert!(Instant::now() < deadline, "/readyz never answered");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Run `program args…` to its end: (success, stdout, stderr).
async fn run_program(program: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new(program)
        .args(args)
        .output()
        .await
        .expect("run abstore");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

// ── Replicas start together ─────────────────────────────────────────────────

/// Five replicas started at the same moment on an empty database all come
/// up and serve, ten times over (on 231d38f, all but one exited with
/// "deadlock detected": migration 0012's concurrent index build waited for
/// the others' blocked `pg_advisory_lock`, which waited for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_replicas_start_together_on_an_empty_database_postgres() {
    let Some(release) = Server::builder().release() else {
        return;
    };
    for round in 1..=ROUNDS {
        let Some(db) = support::pg_database("start_together").await else {
            return;
        };
        let servers = start_together(
            &release.clone().database(&db.url),
            "an empty database",
            round,
        )
        .await;
        every_replica_serves(&servers, round).await;
        drop(servers);
        support::drop_pg(db).await;
    }
}

/// The same on a database one schema version behind, holding the previous
/// version's events: the replicas migrate it (one at a time: the others
/// wait for the lock) and fill the older events' type in batches.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_replicas_start_together_on_the_previous_version_schema_postgres() {
    let (Some(release), Some(previous)) =
        (Server::builder().release(), Server::builder().previous())
    else {
        return;
    };
    let Some(template) = previous_version_store(&previous, "start_behind").await else {
        return;
    };
    for round in 1..=ROUNDS {
        let db = clone_database(&template, round).await;
        let replica = release
            .clone()
            .database(&db.url)
            .flag("--migrate-batch-rows", "50");
        let servers = start_together(&replica, "the previous version's schema", round).await;
        every_replica_serves(&servers, round).await;
        let c = support::client();
        for b in 0..4 {
            let log = events(&c, servers[0].url(), &format!("old-{b}"))
                .await
                .unwrap();
            assert_eq!(log.len(), 60, "old-{b} after the migration");
        }
        drop(servers);
        support::drop_pg(db).await;
    }
    support::drop_pg(template).await;
}

// ── Waiting for another's migration ─────────────────────────────────────────

/// While another process holds the migration lock, a starting replica
/// answers: `/readyz` 503 naming the holder (its pid and application
/// name), `/health` 200, every other route 503 with `Retry-After`; once the
/// lock is released it migrates, prints its listening line and serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_waiting_for_a_migration_is_not_ready_and_says_why_postgres() {
    let Some(release) = Server::builder().release() else {
        return;
    };
    let Some(db) = support::pg_database("waiting").await else {
        return;
    };
    let (holder, pid) = hold_migration_lock(&db, "another migrator").await;
    let port = support::free_port();
    let base = format!("http://127.0.0.1:{port}");
    let starting = tokio::spawn(
        release
            .database(&db.url)
            .listen(&format!("127.0.0.1:{port}"))
            .try_start(),
    );
    let (status, body) = readyz_until(&base, |_, body| {
        body["starting"]["phase"] == "waiting-for-migration"
    })
    .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["ready"], false, "{body}");
    let detail = body["starting"]["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains(&format!("PostgreSQL backend {pid}"))
            && detail.contains("another migrator"),
        "{detail}"
    );
    let (status, _, health) = get(&format!("{base}/health")).await;
    assert_eq!(
        (status, health["ok"].clone()),
        (200, json!(true)),
        "{health}"
    );
    for path in ["/builds", "/builds/x/events", "/repos/acme%2Fw"] {
        let (status, retry, body) = get(&format!("{base}{path}")).await;
        assert_eq!(status, 503, "{path}: {body}");
        assert_eq!(retry.as_deref(), Some("1"), "{path}");
        assert_eq!(body["kind"], "internal", "{path}: {body}");
        let error = body["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("starting") && error.contains("another migrator"),
            "{path}: {error}"
        );
    }
    assert!(!starting.is_finished(), "the replica gave up while waiting");
    holder.close().await.unwrap();
    let server = starting.await.unwrap().unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(server.url(), base);
    support::await_readiness(&base, 200).await;
    assert_eq!(
        create_build(&support::client(), &base, "after").await,
        Ok(201)
    );
    drop(server);
    support::drop_pg(db).await;
}

/// SIGTERM stops a replica that waits for another's migration at once,
/// cleanly (exit 0), without waiting out `--migration-wait-seconds`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_waiting_for_a_migration_stops_on_sigterm_postgres() {
    let Some(db) = support::pg_database("waiting_term").await else {
        return;
    };
    let (holder, _) = hold_migration_lock(&db, "another migrator").await;
    let port = support::free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut child = Server::builder()
        .database(&db.url)
        .listen(&format!("127.0.0.1:{port}"))
        .command()
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    readyz_until(&base, |_, body| {
        body["starting"]["phase"] == "waiting-for-migration"
    })
    .await;
    let pid = child.id().unwrap().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("the waiting replica did not stop on SIGTERM")
        .unwrap();
    assert!(status.success(), "{status:?}");
    holder.close().await.unwrap();
    support::drop_pg(db).await;
}

/// `--migration-wait-seconds` bounds the wait, at its edge: 0 gives up at
/// once, 1 after about a second, each naming the holder and the flag;
/// `abstore migrate` waits on the same lock; the environment variable
/// does the same; values outside 0 to 86400 are refused naming the flag.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_migration_wait_gives_up_at_its_bound_naming_the_holder_postgres() {
    let Some(release) = Server::builder().release() else {
        return;
    };
    let Some(db) = support::pg_database("wait_bound").await else {
        return;
    };
    let (holder, pid) = hold_migration_lock(&db, "a stuck migrator").await;
    let names_holder = |stderr: &str| {
        stderr.contains("gave up after")
            && stderr.contains(&format!("PostgreSQL backend {pid}"))
            && stderr.contains("a stuck migrator")
            && stderr.contains("--migration-wait-seconds")
    };
    for (wait, at_most) in [("0", 20), ("1", 30)] {
        let started = Instant::now();
        let failure = release
            .clone()
            .database(&db.url)
            .flag("--migration-wait-seconds", wait)
            .try_start()
            .await
            .err()
            .unwrap_or_else(|| {
                panic!("--migration-wait-seconds {wait}: started with the lock held")
            });
        assert!(failure.status.is_some_and(|s| !s.success()), "{failure}");
        assert!(names_holder(&failure.stderr), "{wait}: {}", failure.stderr);
        assert!(
            started.elapsed() < Duration::from_secs(at_most),
            "--migration-wait-seconds {wait} took {:?}",
            started.elapsed()
        );
    }
    let failure = release
        .clone()
        .database(&db.url)
        .env("ABSTORE_MIGRATION_WAIT_SECONDS", "0")
        .try_start()
        .await
        .err()
        .expect("started with the lock held");
    assert!(names_holder(&failure.stderr), "{}", failure.stderr);
    let program = release.program().to_owned();
    let (ok, _, stderr) = run_program(
        &program,
        &[
            "migrate",
            "--database",
            &db.url,
            "--migration-wait-seconds",
            "0",
        ],
    )
    .await;
    assert!(!ok && names_holder(&stderr), "{stderr}");
    for bad in ["86401", "-1", "soon"] {
        let (ok, _, stderr) = run_program(
            &program,
            &[
                "migrate",
                "--database",
                &db.url,
                &format!("--migration-wait-seconds={bad}"),
            ],
        )
        .await;
        assert!(
            !ok && stderr.contains("--migration-wait-seconds"),
            "{bad}: {stderr}"
        );
    }
    for bad in ["0", "60001"] {
        let (ok, _, stderr) = run_program(
            &program,
            &[
                "migrate",
                "--database",
                &db.url,
                &format!("--migration-lock-timeout-ms={bad}"),
            ],
        )
        .await;
        assert!(
            !ok && stderr.contains("--migration-lock-timeout-ms"),
            "{bad}: {stderr}"
        );
    }
    holder.close().await.unwrap();
    // Free again: the edge values are accepted.
    let (ok, stdout, stderr) = run_program(
        &program,
        &[
            "migrate",
            "--database",
            &db.url,
            "--migration-wait-seconds",
            "0",
            "--migration-lock-timeout-ms",
            "1",
        ],
    )
    .await;
    assert!(ok, "{stderr}");
    assert!(stdout.contains("applied 0001 initial in "), "{stdout}");
    support::drop_pg(db).await;
}

/// `--no-migrate` applies nothing: on an empty database it waits, not
/// ready and naming what is missing, until `abstore migrate` has applied
/// it, then serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_no_migrate_replica_waits_for_the_migrations_postgres() {
    let Some(release) = Server::builder().release() else {
        return;
    };
    let Some(db) = support::pg_database("no_migrate").await else {
        return;
    };
    let port = support::free_port();
    let base = format!("http://127.0.0.1:{port}");
    let starting = tokio::spawn(
        release
            .clone()
            .database(&db.url)
            .listen(&format!("127.0.0.1:{port}"))
            .arg("--no-migrate")
            .try_start(),
    );
    let (status, body) = readyz_until(&base, |_, body| {
        body["starting"]["phase"] == "waiting-for-migrations"
    })
    .await;
    assert_eq!(status, 503, "{body}");
    let detail = body["starting"]["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("migrations 0001, 0002")
            && detail.contains("--no-migrate")
            && detail.contains("the migration lock is free"),
        "{detail}"
    );
    let (ok, stdout, stderr) =
        run_program(release.program(), &["migrate", "--database", &db.url]).await;
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("migrations: 12 applied now, 0 already applied"),
        "{stdout}"
    );
    let server = starting.await.unwrap().unwrap_or_else(|f| panic!("{f}"));
    support::await_readiness(server.url(), 200).await;
    drop(server);
    support::drop_pg(db).await;
}

// ── abstore migrate ─────────────────────────────────────────────────────────

/// `abstore migrate` prints every migration it applied and how long it
/// took, then a summary; run again it applies nothing and says so.
#[tokio::test]
async fn migrate_prints_each_migration_and_its_time_postgres() {
    let Some(db) = support::pg_database("migrate_report").await else {
        return;
    };
    let (ok, stdout, stderr) = support::run(&["migrate", "--database", &db.url]);
    assert!(ok, "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 14, "{stdout}");
    assert!(lines[0].starts_with("applied 0001 initial in "), "{stdout}");
    // The backfill runs right after 0011, before 0012 indexes its column.
    assert!(
        lines[10].starts_with("applied 0011 event type column in "),
        "{stdout}"
    );
    assert!(
        lines[11].starts_with("filled the type of 0 events (migration 0011) in "),
        "{stdout}"
    );
    assert!(
        lines[12].starts_with("applied 0012 event type index in "),
        "{stdout}"
    );
    assert_eq!(
        lines[13], "migrations: 12 applied now, 0 already applied",
        "{stdout}"
    );
    let (ok, stdout, stderr) = support::run(&["migrate", "--database", &db.url]);
    assert!(ok, "{stderr}");
    assert_eq!(stdout, "migrations: 0 applied now, 12 already applied\n");
    support::drop_pg(db).await;
}

/// The same on a SQLite file; and a file another process serves is
/// refused, naming why, while that process keeps serving (SQLite's path
/// is unaffected by PostgreSQL's lock).
#[tokio::test]
async fn migrate_on_sqlite_reports_and_refuses_a_served_file() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("abstore.db").display());
    let (ok, stdout, stderr) = support::run(&["migrate", "--database", &url]);
    assert!(ok, "{stderr}");
    assert!(stdout.starts_with("applied 0001 initial in "), "{stdout}");
    assert!(
        stdout.ends_with("migrations: 12 applied now, 0 already applied\n"),
        "{stdout}"
    );
    let server = Server::builder().database(&url).start().await;
    let (ok, _, stderr) = support::run(&["migrate", "--database", &url]);
    assert!(!ok, "migrate ran on a served file");
    assert!(
        stderr.contains("another abstore process is using the SQLite database"),
        "{stderr}"
    );
    assert_eq!(
        create_build(&support::client(), server.url(), "still").await,
        Ok(201)
    );
    drop(server);
    let (ok, stdout, _) = support::run(&["migrate", "--database", &url]);
    assert!(ok);
    assert_eq!(stdout, "migrations: 0 applied now, 12 already applied\n");
}

// ── Upgrading while serving ─────────────────────────────────────────────────

/// Appends and reads against one server, until stopped: what each worker
/// did, and every error it met.
struct Load {
    stop: Arc<AtomicBool>,
    workers: Vec<tokio::task::JoinHandle<Tally>>,
}

#[derive(Default)]
struct Tally {
    /// When each append was answered.
    appended: Vec<Instant>,
    reads: usize,
    errors: Vec<String>,
}

impl Load {
    /// `workers` clients, each on a build of its own (created first),
    /// appending and reading the whole log back, checking it holds every
    /// event appended so far.
    async fn start(base: &str, workers: usize, tag: &str) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let c = support::client();
        let mut handles = Vec::new();
        for w in 0..workers {
            let slug = format!("{tag}-{w}");
            assert_eq!(create_build(&c, base, &slug).await, Ok(201));
            let (c, base, stop) = (c.clone(), base.to_owned(), stop.clone());
            handles.push(tokio::spawn(async move {
                let mut tally = Tally::default();
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    match append(&c, &base, &slug, n).await {
                        Ok(()) => {
                            n += 1;
                            tally.appended.push(Instant::now());
                        }
                        Err(err) => tally.errors.push(err),
                    }
                    match events(&c, &base, &slug).await {
                        Ok(log) if log.len() == n => tally.reads += 1,
                        Ok(log) => tally.errors.push(format!(
                            "{slug}: {} events read back, {n} expected",
                            log.len()
                        )),
                        Err(err) => tally.errors.push(err),
                    }
                }
                tally
            }));
        }
        Load {
            stop,
            workers: handles,
        }
    }

    async fn finish(self) -> Tally {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = Tally::default();
        for worker in self.workers {
            let tally = worker.await.unwrap();
            all.appended.extend(tally.appended);
            all.reads += tally.reads;
            all.errors.extend(tally.errors);
        }
        all
    }
}

/// What a rolling upgrade must leave: the previous version's server
/// answered every request while the new version migrated under it, and
/// served appends during the migration itself; both serve afterwards, and
/// every event (the old server's too) has its type.
async fn after_the_upgrade(
    db: &PgDb,
    old: &Server,
    new_base: &str,
    load: Load,
    window: (Instant, Instant),
) {
    let c = support::client();
    // Keep loading the old server a moment after the new one is up.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let tally = load.finish().await;
    assert!(
        tally.errors.is_empty(),
        "the previous version's server failed {} requests during the upgrade, first: {:?}",
        tally.errors.len(),
        &tally.errors[..tally.errors.len().min(5)]
    );
    let during = tally
        .appended
        .iter()
        .filter(|at| **at > window.0 && **at < window.1)
        .count();
    assert!(
        during > 0,
        "no append was answered while the migration ran ({} in all, {} reads)",
        tally.appended.len(),
        tally.reads
    );
    eprintln!(
        "rolling upgrade: {} appends ({during} during the {:?} migration) and {} reads by the previous version, no error",
        tally.appended.len(),
        window.1 - window.0,
        tally.reads
    );
    // Both serve the same store now.
    assert_eq!(create_build(&c, new_base, "new-side").await, Ok(201));
    append(&c, old.url(), "new-side", 1).await.unwrap();
    append(&c, new_base, "new-side", 2).await.unwrap();
    let log = events(&c, old.url(), "new-side").await.unwrap();
    assert_eq!(log.len(), 2);
    for b in 0..4 {
        let through_old = events(&c, old.url(), &format!("old-{b}")).await.unwrap();
        let through_new = events(&c, new_base, &format!("old-{b}")).await.unwrap();
        assert_eq!(through_old, through_new);
    }
    // The old server's appends (during and after the migration) got their
    // type from the migration's trigger or backfill.
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    let untyped: i64 = sqlx::query_scalar("SELECT count(*) FROM events WHERE type IS NULL")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(untyped, 0, "events without a type after the upgrade");
    conn.close().await.ok();
}

/// A rolling upgrade where the new replica migrates at its start: the
/// previous version's replica keeps serving appends and reads, without an
/// error, while the database is migrated under it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_upgrade_from_the_previous_version_postgres() {
    let (Some(release), Some(previous)) =
        (Server::builder().release(), Server::builder().previous())
    else {
        return;
    };
    let Some(db) = previous_version_store(&previous, "rolling").await else {
        return;
    };
    let old = previous.database(&db.url).start().await;
    let load = Load::start(old.url(), 4, "during").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    let new = release
        .database(&db.url)
        .flag("--migrate-batch-rows", "20")
        .start()
        .await;
    let window = (started, Instant::now());
    let new_base = new.url().to_owned();
    after_the_upgrade(&db, &old, &new_base, load, window).await;
    assert!(
        new.stderr().contains("migration applied"),
        "{}",
        new.stderr()
    );
    drop((old, new));
    support::drop_pg(db).await;
}

/// The same with `abstore migrate` first (the release's migrations applied
/// under the serving previous version, a table lock it holds waited for
/// and retried), then the new replica started with `--no-migrate`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_upgrade_with_migrate_first_from_the_previous_version_postgres() {
    let (Some(release), Some(previous)) =
        (Server::builder().release(), Server::builder().previous())
    else {
        return;
    };
    let Some(db) = previous_version_store(&previous, "migrate_first").await else {
        return;
    };
    let old = previous.database(&db.url).start().await;
    let load = Load::start(old.url(), 4, "during").await;
    // A long read holding a lock on `events` (as a slow streamed read
    // would) for a moment: migration 0011's ALTER TABLE may not queue
    // behind it for longer than --migration-lock-timeout-ms, so it is
    // rolled back and tried again until the read ends.
    let mut reader = PgConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql("BEGIN; LOCK TABLE events IN ACCESS SHARE MODE")
        .execute(&mut reader)
        .await
        .unwrap();
    let release_reader = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        sqlx::raw_sql("COMMIT").execute(&mut reader).await.unwrap();
        reader.close().await.ok();
    });
    let started = Instant::now();
    let program = release.program().to_owned();
    let (ok, stdout, stderr) = run_program(
        &program,
        &[
            "migrate",
            "--database",
            &db.url,
            "--migrate-batch-rows",
            "20",
        ],
    )
    .await;
    let window = (started, Instant::now());
    release_reader.await.unwrap();
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("applied 0011 event type column in ") && stdout.contains("retr"),
        "0011 was not retried for its table lock:\n{stdout}"
    );
    assert!(
        stdout.contains("applied 0012 event type index in "),
        "{stdout}"
    );
    // The old store's 240 events, and those the old server appended
    // before migration 0011 (after it, its trigger types them).
    let filled: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("filled the type of "))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no backfill line:\n{stdout}"));
    assert!(filled >= 240, "{stdout}");
    let new = release.database(&db.url).arg("--no-migrate").start().await;
    let new_base = new.url().to_owned();
    after_the_upgrade(&db, &old, &new_base, load, window).await;
    drop((old, new));
    support::drop_pg(db).await;
}

/// A concurrent index build interrupted half-way (here: a unique build
/// failing on duplicates, which leaves its index behind marked invalid, as
/// a cancelled or crashed build does) is redone by the next migration, not
/// kept invalid by its `IF NOT EXISTS`.
#[tokio::test]
async fn an_interrupted_concurrent_index_build_is_redone_postgres() {
    let Some(db) = support::pg_database("invalid_index").await else {
        return;
    };
    support::run_ok(&["migrate", "--database", &db.url]);
    let server = Server::builder().database(&db.url).start().await;
    let c = support::client();
    assert_eq!(create_build(&c, server.url(), "b").await, Ok(201));
    append(&c, server.url(), "b", 1).await.unwrap();
    append(&c, server.url(), "b", 2).await.unwrap();
    drop(server);
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql("DROP INDEX events_by_type; DELETE FROM _sqlx_migrations WHERE version = 12")
        .execute(&mut conn)
        .await
        .unwrap();
    let failed = sqlx::raw_sql("CREATE UNIQUE INDEX CONCURRENTLY events_by_type ON events (kind)")
        .execute(&mut conn)
        .await;
    assert!(failed.is_err(), "the unique build succeeded");
    let valid = "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = 'events_by_type'";
    let before: bool = sqlx::query_scalar(valid)
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert!(!before, "the interrupted build left no invalid index");
    let stdout = support::run_ok(&["migrate", "--database", &db.url]);
    assert!(
        stdout.contains("applied 0012 event type index in "),
        "{stdout}"
    );
    let after: bool = sqlx::query_scalar(valid)
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert!(after, "events_by_type is still invalid");
    let definition: String =
        sqlx::query_scalar("SELECT pg_get_indexdef('events_by_type'::regclass)")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert!(
        definition.ends_with("(kind, resource_id, type, seq)"),
        "{definition}"
    );
    conn.close().await.ok();
    support::drop_pg(db).await;
}
