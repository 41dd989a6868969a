//! Seeds the reference server's store (Autobuild's `SqliteBuildStore` on a
//! file) with a generated history, directly in its SQLite file: the
//! reference server creates its own tables when it first opens the file,
//! then this writes the rows in one transaction, in the columns Autobuild's
//! schema (`src/store/local/schema.ts`) names: `builds`, `events`,
//! `repo_streams`, `repo_events`. Times are ISO strings, actors and payloads
//! JSON text, exactly what the store itself writes.

use std::path::Path;

use anyhow::{Context as _, Result};
use rusqlite::params;

use super::history::History;
use super::text::iso;

pub fn seed(history: &History, path: &Path) -> Result<u64> {
    let mut conn = rusqlite::Connection::open(path)
        .with_context(|| format!("opening the reference store {}", path.display()))?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    let tx = conn.transaction()?;
    let mut rows = 0u64;
    {
        let mut build = tx.prepare(
            "INSERT INTO builds (slug, repo, ticket, branch, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        let mut event = tx.prepare(
            "INSERT INTO events (build, seq, ts, actor, type, payload) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        let mut repo = tx.prepare(
            "INSERT INTO repo_streams (repo, created_at, updated_at) VALUES (?1, ?2, ?3)",
        )?;
        let mut repo_event = tx.prepare(
            "INSERT INTO repo_events (repo, seq, ts, actor, type, payload) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        for r in &history.repos {
            repo.execute(params![r.id, iso(r.created_at), iso(r.updated_at())])?;
            rows += 1;
            for (i, e) in r.journal().enumerate() {
                repo_event.execute(params![
                    r.id,
                    i as i64 + 1,
                    iso(e.ts),
                    e.actor,
                    e.kind,
                    e.payload
                ])?;
                rows += 1;
            }
            for b in &r.builds {
                build.execute(params![
                    b.slug,
                    b.repo,
                    b.ticket.to_string(),
                    b.branch,
                    iso(b.created_at),
                    iso(b.updated_at)
                ])?;
                rows += 1;
                for (i, e) in b.events.iter().enumerate() {
                    event.execute(params![
                        b.slug,
                        i as i64 + 1,
                        iso(e.ts),
                        e.actor,
                        e.kind,
                        e.payload
                    ])?;
                    rows += 1;
                }
            }
        }
    }
    tx.commit()?;
    Ok(rows)
}
