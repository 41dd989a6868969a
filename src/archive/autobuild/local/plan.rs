//! The plan pass: which resources and streams can be carried, and the
//! per-scope counters Autobuild never had (docs/autobuild-stores.md §4.3).

use std::collections::HashMap;

use rusqlite::OptionalExtension as _;
use serde_json::Value;

use super::rows::{self, Counters};
use super::*;
use crate::archive::autobuild::catalogs::Verdict;
use crate::archive::checks;

impl Reader<'_> {
    pub(super) fn plan(&mut self) -> anyhow::Result<()> {
        for family in self.families() {
            self.plan_resources(family)?;
            self.plan_events(family)?;
        }
        if self.has("streams") {
            self.plan_streams()?;
        }
        self.number_children()?;
        Ok(())
    }

    fn note_lease(&mut self, owner: &Owner, holder: Option<&str>, expires: Option<i64>) {
        if let (Some(holder), Some(expires)) = (holder, expires)
            && expires > crate::archive::export::now_ms()
        {
            self.report.note(
                "held leases (copied: they block other holders until they expire)",
                || {
                    format!(
                        "{} {} held by {} until {}",
                        owner.0.noun(),
                        short(&owner.1),
                        short(holder),
                        format_iso(expires)
                    )
                },
            );
        }
    }

    /// Every record of `family`, built as the emit pass will and checked as
    /// its create route would; a session also needs its repository's record.
    fn plan_resources(&mut self, family: Family) -> anyhow::Result<()> {
        let store = self.store;
        let mut statement = store
            .conn
            .prepare(&rows::resource_sql(family, &store.shape))?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            self.report.read(family.record_table(), 1);
            let id = match required_text(row, 0, "id") {
                Ok(id) => id,
                Err(why) => {
                    let what = format!("{}s whose id is not text (left out)", family.noun());
                    self.report.problem(&what, || why);
                    continue;
                }
            };
            if family == Family::Repo {
                self.report.distinct_repo(&id);
            }
            let owner = (family, id);
            match rows::resource_row(family, &owner.1, row, &Counters::planned(family)) {
                Err(why) => self.skip_owner(&owner, &why),
                Ok(archived) => {
                    if let Val::Text(repo) = &archived[11]
                        && !self.owners.contains_key(&(Family::Repo, repo.clone()))
                    {
                        self.skipped.insert(owner.clone());
                        self.report.problem(
                            "sessions without an imported repository record (with their events, artifacts and streams)",
                            || format!("session {} of repository {}", short(&owner.1), short(repo)),
                        );
                        continue;
                    }
                    let holder = match &archived[6] {
                        Val::Text(holder) => Some(holder.clone()),
                        _ => None,
                    };
                    let expires = match archived[7] {
                        Val::Int(at) => Some(at),
                        _ => None,
                    };
                    self.note_lease(&owner, holder.as_deref(), expires);
                    self.owners.insert(owner, OwnerInfo::default());
                }
            }
        }
        Ok(())
    }

    fn skip_owner(&mut self, owner: &Owner, why: &str) {
        self.skipped.insert(owner.clone());
        let what = format!(
            "{}s that cannot be carried (with their events, artifacts and streams)",
            owner.0.noun()
        );
        self.report
            .problem(&what, || format!("{} ({why})", short(&owner.1)));
    }

    /// Checks every event of the family: an event that cannot be carried
    /// exactly, or that no catalog of a client abstore serves accepts,
    /// takes its resource out (a gap would renumber the rest).
    fn plan_events(&mut self, family: Family) -> anyhow::Result<()> {
        let store = self.store;
        let mut statement = store.conn.prepare(&rows::events_sql(family))?;
        let mut rows = statement.query([])?;
        let mut current: Option<String> = None;
        let mut expected = 1;
        let mut bad: Vec<(String, String)> = Vec::new();
        let mut unowned: Vec<String> = Vec::new();
        let mut last: HashMap<String, i64> = HashMap::new();
        let catalogs = self.catalogs;
        while let Some(row) = rows.next()? {
            self.report.read(family.events_table(), 1);
            let id = match required_text(row, 0, family.owner()) {
                Ok(id) => id,
                Err(why) => {
                    let what = format!(
                        "{} events whose {} is not text (left out)",
                        family.noun(),
                        family.owner()
                    );
                    self.report.problem(&what, || why);
                    continue;
                }
            };
            if current.as_deref() != Some(id.as_str()) {
                current = Some(id.clone());
                expected = 1;
                if !self.owners.contains_key(&(family, id.clone())) {
                    unowned.push(id.clone());
                }
            }
            let owned = unowned.last() != Some(&id);
            if !owned || bad.last().is_some_and(|(b, _)| *b == id) {
                continue;
            }
            let verdict = rows::event_row(family, &id, row).and_then(|(event, _)| {
                if event.seq != expected {
                    return Err(format!("seq {} where {expected} was due", event.seq));
                }
                let verdict = catalogs
                    .check(
                        family.catalog(),
                        &event.actor,
                        &event.event_type,
                        &event.payload,
                    )
                    .map_err(|why| {
                        format!(
                            "event {} ({}) is refused by the catalogs of {}: {why}",
                            event.seq,
                            short(&event.event_type),
                            catalogs.name
                        )
                    })?;
                Ok((event, verdict))
            });
            let (event, verdict) = match verdict {
                Ok(ok) => ok,
                Err(why) => {
                    bad.push((id, why));
                    continue;
                }
            };
            let seq = event.seq;
            expected += 1;
            last.insert(id.clone(), seq);
            if parse_iso(&event.ts).map(format_iso).as_deref() != Some(event.ts.as_str()) {
                self.report.note(
                    "event times not in toISOString's spelling (kept as stored)",
                    || format!("{} {} seq {seq}: {}", family.noun(), short(&id), event.ts),
                );
            }
            let changes = |value: &Value, text: &str| {
                serde_json::to_string(value).ok().as_deref() != Some(text)
            };
            if changes(&event.actor, &event.actor_text)
                || changes(&event.payload, &event.payload_text)
            {
                self.report.note(
                    "events whose JSON a parse and re-serialisation would change (kept byte for byte)",
                    || format!("{} {} seq {seq}", family.noun(), short(&id)),
                );
            }
            if verdict == Verdict::Normalised {
                self.report.note(
                    "events whose payload abstore's catalogs would normalise (kept as stored)",
                    || {
                        format!(
                            "{} {} seq {seq} {}",
                            family.noun(),
                            short(&id),
                            event.event_type
                        )
                    },
                );
            }
        }
        drop(rows);
        drop(statement);
        for id in unowned {
            if !self.skipped.contains(&(family, id.clone())) {
                let what = format!("{} events without an imported record", family.noun());
                self.report.problem(&what, || short(&id));
            }
        }
        for (id, why) in bad {
            let owner = (family, id);
            self.owners.remove(&owner);
            self.skip_owner(&owner, &why);
        }
        for (id, seq) in last {
            if let Some(info) = self.owners.get_mut(&(family, id)) {
                info.last_seq = seq;
            }
        }
        Ok(())
    }

    /// Every stream's chunks: numbered 1, 2, 3… and each one an append
    /// could have stored. The count per stream, or why it cannot be
    /// carried; chunks of a stream whose id is not text are reported here.
    fn plan_chunks(&mut self) -> anyhow::Result<HashMap<String, Result<i64, String>>> {
        let store = self.store;
        let mut statement = store.conn.prepare(rows::CHUNKS_SQL)?;
        let mut rows = statement.query([])?;
        let mut chunks: HashMap<String, Result<i64, String>> = HashMap::new();
        while let Some(row) = rows.next()? {
            let id = match required_text(row, 0, "stream") {
                Ok(id) => id,
                Err(why) => {
                    self.report.read("stream_chunks", 1);
                    self.report
                        .problem("stream chunks whose stream is not text (left out)", || why);
                    continue;
                }
            };
            let state = chunks.entry(id.clone()).or_insert(Ok(0));
            let Ok(count) = state else {
                continue;
            };
            let checked = rows::chunk_row(&id, row).and_then(|archived| match archived[1] {
                Val::Int(seq) if seq == *count + 1 => Ok(()),
                Val::Int(seq) => Err(format!("chunk {seq} where {} was due", *count + 1)),
                _ => Err("a chunk without its sequence".to_owned()),
            });
            match checked {
                Ok(()) => *count += 1,
                Err(why) => *state = Err(why),
            }
        }
        Ok(chunks)
    }

    fn plan_streams(&mut self) -> anyhow::Result<()> {
        let has_session = self.store.shape.has_column("streams", "session");
        let tiebreak = if self.store.shape.has_column("streams", "creation_seq") {
            "creation_seq"
        } else {
            "rowid"
        };
        let sql = format!(
            "SELECT id, scope_kind, build, repo, {session}, label, format, status, outcome, \
             artifact_kind, artifact_revision, artifact_blob_ref, created_at, closed_at, {tiebreak} \
             FROM streams ORDER BY id COLLATE BINARY",
            session = if has_session { "session" } else { "NULL" },
        );
        let chunks = self.plan_chunks()?;
        let mut raw = Vec::new();
        {
            let mut statement = self.conn().prepare(&sql)?;
            let mut rows = statement.query([])?;
            while let Some(row) = rows.next()? {
                raw.push(read_stream(row));
            }
        }
        for read in raw {
            self.report.read("streams", 1);
            let stream = match read {
                Ok(stream) => stream,
                Err((id, why)) => {
                    self.report
                        .problem("streams that cannot be carried (with their chunks)", || {
                            format!("{} ({why})", short(&id))
                        });
                    continue;
                }
            };
            let mut row = match self.stream_verdict(stream, &chunks) {
                Ok(row) => row,
                Err((what, id, why)) => {
                    self.report
                        .problem(what, || format!("{} ({why})", short(&id)));
                    continue;
                }
            };
            if let Some(blob) = row.artifact_blob_ref.clone()
                && let Err((why, detail)) = self.blob_verdict(&blob, None)?
            {
                let what = format!("closed streams {why} (with their chunks)");
                self.report.problem(&what, || {
                    format!("{} blob {blob} {detail}", short(&row.id))
                        .trim_end()
                        .to_owned()
                });
                continue;
            }
            if row.status == "closed" && row.last_seq == 0 {
                // Pruned (§1.5): the count survives in the artifact's metadata.
                match self.chunk_count(&row)? {
                    Some(n) => {
                        row.last_seq = n;
                        self.report.note(
                            "closed streams whose chunks Autobuild had pruned (the count kept from the artifact's chunkCount)",
                            || format!("{} ({n} chunks)", short(&row.id)),
                        );
                    }
                    None => self.report.note(
                        "closed streams without chunks or a chunkCount (imported with none)",
                        || short(&row.id),
                    ),
                }
            }
            self.streams.push(row);
        }
        Ok(())
    }

    /// A stream row as abstore keeps it, or the report's kind of problem,
    /// the stream's id and why.
    fn stream_verdict(
        &self,
        s: SourceStream,
        chunks: &HashMap<String, Result<i64, String>>,
    ) -> Result<StreamRow, (&'static str, String, String)> {
        let id = s.id;
        let bad = |why: String| {
            (
                "streams that cannot be carried (with their chunks)",
                id.clone(),
                why,
            )
        };
        let format = s.format.unwrap_or_default();
        if format != STREAM_FORMAT {
            return Err((
                "streams of a format abstore does not serve (with their chunks)",
                id.clone(),
                format!("format {:?}", short(&format)),
            ));
        }
        let (family, scope_id) = match (s.scope_kind.as_deref(), s.build, s.repo, s.session) {
            (Some("build"), Some(b), None, None) => (Family::Build, b),
            (Some("repo"), None, Some(r), None) => (Family::Repo, r),
            (Some("session"), None, None, Some(s)) => (Family::Session, s),
            (kind, ..) => {
                return Err(bad(format!(
                    "scope kind {:?} does not match its one scope column",
                    kind.map(short)
                )));
            }
        };
        let scope = (family, scope_id);
        if !self.owners.contains_key(&scope) {
            return Err((
                "streams whose scope is not imported (with their chunks)",
                id.clone(),
                format!("of {} {}", family.noun(), short(&scope.1)),
            ));
        }
        let created_at = required_time(s.created.as_deref(), "created_at").map_err(bad)?;
        let last_seq = match chunks.get(&id) {
            None => 0,
            Some(Ok(n)) => *n,
            Some(Err(why)) => return Err(bad(why.clone())),
        };
        let mut row = StreamRow {
            id: id.clone(),
            scope,
            label: s.label.unwrap_or_default(),
            status: s.status.clone().unwrap_or_default(),
            created_at,
            creation_tiebreak: s.tiebreak,
            last_seq,
            closed_at: None,
            outcome: None,
            artifact_kind: None,
            artifact_revision: None,
            artifact_blob_ref: None,
            created_order: 1,
            closed_order: None,
        };
        if row.status == "closed" {
            row.closed_at = Some(required_time(s.closed.as_deref(), "closed_at").map_err(bad)?);
            row.closed_order = Some(1);
            row.outcome = s.outcome;
            let (Some(kind), Some(revision), Some(blob)) =
                (s.artifact_kind, s.artifact_revision, s.artifact_blob_ref)
            else {
                return Err(bad("closed without its artifact".to_owned()));
            };
            row.artifact_kind = Some(kind);
            row.artifact_revision = Some(revision);
            row.artifact_blob_ref = Some(blob);
        }
        // Checked with stand-in orders (numbered once every stream is known).
        checks::row(STREAM, &rows::stream_row(&row)).map_err(bad)?;
        row.closed_order = None;
        Ok(row)
    }

    /// The `chunkCount` of a closed stream's artifact metadata.
    fn chunk_count(&self, row: &StreamRow) -> anyhow::Result<Option<i64>> {
        let family = row.scope.0;
        let sql = format!(
            "SELECT metadata FROM {} WHERE {} = ?1 AND kind = ?2 AND revision = ?3",
            family.artifacts_table(),
            family.owner()
        );
        let metadata: Option<Option<String>> = self
            .conn()
            .query_row(
                &sql,
                rusqlite::params![row.scope.1, row.artifact_kind, row.artifact_revision],
                |r| Ok(cell_text(r, 0, "metadata").ok().flatten()),
            )
            .optional()?;
        Ok(metadata
            .flatten()
            .and_then(|m| serde_json::from_str::<Value>(&m).ok())
            .and_then(|m| m.get("chunkCount").and_then(Value::as_i64))
            .filter(|n| (0..=crate::protocol::numbers::MAX_SAFE_INTEGER).contains(n)))
    }

    /// Numbers every scope's creations and closes (streams; a repository's
    /// sessions too) in time order, as abstore's counter would have.
    fn number_children(&mut self) -> anyhow::Result<()> {
        let mut by_scope: HashMap<Owner, Vec<Ordered>> = HashMap::new();
        for (i, stream) in self.streams.iter().enumerate() {
            let list = by_scope.entry(stream.scope.clone()).or_default();
            list.push(Ordered {
                at: stream.created_at,
                phase: 0,
                tiebreak: (stream.creation_tiebreak, stream.id.clone()),
                target: Target::StreamCreated(i),
            });
            if let Some(at) = stream.closed_at {
                list.push(Ordered {
                    at,
                    phase: 1,
                    tiebreak: (0, stream.id.clone()),
                    target: Target::StreamClosed(i),
                });
            }
        }
        if self.has("sessions") {
            let tiebreak = if self.store.shape.has_column("sessions", "creation_seq") {
                "creation_seq"
            } else {
                "rowid"
            };
            let sql = format!("SELECT id, repo, created_at, {tiebreak} FROM sessions");
            let store = self.store;
            let mut statement = store.conn.prepare(&sql)?;
            let mut rows = statement.query([])?;
            while let Some(row) = rows.next()? {
                // Every imported session's columns were read in the plan.
                let (Ok(Some(id)), Ok(Some(repo))) =
                    (cell_text(row, 0, "id"), cell_text(row, 1, "repo"))
                else {
                    continue;
                };
                if !self.owners.contains_key(&(Family::Session, id.clone())) {
                    continue;
                }
                let at = cell_text(row, 2, "created_at")
                    .ok()
                    .flatten()
                    .and_then(|t| parse_iso(&t))
                    .unwrap_or(0);
                let tie = cell_int(row, 3, tiebreak).ok().flatten().unwrap_or(0);
                by_scope
                    .entry((Family::Repo, repo))
                    .or_default()
                    .push(Ordered {
                        at,
                        phase: 0,
                        tiebreak: (tie, id.clone()),
                        target: Target::SessionCreated(id),
                    });
            }
        }
        for (scope, mut list) in by_scope {
            list.sort_by(|a, b| (a.at, a.phase, &a.tiebreak).cmp(&(b.at, b.phase, &b.tiebreak)));
            if list.windows(2).any(|w| w[0].at == w[1].at) {
                self.report.note(
                    "scopes where creations or closes share a millisecond (ordered by Autobuild's creation order, then id)",
                    || format!("{} {}", scope.0.noun(), short(&scope.1)),
                );
            }
            let n = list.len() as i64;
            for (order, item) in (1..).zip(list) {
                match item.target {
                    Target::StreamCreated(i) => self.streams[i].created_order = order,
                    Target::StreamClosed(i) => self.streams[i].closed_order = Some(order),
                    Target::SessionCreated(id) => {
                        self.session_orders.insert(id, order);
                    }
                }
            }
            if let Some(info) = self.owners.get_mut(&scope) {
                info.stream_counter = n;
            }
        }
        Ok(())
    }
}

