//! Writes a generated history as an abstore archive (docs/operations.md,
//! "The archive format"), which `abstore import --apply` loads into a SQLite
//! file or a PostgreSQL database in one transaction: an aged store in
//! seconds instead of minutes of HTTP appends.
//!
//! Lines are the schema's columns in schema order, serialised by serde_json
//! exactly as the server's exporter writes them (the format is canonical and
//! `abstore verify` checks every line). Envelopes are the exact text the
//! server stores: `{"build"|"repo": id, "seq", "ts", "actor", "type",
//! "payload"}`.

use std::io::{BufWriter, Write as _};
use std::path::Path;

use anyhow::Result;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use super::history::{Event, History};
use super::text::iso;

/// What was written.
pub struct Written {
    pub resources: u64,
    pub events: u64,
    pub bytes: u64,
}

/// One envelope as abstore stores and serves it.
pub fn envelope(key: &str, id: &str, seq: u64, event: &Event) -> String {
    format!(
        "{{\"{key}\":{id},\"seq\":{seq},\"ts\":\"{ts}\",\"actor\":{actor},\"type\":\"{kind}\",\"payload\":{payload}}}",
        id = Value::from(id),
        ts = iso(event.ts),
        actor = event.actor,
        kind = event.kind,
        payload = event.payload,
    )
}

struct Lines<W: std::io::Write> {
    out: W,
    digest: Sha256,
    bytes: u64,
}

impl<W: std::io::Write> Lines<W> {
    /// A record line: written and added to the digest.
    fn record(&mut self, line: &Value) -> Result<()> {
        let text = line.to_string();
        self.out.write_all(text.as_bytes())?;
        self.out.write_all(b"\n")?;
        self.digest.update(text.as_bytes());
        self.digest.update(b"\n");
        self.bytes += text.len() as u64 + 1;
        Ok(())
    }
}

pub fn write(history: &History, path: &Path) -> Result<Written> {
    let file = std::fs::File::create(path)?;
    let mut lines = Lines {
        out: BufWriter::with_capacity(1 << 20, file),
        digest: Sha256::new(),
        bytes: 0,
    };
    // The header is outside the digest.
    let header = json!({
        "type": "header",
        "format": "abstore-archive",
        "version": 5,
        "abstore": "abstore-load",
        "source": "sqlite",
        "created_at": iso(history.now),
        "counts": null,
    })
    .to_string();
    lines.out.write_all(header.as_bytes())?;
    lines.out.write_all(b"\n")?;
    lines.bytes += header.len() as u64 + 1;

    // Keys order bytewise: kind "build" < "repo", then ids.
    let mut builds: Vec<_> = history.repos.iter().flat_map(|r| r.builds.iter()).collect();
    builds.sort_by(|a, b| a.slug.as_bytes().cmp(b.slug.as_bytes()));
    let mut repos: Vec<_> = history.repos.iter().collect();
    repos.sort_by(|a, b| a.id.as_bytes().cmp(b.id.as_bytes()));

    let mut resources = 0u64;
    for build in &builds {
        lines.record(&resource(
            "build",
            &build.slug,
            Some(build.attrs().to_string()),
            build.created_at,
            build.updated_at,
            build.events.len() as u64,
        ))?;
        resources += 1;
    }
    for repo in &repos {
        lines.record(&resource(
            "repo",
            &repo.id,
            None,
            repo.created_at,
            repo.updated_at(),
            repo.journal_len(),
        ))?;
        resources += 1;
    }

    let mut events = 0u64;
    for build in &builds {
        for (i, event) in build.events.iter().enumerate() {
            let seq = i as u64 + 1;
            lines.record(&event_line(
                "build",
                &build.slug,
                seq,
                envelope("build", &build.slug, seq, event),
            ))?;
            events += 1;
        }
    }
    for repo in &repos {
        for (i, event) in repo.journal().enumerate() {
            let seq = i as u64 + 1;
            lines.record(&event_line(
                "repo",
                &repo.id,
                seq,
                envelope("repo", &repo.id, seq, &event),
            ))?;
            events += 1;
        }
    }

    let footer = json!({
        "type": "footer",
        "counts": {
            "resource": resources,
            "event": events,
            "artifact_head": 0,
            "artifact": 0,
            "stream": 0,
            "stream_chunk": 0,
            "ticket_asset_head": 0,
            "ticket_asset": 0,
            "revoked_token": 0,
            "ticket_team": 0,
            "ticket": 0,
            "ticket_blocker": 0,
            "ticket_comment": 0,
            "ticket_history": 0,
            "blob": 0,
            "blob_bytes": 0,
        },
        "sha256": format!("{:x}", lines.digest.clone().finalize()),
    })
    .to_string();
    lines.out.write_all(footer.as_bytes())?;
    lines.out.write_all(b"\n")?;
    lines.bytes += footer.len() as u64 + 1;
    lines.out.flush()?;
    Ok(Written {
        resources,
        events,
        bytes: lines.bytes,
    })
}

