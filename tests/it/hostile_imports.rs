//! The importer treats its sources as hostile (issue 49, items 2–5;
//! docs/security.md, "Files we import"), tested on the RELEASE binary as the
//! other adversarial tests are: `abstore import` run as a process, then
//! `abstore serve` and HTTP where serving matters.
//!
//! - Every imported row passes its write route's checks: a ticket-asset
//!   manifest the upload route refuses (`../../../etc/cron.d/x`, `/abs/evil`,
//!   `..`, a duplicate path, NUL) is reported and left out, from a local
//!   store, from PostgreSQL and from a tampered abstore archive, and the
//!   file route answers it absent (`null`), never its bytes.
//! - Special files never hang an import: a blob that is a FIFO or a link to
//!   `/dev/zero` is a reported row, a `-wal` FIFO refuses the store at once.
//! - SIGINT and SIGTERM end an import with a message and leave nothing in
//!   the temporary directory, whose copies are private (0700, 0600) and
//!   where `--temp-dir` / `ABSTORE_TEMP_DIR` say; what a SIGKILL leaves, the
//!   next import removes.
//! - One odd row (a BLOB slug, text in an integer column, an artifact
//!   revision of i64::MAX, a jsonb value nested deeper than 128) is a
//!   reported row naming its build, and the rest imports.

use std::io::Read as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::params;
use serde_json::{Value, json};

use crate::autobuild_import::{PG_V8, ddl, reported};
use crate::support::{self, Server, enc, path_text as s};

const REPO: &str = "/home/me/widgets";
const T: &str = "2026-08-04T17:33:00.000Z";
/// How long any import here may take; past it, it hangs.
const DEADLINE: Duration = Duration::from_secs(90);
const CREATED: &str =
    r#"{"ticket":{"source":"linear","id":"AUT-1"},"repo":"/home/me/widgets","baseBranch":"main"}"#;

/// The release binary, or a loud skip (`None`).
fn release() -> Option<String> {
    support::server::release_bin()
}

/// A finished run.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn ok(&self) -> bool {
        self.code == Some(0)
    }
}

/// A running `abstore` whose output is drained as it comes.
struct Running {
    child: std::process::Child,
    out: std::thread::JoinHandle<String>,
    err: std::thread::JoinHandle<String>,
}

fn spawn(bin: &str, args: &[&str], env: &[(&str, &str)]) -> Running {
    let mut child = std::process::Command::new(bin)
        .args(args)
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run abstore");
    let drain = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            pipe.read_to_string(&mut text).ok();
            text
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    Running { child, out, err }
}

impl Running {
    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Waits at most `bound`; a process still running then has hung: it is
    /// killed and the test fails, naming `what`.
    fn finish(mut self, bound: Duration, what: &str) -> Run {
        let start = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if start.elapsed() > bound {
                self.child.kill().ok();
                self.child.wait().ok();
                let stderr = self.err.join().unwrap_or_default();
                panic!("{what}: still running after {bound:?} (hung); stderr:\n{stderr}");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        Run {
            code: status.code(),
            stdout: self.out.join().unwrap_or_default(),
            stderr: self.err.join().unwrap_or_default(),
        }
    }

    fn signal(&self, name: &str) {
        let sent = std::process::Command::new("kill")
            .args([&format!("-{name}"), &self.pid()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -{name}");
    }
}

fn run(bin: &str, args: &[&str], env: &[(&str, &str)]) -> Run {
    spawn(bin, args, env).finish(DEADLINE, &format!("abstore {}", args.join(" ")))
}

fn sqlite_url(path: &Path) -> String {
    format!("sqlite://{}", path.display())
}

fn mkfifo(path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo {}", path.display());
}

/// The entries of a directory (its names).
fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir).map_or_else(
        |_| Vec::new(),
        |d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        },
    )
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

// ── An Autobuild local store (L6, fresh) ────────────────────────────────────

struct Source {
    _dir: tempfile::TempDir,
    root: PathBuf,
    conn: rusqlite::Connection,
}

impl Source {
    fn new() -> Source {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join(".autobuild");
        std::fs::create_dir_all(root.join("blobs")).unwrap();
        let conn = rusqlite::Connection::open(root.join("autobuild.sqlite")).unwrap();
        conn.execute_batch(&ddl(6, false)).unwrap();
        conn.execute(
            "INSERT INTO repo_streams (repo, created_at, updated_at) VALUES (?1, ?2, ?2)",
            params![REPO, T],
        )
        .unwrap();
        Source {
            _dir: dir,
            root,
            conn,
        }
    }

