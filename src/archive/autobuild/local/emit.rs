//! The emit pass: every table read again in archive key order and sent as
//! archive rows; artifacts and ticket assets are judged here, one by one.

use std::collections::HashSet;

use anyhow::{anyhow, bail};

use super::rows::{self, Counters};
use super::*;
use crate::archive::checks;

/// Sends one archive row.
type Sink<'s> = &'s dyn Fn(usize, Vec<Val>) -> anyhow::Result<()>;

impl Reader<'_> {
    pub(super) fn emit(&mut self, tx: &mpsc::Sender<Item>) -> anyhow::Result<()> {
        let send = |table: usize, row: Vec<Val>| {
            tx.blocking_send(Item::Row(table, row))
                .map_err(|_| anyhow!("the archive writer stopped"))
        };
        let families = self.families();
        for &family in &families {
            self.emit_resources(family, &send)?;
        }
        for &family in &families {
            self.emit_events(family, &send)?;
        }
        for &family in &families {
            self.emit_heads(family, &send)?;
        }
        for &family in &families {
            self.emit_artifacts(family, &send)?;
        }
        if self.has("streams") {
            let streams = std::mem::take(&mut self.streams);
            for s in &streams {
                if let Some(blob) = &s.artifact_blob_ref {
                    self.referenced.insert(blob.clone());
                }
                send(STREAM, rows::stream_row(s))?;
            }
            let included: HashSet<String> = streams.into_iter().map(|s| s.id).collect();
            self.emit_chunks(&included, &send)?;
        }
        if self.has("ticket_assets") {
            self.emit_ticket_assets(&send)?;
        }
        for (table, row) in std::mem::take(&mut self.extra) {
            send(table, row)?;
        }
        for blob in std::mem::take(&mut self.referenced) {
            let size = match self.blobs.get(&blob) {
                Some(BlobState::Ok(size)) => Some(*size),
                _ => None,
            };
            tx.blocking_send(Item::Blob(blob, size))
                .map_err(|_| anyhow!("the archive writer stopped"))?;
        }
        Ok(())
    }

    fn emit_resources(&mut self, family: Family, send: Sink<'_>) -> anyhow::Result<()> {
        let store = self.store;
        let mut statement = store
            .conn
            .prepare(&rows::resource_sql(family, &store.shape))?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            let Ok(id) = required_text(row, 0, "id") else {
                continue;
            };
            let Some(info) = self.owners.get(&(family, id.clone())) else {
                continue;
            };
            let counters = Counters {
                last_seq: info.last_seq,
                stream_counter: info.stream_counter,
                created_order: (family == Family::Session)
                    .then(|| self.session_orders.get(&id).copied())
                    .flatten(),
            };
            let archived = rows::resource_row(family, &id, row, &counters)
                .map_err(|why| changed(family.noun(), &id, &why))?;
            send(RESOURCE, archived)?;
            self.report.imported(family.record_table());
        }
        Ok(())
    }

    fn emit_events(&mut self, family: Family, send: Sink<'_>) -> anyhow::Result<()> {
        let store = self.store;
        let mut statement = store.conn.prepare(&rows::events_sql(family))?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            let Ok(id) = required_text(row, 0, family.owner()) else {
                continue;
            };
            if !self.owners.contains_key(&(family, id.clone())) {
                continue;
            }
            let (_, archived) = rows::event_row(family, &id, row)
                .map_err(|why| changed(family.noun(), &id, &why))?;
            send(EVENT, archived)?;
            self.report.imported(family.events_table());
        }
        Ok(())
    }

    fn emit_heads(&mut self, family: Family, send: Sink<'_>) -> anyhow::Result<()> {
        // Every revision a client could address counts, carried or not:
        // numbering goes on where Autobuild's would. (Integers only, and
        // below 2^53 − 1, so that the next one is one too: SQLite's
        // `MAX(revision) + 1` of i64::MAX is a REAL.)
        let sql = format!(
            "SELECT {owner}, kind, MAX(revision) FROM {table} \
             WHERE typeof(revision) = 'integer' AND revision BETWEEN 0 AND {max} \
             GROUP BY {owner}, kind ORDER BY {owner} COLLATE BINARY, kind COLLATE BINARY",
            owner = family.owner(),
            table = family.artifacts_table(),
            max = crate::protocol::numbers::MAX_SAFE_INTEGER - 1,
        );
        let store = self.store;
        let mut statement = store.conn.prepare(&sql)?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            let (Ok(id), Ok(kind), Ok(last)) = (
                required_text(row, 0, family.owner()),
                required_text(row, 1, "kind"),
                required_int(row, 2, "revision"),
            ) else {
                continue;
            };
            if !self.owners.contains_key(&(family, id.clone())) {
                continue;
            }
            let head = vec![
                Val::Text(family.kind().to_owned()),
                Val::Text(id),
                Val::Text(kind),
                Val::Int(last + 1),
            ];
            // A kind no put could name has no revision carried either
            // (each is reported with its artifact).
            if checks::row(ARTIFACT_HEAD, &head).is_ok() {
                send(ARTIFACT_HEAD, head)?;
            }
        }
        Ok(())
    }

    fn emit_artifacts(&mut self, family: Family, send: Sink<'_>) -> anyhow::Result<()> {
        let store = self.store;
        let mut statement = store.conn.prepare(&rows::artifacts_sql(family))?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            self.report.read(family.artifacts_table(), 1);
            let id = match required_text(row, 0, family.owner()) {
                Ok(id) => id,
                Err(why) => {
                    let what = format!(
                        "{} artifacts whose {} is not text (left out)",
                        family.noun(),
                        family.owner()
                    );
                    self.report.problem(&what, || why);
                    continue;
                }
            };
            if !self.owners.contains_key(&(family, id.clone())) {
                if !self.skipped.contains(&(family, id.clone())) {
                    let what = format!("{} artifacts without an imported record", family.noun());
                    self.report.problem(&what, || short(&id));
                }
                continue;
            }
            let mut archived = match rows::artifact_row(family, &id, row) {
                Ok(archived) => archived,
                Err(why) => {
                    let (kind, revision) = (
                        cell_text(row, 1, "kind").ok().flatten().unwrap_or_default(),
                        cell_text(row, 2, "revision")
                            .ok()
                            .flatten()
                            .or_else(|| {
                                cell_int(row, 2, "revision")
                                    .ok()
                                    .flatten()
                                    .map(|r| r.to_string())
                            })
                            .unwrap_or_default(),
                    );
                    self.report.problem("artifacts that cannot be carried", || {
                        format!(
                            "{} {} {} rev {} ({why})",
                            family.noun(),
                            short(&id),
                            short(&kind),
                            short(&revision)
                        )
                    });
                    continue;
                }
            };
            let Val::Text(blob) = archived[4].clone() else {
                bail!("an artifact row without its blob reference");
            };
            let name = format!(
                "{} {} {} rev {}",
                family.noun(),
                short(&id),
                archived[2],
                archived[3]
            );
            let size = match self.blob_verdict(&blob, None)? {
                Ok(size) => size,
                Err((why, detail)) => {
                    let what = format!("artifacts {why}");
                    self.report.problem(&what, || {
                        format!("{name} blob {blob} {detail}").trim_end().to_owned()
                    });
                    continue;
                }
            };
            archived[5] = Val::Int(size as i64);
            self.referenced.insert(blob);
            send(ARTIFACT, archived)?;
            self.report.imported(family.artifacts_table());
        }
        Ok(())
    }

    fn emit_chunks(&mut self, included: &HashSet<String>, send: Sink<'_>) -> anyhow::Result<()> {
        let store = self.store;
        let mut statement = store.conn.prepare(rows::CHUNKS_SQL)?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            let Ok(id) = required_text(row, 0, "stream") else {
                // Counted and reported by the plan pass.
                continue;
            };
            self.report.read("stream_chunks", 1);
            if !included.contains(&id) {
                continue;
            }
            let archived = rows::chunk_row(&id, row).map_err(|why| changed("stream", &id, &why))?;
            send(STREAM_CHUNK, archived)?;
            self.report.imported("stream_chunks");
        }
        Ok(())
    }

    fn emit_ticket_assets(&mut self, send: Sink<'_>) -> anyhow::Result<()> {
        const SQL: &str = "SELECT repo, ticket_id, kind, name, revision, layout, manifest, size, \
             removed, created_at FROM ticket_assets ORDER BY repo COLLATE BINARY, \
             ticket_id COLLATE BINARY, kind COLLATE BINARY, name COLLATE BINARY, revision";
        type Key = AssetKey;
        // First pass: every asset whose revisions all carry, with its head.
        let mut heads: Vec<(Key, i64, i64)> = Vec::new();
        let store = self.store;
        let rows_of = |reader: &mut Self,
                       visit: &mut dyn FnMut(&mut Self, AssetRow) -> anyhow::Result<()>|
         -> anyhow::Result<()> {
            let mut statement = store.conn.prepare(SQL)?;
            let mut rows = statement.query([])?;
            while let Some(row) = rows.next()? {
                visit(reader, read_asset(row))?;
            }
            Ok(())
        };
        let mut bad: HashSet<Key> = HashSet::new();
        let mut current: Option<(Key, i64, i64)> = None;
        rows_of(self, &mut |reader, asset| {
            reader.report.read("ticket_assets", 1);
            let (key, asset) = match asset {
                AssetRow::Read(key, asset) => (key, asset),
                AssetRow::Unreadable(key, why) => {
                    reader.report.problem(
                        "ticket-asset rows that cannot be read (with every revision of their asset)",
                        || why,
                    );
                    if let Some(key) = key {
                        if current.as_ref().is_some_and(|(k, ..)| *k == key) {
                            current = None;
                        }
                        bad.insert(key);
                    }
                    return Ok(());
                }
            };
            if current.as_ref().is_some_and(|(k, ..)| *k != key) {
                heads.extend(current.take());
            }
            if bad.contains(&key) {
                return Ok(());
            }
            match reader.asset_row(&key, &asset)? {
                Ok(row) => {
                    let at = match row[10] {
                        Val::Int(at) => at,
                        _ => 0,
                    };
                    current = Some((key, asset.revision + 1, at));
                }
                Err(why) => {
                    let example = format!(
                        "{} rev {} ({why})",
                        key.iter().map(|k| short(k)).collect::<Vec<_>>().join(" "),
                        asset.revision
                    );
                    reader.report.problem(
                        "ticket assets that cannot be carried (all their revisions)",
                        || example,
                    );
                    current = None;
                    bad.insert(key);
                }
            }
            Ok(())
        })?;
        heads.extend(current.take());
        let heads: Vec<_> = heads
            .into_iter()
            .filter(|(k, ..)| !bad.contains(k))
            .collect();
        for (key, next, at) in &heads {
            let mut row: Vec<Val> = key.iter().cloned().map(Val::Text).collect();
            row.push(Val::Int(*next));
            row.push(Val::Int(*at));
            checks::row(TICKET_ASSET_HEAD, &row)
                .map_err(|why| changed("ticket asset", &key.join(" "), &why))?;
            send(TICKET_ASSET_HEAD, row)?;
        }
        rows_of(self, &mut |reader, asset| {
            let AssetRow::Read(key, asset) = asset else {
                return Ok(());
            };
            if bad.contains(&key) {
                return Ok(());
            }
            if let Ok(row) = reader.asset_row(&key, &asset)? {
                if asset.size.is_some_and(|size| Val::Int(size) != row[6]) && !asset.removed {
                    reader.report.note(
                        "ticket-asset sizes recomputed from their manifests (Autobuild's differed)",
                        || {
                            let key: Vec<String> = key.iter().map(|k| short(k)).collect();
                            format!("{} rev {}", key.join(" "), asset.revision)
                        },
                    );
                }
                for blob in crate::archive::format::ticket_asset_blobs(match &row[9] {
                    Val::Text(t) => Some(t.as_str()),
                    _ => None,
                })
                .map_err(|why| anyhow!(why))?
                {
                    reader.referenced.insert(blob);
                }
                send(TICKET_ASSET, row)?;
                reader.report.imported("ticket_assets");
            }
            Ok(())
        })
    }

    /// A `ticket_asset` archive row, or why the revision cannot be carried:
    /// its manifest must pass the put route's validation, and each file's
    /// blob must be a regular file of the size its entry promises (no more
    /// is read).
    fn asset_row(
        &mut self,
        key: &[String; 4],
        asset: &SourceAsset,
    ) -> anyhow::Result<Result<Vec<Val>, String>> {
        let Some(at) = asset.created_at.as_deref().and_then(parse_iso) else {
            return Ok(Err("its created_at is not ISO-8601".to_owned()));
        };
        let mut row: Vec<Val> = key.iter().cloned().map(Val::Text).collect();
        row.push(Val::Int(asset.revision));
        if asset.removed {
            // abstore's tombstone has no layout (Autobuild copies the last one).
            row.extend([
                Val::Null,
                Val::Int(0),
                Val::Int(0),
                Val::Int(0),
                Val::Null,
                Val::Int(at),
            ]);
            return Ok(checks::row(TICKET_ASSET, &row).map(|()| row));
        }
        let layout = asset.layout.clone().unwrap_or_default();
        let entries: Vec<AssetEntry> =
            match serde_json::from_str(asset.manifest.as_deref().unwrap_or("")) {
                Ok(entries) => entries,
                Err(err) => {
                    return Ok(Err(format!(
                        "its manifest does not fit abstore's entries ({err})"
                    )));
                }
            };
        if let Err(why) = checks::manifest(&key[2], &key[3], &layout, &entries) {
            return Ok(Err(why));
        }
        let (mut size, mut files, mut dirs) = (0u64, 0i64, 0i64);
        for entry in &entries {
            match entry {
                AssetEntry::File {
                    size: bytes,
                    blob_ref,
                    ..
                } => {
                    match self.blob_verdict(blob_ref, Some(*bytes))? {
                        Ok(actual) if actual == *bytes => {}
                        Ok(actual) => {
                            return Ok(Err(format!(
                                "file blob {blob_ref} holds {actual} bytes, its entry says {bytes}"
                            )));
                        }
                        Err((why, detail)) => {
                            return Ok(Err(format!("a file {why}: {blob_ref} {detail}")
                                .trim_end()
                                .to_owned()));
                        }
                    }
                    size += bytes;
                    files += 1;
                }
                AssetEntry::Dir { .. } => dirs += 1,
            }
        }
        row.extend([
            Val::Text(layout),
            Val::Int(size as i64),
            Val::Int(files),
            Val::Int(dirs),
            Val::Text(serde_json::to_string(&entries)?),
            Val::Int(at),
        ]);
        Ok(checks::row(TICKET_ASSET, &row).map(|()| row))
    }

    /// Counts the blob directory's files nothing imported references:
    /// orphans (written before a transaction that never came, §2) and
    /// `*.partial` files of interrupted writes. Neither is imported. Only
    /// names are read (no file is opened).
    pub(super) fn count_blob_files(&mut self) -> anyhow::Result<()> {
        let referenced: HashSet<&String> = self
            .blobs
            .iter()
            .filter(|(_, s)| matches!(s, BlobState::Ok(_)))
            .map(|(a, _)| a)
            .collect();
        let Some(dir) = self.store.blobs.sharded_dir() else {
            // A bucket is not listed: orphans there are the source's business.
            return Ok(());
        };
        let Ok(shards) = std::fs::read_dir(dir) else {
            return Ok(());
        };
        let (mut partial, mut orphans) = (Vec::new(), Vec::new());
        for shard in shards {
            let shard = shard?;
            if !shard.file_type()?.is_dir() {
                continue;
            }
            for file in std::fs::read_dir(shard.path())? {
                let name = file?.file_name().to_string_lossy().into_owned();
                if name.ends_with(".partial") {
                    partial.push(name);
                } else if !referenced.contains(&name) && !self.blobs.contains_key(&name) {
                    // (A referenced file that failed its hash is reported
                    // with what references it.)
                    orphans.push(name);
                }
            }
        }
        for name in partial {
            self.report.note(
                "blob files of interrupted writes (*.partial, skipped)",
                || name,
            );
        }
        for name in orphans {
            self.report
                .note("blob files no imported record references (orphans, or owned by what was left out; skipped)", || name);
        }
        Ok(())
    }
}

