//! The collection bounds (issue 33; docs/configuration.md, "Collection
//! bounds") through the real binary, on a SQLite file and on PostgreSQL:
//! each bound's refusal (`413 validation` naming the bound and its flag) at
//! its edge, after the checks the protocol orders before it; the migration
//! that adds streams' byte totals (0008) on a store created before it; an
//! import recounting them; and the flags' own limits.

use abstore_conformance::util::{b64, enc};
use abstore_conformance::{Ctx, Res};
use serde_json::{Value, json};

use crate::support::{self, Server, VERSION, path_text};

/// Small bounds: 3 chunks or 1000 bytes a stream, 4 events a log, 3
/// revisions an artifact kind or ticket asset, 2 live assets a ticket.
const BOUNDS: [&str; 12] = [
    "--max-stream-chunks",
    "3",
    "--max-stream-bytes",
    "1000",
    "--max-events-per-log",
    "4",
    "--max-artifact-revisions",
    "3",
    "--max-ticket-asset-revisions",
    "3",
    "--max-ticket-assets",
    "2",
];

async fn serve(database: &str, extra: &[&str]) -> Server {
    Server::builder()
        .database(database)
        .accept_protocol3()
        .test_clock()
        .flag("--max-stream-batch-bytes", "2000")
        .args(extra)
        .start()
        .await
}

/// The protocol-2 client, and a protocol-3 one for ticket assets.
fn clients(server: &Server) -> (Ctx, Ctx) {
    let c = Ctx::new(server.url(), VERSION).expect("http client");
    let mut p3 = c.clone();
    let (version, protocol) = support::PROTOCOL3_CLIENT;
    p3.autobuild_version = version.to_owned();
    p3.protocol_version = protocol.to_owned();
    (c, p3)
}

/// `path` answered `413 validation` naming `flag`; the message.
async fn refused(c: &Ctx, path: &str, body: &Value, flag: &str) -> String {
    let r = c.post(path, body).send().await.unwrap();
    let message = r.error(413, "validation").unwrap();
    assert!(message.contains(flag), "{path}: {message}");
    assert!(message.contains("nothing was written"), "{message}");
    message
}

async fn post_ok(c: &Ctx, path: &str, body: &Value, status: u16) -> Value {
    let r = c.post(path, body).send().await.unwrap();
    r.json_status(status).unwrap()
}

fn deposit_body(res: Res, kinds: &[&str]) -> Value {
    json!({
        "artifacts": kinds
            .iter()
            .map(|kind| json!({"kind": kind, "contentBase64": b64(b"x")}))
            .collect::<Vec<_>>(),
        "event": res.ref_event(json!({"kind": kinds[0], "rev": -1})),
    })
}