    fn blob_path(&self, sha: &str) -> PathBuf {
        self.root.join("blobs").join(&sha[..2]).join(sha)
    }

    /// Writes `bytes` as a blob; returns its address.
    fn blob(&self, bytes: &[u8]) -> String {
        let sha = abstore::blobs::blob_ref(bytes);
        let path = self.blob_path(&sha);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
        sha
    }

    fn exec(&self, sql: &str, values: impl rusqlite::Params) {
        self.conn.execute(sql, values).unwrap();
    }

    /// A build abstore takes: its record and a `build.created` event.
    fn build(&self, slug: &str) {
        self.exec(
            "INSERT INTO builds (slug, repo, branch, created_at, updated_at) VALUES (?1, ?2, 'main', ?3, ?3)",
            params![slug, REPO, T],
        );
        self.exec(
            "INSERT INTO events VALUES (?1, 1, ?2, '{\"kind\":\"dispatcher\"}', 'build.created', ?3)",
            params![slug, T, CREATED],
        );
    }

    fn artifact(&self, slug: &str, kind: &str, revision: i64, blob: &str) {
        self.exec(
            "INSERT INTO artifacts VALUES (?1, ?2, ?3, ?4, '{}', ?5)",
            params![slug, kind, revision, blob, T],
        );
    }

    /// One revision (0) of ticket asset `kind/name` of ticket AUT-1.
    fn asset(&self, kind: &str, name: &str, layout: &str, manifest: &str) {
        self.exec(
            "INSERT INTO ticket_assets VALUES (?1, 'AUT-1', ?2, ?3, 0, ?4, ?5, 0, 0, ?6)",
            params![REPO, kind, name, layout, manifest, T],
        );
    }

