//! `import --from autobuild-local` and `export --from autobuild-local`
//! through the real binary: Autobuild-shaped local stores of every version
//! (L1…L6, fresh and upgraded; our own DDL, written from the facts in
//! docs/autobuild-stores.md §1), imported into SQLite and PostgreSQL, then
//! read over HTTP from `abstore serve`.

use crate::support;

use std::path::{Path, PathBuf};

use rusqlite::params;
use rusqlite::types::Value as Sql;
use serde_json::{Value, json};
use support::{Server, enc, path_text as s, run, run_ok};

// ── The fixture: an Autobuild local store ───────────────────────────────────

/// The versions of docs/autobuild-stores.md §1.2, in order.
const VERSIONS: [&str; 7] = ["L1", "L2", "L3", "L3b", "L4", "L5", "L6"];

const REPO: &str = "/home/me/widgets";
const SESSION: &str = "os_11111111-2222-3333-4444-555555555555";
const LONG_SLUG_LEN: usize = 600;

/// The stored texts of build b-1's events (actor, type, payload), each one
/// abstore's catalogs accept, as JavaScript's JSON.stringify wrote them (a
/// raw U+2028 and `é`, escaped quotes and a tab), and one `\u00e9` escape
/// that JSON.stringify would not write but a re-serialisation would change:
/// served as stored, byte for byte.
const B1_EVENTS: [(&str, &str, &str); 3] = [
    (
        r#"{"kind":"dispatcher"}"#,
        "build.created",
        r#"{"ticket":{"source":"linear","id":"AUT-1"},"repo":"/home/me/widgets","baseBranch":"main"}"#,
    ),
    (
        r#"{"kind":"human","user":"ann"}"#,
        "build.pause-requested",
        "{\"reason\":\"h\u{e9}llo h\\u00e9llo \\\"q\\\" \u{2028} tab\\t\"}",
    ),
    (r#"{"kind":"kernel"}"#, "plan.started", r#"{"round":2}"#),
];

/// A session event whose free-form `input` holds what JSON.stringify writes
/// and serde would not: integer-like keys first, `1e+21`, `-0`.
const SESSION_APPROVAL: (&str, &str, &str) = (
    r#"{"kind":"agent","role":"operator","session":"os_11111111-2222-3333-4444-555555555555"}"#,
    "approval.requested",
    r#"{"turn":"t1","toolCallId":"c1","toolName":"shell","input":{"2":"b","10":"a","n":1e+21,"list":[1,2.5,-0,{"x":null}]}}"#,
);

fn ts(n: u32) -> String {
    format!("2026-08-04T17:33:{:02}.{:03}Z", n / 1000 % 60, n % 1000)
}

/// A local store on disk (its database closed).
struct Store {
    _dir: tempfile::TempDir,
    root: PathBuf,
    version: usize,
    upgraded: bool,
}

impl Store {
    fn at_least(&self, version: &str) -> bool {
        self.version >= VERSIONS.iter().position(|v| *v == version).unwrap()
    }
}

/// A local store being written.
struct Fixture {
    root: PathBuf,
    conn: rusqlite::Connection,
    version: usize,
    upgraded: bool,
}

impl Fixture {
    fn at_least(&self, version: &str) -> bool {
        self.version >= VERSIONS.iter().position(|v| *v == version).unwrap()
    }

    /// Writes `bytes` as a blob; returns its hash.
    fn blob(&self, bytes: &[u8]) -> String {
        let sha = abstore::blobs::blob_ref(bytes);
        let dir = self.root.join("blobs").join(&sha[..2]);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(&sha), bytes).unwrap();
        sha
    }

    fn exec(&self, sql: &str, values: impl rusqlite::Params) {
        self.conn.execute(sql, values).unwrap();
    }
}

/// The tables of `version`: created as that version's Autobuild creates
/// them (`upgraded == false`), or as an L1 store later opened by each newer
/// Autobuild in turn (added columns at the end, the old streams CHECK).
pub(crate) fn ddl(version: usize, upgraded: bool) -> String {
    let v = |name: &str| version >= VERSIONS.iter().position(|x| *x == name).unwrap();
    let lease = "lease_holder TEXT, lease_expires_at TEXT, lease_ttl_ms INTEGER, heartbeat_at TEXT";
    let events = |owner: &str, table: &str| {
        format!(
            "CREATE TABLE {table} ({owner} TEXT NOT NULL, seq INTEGER NOT NULL, ts TEXT NOT NULL, \
             actor TEXT NOT NULL, type TEXT NOT NULL, payload TEXT NOT NULL, PRIMARY KEY ({owner}, seq));"
        )
    };
    let artifacts = |owner: &str, table: &str| {
        format!(
            "CREATE TABLE {table} ({owner} TEXT NOT NULL, kind TEXT NOT NULL, revision INTEGER NOT NULL, \
             blob_ref TEXT NOT NULL, metadata TEXT NOT NULL, created_at TEXT NOT NULL, \
             PRIMARY KEY ({owner}, kind, revision));"
        )
    };
    let origin = if v("L3") && !upgraded {
        "repo_origin TEXT, "
    } else {
        ""
    };
    let mut sql = format!(
        "CREATE TABLE builds (slug TEXT PRIMARY KEY NOT NULL, repo TEXT NOT NULL, {origin}ticket TEXT, \
         branch TEXT, created_at TEXT NOT NULL, updated_at TEXT NOT NULL, {lease});"
    );
    sql += &events("build", "events");
    sql += &artifacts("build", "artifacts");
    if v("L2") {
        sql += &format!(
            "CREATE TABLE repo_streams (repo TEXT PRIMARY KEY NOT NULL, created_at TEXT NOT NULL, \
             updated_at TEXT NOT NULL, {lease});"
        );
        sql += &events("repo", "repo_events");
        sql += &artifacts("repo", "repo_artifacts");
    }
    if v("L3") && upgraded {
        sql += "ALTER TABLE builds ADD COLUMN repo_origin TEXT;";
    }
    let fresh_sessions = v("L4") && !upgraded;
    if v("L3b") {
        let (session, check) = if fresh_sessions {
            ("session TEXT, ", "'build', 'repo', 'session'")
        } else {
            ("", "'build', 'repo'")
        };
        let creation = if v("L5") && !upgraded {
            ", creation_seq INTEGER NOT NULL"
        } else {
            ""
        };
        sql += &format!(
            "CREATE TABLE streams (id TEXT PRIMARY KEY NOT NULL, scope_kind TEXT NOT NULL CHECK (scope_kind IN ({check})), \
             build TEXT, repo TEXT, {session}label TEXT NOT NULL, format TEXT NOT NULL, status TEXT NOT NULL, \
             outcome TEXT, artifact_kind TEXT, artifact_revision INTEGER, artifact_blob_ref TEXT, \
             created_at TEXT NOT NULL, closed_at TEXT{creation});
             CREATE TABLE stream_chunks (stream TEXT NOT NULL REFERENCES streams(id) ON DELETE CASCADE, \
             seq INTEGER NOT NULL, ts TEXT NOT NULL, parts TEXT NOT NULL, PRIMARY KEY (stream, seq));"
        );
    }
    if v("L4") {
        if upgraded {
            sql += "ALTER TABLE streams ADD COLUMN session TEXT;";
        }
        let creation = if v("L5") && !upgraded {
            "creation_seq INTEGER NOT NULL, "
        } else {
            ""
        };
        sql += &format!(
            "CREATE TABLE sessions (id TEXT PRIMARY KEY NOT NULL, repo TEXT NOT NULL, operator TEXT NOT NULL, \
             title TEXT, {creation}created_at TEXT NOT NULL, updated_at TEXT NOT NULL);"
        );
        sql += &events("session", "session_events");
        sql += &artifacts("session", "session_artifacts");
    }
    if v("L5") {
        if upgraded {
            sql += "ALTER TABLE sessions ADD COLUMN creation_seq INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE streams ADD COLUMN creation_seq INTEGER NOT NULL DEFAULT 0;";
        }
        sql += "CREATE INDEX events_type_build_seq ON events(type, build, seq);";
    }
    if v("L6") {
        sql += "CREATE TABLE ticket_assets (repo TEXT NOT NULL, ticket_id TEXT NOT NULL, kind TEXT NOT NULL, \
                name TEXT NOT NULL, revision INTEGER NOT NULL, layout TEXT NOT NULL, manifest TEXT NOT NULL, \
                size INTEGER NOT NULL, removed INTEGER NOT NULL DEFAULT 0, created_at TEXT NOT NULL, \
                PRIMARY KEY (repo, ticket_id, kind, name, revision));";
    }
    sql
}

