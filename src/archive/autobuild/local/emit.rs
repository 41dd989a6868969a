//! The emit pass: every table read again in archive key order and sent as
//! archive rows; artifacts and ticket assets are judged here, one by one.

use std::collections::HashSet;

use anyhow::{anyhow, bail};
use serde_json::{Map, Value};

use super::*;

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
                send(
                    STREAM,
                    vec![
                        Val::Text(s.id.clone()),
                        Val::Text(s.scope.0.kind().to_owned()),
                        Val::Text(s.scope.1.clone()),
                        Val::Text(s.label.clone()),
                        Val::Text(s.status.clone()),
                        Val::Int(s.created_at),
                        Val::Int(s.created_order),
                        Val::Int(s.last_seq),
                        opt_int(s.closed_at),
                        opt_int(s.closed_order),
                        opt(s.outcome.clone()),
                        opt(s.artifact_kind.clone()),
                        opt_int(s.artifact_revision),
                        opt(s.artifact_blob_ref.clone()),
                    ],
                )?;
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
            tx.blocking_send(Item::Blob(blob))
                .map_err(|_| anyhow!("the archive writer stopped"))?;
        }
        Ok(())
    }

    fn emit_resources(
        &mut self,
        family: Family,
        send: &dyn Fn(usize, Vec<Val>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let (sql, extra) = match family {
            Family::Build => (
                format!(
                    "SELECT slug, created_at, updated_at, lease_holder, lease_expires_at, lease_ttl_ms, \
                     heartbeat_at, repo, {origin}, ticket, branch FROM builds ORDER BY slug COLLATE BINARY",
                    origin = if self.store.shape.has_column("builds", "repo_origin") {
                        "repo_origin"
                    } else {
                        "NULL"
                    }
                ),
                4,
            ),
            Family::Repo => (
                "SELECT repo, created_at, updated_at, lease_holder, lease_expires_at, lease_ttl_ms, \
                 heartbeat_at FROM repo_streams ORDER BY repo COLLATE BINARY"
                    .to_owned(),
                0,
            ),
            Family::Session => (
                "SELECT id, created_at, updated_at, NULL, NULL, NULL, NULL, repo, operator, title \
                 FROM sessions ORDER BY id COLLATE BINARY"
                    .to_owned(),
                3,
            ),
        };
        let store = self.store;
        let mut statement = store.conn.prepare(&sql)?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            let id: String = row.get(0)?;
            let Some(info) = self.owners.get(&(family, id.clone())) else {
                continue;
            };
            let t = |i: usize| -> anyhow::Result<Option<i64>> {
                time(text(row, i)?.as_deref()).map_err(|why| anyhow!(why))
            };
            let extras: Vec<Option<String>> = (7..7 + extra)
                .map(|i| text(row, i))
                .collect::<rusqlite::Result<_>>()?;
            let mut attrs = Map::new();
            let (attrs, parent, created_order) = match family {
                Family::Build => {
                    attrs.insert("repo".into(), extras[0].clone().unwrap_or_default().into());
                    if let Some(origin) = &extras[1] {
                        attrs.insert("repoOrigin".into(), origin.clone().into());
                    }
                    if let Some(ticket) = &extras[2] {
                        attrs.insert("ticket".into(), serde_json::from_str(ticket)?);
                    }
                    if let Some(branch) = &extras[3] {
                        attrs.insert("branch".into(), branch.clone().into());
                    }
                    (
                        Val::Text(Value::Object(attrs).to_string()),
                        Val::Null,
                        Val::Null,
                    )
                }
                Family::Repo => (Val::Null, Val::Null, Val::Null),
                Family::Session => {
                    let repo = extras[0].clone().unwrap_or_default();
                    attrs.insert("repo".into(), repo.clone().into());
                    attrs.insert(
                        "operator".into(),
                        extras[1].clone().unwrap_or_default().trim().into(),
                    );
                    if let Some(title) = &extras[2] {
                        attrs.insert("title".into(), title.clone().into());
                    }
                    (
                        Val::Text(Value::Object(attrs).to_string()),
                        Val::Text(repo),
                        opt_int(self.session_orders.get(&id).copied()),
                    )
                }
            };
            let lease_ttl: Option<i64> = row.get(5)?;
            send(
                RESOURCE,
                vec![
                    Val::Text(family.kind().to_owned()),
                    Val::Text(id.clone()),
                    attrs,
                    opt_int(t(1)?),
                    opt_int(t(2)?),
                    Val::Int(info.last_seq),
                    opt(text(row, 3)?),
                    opt_int(t(4)?),
                    opt_int(lease_ttl),
                    opt_int(t(6)?),
                    Val::Int(info.stream_counter),
                    parent,
                    created_order,
                ],
            )?;
            self.report.imported(family.record_table());
        }
        Ok(())
    }

    fn emit_events(
        &mut self,
        family: Family,
        send: &dyn Fn(usize, Vec<Val>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let sql = format!(
            "SELECT {owner}, seq, ts, actor, type, payload FROM {table} \
             ORDER BY {owner} COLLATE BINARY, seq",
            owner = family.owner(),
            table = family.events_table()
        );
        let store = self.store;
        let mut statement = store.conn.prepare(&sql)?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            let id: String = row.get(0)?;
            if !self.owners.contains_key(&(family, id.clone())) {
                continue;
            }
            let seq: i64 = row.get(1)?;
            let ts: String = row.get(2)?;
            let actor: String = row.get(3)?;
            let ty: String = row.get(4)?;
            let payload: String = row.get(5)?;
            // Spliced, not re-serialised (§4.2): the stored actor and payload
            // are JSON.stringify's output, so this is what Autobuild served.
            let envelope = format!(
                "{{\"{key}\":{id},\"seq\":{seq},\"ts\":{ts},\"actor\":{actor},\"type\":{ty},\"payload\":{payload}}}",
                key = family.owner(),
                id = Value::String(id.clone()),
                ts = Value::String(ts),
                ty = Value::String(ty),
            );
            send(
                EVENT,
                vec![
                    Val::Text(family.kind().to_owned()),
                    Val::Text(id),
                    Val::Int(seq),
                    Val::Text(envelope),
                ],
            )?;
            self.report.imported(family.events_table());
        }
        Ok(())
    }

    fn emit_heads(
        &mut self,
        family: Family,
        send: &dyn Fn(usize, Vec<Val>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        // Every revision counts, carried or not: numbering goes on where
        // Autobuild's would.
        let sql = format!(
            "SELECT {owner}, kind, MAX(revision) + 1 FROM {table} GROUP BY {owner}, kind \
             ORDER BY {owner} COLLATE BINARY, kind COLLATE BINARY",
            owner = family.owner(),
            table = family.artifacts_table()
        );
        let store = self.store;
        let mut statement = store.conn.prepare(&sql)?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            let id: String = row.get(0)?;
            let kind: String = row.get(1)?;
            if !self.owners.contains_key(&(family, id.clone())) || !ident::fits(&kind) {
                continue;
            }
            send(
                ARTIFACT_HEAD,
                vec![
                    Val::Text(family.kind().to_owned()),
                    Val::Text(id),
                    Val::Text(kind),
                    Val::Int(row.get(2)?),
                ],
            )?;
        }
        Ok(())
    }

    fn emit_artifacts(
        &mut self,
        family: Family,
        send: &dyn Fn(usize, Vec<Val>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let sql = format!(
            "SELECT {owner}, kind, revision, blob_ref, metadata, created_at FROM {table} \
             ORDER BY {owner} COLLATE BINARY, kind COLLATE BINARY, revision",
            owner = family.owner(),
            table = family.artifacts_table()
        );
        let store = self.store;
        let mut statement = store.conn.prepare(&sql)?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            let id: String = row.get(0)?;
            let kind: String = row.get(1)?;
            let revision: i64 = row.get(2)?;
            let blob: String = row.get(3)?;
            let metadata: Option<String> = row.get(4)?;
            let created: Option<String> = row.get(5)?;
            self.report.read(family.artifacts_table(), 1);
            if !self.owners.contains_key(&(family, id.clone())) {
                if !self.skipped.contains(&(family, id.clone())) {
                    let what = format!("{} artifacts without an imported record", family.noun());
                    self.report.problem(&what, || short(&id));
                }
                continue;
            }
            let name = || {
                format!(
                    "{} {} {} rev {revision}",
                    family.noun(),
                    short(&id),
                    short(&kind)
                )
            };
            let checked = (|| {
                fit("the kind", &kind)?;
                let metadata = metadata.clone().ok_or("its metadata is NULL")?;
                match serde_json::from_str::<Value>(&metadata) {
                    Ok(Value::Object(_)) => {}
                    _ => return Err("its metadata is not a JSON object".to_owned()),
                }
                let at = required_time(created.as_deref(), "created_at")?;
                Ok((metadata, at))
            })();
            let (metadata, at) = match checked {
                Ok(ok) => ok,
                Err(why) => {
                    self.report.problem("artifacts that cannot be carried", || {
                        format!("{} ({why})", name())
                    });
                    continue;
                }
            };
            let size = match self.blob_verdict(&blob)? {
                Ok(size) => size,
                Err(why) => {
                    let what = format!("artifacts {why}");
                    self.report
                        .problem(&what, || format!("{} blob {blob}", name()));
                    continue;
                }
            };
            self.referenced.insert(blob.clone());
            send(
                ARTIFACT,
                vec![
                    Val::Text(family.kind().to_owned()),
                    Val::Text(id),
                    Val::Text(kind),
                    Val::Int(revision),
                    Val::Text(blob),
                    Val::Int(size as i64),
                    Val::Text(metadata),
                    Val::Int(at),
                ],
            )?;
            self.report.imported(family.artifacts_table());
        }
        Ok(())
    }

    fn emit_chunks(
        &mut self,
        included: &HashSet<String>,
        send: &dyn Fn(usize, Vec<Val>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let store = self.store;
        let mut statement = store.conn.prepare(
            "SELECT stream, seq, ts, parts FROM stream_chunks ORDER BY stream COLLATE BINARY, seq",
        )?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            let id: String = row.get(0)?;
            self.report.read("stream_chunks", 1);
            if !included.contains(&id) {
                continue;
            }
            let seq: i64 = row.get(1)?;
            let ts: String = row.get(2)?;
            let parts: String = row.get(3)?;
            if serde_json::from_str::<Value>(&parts).is_err() {
                bail!("stream {} chunk {seq}: its parts are not JSON", short(&id));
            }
            let chunk = format!(
                "{{\"stream\":{},\"seq\":{seq},\"ts\":{},\"parts\":{parts}}}",
                Value::String(id.clone()),
                Value::String(ts)
            );
            send(
                STREAM_CHUNK,
                vec![Val::Text(id), Val::Int(seq), Val::Text(chunk)],
            )?;
            self.report.imported("stream_chunks");
        }
        Ok(())
    }

    fn emit_ticket_assets(
        &mut self,
        send: &dyn Fn(usize, Vec<Val>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        const SQL: &str = "SELECT repo, ticket_id, kind, name, revision, layout, manifest, size, \
             removed, created_at FROM ticket_assets ORDER BY repo COLLATE BINARY, \
             ticket_id COLLATE BINARY, kind COLLATE BINARY, name COLLATE BINARY, revision";
        type Key = [String; 4];
        // First pass: every asset whose revisions all carry, with its head.
        let mut heads: Vec<(Key, i64, i64)> = Vec::new();
        let store = self.store;
        let rows_of = |reader: &mut Self,
                       visit: &mut dyn FnMut(&mut Self, Key, AssetRow) -> anyhow::Result<()>|
         -> anyhow::Result<()> {
            let mut statement = store.conn.prepare(SQL)?;
            let mut rows = statement.query([])?;
            while let Some(row) = rows.next()? {
                let key: Key = [row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?];
                let asset = AssetRow {
                    revision: row.get(4)?,
                    layout: row.get(5)?,
                    manifest: row.get(6)?,
                    size: row.get(7)?,
                    removed: row.get::<_, Option<i64>>(8)?.unwrap_or(0) != 0,
                    created_at: row.get(9)?,
                };
                visit(reader, key, asset)?;
            }
            Ok(())
        };
        let mut bad: HashSet<Key> = HashSet::new();
        let mut current: Option<(Key, i64, i64)> = None;
        rows_of(self, &mut |reader, key, asset| {
            reader.report.read("ticket_assets", 1);
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
            send(TICKET_ASSET_HEAD, row)?;
        }
        rows_of(self, &mut |reader, key, asset| {
            if bad.contains(&key) {
                return Ok(());
            }
            if let Ok(row) = reader.asset_row(&key, &asset)? {
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

    /// A `ticket_asset` archive row, or why the revision cannot be carried.
    fn asset_row(
        &mut self,
        key: &[String; 4],
        asset: &AssetRow,
    ) -> anyhow::Result<Result<Vec<Val>, String>> {
        for part in key {
            if let Err(why) = fit("a key member", part) {
                return Ok(Err(why));
            }
        }
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
            return Ok(Ok(row));
        }
        let layout = asset.layout.clone().unwrap_or_default();
        if crate::protocol::ticket_assets::Layout::parse(&layout).is_none() {
            return Ok(Err(format!("layout {layout:?}")));
        }
        let entries: Vec<AssetEntry> =
            match serde_json::from_str(asset.manifest.as_deref().unwrap_or("")) {
                Ok(entries) => entries,
                Err(err) => {
                    return Ok(Err(format!(
                        "its manifest does not fit abstore's entries ({err})"
                    )));
                }
            };
        let (mut size, mut files, mut dirs) = (0u64, 0i64, 0i64);
        for entry in &entries {
            match entry {
                AssetEntry::File {
                    size: bytes,
                    blob_ref,
                    ..
                } => {
                    match self.blob_verdict(blob_ref)? {
                        Ok(actual) if actual == *bytes => {}
                        Ok(actual) => {
                            return Ok(Err(format!(
                                "file blob {blob_ref} holds {actual} bytes, its entry says {bytes}"
                            )));
                        }
                        Err(why) => return Ok(Err(format!("a file {why}: {blob_ref}"))),
                    }
                    size += bytes;
                    files += 1;
                }
                AssetEntry::Dir { .. } => dirs += 1,
            }
        }
        if asset.size.is_some_and(|s| s != size as i64) {
            self.report.note(
                "ticket-asset sizes recomputed from their manifests (Autobuild's differed)",
                || format!("{} rev {}", key.join(" "), asset.revision),
            );
        }
        row.extend([
            Val::Text(layout),
            Val::Int(size as i64),
            Val::Int(files),
            Val::Int(dirs),
            Val::Text(serde_json::to_string(&entries)?),
            Val::Int(at),
        ]);
        Ok(Ok(row))
    }

    /// Counts the blob directory's files nothing imported references:
    /// orphans (written before a transaction that never came, §2) and
    /// `*.partial` files of interrupted writes. Neither is imported.
    pub(super) fn count_blob_files(&mut self) -> anyhow::Result<()> {
        let referenced: HashSet<&String> = self
            .blobs
            .iter()
            .filter(|(_, s)| matches!(s, BlobState::Ok(_)))
            .map(|(a, _)| a)
            .collect();
        let SourceBlobs::Sharded(dir) = &self.store.blobs else {
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

struct AssetRow {
    revision: i64,
    layout: Option<String>,
    manifest: Option<String>,
    size: Option<i64>,
    removed: bool,
    created_at: Option<String>,
}