    /// `abstore import --from autobuild-local` into a fresh store under
    /// `out`: (its database URL, blob directory, the run).
    fn import(&self, bin: &str, out: &Path, extra: &[&str]) -> (String, String, Run) {
        let db = sqlite_url(&out.join("abstore.db"));
        let blobs = s(&out.join("blobs")).to_owned();
        let mut args = vec![
            "import",
            "--from",
            "autobuild-local",
            s(&self.root),
            "--database",
            &db,
            "--blobs",
            &blobs,
            "--quiet",
        ];
        args.extend_from_slice(extra);
        let done = run(bin, &args, &[]);
        (db, blobs, done)
    }
}

fn file_entry(path: &str, size: u64, blob: &str) -> String {
    json!([{"type": "file", "path": path, "size": size, "blobRef": blob}]).to_string()
}

/// `abstore serve` (release) on an imported store.
async fn serve(database: &str, blobs: &str) -> Server {
    Server::builder()
        .release()
        .expect("the release binary")
        .database(database)
        .blobs(blobs)
        .accept_protocol3()
        .start()
        .await
}

async fn get(c: &reqwest::Client, base: &str, path: &str) -> (u16, String) {
    let r = c.get(format!("{base}{path}")).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// The file route of asset `design/<name>` of ticket AUT-1.
fn file_route(name: &str, path: &str) -> String {
    format!(
        "/repos/{}/tickets/AUT-1/assets/file?kind=design&name={name}&path={}",
        enc(REPO),
        enc(path)
    )
}

// ── Item 2: every row passes its write route's checks ───────────────────────

/// The manifests `POST …/assets` refuses with 422, each one asset of its
/// own: (name, layout, manifest), with the blob `blob` of 2 bytes.
fn hostile_manifests(blob: &str) -> Vec<(&'static str, &'static str, String)> {
    vec![
        ("cron", "tree", file_entry("../../../etc/cron.d/x", 2, blob)),
        ("abs", "tree", file_entry("/abs/evil", 2, blob)),
        (
            "dotdot",
            "tree",
            json!([{"type": "dir", "path": ".."}, {"type": "file", "path": "a", "size": 2, "blobRef": blob}])
                .to_string(),
        ),
        (
            "dup",
            "tree",
            json!([{"type": "file", "path": "same", "size": 2, "blobRef": blob},
                   {"type": "file", "path": "same", "size": 2, "blobRef": blob}])
            .to_string(),
        ),
        ("back", "tree", file_entry("a\\b", 2, blob)),
        ("deep", "file", file_entry("dir/file", 2, blob)),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_ticket_asset_manifests_never_reach_the_file_route() {
    let Some(bin) = release() else { return };
    let src = Source::new();
    let ok = src.blob(b"ok");
    src.build("b-ok");
    src.asset("design", "good", "tree", &file_entry("ok.txt", 2, &ok));
    let mut refused = hostile_manifests(&ok);
    refused.push(("nul", "tree", file_entry("a\0b", 2, &ok)));
    for (name, layout, manifest) in &refused {
        src.asset("design", name, layout, manifest);
    }
    // A kind the label rule refuses, and a file larger than its entry says
    // (only the promised 2 bytes are ever read).
    src.asset("..", "x", "tree", &file_entry("ok.txt", 2, &ok));
    let big = src.blob(b"ten bytes!");
    src.asset("design", "big", "tree", &file_entry("big.txt", 2, &big));
    let out = tempfile::tempdir().unwrap();
    let (db, blobs, done) = src.import(&bin, out.path(), &["--apply"]);
    assert!(done.ok(), "{}", done.stderr);
    let stdout = &done.stdout;
    assert_eq!(
        reported(
            stdout,
            "cannot import",
            "ticket assets that cannot be carried"
        ),
        refused.len() as u64 + 2,
        "{stdout}"
    );
    // The upload route's own 422 messages name why.
    assert!(stdout.contains("must be relative"), "{stdout}");

    let mut server = serve(&db, &blobs).await;
    let p3 = support::protocol3_client();
    let base = server.url().to_owned();
    let (status, body) = get(&p3, &base, &file_route("good", "ok.txt")).await;
    assert_eq!(
        (status, body.as_str()),
        (200, r#"{"contentBase64":"b2s="}"#)
    );
    // Absent: the protocol's `null` for an asset that does not exist.
    let absent = (200, "null".to_owned());
    assert_eq!(
        get(&p3, &base, &file_route("cron", "../../../etc/cron.d/x")).await,
        absent
    );
    for (name, _, manifest) in &refused {
        let entries: Value = serde_json::from_str(manifest).unwrap();
        for entry in entries.as_array().unwrap() {
            let path = entry["path"].as_str().unwrap();
            // Absent; a NUL in the query is refused before any lookup (400).
            let got = get(&p3, &base, &file_route(name, path)).await;
            assert!(got == absent || got.0 == 400, "{name} {path:?}: {got:?}");
        }
    }
    assert_eq!(get(&p3, &base, &file_route("big", "big.txt")).await, absent);
    let (_, list) = get(
        &p3,
        &base,
        &format!("/repos/{}/tickets/AUT-1/assets/list", enc(REPO)),
    )
    .await;
    let list: Value = serde_json::from_str(&list).unwrap();
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_ticket_asset_manifests_from_postgres_never_reach_the_file_route() {
    let Some(bin) = release() else { return };
    support::with_pg("abhostileassets", |url| async move {
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&url)
            .await
            .unwrap();
        sqlx::raw_sql(PG_V8).execute(&mut conn).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let source_blobs = dir.path().join("source-blobs");
        std::fs::create_dir_all(&source_blobs).unwrap();
        let ok = abstore::blobs::blob_ref(b"ok");
        std::fs::write(source_blobs.join(&ok), b"ok").unwrap();
        let insert = |name: &str, layout: &str, manifest: &str| {
            format!(
                "INSERT INTO ticket_assets VALUES ('{REPO}', 'AUT-1', 'design', '{name}', 0, '{layout}', \
                 '{}'::jsonb, 2, false, '{T}');",
                manifest.replace('\'', "''")
            )
        };
        let mut seed = "INSERT INTO ab_schema_migrations (version, checksum) VALUES (8, 'x');".to_owned();
        seed += &insert("good", "tree", &file_entry("ok.txt", 2, &ok));
        let refused = hostile_manifests(&ok);
        for (name, layout, manifest) in &refused {
            seed += &insert(name, layout, manifest);
        }
        sqlx::raw_sql(sqlx::AssertSqlSafe(seed))
            .execute(&mut conn)
            .await
            .unwrap();
        let db = sqlite_url(&dir.path().join("abstore.db"));
        let blobs = s(&dir.path().join("blobs")).to_owned();
        let done = run(
            &bin,
            &[
                "import",
                "--from",
                "autobuild-postgres",
                &url,
                "--source-blobs",
                s(&source_blobs),
                "--database",
                &db,
                "--blobs",
                &blobs,
                "--quiet",
                "--apply",
            ],
            &[],
        );
        assert!(done.ok(), "{}", done.stderr);
        assert_eq!(
            reported(&done.stdout, "cannot import", "ticket assets that cannot be carried"),
            refused.len() as u64,
            "{}",
            done.stdout
        );
        let mut server = serve(&db, &blobs).await;
        let p3 = support::protocol3_client();
        let base = server.url().to_owned();
        assert_eq!(get(&p3, &base, &file_route("good", "ok.txt")).await.0, 200);
        // Absent: the protocol's `null` for an asset that does not exist.
        for (name, path) in [("cron", "../../../etc/cron.d/x"), ("abs", "/abs/evil")] {
            assert_eq!(
                get(&p3, &base, &file_route(name, path)).await,
                (200, "null".to_owned()),
                "{name}"
            );
        }
        server.stop().await.unwrap();
    })
    .await;
}

/// Rewrites one archive line in place; true for the line it rewrote.
type Edit = dyn Fn(&mut Value) -> bool;

/// An archive line rewritten as an attacker would: the footer's digest
/// recomputed, so only the rows' own checks can refuse it.
fn tamper(archive: &Path, out: &Path, edit: impl Fn(&mut Value) -> bool) {
    use sha2::Digest as _;
    let text = std::fs::read_to_string(archive).unwrap();
    let mut lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut edited = 0;
    for line in &mut lines {
        if edit(line) {
            edited += 1;
        }
    }
    assert_eq!(edited, 1, "one line edited");
    let body = &lines[1..lines.len() - 1];
    let mut digest = sha2::Sha256::new();
    for line in body {
        digest.update(line.to_string().as_bytes());
        digest.update(b"\n");
    }
    let sha = hex::encode(digest.finalize());
    let footer = lines.last_mut().unwrap();
    footer["sha256"] = json!(sha);
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(out, text).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_archive_rows_fail_verify_and_import() {
    let Some(bin) = release() else { return };
    let src = Source::new();
    let ok = src.blob(b"ok");
    src.build("b-ok");
    src.asset("design", "good", "tree", &file_entry("ok.txt", 2, &ok));
    let out = tempfile::tempdir().unwrap();
    let (db, blobs, done) = src.import(&bin, out.path(), &["--apply"]);
    assert!(done.ok(), "{}", done.stderr);
    let archive = out.path().join("clean.archive");
    let exported = run(
        &bin,
        &[
            "export",
            "--database",
            &db,
            "--blobs",
            &blobs,
            "--out",
            s(&archive),
            "--quiet",
        ],
        &[],
    );
    assert!(exported.ok(), "{}", exported.stderr);
    let cases: Vec<(&str, Box<Edit>, &str)> = vec![
        (
            "traversal",
            Box::new(|l: &mut Value| {
                l["type"] == "ticket_asset" && {
                    let text = l["entries"]
                        .as_str()
                        .unwrap()
                        .replace("ok.txt", "../../../etc/cron.d/x");
                    l["entries"] = json!(text);
                    true
                }
            }),
            "has an empty, '.' or '..' segment",
        ),
        (
            "envelope",
            Box::new(|l: &mut Value| {
                l["type"] == "event" && {
                    l["envelope"] = json!(r#"{"build":"b-ok","seq":1,"ts":"x"}"#);
                    true
                }
            }),
            "envelope",
        ),
        (
            "nul-holder",
            Box::new(|l: &mut Value| {
                l["type"] == "resource" && l["kind"] == "build" && {
                    l["lease_holder"] = json!("w\u{0}");
                    l["lease_expires_at"] = json!(1);
                    true
                }
            }),
            "NUL",
        ),
    ];
    for (name, edit, why) in cases {
        let bad = out.path().join(format!("{name}.archive"));
        tamper(&archive, &bad, edit);
        let verdict = run(&bin, &["verify", s(&bad), "--quiet"], &[]);
        assert!(!verdict.ok(), "{name}: verify passed: {}", verdict.stdout);
        assert!(
            verdict.stderr.contains("INVALID") && verdict.stderr.contains(why),
            "{name}: {}",
            verdict.stderr
        );
        let dest = out.path().join(format!("{name}.db"));
        let imported = run(
            &bin,
            &[
                "import",
                s(&bad),
                "--database",
                &sqlite_url(&dest),
                "--blobs",
                s(&out.path().join(format!("{name}-blobs"))),
                "--quiet",
                "--apply",
            ],
            &[],
        );
        assert!(!imported.ok(), "{name}: import passed");
        assert!(imported.stderr.contains(why), "{name}: {}", imported.stderr);
        assert!(!dest.exists(), "{name}: the import created its database");
    }
}

// ── Item 3: special files, signals; item 4: private copies ──────────────────

#[tokio::test(flavor = "multi_thread")]
async fn special_files_in_a_source_store_never_hang_the_import() {
    let Some(bin) = release() else { return };
    let src = Source::new();
    src.build("b-ok");
    for slug in ["b-fifo", "b-zero"] {
        src.build(slug);
    }
    let fifo = abstore::blobs::blob_ref(b"a fifo");
    mkfifo(&src.blob_path(&fifo));
    src.artifact("b-fifo", "plan", 0, &fifo);
    let zero = abstore::blobs::blob_ref(b"endless zeros");
    let link = src.blob_path(&zero);
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
    src.artifact("b-zero", "plan", 0, &zero);
    src.asset("design", "piped", "tree", &file_entry("p.txt", 6, &fifo));
    let out = tempfile::tempdir().unwrap();
    let (db, blobs, done) = src.import(&bin, out.path(), &["--apply"]);
    assert!(done.ok(), "{}", done.stderr);
    assert_eq!(
        reported(
            &done.stdout,
            "cannot import",
            "artifacts whose blob is not a regular file"
        ),
        2,
        "{}",
        done.stdout
    );
    assert!(
        done.stdout.contains("it is a FIFO") && done.stdout.contains("it is a symbolic link"),
        "{}",
        done.stdout
    );
    assert_eq!(
        reported(
            &done.stdout,
            "cannot import",
            "ticket assets that cannot be carried"
        ),
        1,
        "{}",
        done.stdout
    );
    let mut server = serve(&db, &blobs).await;
    let c = support::client();
    let base = server.url().to_owned();
    assert_eq!(get(&c, &base, "/builds/b-ok/events").await.0, 200);
    for slug in ["b-fifo", "b-zero"] {
        let (status, body) = get(&c, &base, &format!("/builds/{slug}/artifacts?kind=plan")).await;
        assert_eq!((status, body.as_str()), (200, "null"), "{slug}");
    }
    server.stop().await.unwrap();

    // A `-wal` that is a FIFO: the store is refused at once, nothing left
    // in the temporary directory (TMPDIR: the default place).
    let src = Source::new();
    src.build("b-ok");
    drop(src.conn);
    mkfifo(&src.root.join("autobuild.sqlite-wal"));
    let tmp = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let db = sqlite_url(&out.path().join("abstore.db"));
    let done = run(
        &bin,
        &[
            "import",
            "--from",
            "autobuild-local",
            s(&src.root),
            "--database",
            &db,
            "--blobs",
            s(&out.path().join("blobs")),
            "--quiet",
        ],
        &[("TMPDIR", s(tmp.path()))],
    );
    assert!(!done.ok());
    assert!(
        done.stderr
            .contains("autobuild.sqlite-wal is a FIFO, not a regular file"),
        "{}",
        done.stderr
    );
    assert_eq!(entries(tmp.path()), Vec::<String>::new());
}

/// A store with a held write lock on `dest` (a migrated abstore store): an
/// import into it waits in its transaction's first statement, its archive
/// written. Returns the holding connection.
fn locked_destination(bin: &str, dest: &Path) -> rusqlite::Connection {
    let migrated = run(bin, &["migrate", "--database", &sqlite_url(dest)], &[]);
    assert!(migrated.ok(), "{}", migrated.stderr);
    let conn = rusqlite::Connection::open(dest).unwrap();
    conn.execute_batch("BEGIN IMMEDIATE").unwrap();
    conn
}

/// Polls until `find` finds something in `dir`, while `running` runs.
fn wait_for(
    running: &mut Running,
    dir: &Path,
    what: &str,
    find: impl Fn(&Path) -> Option<PathBuf>,
) -> PathBuf {
    let start = Instant::now();
    loop {
        if let Some(found) = find(dir) {
            return found;
        }
        assert!(
            running.alive(),
            "the import ended before {what} appeared in {}",
            dir.display()
        );
        assert!(
            start.elapsed() < DEADLINE,
            "{what} never appeared in {}",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `dir`'s subdirectory named `prefix…` holding `file`, once there.
fn temp_copy(dir: &Path, prefix: &str, file: &str) -> Option<PathBuf> {
    entries(dir)
        .into_iter()
        .filter(|name| name.starts_with(prefix))
        .map(|name| dir.join(name).join(file))
        .find(|path| path.exists())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interrupted_import_leaves_nothing_and_its_copies_are_private() {
    let Some(bin) = release() else { return };
    let src = Source::new();
    let blob = src.blob(b"secret plan");
    src.build("b-ok");
    src.artifact("b-ok", "plan", 0, &blob);
    for (signal, code, how) in [("INT", 130, "flag"), ("TERM", 143, "env")] {
        let work = tempfile::tempdir().unwrap();
        let temp = work.path().join("scratch");
        std::fs::create_dir(&temp).unwrap();
        let dest = work.path().join("dest.db");
        let lock = locked_destination(&bin, &dest);
        let db = sqlite_url(&dest);
        let blobs = s(&work.path().join("blobs")).to_owned();
        let mut args = vec![
            "import",
            "--from",
            "autobuild-local",
            s(&src.root),
            "--database",
            &db,
            "--blobs",
            &blobs,
            "--quiet",
        ];
        let mut env = Vec::new();
        if how == "flag" {
            args.extend(["--temp-dir", s(&temp)]);
        } else {
            env.push(("ABSTORE_TEMP_DIR", s(&temp)));
        }
        let mut import = spawn(&bin, &args, &env);
        let archive = wait_for(&mut import, &temp, "the import's archive", |dir| {
            temp_copy(dir, "abstore-autobuild-import-", "store.archive")
        });
        assert_eq!(
            mode(archive.parent().unwrap()),
            0o700,
            "{how}: its directory"
        );
        assert_eq!(mode(&archive), 0o600, "{how}: the archive");
        std::thread::sleep(Duration::from_millis(500));
        assert!(import.alive(), "{how}: the import should wait for the lock");
        import.signal(signal);
        let done = import.finish(Duration::from_secs(20), "the interrupted import");
        assert_eq!(done.code, Some(code), "{how}: {}", done.stderr);
        assert!(
            done.stderr
                .contains(&format!("import was interrupted by SIG{signal}")),
            "{how}: {}",
            done.stderr
        );
        assert_eq!(entries(&temp), Vec::<String>::new(), "{how}: left behind");
        lock.execute_batch("ROLLBACK").unwrap();
        let resources: i64 = lock
            .query_row("SELECT count(*) FROM resources", [], |r| r.get(0))
            .unwrap();
        assert_eq!(resources, 0, "{how}: nothing was imported");
    }

    // SIGKILL leaves no chance to clean up: the next import removes what it
    // left once nobody holds its lock and it is a minute old.
    let work = tempfile::tempdir().unwrap();
    let temp = work.path().join("scratch");
    std::fs::create_dir(&temp).unwrap();
    let dest = work.path().join("dest.db");
    let lock = locked_destination(&bin, &dest);
    let db = sqlite_url(&dest);
    let blobs = s(&work.path().join("blobs")).to_owned();
    let args = [
        "import",
        "--from",
        "autobuild-local",
        s(&src.root),
        "--database",
        &db,
        "--blobs",
        &blobs,
        "--temp-dir",
        s(&temp),
        "--quiet",
    ];
    let mut import = spawn(&bin, &args, &[]);
    let archive = wait_for(&mut import, &temp, "the import's archive", |dir| {
        temp_copy(dir, "abstore-autobuild-import-", "store.archive")
    });
    import.signal("KILL");
    let done = import.finish(Duration::from_secs(20), "the killed import");
    assert_eq!(done.code, None, "killed by a signal");
    assert!(archive.exists(), "a killed import cannot clean up");
    drop(lock);
    // Its archive's directory, and its copy of the store if it was still
    // reading it.
    let left = entries(&temp);
    for name in &left {
        let aged = std::process::Command::new("touch")
            .args(["-d", "2 minutes ago", s(&temp.join(name))])
            .status()
            .unwrap();
        assert!(aged.success());
    }
    let again = run(&bin, &args, &[]);
    assert!(again.ok(), "{}", again.stderr);
    assert_eq!(
        reported(
            &again.stdout,
            "note",
            "temporary directories killed imports had left"
        ),
        left.len() as u64,
        "{}",
        again.stdout
    );
    assert_eq!(entries(&temp), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interrupted_import_from_postgres_leaves_nothing_and_its_copy_is_private() {
    let Some(bin) = release() else { return };
    support::with_pg("abhostilesignal", |url| async move {
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&url)
            .await
            .unwrap();
        sqlx::raw_sql(PG_V8).execute(&mut conn).await.unwrap();
        sqlx::raw_sql("INSERT INTO ab_schema_migrations (version, checksum) VALUES (8, 'x')")
            .execute(&mut conn)
            .await
            .unwrap();
        // Held until the import is interrupted: its copy of this table waits.
        sqlx::raw_sql("BEGIN; LOCK TABLE ticket_assets IN ACCESS EXCLUSIVE MODE;")
            .execute(&mut conn)
            .await
            .unwrap();
        let work = tempfile::tempdir().unwrap();
        let source_blobs = work.path().join("source-blobs");
        std::fs::create_dir_all(&source_blobs).unwrap();
        let temp = work.path().join("scratch");
        std::fs::create_dir(&temp).unwrap();
        let db = sqlite_url(&work.path().join("abstore.db"));
        let mut import = spawn(
            &bin,
            &[
                "import",
                "--from",
                "autobuild-postgres",
                &url,
                "--source-blobs",
                s(&source_blobs),
                "--database",
                &db,
                "--blobs",
                s(&work.path().join("blobs")),
                "--temp-dir",
                s(&temp),
                "--quiet",
            ],
            &[],
        );
        let copy = wait_for(&mut import, &temp, "the PostgreSQL store's copy", |dir| {
            temp_copy(dir, "abstore-autobuild-pg-", "autobuild.sqlite")
        });
        assert_eq!(mode(copy.parent().unwrap()), 0o700);
        assert_eq!(mode(&copy), 0o600);
        import.signal("TERM");
        let done = import.finish(Duration::from_secs(20), "the interrupted import");
        assert_eq!(done.code, Some(143), "{}", done.stderr);
        assert!(
            done.stderr.contains("interrupted by SIGTERM"),
            "{}",
            done.stderr
        );
        assert_eq!(entries(&temp), Vec::<String>::new());
        sqlx::raw_sql("ROLLBACK").execute(&mut conn).await.unwrap();
        <sqlx::PgConnection as sqlx::Connection>::close(conn)
            .await
            .unwrap();
    })
    .await;
}

// ── Item 5: one odd row is that row's problem ───────────────────────────────

#[tokio::test(flavor = "multi_thread")]
async fn odd_rows_are_reported_with_their_build_and_the_rest_imports() {
    let Some(bin) = release() else { return };
    let src = Source::new();
    let blob = src.blob(b"# plan");
    src.build("b-ok");
    // A slug SQLite holds as a BLOB, with an event under it.
    src.exec(
        "INSERT INTO builds (slug, repo, created_at, updated_at) VALUES (CAST('b-blob' AS BLOB), ?1, ?2, ?2)",
        params![REPO, T],
    );
    src.exec(
        "INSERT INTO events VALUES (CAST('b-blob' AS BLOB), 1, ?1, '{\"kind\":\"dispatcher\"}', 'build.created', ?2)",
        params![T, CREATED],
    );
    // Text where integers belong.
    src.build("b-ttl");
    src.exec(
        "UPDATE builds SET lease_holder = 'w', lease_expires_at = ?1, lease_ttl_ms = 'soon' WHERE slug = 'b-ttl'",
        params![T],
    );
    src.build("b-seq");
    src.exec(
        "INSERT INTO events VALUES ('b-seq', 'two', ?1, '{\"kind\":\"kernel\"}', 'plan.started', '{\"round\":1}')",
        params![T],
    );
    // A revision whose successor SQLite computes as a REAL.
    src.build("b-rev");
    src.artifact("b-rev", "plan", 0, &blob);
    src.artifact("b-rev", "plan", i64::MAX, &blob);
    // What the write routes refuse: an event no client's catalogs take.
    src.build("b-cat");
    src.exec(
        "INSERT INTO events VALUES ('b-cat', 2, ?1, '{\"kind\":\"human\",\"user\":\"ann\"}', 'note.weird', '{}')",
        params![T],
    );
    let out = tempfile::tempdir().unwrap();
    let (db, blobs, done) = src.import(&bin, out.path(), &["--apply"]);
    assert!(done.ok(), "{}", done.stderr);
    let stdout = &done.stdout;
    for (what, example) in [
        ("builds whose id is not text", "is a BLOB"),
        (
            "builds that cannot be carried",
            "b-ttl (its lease_ttl_ms is the text \"soon\"",
        ),
        (
            "builds that cannot be carried",
            "b-seq (its seq is the text \"two\"",
        ),
        (
            "builds that cannot be carried",
            "b-cat (event 2 (note.weird) is refused by the catalogs",
        ),
        (
            "artifacts that cannot be carried",
            "build b-rev plan rev 9223372036854775807",
        ),
        ("build events whose build is not text", "is a BLOB"),
    ] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with("cannot import: ") && l.contains(what))
            .unwrap_or_else(|| panic!("no {what:?} in\n{stdout}"));
        assert!(line.contains(example), "{example:?} not in {line}");
    }
    assert_eq!(
        reported(stdout, "cannot import", "builds that cannot be carried"),
        3,
        "{stdout}"
    );
    let mut server = serve(&db, &blobs).await;
    let c = support::client();
    let base = server.url().to_owned();
    for (slug, status) in [
        ("b-ok", 200),
        ("b-rev", 200),
        ("b-ttl", 404),
        ("b-seq", 404),
        ("b-cat", 404),
        ("b-blob", 404),
    ] {
        assert_eq!(
            get(&c, &base, &format!("/builds/{slug}")).await.0,
            status,
            "{slug}"
        );
    }
    let (_, body) = get(&c, &base, "/builds/b-rev/artifacts?kind=plan").await;
    let read: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(read["meta"]["revision"], 0, "{read}");
    server.stop().await.unwrap();

    // One client's catalogs, named: the report says whose.
    let again = tempfile::tempdir().unwrap();
    let (_, _, done) = src.import(&bin, again.path(), &["--catalog-for", "0.8.0/2"]);
    assert!(done.ok(), "{}", done.stderr);
    assert!(
        done.stdout
            .contains("events checked against the catalogs of 0.8.0/2"),
        "{}",
        done.stdout
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn deep_jsonb_from_postgres_is_a_reported_row() {
    let Some(bin) = release() else { return };
    support::with_pg("abhostiledeep", |url| async move {
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&url)
            .await
            .unwrap();
        sqlx::raw_sql(PG_V8).execute(&mut conn).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let source_blobs = dir.path().join("source-blobs");
        std::fs::create_dir_all(&source_blobs).unwrap();
        let plan = abstore::blobs::blob_ref(b"# plan");
        std::fs::write(source_blobs.join(&plan), b"# plan").unwrap();
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        let created = CREATED.replace('\'', "''");
        let seed = format!(
            "INSERT INTO ab_schema_migrations (version, checksum) VALUES (8, 'x');
             INSERT INTO builds (slug, repo, created_at, updated_at) VALUES
               ('b-ok', '{REPO}', '{T}', '{T}'), ('b-deep', '{REPO}', '{T}', '{T}');
             INSERT INTO events VALUES
               ('b-ok', 1, '{T}', '{{\"kind\": \"dispatcher\"}}', 'build.created', '{created}'),
               ('b-deep', 1, '{T}', '{{\"kind\": \"dispatcher\"}}', 'build.created', '{{\"deep\": {deep}}}');
             INSERT INTO artifacts VALUES
               ('b-ok', 'plan', 0, '{plan}', '{{}}', '{T}'),
               ('b-ok', 'notes', 0, '{plan}', '{{\"deep\": {deep}}}', '{T}');"
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(seed))
            .execute(&mut conn)
            .await
            .unwrap();
        let db = sqlite_url(&dir.path().join("abstore.db"));
        let blobs = s(&dir.path().join("blobs")).to_owned();
        let done = run(
            &bin,
            &[
                "import",
                "--from",
                "autobuild-postgres",
                &url,
                "--source-blobs",
                s(&source_blobs),
                "--database",
                &db,
                "--blobs",
                &blobs,
                "--quiet",
                "--apply",
            ],
            &[],
        );
        assert!(done.ok(), "{}", done.stderr);
        let line = |what: &str| {
            done.stdout
                .lines()
                .find(|l| l.starts_with("cannot import: ") && l.contains(what))
                .unwrap_or_else(|| panic!("no {what:?} in\n{}", done.stdout))
                .to_owned()
        };
        let builds = line("builds that cannot be carried");
        assert!(builds.contains("b-deep") && builds.contains("recursion limit"), "{builds}");
        let artifacts = line("artifacts that cannot be carried");
        assert!(artifacts.contains("build b-ok notes rev 0"), "{artifacts}");
        let mut server = serve(&db, &blobs).await;
        let c = support::client();
        let base = server.url().to_owned();
        assert_eq!(get(&c, &base, "/builds/b-ok/events").await.0, 200);
        assert_eq!(get(&c, &base, "/builds/b-deep").await.0, 404);
        let (_, body) = get(&c, &base, "/builds/b-ok/artifacts?kind=plan").await;
        assert!(body.contains("\"revision\":0"), "{body}");
        server.stop().await.unwrap();
    })
    .await;
}