/// Events per log: builds, repositories and sessions; appends, conditional
/// appends and deposits.
async fn events_per_log(c: &Ctx) {
    for res in [Res::Build, Res::Repo, Res::Session] {
        let id = c.with_events(res, 4).await.unwrap();
        let path = res.path(&id);
        let message = refused(
            c,
            &format!("{path}/events"),
            &res.simple_event(),
            "--max-events-per-log",
        )
        .await;
        assert!(
            message.starts_with(&format!("{} \"{id}\" holds 4 events", res.key())),
            "{message}"
        );
        let deposit = deposit_body(res, &["plan"]);
        refused(
            c,
            &format!("{path}/deposits"),
            &deposit,
            "--max-events-per-log",
        )
        .await;
        assert_eq!(c.seqs(res, &id).await.unwrap(), vec![1, 2, 3, 4]);
        let plan = c.get_artifact(res, &id, "?kind=plan").await.unwrap();
        assert_eq!(plan, Value::Null, "the refused deposit left no revision");
    }
    // The conditional append: stale first (200 null), then the bound.
    let slug = c.with_events(Res::Build, 4).await.unwrap();
    let conditional = format!("{}/events/conditional", Res::Build.path(&slug));
    let event = Res::Build.simple_event();
    let r = c
        .post(&conditional, &json!({"expectedSeq": 2, "event": event}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.json_status(200).unwrap(), Value::Null);
    refused(
        c,
        &conditional,
        &json!({"expectedSeq": 4, "event": event}),
        "--max-events-per-log",
    )
    .await;
    // The catalog's 422 comes before the bound, as the store is asked last.
    let mut invalid = Res::Build.simple_event();
    invalid["type"] = json!("no.such.type");
    let r = c
        .post(&format!("{}/events", Res::Build.path(&slug)), &invalid)
        .send()
        .await
        .unwrap();
    r.e422().unwrap();
}

/// Revisions per artifact kind, by puts and deposits.
async fn artifact_revisions(c: &Ctx) {
    let (slug, _) = c.new_build().await.unwrap();
    for n in 0..3 {
        let meta = c
            .put_artifact(Res::Build, &slug, "plan", b"p", None)
            .await
            .unwrap();
        assert_eq!(meta["revision"], n);
    }
    let path = Res::Build.path(&slug);
    let put = json!({"kind": "plan", "contentBase64": b64(b"q")});
    let message = refused(
        c,
        &format!("{path}/artifacts"),
        &put,
        "--max-artifact-revisions",
    )
    .await;
    assert!(
        message.starts_with(&format!(
            "artifact kind \"plan\" of build \"{slug}\" has 3 revisions"
        )),
        "{message}"
    );
    refused(
        c,
        &format!("{path}/deposits"),
        &deposit_body(Res::Build, &["plan"]),
        "--max-artifact-revisions",
    )
    .await;
    assert!(c.events(Res::Build, &slug, "").await.unwrap().is_empty());
    let latest = c
        .get_artifact(Res::Build, &slug, "?kind=plan")
        .await
        .unwrap();
    assert_eq!(latest["meta"]["revision"], 2);
    // A kind under the (embedded) retention policy is bounded by it instead.
    for n in 0..4 {
        let meta = c
            .put_artifact(
                Res::Build,
                &slug,
                "build-runner-effective-config",
                b"c",
                None,
            )
            .await
            .unwrap();
        assert_eq!(meta["revision"], n);
    }
}

/// Chunks per stream, by count and bytes, after the checks the protocol
/// orders first: resolution (404), schema (400), batch ceiling (413), closed
/// (409).
async fn stream_chunks(c: &Ctx) {
    let (slug, _) = c.new_build().await.unwrap();
    let streams = format!("{}/streams", Res::Build.path(&slug));
    let stream = post_ok(c, &streams, &json!({"label": "l"}), 201).await;
    let id = stream["id"].as_str().unwrap().to_owned();
    let chunks = format!("/streams/{id}/chunks");
    let small = json!({"parts": [{"type": "text-delta", "id": "t", "delta": "é"}]});
    for seq in 1..=3 {
        let chunk = post_ok(c, &chunks, &small, 201).await;
        assert_eq!(chunk["seq"], seq);
    }
    let message = refused(c, &chunks, &small, "--max-stream-chunks").await;
    assert!(
        message.starts_with(&format!("stream \"{id}\" holds 3 chunks")),
        "{message}"
    );
    // What the spec orders before it still answers first.
    let r = c
        .post("/streams/st_missing/chunks", &small)
        .send()
        .await
        .unwrap();
    r.e404().unwrap();
    let r = c.post(&chunks, &json!({"parts": []})).send().await.unwrap();
    r.e400().unwrap();
    let wide = json!({"parts": [{"type": "x", "pad": "a".repeat(2100)}]});
    let r = c.post(&chunks, &wide).send().await.unwrap();
    let message = r.error(413, "validation").unwrap();
    assert!(message.contains("2000-byte ceiling"), "{message}");
    let read = c.get(&format!("{chunks}?since=0")).send().await.unwrap();
    assert_eq!(
        read.json_status(200).unwrap()["chunks"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    // A full stream closes; then it is closed first.
    let closed = post_ok(
        c,
        &format!("/streams/{id}/close"),
        &json!({"outcome": "completed"}),
        200,
    )
    .await;
    assert_eq!(closed["status"], "closed");
    let r = c.post(&chunks, &small).send().await.unwrap();
    r.error(409, "conflict").unwrap();

    // Bytes: 1000 of stored chunks (each batch plus its envelope).
    let stream = post_ok(c, &streams, &json!({"label": "bytes"}), 201).await;
    let id = stream["id"].as_str().unwrap().to_owned();
    let chunks = format!("/streams/{id}/chunks");
    let batch = json!({"parts": [{"type": "x", "pad": "a".repeat(500)}]});
    let first = c.post(&chunks, &batch).send().await.unwrap();
    let stored = first.text.len();
    assert!((500..1000).contains(&stored), "{stored}");
    let message = refused(c, &chunks, &batch, "--max-stream-bytes").await;
    assert!(
        message.contains(&format!("holds {stored} bytes of chunks")),
        "{message}"
    );
    // What still fits is taken: exactly up to the bound.
    let room = 1000 - stored;
    let around = stored - 500;
    let last = json!({"parts": [{"type": "x", "pad": "b".repeat(room - around)}]});
    let r = c.post(&chunks, &last).send().await.unwrap();
    assert_eq!(r.json_status(201).unwrap()["seq"], 2);
    assert_eq!(r.text.len(), room);
    refused(c, &chunks, &small, "--max-stream-bytes").await;
}

/// Revisions per ticket asset (removals included) and live assets per ticket.
async fn ticket_assets(p3: &Ctx) {
    let ticket = "/repos/acme%2Fbounds/tickets/AUT-1";
    let assets = format!("{ticket}/assets");
    let put = |name: &str| {
        json!({"kind": "design", "name": name, "layout": "tree",
               "entries": [{"type": "dir", "path": "d"}]})
    };
    for n in 0..3 {
        assert_eq!(post_ok(p3, &assets, &put("home"), 201).await["revision"], n);
    }
    let message = refused(p3, &assets, &put("home"), "--max-ticket-asset-revisions").await;
    assert!(
        message.starts_with("ticket asset design/home has 3 revisions"),
        "{message}"
    );
    let remove = json!({"kind": "design", "name": "home"});
    refused(
        p3,
        &format!("{assets}/remove"),
        &remove,
        "--max-ticket-asset-revisions",
    )
    .await;
    let latest = p3
        .get(&format!("{assets}?kind=design&name=home"))
        .send()
        .await
        .unwrap();
    assert_eq!(latest.json_status(200).unwrap()["revision"], 2);

    post_ok(p3, &assets, &put("other"), 201).await;
    let message = refused(p3, &assets, &put("third"), "--max-ticket-assets").await;
    assert!(
        message.starts_with("ticket \"AUT-1\" has 2 assets"),
        "{message}"
    );
    // A removal makes room; the refused put consumed no revision.
    let removed = post_ok(
        p3,
        &format!("{assets}/remove"),
        &json!({"kind": "design", "name": "other"}),
        200,
    )
    .await;
    assert_eq!(removed["revision"], 0);
    assert_eq!(
        post_ok(p3, &assets, &put("third"), 201).await["revision"],
        0
    );
    let list = p3.get(&format!("{assets}/list")).send().await.unwrap();
    let names: Vec<Value> = list
        .json_status(200)
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].clone())
        .collect();
    assert_eq!(names, [json!("home"), json!("third")]);
}

async fn every_bound(database: &str) {
    let server = serve(database, &BOUNDS).await;
    let (c, p3) = clients(&server);
    events_per_log(&c).await;
    artifact_revisions(&c).await;
    stream_chunks(&c).await;
    ticket_assets(&p3).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bounds_hold_on_a_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("bounds.db").display());
    every_bound(&db).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bounds_hold_on_postgres() {
    support::with_pg("bounds", |url| async move { every_bound(&url).await }).await;
}

/// Bad values stop the start naming the flag (or its variable); the
/// variables set the bounds like the flags, and the start-up configuration
/// line shows them.
#[tokio::test(flavor = "multi_thread")]
async fn the_bounds_are_flags_and_variables_within_limits() {
    for (flag, value) in [
        ("--max-stream-chunks", "0"),
        ("--max-stream-bytes", "-1"),
        ("--max-events-per-log", "9007199254740992"),
        ("--max-artifact-revisions", "many"),
        ("--max-ticket-asset-revisions", "0"),
        ("--max-ticket-assets", "0"),
    ] {
        let (ok, _, stderr) = Server::builder().arg(&format!("{flag}={value}")).run();
        assert!(!ok, "{flag} {value} was accepted");
        assert!(stderr.contains(flag), "{flag} {value}: {stderr}");
    }
    let (ok, _, stderr) = Server::builder()
        .env("ABSTORE_MAX_TICKET_ASSETS", "0")
        .run();
    assert!(
        !ok && stderr.contains("ABSTORE_MAX_TICKET_ASSETS"),
        "{stderr}"
    );

    // Through the variable: one event a log.
    let server = Server::builder()
        .env("ABSTORE_MAX_EVENTS_PER_LOG", "1")
        .start()
        .await;
    let (c, _) = clients(&server);
    let slug = c.with_events(Res::Build, 1).await.unwrap();
    refused(
        &c,
        &format!("{}/events", Res::Build.path(&slug)),
        &Res::Build.simple_event(),
        "--max-events-per-log",
    )
    .await;
    let log = server.stderr();
    let configuration = log
        .lines()
        .find(|l| l.contains(" configuration "))
        .unwrap_or_else(|| panic!("no configuration line:\n{log}"));
    for field in [
        "max_stream_chunks=100000 ",
        "max_stream_bytes=67108864 ",
        "max_events_per_log=1 ",
        "max_artifact_revisions=100000 ",
        "max_ticket_asset_revisions=10000 ",
        "max_ticket_assets=1000 ",
    ] {
        assert!(configuration.contains(field), "{field}: {configuration}");
    }
}

// ── migration 0008 on a store created before it ────────────────────────────

/// Chunk texts of the streams a pre-0008 store holds: an open stream with
/// text beyond ASCII, an open one without chunks, a closed one.
const OLD_CHUNKS: [(&str, i64, &str); 3] = [
    (
        "st_open",
        1,
        r#"{"stream":"st_open","seq":1,"ts":"2026-07-15T12:00:00.000Z","parts":[{"type":"text-start","id":"t"}]}"#,
    ),
    (
        "st_open",
        2,
        r#"{"stream":"st_open","seq":2,"ts":"2026-07-15T12:00:00.000Z","parts":[{"type":"text-delta","id":"t","delta":"héllo € 😀"}]}"#,
    ),
    (
        "st_closed",
        1,
        r#"{"stream":"st_closed","seq":1,"ts":"2026-07-15T12:00:00.000Z","parts":[{"type":"start"}]}"#,
    ),
];

/// What 0008 backfills: an open stream's chunks' UTF-8 bytes; 0 otherwise.
fn expected_bytes() -> Vec<(String, i64)> {
    let open: usize = OLD_CHUNKS
        .iter()
        .filter(|(id, _, _)| *id == "st_open")
        .map(|(_, _, chunk)| chunk.len())
        .sum();
    vec![
        ("st_closed".into(), 0),
        ("st_empty".into(), 0),
        ("st_open".into(), open as i64),
    ]
}

/// The rows of the old store, in statements both dialects run.
fn old_rows() -> Vec<String> {
    let mut rows = vec![
        "INSERT INTO resources (kind, id, attrs, created_at, updated_at, last_seq) \
         VALUES ('build', 'b-old', '{\"repo\":\"acme/old\"}', 1784116800000, 1784116800000, 0)"
            .to_owned(),
    ];
    for (id, status, last_seq, order) in [
        ("st_open", "open", 2, 1),
        ("st_empty", "open", 0, 2),
        ("st_closed", "closed", 1, 3),
    ] {
        rows.push(format!(
            "INSERT INTO streams (id, scope_kind, scope_id, label, status, created_at, \
             created_order, last_seq) VALUES ('{id}', 'build', 'b-old', 'l', '{status}', \
             1784116800000, {order}, {last_seq})"
        ));
    }
    for (id, seq, chunk) in OLD_CHUNKS {
        rows.push(format!(
            "INSERT INTO stream_chunks (stream_id, seq, chunk) VALUES ('{id}', {seq}, '{chunk}')"
        ));
    }
    rows
}

/// The byte totals migrated, then the bound holding them: `--max-stream-bytes`
/// leaves the open stream room for one small chunk, not two.
async fn backfilled_bytes_bind(database: &str) {
    let open = expected_bytes()[2].1;
    let bound = (open + 100).to_string();
    let server = serve(database, &["--max-stream-bytes", &bound]).await;
    let (c, _) = clients(&server);
    let small = json!({"parts": [{"type": "x"}]});
    let chunk = post_ok(&c, "/streams/st_open/chunks", &small, 201).await;
    assert_eq!(chunk["seq"], 3);
    refused(&c, "/streams/st_open/chunks", &small, "--max-stream-bytes").await;
}

/// A SQLite store migrated by the migrations before 0008 only, as a server
/// of that version left it (sqlx's bookkeeping included).
fn sqlite_before_0008(path: &std::path::Path) {
    let migrator = sqlx::migrate!("migrations/sqlite");
    let mut conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS _sqlx_migrations (
            version BIGINT PRIMARY KEY,
            description TEXT NOT NULL,
            installed_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
            success BOOLEAN NOT NULL,
            checksum BLOB NOT NULL,
            execution_time BIGINT NOT NULL
        )",
    )
    .unwrap();
    let tx = conn.transaction().unwrap();
    for migration in migrator.iter().filter(|m| m.version < 8) {
        tx.execute_batch(migration.sql.as_str()).unwrap();
        tx.execute(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES (?1, ?2, TRUE, ?3, 0)",
            rusqlite::params![
                migration.version,
                migration.description.as_ref(),
                migration.checksum.as_ref()
            ],
        )
        .unwrap();
    }
    for row in old_rows() {
        tx.execute_batch(&row).unwrap();
    }
    tx.commit().unwrap();
}

