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
        "version": 4,
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

    /// The server binary of this workspace (`cargo build --bin abstore`).
    fn abstore() -> PathBuf {
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
        let bin = target.join("debug/abstore");
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