/// An Autobuild local store of `version` with every family it has, plus
/// what an import must report: a missing blob, a blob whose bytes do not
/// hash to its name, an unfit slug, an event serde cannot read, events
/// without a build, a session without a repository, a pruned closed
/// stream, a `.partial` file and an orphan blob.
fn fixture(version: &str, upgraded: bool) -> Store {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join(".autobuild");
    std::fs::create_dir_all(root.join("blobs")).unwrap();
    let conn = rusqlite::Connection::open(root.join("autobuild.sqlite")).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    let version = VERSIONS.iter().position(|v| *v == version).unwrap();
    conn.execute_batch(&ddl(version, upgraded)).unwrap();
    let f = Fixture {
        root: root.clone(),
        conn,
        version,
        upgraded,
    };
    seed(&f);
    Store {
        _dir: dir,
        root,
        version,
        upgraded,
    }
}

fn seed(f: &Fixture) {
    // Builds.
    let insert_build = |slug: &str, ticket: Option<&str>, lease: Option<(&str, &str)>| {
        f.exec(
            "INSERT INTO builds (slug, repo, ticket, branch, created_at, updated_at, lease_holder, \
             lease_expires_at, lease_ttl_ms, heartbeat_at) VALUES (?1, ?2, ?3, 'main', ?4, ?5, ?6, ?7, ?8, ?9)",
            params![
                slug,
                REPO,
                ticket,
                ts(1000),
                ts(9000),
                lease.map(|l| l.0),
                lease.map(|l| l.1),
                lease.map(|_| 60_000),
                lease.map(|_| ts(8000)),
            ],
        );
    };
    insert_build("b-1", Some(r#"{"source":"linear","id":"AUT-1"}"#), None);
    insert_build("b-2", None, Some(("worker-1", "2099-01-01T00:00:00.000Z")));
    insert_build(&"x".repeat(LONG_SLUG_LEN), None, None);
    insert_build("b-surrogate", None, None);
    if f.at_least("L3") {
        f.exec(
            "UPDATE builds SET repo_origin = 'git@github.com:me/widgets.git' WHERE slug = 'b-1'",
            [],
        );
    }
    for (i, (actor, ty, payload)) in B1_EVENTS.iter().enumerate() {
        f.exec(
            "INSERT INTO events (build, seq, ts, actor, type, payload) VALUES ('b-1', ?1, ?2, ?3, ?4, ?5)",
            params![i as i64 + 1, ts(2000 + i as u32), actor, ty, payload],
        );
    }
    f.exec(
        "INSERT INTO events VALUES (?1, 1, ?2, '{}', 'x', '{}')",
        params!["x".repeat(LONG_SLUG_LEN), ts(2000)],
    );
    f.exec(
        r#"INSERT INTO events VALUES ('b-surrogate', 1, ?1, '{}', 'x', '{"t":"\ud800"}')"#,
        params![ts(2000)],
    );
    f.exec(
        "INSERT INTO events VALUES ('ghost', 1, ?1, '{}', 'x', '{}')",
        params![ts(2000)],
    );
    // Artifacts: three revisions; one missing blob; one corrupt blob.
    let artifact = |table: &str, owner: &str, kind: &str, revision: i64, blob: &str, meta: &str| {
        f.exec(
            &format!("INSERT INTO {table} VALUES (?1, ?2, ?3, ?4, ?5, ?6)"),
            params![
                owner,
                kind,
                revision,
                blob,
                meta,
                ts(3000 + revision as u32)
            ],
        );
    };
    for rev in 0..3 {
        let blob = f.blob(format!("# Plan v{rev}\n").as_bytes());
        artifact(
            "artifacts",
            "b-1",
            "plan",
            rev,
            &blob,
            &format!(r#"{{"round":{rev}}}"#),
        );
    }
    artifact(
        "artifacts",
        "b-1",
        "lost",
        0,
        &abstore::blobs::blob_ref(b"never written"),
        "{}",
    );
    let corrupt = abstore::blobs::blob_ref(b"the real bytes");
    std::fs::create_dir_all(f.root.join("blobs").join(&corrupt[..2])).unwrap();
    std::fs::write(
        f.root.join("blobs").join(&corrupt[..2]).join(&corrupt),
        b"other bytes",
    )
    .unwrap();
    artifact("artifacts", "b-1", "bad", 0, &corrupt, "{}");
    // Leftovers: an interrupted write and an orphan.
    let orphan = f.blob(b"written before a transaction that never came");
    std::fs::write(
        f.root
            .join("blobs")
            .join(&orphan[..2])
            .join(format!("{orphan}.4242.0d1e.partial")),
        b"half",
    )
    .unwrap();
    if f.at_least("L2") {
        f.exec(
            "INSERT INTO repo_streams (repo, created_at, updated_at, lease_holder, lease_expires_at, \
             lease_ttl_ms, heartbeat_at) VALUES (?1, ?2, ?3, 'dispatcher', ?4, 30000, ?3)",
            params![REPO, ts(500), ts(9500), ts(9600)],
        );
        for seq in 1..=2 {
            f.exec(
                "INSERT INTO repo_events VALUES (?1, ?2, ?3, '{\"kind\":\"dispatcher\"}', 'dispatcher.tick-started', '{\"run\":\"r-1\"}')",
                params![REPO, seq, ts(4000 + seq as u32)],
            );
        }
        // Retention had removed revisions 0 to 4 (§1.5).
        for rev in 5..7 {
            let blob = f.blob(format!("notes {rev}").as_bytes());
            artifact("repo_artifacts", REPO, "operator-notes", rev, &blob, "{}");
        }
    }
    if f.at_least("L3b") {
        let stream = |id: &str, kind: &str, owner: &str, status: &str, n: u32| {
            let column = match kind {
                "build" => "build",
                "repo" => "repo",
                _ => "session",
            };
            f.exec(
                &format!(
                    "INSERT INTO streams (id, scope_kind, {column}, label, format, status, created_at{seq}) \
                     VALUES (?1, ?2, ?3, 'chat', 'ai-ui-message-stream/v1', ?4, ?5{seq_value})",
                    seq = if f.at_least("L5") { ", creation_seq" } else { "" },
                    seq_value = if f.at_least("L5") { ", ?6" } else { "" },
                ),
                rusqlite::params_from_iter(
                    [
                        Sql::from(id.to_owned()),
                        Sql::from(kind.to_owned()),
                        Sql::from(owner.to_owned()),
                        Sql::from(status.to_owned()),
                        Sql::from(ts(5000 + n)),
                        Sql::from(i64::from(n)),
                    ]
                    .into_iter()
                    .take(if f.at_least("L5") { 6 } else { 5 }),
                ),
            );
        };
        let chunk = |id: &str, seq: i64| {
            f.exec(
                "INSERT INTO stream_chunks VALUES (?1, ?2, ?3, ?4)",
                params![
                    id,
                    seq,
                    ts(5100 + seq as u32),
                    format!(r#"[{{"type":"text-delta","id":"t","delta":"part {seq}"}}]"#)
                ],
            );
        };
        let close = |id: &str, n: u32, chunks: i64| {
            let blob = f.blob(format!("[{{\"id\":\"{id}\"}}]").as_bytes());
            let kind = format!("stream:{id}");
            let meta = format!(
                r#"{{"stream":"{id}","label":"chat","scope":{{"kind":"repo","repo":"{REPO}"}},"outcome":"completed","chunkCount":{chunks},"droppedPartCount":0}}"#
            );
            artifact("repo_artifacts", REPO, &kind, 0, &blob, &meta);
            f.exec(
                "UPDATE streams SET status = 'closed', outcome = 'completed', artifact_kind = ?2, \
                 artifact_revision = 0, artifact_blob_ref = ?3, closed_at = ?4 WHERE id = ?1",
                params![id, kind, blob, ts(5500 + n)],
            );
        };
        stream("st_a", "build", "b-1", "open", 1);
        chunk("st_a", 1);
        chunk("st_a", 2);
        stream("st_b", "repo", REPO, "open", 2);
        chunk("st_b", 1);
        chunk("st_b", 2);
        close("st_b", 2, 2);
        // Closed, its chunks pruned by a later creation (§1.5).
        stream("st_c", "repo", REPO, "open", 3);
        close("st_c", 3, 3);
        if f.at_least("L4") && !f.upgraded {
            stream("st_d", "session", SESSION, "open", 4);
            chunk("st_d", 1);
        }
    }
    if f.at_least("L4") {
        for (n, (id, repo)) in [(SESSION, REPO), ("os_orphan", "/nowhere")]
            .iter()
            .enumerate()
        {
            f.exec(
                &format!(
                    "INSERT INTO sessions (id, repo, operator, title, created_at, updated_at{seq}) \
                     VALUES (?1, ?2, 'ann', 'Triage', ?3, ?3{seq_value})",
                    seq = if f.at_least("L5") {
                        ", creation_seq"
                    } else {
                        ""
                    },
                    seq_value = if f.at_least("L5") { ", ?4" } else { "" },
                ),
                rusqlite::params_from_iter(
                    [
                        Sql::from((*id).to_owned()),
                        Sql::from((*repo).to_owned()),
                        Sql::from(ts(6000 + n as u32)),
                        Sql::from(n as i64 + 1),
                    ]
                    .into_iter()
                    .take(if f.at_least("L5") { 4 } else { 3 }),
                ),
            );
            f.exec(
                "INSERT INTO session_events VALUES (?1, 1, ?2, '{\"kind\":\"human\",\"user\":\"ann\"}', \
                 'session.created', '{\"title\":\"Triage\"}')",
                params![id, ts(6000 + n as u32)],
            );
        }
        let (actor, ty, payload) = SESSION_APPROVAL;
        f.exec(
            "INSERT INTO session_events VALUES (?1, 2, ?2, ?3, ?4, ?5)",
            params![SESSION, ts(6100), actor, ty, payload],
        );
        let blob = f.blob(b"transcript");
        artifact("session_artifacts", SESSION, "transcript", 0, &blob, "{}");
    }
    if f.at_least("L6") {
        let png = f.blob(b"\x89PNG fake");
        let css = f.blob(b"body{}");
        let asset = |rev: i64, layout: &str, manifest: String, size: i64, removed: i64| {
            f.exec(
                "INSERT INTO ticket_assets VALUES (?1, 'AUT-1', 'design', 'home', ?2, ?3, ?4, ?5, ?6, ?7)",
                params![REPO, rev, layout, manifest, size, removed, ts(7000 + rev as u32)],
            );
        };
        asset(
            0,
            "file",
            format!(r#"[{{"type":"file","path":"home.png","size":9,"blobRef":"{png}"}}]"#),
            9,
            0,
        );
        asset(
            1,
            "tree",
            format!(
                r#"[{{"type":"dir","path":"css"}},{{"type":"file","path":"css/a.css","size":6,"blobRef":"{css}"}}]"#
            ),
            6,
            0,
        );
        asset(2, "tree", "[]".to_owned(), 0, 1);
    }
}

// ── Running the binary ──────────────────────────────────────────────────────

fn sqlite_url(path: &Path) -> String {
    format!("sqlite://{}", path.display())
}

/// `abstore import --from autobuild-local ROOT …`; returns (ok, stdout, stderr).
fn import_from(root: &Path, database: &str, blobs: &str, apply: bool) -> (bool, String, String) {
    let mut args = vec![
        "import",
        "--from",
        "autobuild-local",
        s(root),
        "--database",
        database,
        "--blobs",
        blobs,
        "--quiet",
    ];
    if apply {
        args.push("--apply");
    }
    run(&args)
}

/// The report line `label: N what…`'s count, 0 when absent.
pub(crate) fn reported(stdout: &str, label: &str, what: &str) -> u64 {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("{label}: ")))
        .filter(|l| l.contains(what))
        .filter_map(|l| l.split(' ').next()?.parse::<u64>().ok())
        .sum()
}

async fn get(c: &reqwest::Client, base: &str, path: &str) -> (u16, String) {
    let r = c.get(format!("{base}{path}")).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

fn envelope(
    key: &str,
    id: &str,
    seq: usize,
    ts: &str,
    (actor, ty, payload): (&str, &str, &str),
) -> String {
    format!(
        "{{\"{key}\":{},\"seq\":{seq},\"ts\":\"{ts}\",\"actor\":{actor},\"type\":{},\"payload\":{payload}}}",
        Value::from(id),
        Value::from(ty)
    )
}

/// What clients read from abstore serving the import of `f`.
async fn check_reads(f: &Store, server: &Server) {
    let base = server.url();
    let c = support::client();
    // Events: the exact bytes Autobuild served (spliced, never re-serialised).
    let expected: Vec<String> = B1_EVENTS
        .iter()
        .enumerate()
        .map(|(i, e)| envelope("build", "b-1", i + 1, &ts(2000 + i as u32), *e))
        .collect();
    let (status, body) = get(&c, base, "/builds/b-1/events").await;
    assert_eq!(status, 200);
    assert_eq!(body, format!("[{}]", expected.join(",")), "b-1's events");
    assert!(body.contains('\u{2028}') && body.contains(r"h\u00e9llo"));
    let (_, body) = get(&c, base, "/builds/b-1/events?since=2").await;
    assert_eq!(body, format!("[{}]", expected[2]));
    // The build record.
    let (status, body) = get(&c, base, "/builds/b-1").await;
    assert_eq!(status, 200);
    let record: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(record["slug"], "b-1");
    assert_eq!(record["repo"], REPO);
    assert_eq!(record["ticket"], json!({"source": "linear", "id": "AUT-1"}));
    assert_eq!(record["createdAt"], ts(1000));
    assert_eq!(record["updatedAt"], ts(9000));
    if f.at_least("L3") {
        assert_eq!(record["repoOrigin"], "git@github.com:me/widgets.git");
    }
    let (_, body) = get(&c, base, "/builds/b-2").await;
    let record: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(record["lease"]["holder"], "worker-1", "{record}");
    // Left out whole: an event serde cannot read; events without a build.
    assert_eq!(get(&c, base, "/builds/b-surrogate").await.0, 404);
    assert_eq!(get(&c, base, "/builds/ghost").await.0, 404);
    // Artifacts: bytes and revisions; a missing or corrupt blob reads absent.
    for rev in 0..3 {
        let (_, body) = get(
            &c,
            base,
            &format!("/builds/b-1/artifacts?kind=plan&rev={rev}"),
        )
        .await;
        let read: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(read["meta"]["revision"], rev, "{read}");
        assert_eq!(read["meta"]["metadata"], json!({"round": rev}));
        let bytes =
            abstore::protocol::base64::decode(read["contentBase64"].as_str().unwrap(), 1 << 20)
                .unwrap();
        assert_eq!(bytes, format!("# Plan v{rev}\n").as_bytes());
    }
    let (_, body) = get(&c, base, "/builds/b-1/artifacts?kind=plan").await;
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["meta"]["revision"],
        2
    );
    for kind in ["lost", "bad"] {
        let (status, body) = get(&c, base, &format!("/builds/b-1/artifacts?kind={kind}")).await;
        assert_eq!((status, body.as_str()), (200, "null"), "{kind}");
    }
    if !f.at_least("L2") {
        return;
    }
    let repo = enc(REPO);
    let (_, body) = get(&c, base, &format!("/repos/{repo}/events")).await;
    let events: Vec<Value> = serde_json::from_str(&body).unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[1]["repo"], REPO);
    assert_eq!(events[1]["ts"], ts(4002));
    let (_, body) = get(
        &c,
        base,
        &format!("/repos/{repo}/artifacts?kind=operator-notes"),
    )
    .await;
    let read: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(read["meta"]["revision"], 6);
    let (_, body) = get(
        &c,
        base,
        &format!("/repos/{repo}/artifacts?kind=operator-notes&rev=4"),
    )
    .await;
    assert_eq!(
        body, "null",
        "revisions Autobuild's retention removed stay absent"
    );
    let (_, body) = get(&c, base, &format!("/repos/{repo}")).await;
    let record: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(record["lease"]["holder"], "dispatcher", "{record}");
    if f.at_least("L3b") {
        let (_, body) = get(&c, base, "/builds/b-1/streams").await;
        let list: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
        let (_, body) = get(&c, base, "/builds/b-1/streams/st_a/chunks").await;
        let chunks: Value = serde_json::from_str(&body).unwrap();
        assert!(body.contains(&format!(
            r#"{{"stream":"st_a","seq":2,"ts":"{}","parts":[{{"type":"text-delta","id":"t","delta":"part 2"}}]}}"#,
            ts(5102)
        )));
        assert_eq!(
            chunks["chunks"][1],
            json!({"stream": "st_a", "seq": 2, "ts": ts(5102),
                   "parts": [{"type": "text-delta", "id": "t", "delta": "part 2"}]}),
            "{chunks}"
        );
        let (_, body) = get(&c, base, &format!("/repos/{repo}/streams")).await;
        let list: Value = serde_json::from_str(&body).unwrap();
        let list = list.as_array().unwrap();
        assert_eq!(list.len(), 2, "{list:?}");
        let pruned = list.iter().find(|s| s["id"] == "st_c").unwrap();
        assert_eq!(pruned["status"], "closed", "{pruned}");
        let (status, _) = get(
            &c,
            base,
            &format!("/repos/{repo}/artifacts?kind=stream:st_c"),
        )
        .await;
        assert_eq!(status, 200);
    }
    if f.at_least("L4") {
        let (status, body) = get(&c, base, &format!("/sessions/{SESSION}")).await;
        assert_eq!(status, 200, "{body}");
        let record: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(record["operator"], "ann");
        assert_eq!(record["repo"], REPO);
        let (_, body) = get(&c, base, &format!("/repos/{repo}/sessions")).await;
        assert!(body.contains(SESSION), "{body}");
        let (_, body) = get(&c, base, &format!("/sessions/{SESSION}/events")).await;
        let events: Vec<Value> = serde_json::from_str(&body).unwrap();
        assert_eq!(events[0]["session"], SESSION);
        assert!(
            body.ends_with(&format!(
                "{}]",
                envelope("session", SESSION, 2, &ts(6100), SESSION_APPROVAL)
            )),
            "spliced, never re-serialised: {body}"
        );
        let (_, body) = get(
            &c,
            base,
            &format!("/sessions/{SESSION}/artifacts?kind=transcript"),
        )
        .await;
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap()["meta"]["revision"],
            0
        );
        assert_eq!(get(&c, base, "/sessions/os_orphan").await.0, 404);
        if !f.upgraded {
            let (_, body) = get(&c, base, &format!("/sessions/{SESSION}/streams")).await;
            assert!(body.contains("st_d"), "{body}");
        }
    }
    if f.at_least("L6") {
        let p3 = support::protocol3_client();
        let t = format!("/repos/{repo}/tickets/AUT-1/assets");
        let (status, body) = get(&p3, base, &format!("{t}?kind=design&name=home&rev=1")).await;
        assert_eq!(status, 200, "{body}");
        let manifest: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(manifest["revision"], 1, "{manifest}");
        assert_eq!(
            manifest["entries"].as_array().unwrap().len(),
            2,
            "{manifest}"
        );
        let (status, body) = get(
            &p3,
            base,
            &format!("{t}/file?kind=design&name=home&rev=1&path=css%2Fa.css"),
        )
        .await;
        assert_eq!(
            (status, body.as_str()),
            (200, r#"{"contentBase64":"Ym9keXt9"}"#),
            "css/a.css is `body{{}}`"
        );
        // The tombstone: the asset reads as removed.
        let (_, body) = get(&p3, base, &format!("{t}?kind=design&name=home")).await;
        assert_eq!(body, "null");
    }
}

async fn serve(database: &str, blobs: &str) -> Server {
    Server::builder()
        .database(database)
        .blobs(blobs)
        .accept_protocol3()
        .start()
        .await
}

/// Import `f` into SQLite; check the dry run, the report and the reads.
async fn import_and_check_sqlite(f: &Store) {
    let out = tempfile::tempdir().unwrap();
    let db_path = out.path().join("abstore.db");
    let db = sqlite_url(&db_path);
    let blobs = s(&out.path().join("blobs")).to_owned();
    // A dry run writes nothing, and says what it would.
    let (ok, stdout, stderr) = import_from(&f.root, &db, &blobs, false);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("dry run"), "{stdout}");
    assert!(!db_path.exists(), "a dry run created the database");
    assert!(
        !out.path().join("blobs").exists(),
        "a dry run created the blobs"
    );
    assert_eq!(
        reported(&stdout, "cannot import", "artifacts whose blob is missing"),
        1,
        "{stdout}"
    );
    assert_eq!(
        reported(
            &stdout,
            "cannot import",
            "artifacts whose blob's bytes do not hash"
        ),
        1,
        "{stdout}"
    );
    assert_eq!(
        reported(&stdout, "cannot import", "builds that cannot be carried"),
        2,
        "{stdout}"
    );
    assert_eq!(
        reported(&stdout, "cannot import", "build events without"),
        1,
        "{stdout}"
    );
    assert_eq!(reported(&stdout, "note", "*.partial"), 1, "{stdout}");
    assert_eq!(reported(&stdout, "note", "(orphans"), 1, "{stdout}");
    assert!(
        stdout.contains("events checked against the catalogs of any client abstore serves"),
        "{stdout}"
    );
    assert_eq!(reported(&stdout, "note", "held leases"), 1, "{stdout}");
    // b-1's `\u00e9`, and (L4 on) the session's `1e+21`.
    let reserialised = if f.at_least("L4") { 2 } else { 1 };
    assert_eq!(
        reported(&stdout, "note", "re-serialisation would change"),
        reserialised,
        "{stdout}"
    );
    if f.at_least("L3b") {
        assert_eq!(reported(&stdout, "note", "pruned"), 1, "{stdout}");
    }
    if f.at_least("L4") {
        assert_eq!(
            reported(
                &stdout,
                "cannot import",
                "sessions without an imported repository"
            ),
            1,
            "{stdout}"
        );
    }
    let (ok, applied, stderr) = import_from(&f.root, &db, &blobs, true);
    assert!(ok, "{stderr}");
    assert!(applied.contains("imported autobuild-local"), "{applied}");
    let mut server = serve(&db, &blobs).await;
    check_reads(f, &server).await;
    server.stop().await.unwrap();
    // Again: every record is already there, nothing changes.
    let (ok, again, stderr) = import_from(&f.root, &db, &blobs, true);
    assert!(ok, "{stderr}");
    assert!(again.contains(" 0 records new"), "{again}");
}

// ── The tests ───────────────────────────────────────────────────────────────

#[tokio::test(flavor = "multi_thread")]
async fn autobuild_import_every_local_version_into_sqlite() {
    for version in VERSIONS {
        let f = fixture(version, false);
        import_and_check_sqlite(&f).await;
        if version != "L1" {
            let f = fixture(version, true);
            import_and_check_sqlite(&f).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn autobuild_import_into_postgres() {
    support::with_pg("abimport", |url| async move {
        for version in ["L2", "L6"] {
            for upgraded in [false, true] {
                let f = fixture(version, upgraded);
                // A fresh schema each time: the same ids would collide.
                let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&url)
                    .await
                    .unwrap();
                sqlx::raw_sql("DROP SCHEMA public CASCADE; CREATE SCHEMA public;")
                    .execute(&mut conn)
                    .await
                    .unwrap();
                let out = tempfile::tempdir().unwrap();
                let blobs = s(&out.path().join("blobs")).to_owned();
                let (ok, stdout, stderr) = import_from(&f.root, &url, &blobs, false);
                assert!(ok, "{stderr}");
                assert!(stdout.contains("dry run"), "{stdout}");
                let (ok, stdout, stderr) = import_from(&f.root, &url, &blobs, true);
                assert!(ok, "{stderr}\n{stdout}");
                let mut server = serve(&url, &blobs).await;
                check_reads(&f, &server).await;
                server.stop().await.unwrap();
            }
        }
    })
    .await;
}

/// `export --from` then `verify` then `import` gives the store a direct
/// import gives: the two stores export identical archives.
#[tokio::test(flavor = "multi_thread")]
async fn autobuild_import_export_archive_round_trip() {
    let f = fixture("L6", false);
    let out = tempfile::tempdir().unwrap();
    let archive = out.path().join("autobuild.archive");
    let stdout = run_ok(&[
        "export",
        "--from",
        "autobuild-local",
        s(&f.root),
        "--out",
        s(&archive),
        "--quiet",
    ]);
    assert!(stdout.contains("version L6"), "{stdout}");
    let verdict = run_ok(&["verify", s(&archive), "--quiet"]);
    assert!(
        verdict.contains(": OK: autobuild-local archive"),
        "{verdict}"
    );
    let via_archive = sqlite_url(&out.path().join("a.db"));
    let via_blobs = s(&out.path().join("a-blobs")).to_owned();
    let (ok, _, stderr) = support::import(&archive, &via_archive, &via_blobs, true);
    assert!(ok, "{stderr}");
    let direct = sqlite_url(&out.path().join("b.db"));
    let direct_blobs = s(&out.path().join("b-blobs")).to_owned();
    let (ok, _, stderr) = import_from(&f.root, &direct, &direct_blobs, true);
    assert!(ok, "{stderr}");
    let (a, b) = (out.path().join("a.archive"), out.path().join("b.archive"));
    support::export(&via_archive, &via_blobs, &a);
    support::export(&direct, &direct_blobs, &b);
    support::assert_same_archive_body(&a, &b, "archive import vs direct import");
    support::assert_same_archive_body(
        &archive,
        &a,
        "the exported Autobuild archive vs the store's",
    );
    // The source was read from a copy: nothing changed under the state root.
    let mut names: Vec<String> = std::fs::read_dir(&f.root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(
        names
            .iter()
            .all(|n| n == "blobs" || n.starts_with("autobuild.sqlite")),
        "{names:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn autobuild_import_refuses_unknown_schemas() {
    let out = tempfile::tempdir().unwrap();
    let db = sqlite_url(&out.path().join("abstore.db"));
    let blobs = s(&out.path().join("blobs")).to_owned();
    let case = |ddl: &str, expected: &str| {
        let f = tempfile::tempdir().unwrap();
        let conn = rusqlite::Connection::open(f.path().join("autobuild.sqlite")).unwrap();
        conn.execute_batch(ddl).unwrap();
        drop(conn);
        let (ok, stdout, stderr) = import_from(f.path(), &db, &blobs, true);
        assert!(!ok, "{stdout}");
        assert!(stderr.contains(expected), "{stderr}");
        assert!(
            stderr.contains("nothing was read") || stderr.contains("found"),
            "{stderr}"
        );
    };
    case(
        "CREATE TABLE notes (id TEXT)",
        "lacks the builds, events and artifacts tables (found notes(id))",
    );
    case(
        &format!("{} CREATE TABLE widgets (id TEXT);", ddl(6, false)),
        "table widgets is not one of Autobuild's local tables",
    );
    case(
        &format!(
            "{} ALTER TABLE events ADD COLUMN colour TEXT;",
            ddl(2, false)
        ),
        "events has column colour",
    );
    assert!(!out.path().join("abstore.db").exists());
    // Not a store at all.
    let (ok, _, stderr) = import_from(out.path(), &db, &blobs, true);
    assert!(!ok);
    assert!(
        stderr.contains("is not an Autobuild local store"),
        "{stderr}"
    );
}

// ── Proof by difference against Autobuild itself ────────────────────────────

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn bun() -> String {
    std::env::var("ABC_BUN")
        .or_else(|_| std::env::var("BUN"))
        .unwrap_or_else(|_| "bun".to_owned())
}

/// Starts Autobuild's reference server (bench/reference/serve.ts) over the
/// local store at `root`; returns it and its URL.
async fn start_autobuild_reference(
    autobuild: &str,
    root: &Path,
) -> (tokio::process::Child, String) {
    use tokio::io::AsyncBufReadExt as _;
    let mut child = tokio::process::Command::new(bun())
        .arg(workspace().join("bench/reference/serve.ts"))
        .arg(autobuild)
        .arg(format!(
            "sqlite-file:{}",
            root.join("autobuild.sqlite").display()
        ))
        .arg(root.join("blobs"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("run Bun (set ABC_BUN)");
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let url = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(url) = line.strip_prefix("reference listening on ") {
                return url.trim_end_matches('/').to_owned();
            }
        }
        panic!("serve.ts exited without listening")
    })
    .await
    .expect("the reference server started within 60 s");
    (child, url)
}

/// A store written by Autobuild's own local store code, imported, answers
/// every read route exactly as Autobuild's reference server over the same
/// directory does: status and body bytes.
#[tokio::test(flavor = "multi_thread")]
async fn autobuild_reference_local_store_imports_with_identical_reads() {
    let Ok(autobuild) = std::env::var("ABC_AUTOBUILD") else {
        abstore_testkit::skip::needs_user_supplied(
            "autobuild_reference_local_store_imports_with_identical_reads",
            "set ABC_AUTOBUILD to an Autobuild checkout (and ABC_BUN) to run it",
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_url(&dir.path().join("abstore.db"));
    compare_with_autobuild(&autobuild, &db).await;
}

/// The same, imported into PostgreSQL.
#[tokio::test(flavor = "multi_thread")]
async fn autobuild_reference_local_store_into_postgres_with_identical_reads() {
    let Ok(autobuild) = std::env::var("ABC_AUTOBUILD") else {
        abstore_testkit::skip::needs_user_supplied(
            "autobuild_reference_local_store_into_postgres_with_identical_reads",
            "set ABC_AUTOBUILD to an Autobuild checkout (and ABC_BUN) to run it",
        );
        return;
    };
    support::with_pg("abreference", |url| async move {
        compare_with_autobuild(&autobuild, &url).await;
    })
    .await;
}

/// Fills a local store through Autobuild's code, imports it into `db`, and
/// compares every read route of Autobuild's reference server over the
/// store with abstore's over the import.
async fn compare_with_autobuild(autobuild: &str, db: &str) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join(".autobuild");
    let out = std::process::Command::new(bun())
        .arg(workspace().join("conformance/autobuild/reference/populate-local.ts"))
        .arg(autobuild)
        .arg(&root)
        .arg(workspace().join("fixtures/catalog"))
        .output()
        .expect("run Bun (set ABC_BUN)");
    assert!(
        out.status.success(),
        "populate-local.ts failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written: Value = serde_json::from_slice(
        out.stdout
            .split(|b| *b == b'\n')
            .find(|l| l.starts_with(b"{"))
            .expect("populate-local.ts's summary line"),
    )
    .unwrap();
    let blobs = s(&dir.path().join("blobs")).to_owned();
    let (ok, report, stderr) = import_from(&root, db, &blobs, true);
    assert!(ok, "{stderr}");
    assert!(
        report.contains("everything read can be imported"),
        "{report}"
    );
    let (_reference, reference_url) = start_autobuild_reference(autobuild, &root).await;
    let mut server = serve(db, &blobs).await;

    let mut paths = vec!["/builds".to_owned(), "/builds/nope".to_owned()];
    for slug in written["builds"].as_array().unwrap() {
        let slug = slug.as_str().unwrap();
        let base = format!("/builds/{}", enc(slug));
        for tail in [
            "",
            "/events",
            "/events?since=1",
            "/events?since=7",
            "/artifact-list",
        ] {
            paths.push(format!("{base}{tail}"));
        }
        paths.push(format!("{base}/artifacts?kind=absent"));
        for kind in written["kinds"][slug].as_array().unwrap() {
            let kind = enc(kind.as_str().unwrap());
            paths.push(format!("{base}/artifact-list?kind={kind}"));
            paths.push(format!("{base}/artifacts?kind={kind}"));
            for rev in 0..4 {
                paths.push(format!("{base}/artifacts?kind={kind}&rev={rev}"));
            }
        }
    }
    for (repo, kinds) in written["repoKinds"].as_object().unwrap() {
        let base = format!("/repos/{}", enc(repo));
        for tail in ["", "/events", "/events?since=3", "/artifact-list"] {
            paths.push(format!("{base}{tail}"));
        }
        for kind in kinds.as_array().unwrap() {
            let kind = enc(kind.as_str().unwrap());
            paths.push(format!("{base}/artifacts?kind={kind}"));
            for rev in 0..3 {
                paths.push(format!("{base}/artifacts?kind={kind}&rev={rev}"));
            }
        }
    }
    let c = support::client();
    let mut differ = Vec::new();
    let mut compared_bytes = 0;
    for path in &paths {
        let theirs = get(&c, &reference_url, path).await;
        compared_bytes += theirs.1.len();
        let ours = get(&c, server.url(), path).await;
        // Not-found answers carry each server's own error text; the protocol
        // fixes their status only.
        let same = if theirs.0 == 404 {
            ours.0 == 404
        } else {
            theirs == ours
        };
        if !same {
            differ.push(format!(
                "{path}\n  Autobuild: {} {}\n  abstore:   {} {}",
                theirs.0, theirs.1, ours.0, ours.1
            ));
        }
    }
    server.stop().await.unwrap();
    eprintln!(
        "compared {} reads ({compared_bytes} bytes from Autobuild) of a store with {} build \
         events Autobuild's validator took",
        paths.len(),
        written["buildEvents"]
    );
    assert!(
        differ.is_empty(),
        "{} of {} reads differ:\n{}",
        differ.len(),
        paths.len(),
        differ.join("\n")
    );
}

// ── Autobuild's PostgreSQL store ────────────────────────────────────────────

/// Our DDL for the build family at version 8, from docs/autobuild-stores.md
/// §3.2–3.3 (not Autobuild's text), plus a hosted-ticket table.
pub(crate) const PG_V8: &str = "
CREATE TABLE ab_schema_migrations (singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  version integer NOT NULL, checksum text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE builds (slug text PRIMARY KEY, repo text NOT NULL, ticket jsonb, branch text,
  created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL, lease_holder text,
  lease_expires_at timestamptz, lease_ttl_ms bigint, heartbeat_at timestamptz, repo_origin text);
CREATE TABLE events (build text NOT NULL REFERENCES builds(slug) ON DELETE CASCADE, seq bigint NOT NULL,
  ts timestamptz NOT NULL, actor jsonb NOT NULL, type text NOT NULL, payload jsonb NOT NULL, PRIMARY KEY (build, seq));
CREATE TABLE artifacts (build text NOT NULL REFERENCES builds(slug) ON DELETE CASCADE, kind text NOT NULL,
  revision bigint NOT NULL, blob_ref text NOT NULL, metadata jsonb NOT NULL, created_at timestamptz NOT NULL,
  PRIMARY KEY (build, kind, revision));
CREATE TABLE repo_streams (repo text PRIMARY KEY, created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL,
  lease_holder text, lease_expires_at timestamptz, lease_ttl_ms bigint, heartbeat_at timestamptz);
CREATE TABLE repo_events (repo text NOT NULL REFERENCES repo_streams(repo) ON DELETE CASCADE, seq bigint NOT NULL,
  ts timestamptz NOT NULL, actor jsonb NOT NULL, type text NOT NULL, payload jsonb NOT NULL, PRIMARY KEY (repo, seq));
CREATE TABLE repo_artifacts (repo text NOT NULL REFERENCES repo_streams(repo) ON DELETE CASCADE, kind text NOT NULL,
  revision bigint NOT NULL, blob_ref text NOT NULL, metadata jsonb NOT NULL, created_at timestamptz NOT NULL,
  PRIMARY KEY (repo, kind, revision));
CREATE SEQUENCE sessions_creation_seq;
CREATE TABLE sessions (id text PRIMARY KEY, repo text NOT NULL, operator text NOT NULL, title text,
  created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL,
  creation_seq bigint NOT NULL DEFAULT nextval('sessions_creation_seq'));
CREATE TABLE session_events (session text NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, seq bigint NOT NULL,
  ts timestamptz NOT NULL, actor jsonb NOT NULL, type text NOT NULL, payload jsonb NOT NULL, PRIMARY KEY (session, seq));
CREATE TABLE session_artifacts (session text NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, kind text NOT NULL,
  revision bigint NOT NULL, blob_ref text NOT NULL, metadata jsonb NOT NULL, created_at timestamptz NOT NULL,
  PRIMARY KEY (session, kind, revision));
CREATE SEQUENCE streams_creation_seq;
CREATE TABLE streams (id text PRIMARY KEY, scope_kind text NOT NULL, build text REFERENCES builds(slug),
  repo text REFERENCES repo_streams(repo), label text NOT NULL, format text NOT NULL, status text NOT NULL,
  outcome text, artifact_kind text, artifact_revision bigint, artifact_blob_ref text,
  created_at timestamptz NOT NULL, closed_at timestamptz, session text REFERENCES sessions(id),
  creation_seq bigint NOT NULL DEFAULT nextval('streams_creation_seq'));
CREATE TABLE stream_chunks (stream text NOT NULL REFERENCES streams(id) ON DELETE CASCADE, seq bigint NOT NULL,
  ts timestamptz NOT NULL, parts jsonb NOT NULL, PRIMARY KEY (stream, seq));
CREATE TABLE ticket_assets (repo text NOT NULL, ticket_id text NOT NULL, kind text NOT NULL, name text NOT NULL,
  revision bigint NOT NULL, layout text NOT NULL, manifest jsonb NOT NULL, size bigint NOT NULL,
  removed boolean NOT NULL DEFAULT false, created_at timestamptz NOT NULL,
  PRIMARY KEY (repo, ticket_id, kind, name, revision));
CREATE TABLE ab_ticket_schema_migrations (singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  version integer NOT NULL, checksum text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now());
INSERT INTO ab_ticket_schema_migrations (version, checksum) VALUES (1, 'x');
CREATE TABLE ab_tickets (team text NOT NULL, id text NOT NULL, creation_key text, title text NOT NULL,
  body text NOT NULL DEFAULT '', state text NOT NULL, labels text[] NOT NULL DEFAULT '{}',
  created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL, PRIMARY KEY (team, id),
  UNIQUE (team, creation_key));
CREATE TABLE ab_ticket_comments (team text NOT NULL, ticket_id text NOT NULL, seq bigint NOT NULL,
  body text NOT NULL, created_at timestamptz NOT NULL, PRIMARY KEY (team, ticket_id, seq),
  FOREIGN KEY (team, ticket_id) REFERENCES ab_tickets ON DELETE CASCADE);
CREATE TABLE ab_ticket_blockers (team text NOT NULL, ticket_id text NOT NULL, blocker_id text NOT NULL,
  PRIMARY KEY (team, ticket_id, blocker_id), FOREIGN KEY (team, ticket_id) REFERENCES ab_tickets ON DELETE CASCADE,
  FOREIGN KEY (team, blocker_id) REFERENCES ab_tickets ON DELETE CASCADE, CHECK (ticket_id <> blocker_id));
INSERT INTO ab_tickets VALUES
  ('ENG', 'ticket-b', NULL, 'Second \"quoted\"', E'body\nline', 'Ready', '{x,y}', '2026-08-04T17:40:00Z', '2026-08-04T17:41:00Z'),
  ('ENG', 'ticket-a', 'key-1', 'First', '', 'Triage', '{}', '2026-08-04T17:39:00Z', '2026-08-04T17:39:00Z'),
  ('OPS', 'ticket-c', NULL, 'Ops', '', 'Custom', '{}', '2026-08-04T17:38:00Z', '2026-08-04T17:38:00.250Z');
INSERT INTO ab_ticket_comments VALUES ('ENG', 'ticket-b', 1, 'looks good', '2026-08-04T17:42:00Z'),
  ('ENG', 'ticket-b', 2, 'merged', '2026-08-04T17:43:00Z');
INSERT INTO ab_ticket_blockers VALUES ('ENG', 'ticket-b', 'ticket-a');
";

#[tokio::test(flavor = "multi_thread")]
async fn autobuild_import_from_postgres_store() {
    support::with_pg("abpgsource", |url| async move {
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&url)
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let source_blobs = dir.path().join("source-blobs");
        std::fs::create_dir_all(&source_blobs).unwrap();
        let flat_blob = |bytes: &[u8]| {
            let sha = abstore::blobs::blob_ref(bytes);
            std::fs::write(source_blobs.join(&sha), bytes).unwrap();
            sha
        };
        let db = sqlite_url(&dir.path().join("abstore.db"));
        let blobs = s(&dir.path().join("blobs")).to_owned();
        let from = |args: &[&str]| {
            let mut all = vec![
                "import",
                "--from",
                "autobuild-postgres",
                url.as_str(),
                "--source-blobs",
                s(&source_blobs),
                "--database",
                &db,
                "--blobs",
                &blobs,
                "--quiet",
            ];
            all.extend_from_slice(args);
            run(&all)
        };
        // Not a store yet: refused, naming what it found.
        let (ok, _, stderr) = from(&[]);
        assert!(!ok);
        assert!(stderr.contains("no ab_schema_migrations table"), "{stderr}");
        sqlx::raw_sql(PG_V8).execute(&mut conn).await.unwrap();
        sqlx::raw_sql("INSERT INTO ab_schema_migrations (version, checksum) VALUES (9, 'x')")
            .execute(&mut conn)
            .await
            .unwrap();
        let (ok, _, stderr) = from(&[]);
        assert!(!ok);
        assert!(stderr.contains("schema version 9"), "{stderr}");
        let plan = flat_blob(b"# Plan\n");
        let notes = flat_blob(b"notes");
        let seed = format!(
            "UPDATE ab_schema_migrations SET version = 8;
             INSERT INTO builds VALUES ('b-1', '{REPO}', '{{\"source\": \"linear\", \"id\": \"AUT-1\"}}', 'main',
               '2026-08-04T17:33:01.000Z', '2026-08-04T17:33:09.000Z', 'runner-1', '2099-01-01T00:00:00Z', 60000,
               '2026-08-04T17:33:08.000Z', 'git@github.com:me/widgets.git');
             INSERT INTO events VALUES
               ('b-1', 1, '2026-08-04T17:33:02.123Z', '{{\"kind\": \"dispatcher\"}}', 'build.created',
                '{{\"ticket\": {{\"source\": \"linear\", \"id\": \"AUT-1\"}}, \"repo\": \"{REPO}\", \"baseBranch\": \"main\"}}'),
               ('b-1', 2, '2026-08-04T17:33:02.123456Z', '{{\"kind\": \"kernel\"}}', 'plan.started', '{{\"round\": 1}}');
             INSERT INTO artifacts VALUES ('b-1', 'plan', 0, '{plan}', '{{\"round\": 1}}', '2026-08-04T17:33:03.000Z');
             INSERT INTO repo_streams VALUES ('{REPO}', '2026-08-04T17:33:00.000Z', '2026-08-04T17:33:05.000Z',
               NULL, NULL, NULL, NULL);
             INSERT INTO repo_events VALUES ('{REPO}', 1, '2026-08-04T17:33:04.000Z', '{{\"kind\": \"dispatcher\"}}',
               'dispatcher.tick-started', '{{\"run\": \"r-1\"}}');
             INSERT INTO repo_artifacts VALUES ('{REPO}', 'operator-notes', 3, '{notes}', '{{}}', '2026-08-04T17:33:05.000Z');
             INSERT INTO sessions (id, repo, operator, title, created_at, updated_at)
               VALUES ('{SESSION}', '{REPO}', 'ann', NULL, '2026-08-04T17:33:06.000Z', '2026-08-04T17:33:06.000Z');
             INSERT INTO session_events VALUES ('{SESSION}', 1, '2026-08-04T17:33:06.000Z',
               '{{\"kind\": \"human\", \"user\": \"ann\"}}', 'session.created', '{{}}'),
               ('{SESSION}', 2, '2026-08-04T17:33:06.500Z',
               '{{\"kind\": \"agent\", \"role\": \"operator\", \"session\": \"{SESSION}\"}}', 'approval.requested',
               '{{\"turn\": \"t1\", \"toolCallId\": \"c1\", \"toolName\": \"shell\",
                 \"input\": {{\"b\": 1.50, \"10\": 1, \"2\": [1e21, 0.0000001], \"a\": \"x\\u00e9\"}}}}');
             INSERT INTO streams (id, scope_kind, build, label, format, status, created_at)
               VALUES ('st_p', 'build', 'b-1', 'chat', 'ai-ui-message-stream/v1', 'open', '2026-08-04T17:33:07.000Z');
             INSERT INTO stream_chunks VALUES ('st_p', 1, '2026-08-04T17:33:07.500Z', '[{{\"type\": \"start\"}}]');
             INSERT INTO ticket_assets VALUES
               ('{REPO}', 'AUT-1', 'design', 'home', 0, 'file',
                '[{{\"type\": \"file\", \"path\": \"home.txt\", \"size\": 5, \"blobRef\": \"{notes}\"}}]', 5, false,
                '2026-08-04T17:33:08.000Z'),
               ('{REPO}', 'AUT-1', 'design', 'home', 1, 'file', '[]', 0, true, '2026-08-04T17:33:09.000Z');"
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(seed))
            .execute(&mut conn)
            .await
            .unwrap();
        let (ok, stdout, stderr) = from(&["--apply"]);
        assert!(ok, "{stderr}");
        assert!(stdout.contains("build-family schema version 8"), "{stdout}");
        assert_eq!(reported(&stdout, "note", "sub-millisecond"), 1, "{stdout}");
        assert_eq!(reported(&stdout, "note", "held leases"), 1, "{stdout}");
        let mut server = serve(&db, &blobs).await;
        let c = support::client();
        let base = server.url();
        // jsonb's order (shorter keys first), integer-like keys first, JS
        // numbers: what Autobuild's Bun server printed.
        let (_, body) = get(&c, base, "/builds/b-1/events").await;
        assert_eq!(
            body,
            format!(
                concat!(
                    r#"[{{"build":"b-1","seq":1,"ts":"2026-08-04T17:33:02.123Z","actor":{{"kind":"dispatcher"}},"type":"build.created","payload":{{"repo":"{}","ticket":{{"id":"AUT-1","source":"linear"}},"baseBranch":"main"}}}},"#,
                    r#"{{"build":"b-1","seq":2,"ts":"2026-08-04T17:33:02.123Z","actor":{{"kind":"kernel"}},"type":"plan.started","payload":{{"round":1}}}}]"#
                ),
                REPO
            )
        );
        let (_, body) = get(&c, base, &format!("/sessions/{SESSION}/events")).await;
        assert!(
            body.contains(r#""input":{"2":[1e+21,1e-7],"10":1,"a":"xé","b":1.5}"#),
            "{body}"
        );
        let (_, body) = get(&c, base, "/builds/b-1").await;
        let record: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(record["ticket"], json!({"source": "linear", "id": "AUT-1"}));
        assert_eq!(record["repoOrigin"], "git@github.com:me/widgets.git");
        let (_, body) = get(&c, base, "/builds/b-1/artifacts?kind=plan").await;
        let read: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(read["contentBase64"], "IyBQbGFuCg==", "{read}");
        let repo = enc(REPO);
        let (_, body) = get(&c, base, &format!("/repos/{repo}/artifacts?kind=operator-notes")).await;
        let read: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(read["meta"]["revision"], 3, "{read}");
        let (_, body) = get(&c, base, &format!("/sessions/{SESSION}/events")).await;
        assert!(body.contains(r#""session":"os_11111111"#), "{body}");
        let (_, body) = get(&c, base, "/builds/b-1/streams/st_p/chunks").await;
        assert!(
            body.contains(r#"{"stream":"st_p","seq":1,"ts":"2026-08-04T17:33:07.500Z","parts":[{"type":"start"}]}"#),
            "{body}"
        );
        let p3 = support::protocol3_client();
        let t = format!("/repos/{repo}/tickets/AUT-1/assets");
        let (status, body) = get(&p3, base, &format!("{t}?kind=design&name=home&rev=0")).await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains(r#""path":"home.txt""#), "{body}");
        let (_, body) = get(&p3, base, &format!("{t}?kind=design&name=home")).await;
        assert_eq!(body, "null", "removed at revision 1");
        server.stop().await.unwrap();
        // The hosted tickets, as abstore's records.
        let archive = dir.path().join("check.archive");
        support::export(&db, &blobs, &archive);
        let text = std::fs::read_to_string(&archive).unwrap();
        let records: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|r| r["type"].as_str().unwrap().starts_with("ticket_") || r["type"] == "ticket")
            .filter(|r| !r["type"].as_str().unwrap().starts_with("ticket_asset"))
            .collect();
        assert_eq!(
            records,
            vec![
                json!({"type": "ticket_team", "team_key": "ENG", "last_seq": 2}),
                json!({"type": "ticket_team", "team_key": "OPS", "last_seq": 1}),
                json!({"type": "ticket", "team_key": "ENG", "id": "ticket-a", "seq": 1, "creation_key": "key-1",
                       "title_json": "\"First\"", "body_json": "\"\"", "state": "Triage", "labels_json": "[]",
                       "created_at": 1785865140000_i64, "updated_at": 1785865140000_i64}),
                json!({"type": "ticket", "team_key": "ENG", "id": "ticket-b", "seq": 2, "creation_key": null,
                       "title_json": "\"Second \\\"quoted\\\"\"", "body_json": "\"body\\nline\"", "state": "Ready",
                       "labels_json": "[\"x\",\"y\"]", "created_at": 1785865200000_i64, "updated_at": 1785865260000_i64}),
                json!({"type": "ticket", "team_key": "OPS", "id": "ticket-c", "seq": 1, "creation_key": null,
                       "title_json": "\"Ops\"", "body_json": "\"\"", "state": "Custom", "labels_json": "[]",
                       "created_at": 1785865080000_i64, "updated_at": 1785865080250_i64}),
                json!({"type": "ticket_blocker", "team_key": "ENG", "ticket_id": "ticket-b", "blocker_id": "ticket-a"}),
                json!({"type": "ticket_comment", "team_key": "ENG", "ticket_id": "ticket-b", "seq": 1,
                       "body_json": "\"looks good\"", "created_at": 1785865320000_i64}),
                json!({"type": "ticket_comment", "team_key": "ENG", "ticket_id": "ticket-b", "seq": 2,
                       "body_json": "\"merged\"", "created_at": 1785865380000_i64}),
            ]
        );
    })
    .await;
}