fn resource(
    kind: &str,
    id: &str,
    attrs: Option<String>,
    created: i64,
    updated: i64,
    last_seq: u64,
) -> Value {
    json!({
        "type": "resource",
        "kind": kind,
        "id": id,
        "attrs": attrs,
        "created_at": created,
        "updated_at": updated,
        "last_seq": last_seq,
        "lease_holder": null,
        "lease_expires_at": null,
        "lease_ttl_ms": null,
        "heartbeat_at": null,
        "stream_counter": 0,
        "parent": null,
        "created_order": null,
    })
}

fn event_line(kind: &str, id: &str, seq: u64, envelope: String) -> Value {
    json!({
        "type": "event",
        "kind": kind,
        "resource_id": id,
        "seq": seq,
        "envelope": envelope,
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::process::Command;

    use super::*;
    use crate::autobuild::history::{Size, generate};

    /// The server binary of this workspace (`cargo build --bin abstore`):
    /// beside this test binary, which runs from `<target>/debug/deps/`. Not
    /// from a path fixed at compile time: a test binary built in another
    /// checkout sharing this `target/` is reused, and its path pointed there.
    pub(super) fn abstore() -> PathBuf {
        let test_binary = std::env::current_exe().expect("the test binary's path");
        let debug = test_binary
            .parent()
            .and_then(std::path::Path::parent)
            .expect("a test binary under <target>/debug/deps");
        let bin = debug.join("abstore");
        assert!(
            bin.is_file(),
            "{} is missing: run `cargo build --bin abstore`",
            bin.display()
        );
        bin
    }

    fn run(args: &[&std::ffi::OsStr]) -> String {
        let output = Command::new(abstore())
            .args(args)
            .output()
            .expect("abstore runs");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(output.status.success(), "abstore {args:?} failed: {text}");
        text
    }

    #[test]
    fn generated_archives_verify_import_and_export_identically() {
        let dir =
            std::env::temp_dir().join(format!("abstore-replay-archive-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let size = Size {
            journal_events: 1_500,
            builds: 8,
            events_per_build: 100,
            span_secs: 40_000,
        };
        let history = generate(2, size, 2, 1_784_116_800_000, 9);
        let archive = dir.join("generated.ndjson");
        let written = write(&history, &archive).unwrap();
        assert_eq!(written.resources, 2 * 8 + 2);
        let build_events: u64 = history
            .repos
            .iter()
            .flat_map(|r| &r.builds)
            .map(|b| b.events.len() as u64)
            .sum();
        assert_eq!(written.events, build_events + 2 * 1_500);

        let verified = run(&["verify".as_ref(), archive.as_os_str()]);
        assert!(verified.contains("OK"), "{verified}");
        let database = format!("sqlite://{}", dir.join("store.db").display());
        let blobs = dir.join("blobs");
        let imported = run(&[
            "import".as_ref(),
            archive.as_os_str(),
            "--database".as_ref(),
            database.as_ref(),
            "--blobs".as_ref(),
            blobs.as_os_str(),
            "--apply".as_ref(),
            "--quiet".as_ref(),
        ]);
        let records = written.resources + written.events;
        assert!(
            imported.contains(&format!("{records} records new")),
            "{imported}"
        );
        // The server's own export of the imported store is the same archive
        // (after the header): every line was canonical and in order.
        let exported = dir.join("exported.ndjson");
        run(&[
            "export".as_ref(),
            "--database".as_ref(),
            database.as_ref(),
            "--blobs".as_ref(),
            blobs.as_os_str(),
            "--out".as_ref(),
            exported.as_os_str(),
            "--quiet".as_ref(),
        ]);
        let body = |path: &PathBuf| {
            let text = std::fs::read_to_string(path).unwrap();
            text.split_once('\n').unwrap().1.to_owned()
        };
        assert!(
            body(&archive) == body(&exported),
            "the export differs from the generated archive"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Migration 0011 on an aged store: a generated history imported, its
/// protocol-3 answers read, the store taken back to migration 0010's schema
/// (the `type` column, its trigger and index replaced by 0010's expression
/// index, the two migrations unrecorded), then served again: the server
/// fills every event's type in batches and answers byte for byte as before.
#[cfg(test)]
mod type_column {
    use std::io::BufRead as _;
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command, Stdio};

    use super::tests::abstore;
    use super::*;
    use crate::autobuild::history::{Size, generate};

    struct Served {
        child: Child,
        base: String,
    }

    impl Drop for Served {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    fn serve(database: &str, blobs: &Path, extra: &[&str]) -> Served {
        let mut child = Command::new(abstore())
            .args(["serve", "--listen", "127.0.0.1:0", "--database", database])
            .arg("--blobs")
            .arg(blobs)
            .args(["--accept-client", "0.9.0/3"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("abstore serve starts");
        let stdout = child.stdout.take().unwrap();
        let mut lines = std::io::BufReader::new(stdout).lines();
        let base = loop {
            let line = lines
                .next()
                .expect("the server announces its address")
                .unwrap();
            if let Some(rest) = line.strip_prefix("abstore listening on ") {
                break rest.trim().to_owned();
            }
        };
        Served { child, base }
    }

    /// Every repository's build digests and state events, as served.
    fn answers(served: &Served, repos: &[String]) -> Vec<String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let http = reqwest::Client::new();
            let mut all = Vec::new();
            for repo in repos {
                for route in ["build-digests", "state-events"] {
                    let url = format!("{}/repos/{}/{route}", served.base, repo.replace('/', "%2F"));
                    let reply = http
                        .get(&url)
                        .header("x-autobuild-version", "0.9.0")
                        .header("x-autobuild-protocol-version", "3")
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(reply.status().as_u16(), 200, "{url}");
                    all.push(reply.text().await.unwrap());
                }
            }
            all
        })
    }

    fn import(archive: &Path, database: &str, blobs: &Path) {
        let out = Command::new(abstore())
            .arg("import")
            .arg(archive)
            .args(["--database", database, "--apply", "--quiet"])
            .arg("--blobs")
            .arg(blobs)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn history_archive(dir: &Path) -> (PathBuf, Vec<String>, u64) {
        let size = Size {
            journal_events: 1_200,
            builds: 12,
            events_per_build: 80,
            span_secs: 40_000,
        };
        let history = generate(2, size, 2, 1_784_116_800_000, 11);
        let archive = dir.join("aged.ndjson");
        let written = write(&history, &archive).unwrap();
        let repos = history.repos.iter().map(|r| r.id.clone()).collect();
        (archive, repos, written.events)
    }

    /// Migration 0010's schema, from a migrated store.
    const SQLITE_BACK_TO_0010: &str = "DROP INDEX events_by_type; ALTER TABLE events DROP COLUMN type; \
         CREATE INDEX events_by_type ON events (kind, resource_id, json_extract(envelope, '$.type'), seq); \
         DROP TABLE event_types_filled; DELETE FROM _sqlx_migrations WHERE version >= 11;";

    #[test]
    fn an_aged_sqlite_store_gains_its_type_column_in_batches() {
        let dir = std::env::temp_dir().join(format!("abstore-type-column-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (archive, repos, events) = history_archive(&dir);
        let path = dir.join("aged.db");
        let database = format!("sqlite://{}", path.display());
        let blobs = dir.join("blobs");
        import(&archive, &database, &blobs);
        let before = answers(&serve(&database, &blobs, &[]), &repos);

        let conn = rusqlite::Connection::open(&path).unwrap();
        let imported: i64 = conn
            .query_row("SELECT COUNT(type) FROM events", [], |row| row.get(0))
            .unwrap();
        assert_eq!(
            imported, events as i64,
            "the import fills every event's type"
        );
        conn.execute_batch(SQLITE_BACK_TO_0010).unwrap();
        drop(conn);
        let after = answers(
            &serve(&database, &blobs, &["--migrate-batch-rows", "97"]),
            &repos,
        );
        assert!(before == after, "the answers changed across the migration");

        let conn = rusqlite::Connection::open(&path).unwrap();
        let (typed, matching): (i64, i64) = conn
            .query_row(
                "SELECT COUNT(type), SUM(type = json_extract(envelope, '$.type')) FROM events",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .unwrap();
        assert_eq!((typed, matching), (events as i64, events as i64));
        let filled: i64 = conn
            .query_row("SELECT COUNT(*) FROM event_types_filled", [], |row| {
                row.get(0)
            })
            .unwrap();
        assert_eq!(filled, 1);

        // A fill left unfinished (a crash mid-way): `--no-migrate` refuses
        // to serve it, `abstore migrate` finishes it.
        conn.execute_batch("DELETE FROM event_types_filled; UPDATE events SET type = NULL;")
            .unwrap();
        drop(conn);
        let refused = Command::new(abstore())
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--no-migrate",
                "--database",
                &database,
            ])
            .arg("--blobs")
            .arg(&blobs)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&refused.stderr);
        assert!(
            !refused.status.success() && said.contains("run `abstore migrate`"),
            "{said}"
        );
        let migrated = Command::new(abstore())
            .args([
                "migrate",
                "--database",
                &database,
                "--migrate-batch-rows",
                "1000000",
            ])
            .output()
            .unwrap();
        assert!(
            migrated.status.success(),
            "{}",
            String::from_utf8_lossy(&migrated.stderr)
        );
        let again = answers(&serve(&database, &blobs, &["--no-migrate"]), &repos);
        assert!(before == again, "the answers changed after a resumed fill");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_aged_postgres_store_gains_its_type_column_in_batches() {
        let Ok(base) = std::env::var("ABSTORE_TEST_POSTGRES_URL") else {
            eprintln!(
                "*** SKIPPED: PostgreSQL type-column migration (set ABSTORE_TEST_POSTGRES_URL) ***"
            );
            return;
        };
        let dir =
            std::env::temp_dir().join(format!("abstore-type-column-pg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (archive, repos, events) = history_archive(&dir);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let name = format!("abstore_type_column_{}", std::process::id());
        let admin = |sql: String| {
            let base = base.clone();
            runtime.block_on(async move {
                use sqlx::Connection as _;
                let mut conn = sqlx::PgConnection::connect(&base).await.unwrap();
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                    .execute(&mut conn)
                    .await
                    .unwrap();
            })
        };
        admin(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
        admin(format!("CREATE DATABASE {name}"));
        let database = match base.rsplit_once('/') {
            Some((server, _)) => format!("{server}/{name}"),
            None => panic!("ABSTORE_TEST_POSTGRES_URL has no database: {base}"),
        };
        let blobs = dir.join("blobs");
        import(&archive, &database, &blobs);
        let before = answers(&serve(&database, &blobs, &[]), &repos);
        let run = |sql: &'static str| {
            let database = database.clone();
            runtime.block_on(async move {
                use sqlx::Connection as _;
                let mut conn = sqlx::PgConnection::connect(&database).await.unwrap();
                sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
            })
        };
        run("DROP TRIGGER events_type_from_envelope ON events; \
             DROP FUNCTION abstore_event_type_from_envelope(); \
             DROP INDEX events_by_type; ALTER TABLE events DROP COLUMN type; \
             CREATE INDEX events_by_type ON events (kind, resource_id, \
             (abstore_json_member(envelope, 'type') COLLATE \"C\"), seq); \
             DROP TABLE event_types_filled; DELETE FROM _sqlx_migrations WHERE version >= 11;");
        let after = answers(
            &serve(&database, &blobs, &["--migrate-batch-rows", "97"]),
            &repos,
        );
        assert!(before == after, "the answers changed across the migration");
        let counted = {
            let database = database.clone();
            runtime.block_on(async move {
                use sqlx::Connection as _;
                let mut conn = sqlx::PgConnection::connect(&database).await.unwrap();
                let typed: (i64, i64, i64) = sqlx::query_as(
                    "SELECT COUNT(type), COUNT(*) FILTER (WHERE type = abstore_json_member(envelope, 'type')), \
                     (SELECT COUNT(*) FROM event_types_filled) FROM events",
                )
                .fetch_one(&mut conn)
                .await
                .unwrap();
                typed
            })
        };
        assert_eq!(counted, (events as i64, events as i64, 1));
        admin(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