/// The plan pass accepted a row the emit pass now refuses: the private
/// copy cannot change between them, so this is a defect, not the source's.
fn changed(what: &str, id: &str, why: &str) -> anyhow::Error {
    anyhow!(
        "{what} {} read differently in the second pass ({why})",
        short(id)
    )
}

type AssetKey = [String; 4];

/// A `ticket_assets` row, or why it cannot be read (with its key when that
/// much reads).
enum AssetRow {
    Read(AssetKey, SourceAsset),
    Unreadable(Option<AssetKey>, String),
}

struct SourceAsset {
    revision: i64,
    layout: Option<String>,
    manifest: Option<String>,
    size: Option<i64>,
    removed: bool,
    created_at: Option<String>,
}

/// A `ticket_assets` row's key and columns, each what it must be.
fn read_asset(row: &rusqlite::Row<'_>) -> AssetRow {
    let key = (|| -> Result<AssetKey, String> {
        Ok([
            required_text(row, 0, "repo")?,
            required_text(row, 1, "ticket_id")?,
            required_text(row, 2, "kind")?,
            required_text(row, 3, "name")?,
        ])
    })();
    let key = match key {
        Ok(key) => key,
        Err(why) => return AssetRow::Unreadable(None, why),
    };
    let read = || -> Result<SourceAsset, String> {
        Ok(SourceAsset {
            revision: required_int(row, 4, "revision")?,
            layout: cell_text(row, 5, "layout")?,
            manifest: cell_text(row, 6, "manifest")?,
            size: cell_int(row, 7, "size")?,
            removed: cell_int(row, 8, "removed")?.unwrap_or(0) != 0,
            created_at: cell_text(row, 9, "created_at")?,
        })
    };
    match read() {
        Ok(asset) => AssetRow::Read(key, asset),
        Err(why) => {
            let shown = key.iter().map(|k| short(k)).collect::<Vec<_>>().join(" ");
            AssetRow::Unreadable(Some(key), format!("{shown} ({why})"))
        }
    }
}