/// A `streams` row as read, each column what it must be.
struct SourceStream {
    id: String,
    scope_kind: Option<String>,
    build: Option<String>,
    repo: Option<String>,
    session: Option<String>,
    label: Option<String>,
    format: Option<String>,
    status: Option<String>,
    outcome: Option<String>,
    artifact_kind: Option<String>,
    artifact_revision: Option<i64>,
    artifact_blob_ref: Option<String>,
    created: Option<String>,
    closed: Option<String>,
    tiebreak: i64,
}

/// The columns of `plan_streams`'s row, or the stream's id (as far as it
/// reads) and why the row cannot be read.
fn read_stream(row: &rusqlite::Row<'_>) -> Result<SourceStream, (String, String)> {
    let id = required_text(row, 0, "id").map_err(|why| ("(unreadable id)".to_owned(), why))?;
    let read = || -> Result<SourceStream, String> {
        let t = |i: usize, column: &str| cell_text(row, i, column);
        Ok(SourceStream {
            id: id.clone(),
            scope_kind: t(1, "scope_kind")?,
            build: t(2, "build")?,
            repo: t(3, "repo")?,
            session: t(4, "session")?,
            label: t(5, "label")?,
            format: t(6, "format")?,
            status: t(7, "status")?,
            outcome: t(8, "outcome")?,
            artifact_kind: t(9, "artifact_kind")?,
            artifact_revision: cell_int(row, 10, "artifact_revision")?,
            artifact_blob_ref: t(11, "artifact_blob_ref")?,
            created: t(12, "created_at")?,
            closed: t(13, "closed_at")?,
            tiebreak: cell_int(row, 14, "creation_seq")?.unwrap_or(0),
        })
    };
    read().map_err(|why| (id.clone(), why))
}