fn sqlite_bytes(path: &std::path::Path) -> Vec<(String, i64)> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut statement = conn
        .prepare("SELECT id, bytes FROM streams ORDER BY id")
        .unwrap();
    statement
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

async fn pg_bytes(url: &str) -> Vec<(String, i64)> {
    use sqlx::Connection as _;
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    let rows = sqlx::query_as("SELECT id, bytes FROM streams ORDER BY id")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    conn.close().await.ok();
    rows
}

#[tokio::test(flavor = "multi_thread")]
async fn migration_0008_backfills_stream_bytes_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    sqlite_before_0008(&path);
    let database = format!("sqlite://{}", path.display());
    support::run_ok(&["migrate", "--database", &database]);
    assert_eq!(sqlite_bytes(&path), expected_bytes());
    backfilled_bytes_bind(&database).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn migration_0008_backfills_stream_bytes_on_postgres() {
    support::with_pg("bounds_migration", |url| async move {
        let pool = sqlx::PgPool::connect(&url).await.unwrap();
        sqlx::migrate!("migrations/postgres")
            .run_to(7, &pool)
            .await
            .unwrap();
        for row in old_rows() {
            sqlx::raw_sql(sqlx::AssertSqlSafe(row))
                .execute(&pool)
                .await
                .unwrap();
        }
        pool.close().await;
        support::run_ok(&["migrate", "--database", &url]);
        assert_eq!(pg_bytes(&url).await, expected_bytes());
        backfilled_bytes_bind(&url).await;
    })
    .await;
}

// ── archives ────────────────────────────────────────────────────────────────

/// A SQLite store with an open stream holding chunks, exported; its
/// stream's bytes and the archive.
async fn archive_with_an_open_stream(dir: &std::path::Path) -> (i64, std::path::PathBuf) {
    let path = dir.join("source.db");
    let database = format!("sqlite://{}", path.display());
    let blobs = format!("file://{}", dir.join("blobs").display());
    let mut server = Server::builder()
        .database(&database)
        .blobs(&blobs)
        .start()
        .await;
    let (c, _) = clients(&server);
    let (slug, _) = c.new_build().await.unwrap();
    let streams = format!("{}/streams", Res::Build.path(&slug));
    let id = post_ok(&c, &streams, &json!({"label": "l"}), 201).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    for delta in ["un", "deux €", "trois 😀"] {
        let batch = json!({"parts": [{"type": "text-delta", "id": "t", "delta": delta}]});
        post_ok(&c, &format!("/streams/{}/chunks", enc(&id)), &batch, 201).await;
    }
    server.stop().await.unwrap();
    let bytes = sqlite_bytes(&path)[0].1;
    assert!(bytes > 0);
    let archive = dir.join("store.abstore");
    support::export(&database, &blobs, &archive);
    let text = std::fs::read_to_string(&archive).unwrap();
    assert!(
        !text.contains("\"bytes\""),
        "the archive carries no derived column"
    );
    (bytes, archive)
}

#[tokio::test(flavor = "multi_thread")]
async fn imports_recount_stream_bytes_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, archive) = archive_with_an_open_stream(dir.path()).await;
    let target = dir.path().join("target.db");
    let database = format!("sqlite://{}", target.display());
    let blobs = format!("file://{}", dir.path().join("blobs2").display());
    let (ok, _, stderr) = support::import(&archive, &database, &blobs, true);
    assert!(ok, "{stderr}");
    assert_eq!(sqlite_bytes(&target)[0].1, bytes);
    // A second export is the first's, byte for byte.
    let again = dir.path().join("again.abstore");
    support::export(&database, &blobs, &again);
    support::assert_same_archive_body(&archive, &again, "re-export");
    assert!(path_text(&again).ends_with("again.abstore"));
}

#[tokio::test(flavor = "multi_thread")]
async fn imports_recount_stream_bytes_on_postgres() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, archive) = archive_with_an_open_stream(dir.path()).await;
    support::with_pg("bounds_import", |url| async move {
        let blobs = "memory://";
        let (ok, _, stderr) = support::import(&archive, &url, blobs, true);
        assert!(ok, "{stderr}");
        assert_eq!(pg_bytes(&url).await[0].1, bytes);
    })
    .await;
}
