//! The plan pass: which resources and streams can be carried, and the
//! per-scope counters Autobuild never had (docs/autobuild-stores.md §4.3).

use std::collections::HashMap;

use anyhow::anyhow;
use rusqlite::OptionalExtension as _;
use serde_json::Value;

use super::*;

impl Reader<'_> {
    pub(super) fn plan(&mut self) -> anyhow::Result<()> {
        for family in self.families() {
            match family {
                Family::Build => self.plan_builds()?,
                Family::Repo => self.plan_repos()?,
                Family::Session => self.plan_sessions()?,
            }
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

    fn plan_builds(&mut self) -> anyhow::Result<()> {
        let mut statement = self.conn().prepare(
            "SELECT slug, created_at, updated_at, lease_holder, lease_expires_at, ticket FROM builds",
        )?;
        let mut rows = statement.query([])?;
        let mut found = Vec::new();
        while let Some(row) = rows.next()? {
            let slug: String = row.get(0)?;
            let (created, updated, holder, expires, ticket) = (
                text(row, 1)?,
                text(row, 2)?,
                text(row, 3)?,
                text(row, 4)?,
                text(row, 5)?,
            );
            let verdict = (|| {
                fit("the slug", &slug)?;
                required_time(created.as_deref(), "created_at")?;
                required_time(updated.as_deref(), "updated_at")?;
                if let Some(holder) = &holder {
                    fit("the lease holder", holder)?;
                }
                let expires = time(expires.as_deref())?;
                if let Some(ticket) = &ticket {
                    serde_json::from_str::<Value>(ticket)
                        .map_err(|err| format!("its ticket is not JSON ({err})"))?;
                }
                Ok::<_, String>(expires)
            })();
            found.push((slug, holder, verdict));
        }
        drop(rows);
        drop(statement);
        for (slug, holder, verdict) in found {
            self.report.read("builds", 1);
            let owner = (Family::Build, slug);
            match verdict {
                Ok(expires) => {
                    self.note_lease(&owner, holder.as_deref(), expires);
                    self.owners.insert(owner, OwnerInfo::default());
                }
                Err(why) => self.skip_owner(&owner, &why),
            }
        }
        Ok(())
    }

    fn plan_repos(&mut self) -> anyhow::Result<()> {
        let mut statement = self.conn().prepare(
            "SELECT repo, created_at, updated_at, lease_holder, lease_expires_at FROM repo_streams",
        )?;
        let mut rows = statement.query([])?;
        let mut found = Vec::new();
        while let Some(row) = rows.next()? {
            let repo: String = row.get(0)?;
            let (created, updated, holder, expires) =
                (text(row, 1)?, text(row, 2)?, text(row, 3)?, text(row, 4)?);
            let verdict = (|| {
                fit("the repository id", &repo)?;
                required_time(created.as_deref(), "created_at")?;
                required_time(updated.as_deref(), "updated_at")?;
                if let Some(holder) = &holder {
                    fit("the lease holder", holder)?;
                }
                time(expires.as_deref())
            })();
            found.push((repo, holder, verdict));
        }
        drop(rows);
        drop(statement);
        for (repo, holder, verdict) in found {
            self.report.read("repo_streams", 1);
            self.report.distinct_repo(&repo);
            let owner = (Family::Repo, repo);
            match verdict {
                Ok(expires) => {
                    self.note_lease(&owner, holder.as_deref(), expires);
                    self.owners.insert(owner, OwnerInfo::default());
                }
                Err(why) => self.skip_owner(&owner, &why),
            }
        }
        Ok(())
    }

    fn plan_sessions(&mut self) -> anyhow::Result<()> {
        let mut statement = self
            .conn()
            .prepare("SELECT id, repo, operator, created_at, updated_at FROM sessions")?;
        let mut rows = statement.query([])?;
        let mut found = Vec::new();
        while let Some(row) = rows.next()? {
            let id: String = row.get(0)?;
            let repo: String = row.get(1)?;
            let operator: String = row.get(2)?;
            let (created, updated) = (text(row, 3)?, text(row, 4)?);
            found.push((id, repo, operator, created, updated));
        }
        drop(rows);
        drop(statement);
        for (id, repo, operator, created, updated) in found {
            self.report.read("sessions", 1);
            let owner = (Family::Session, id);
            let verdict = (|| {
                fit("the session id", &owner.1)?;
                if operator.trim().is_empty() {
                    return Err("its operator is blank".to_owned());
                }
                required_time(created.as_deref(), "created_at")?;
                required_time(updated.as_deref(), "updated_at")?;
                Ok(())
            })();
            if let Err(why) = verdict {
                self.skip_owner(&owner, &why);
            } else if !self.owners.contains_key(&(Family::Repo, repo.clone())) {
                self.skipped.insert(owner.clone());
                self.report.problem(
                    "sessions without an imported repository record (with their events, artifacts and streams)",
                    || format!("session {} of repository {}", short(&owner.1), short(&repo)),
                );
            } else {
                self.owners.insert(owner, OwnerInfo::default());
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
    /// exactly takes its resource out (a gap would renumber the rest).
    fn plan_events(&mut self, family: Family) -> anyhow::Result<()> {
        let sql = format!(
            "SELECT {owner}, seq, ts, actor, type, payload FROM {table} \
             ORDER BY {owner} COLLATE BINARY, seq",
            owner = family.owner(),
            table = family.events_table()
        );
        let store = self.store;
        let mut statement = store.conn.prepare(&sql)?;
        let mut rows = statement.query([])?;
        let mut current: Option<String> = None;
        let mut expected = 1;
        let mut bad: Vec<(String, String)> = Vec::new();
        let mut unowned: Vec<String> = Vec::new();
        let mut last: HashMap<String, i64> = HashMap::new();
        let catalog = self.catalog;
        while let Some(row) = rows.next()? {
            let id: String = row.get(0)?;
            let seq: i64 = row.get(1)?;
            if current.as_deref() != Some(id.as_str()) {
                current = Some(id.clone());
                expected = 1;
                if !self.owners.contains_key(&(family, id.clone())) {
                    unowned.push(id.clone());
                }
            }
            self.report.read(family.events_table(), 1);
            let owned = unowned.last() != Some(&id);
            if !owned || bad.last().is_some_and(|(b, _)| *b == id) {
                continue;
            }
            let (ts, actor, ty, payload) =
                (text(row, 2)?, text(row, 3)?, text(row, 4)?, text(row, 5)?);
            let verdict = (|| {
                if seq != expected {
                    return Err(format!("seq {seq} where {expected} was due"));
                }
                let ts = ts.ok_or("an event's ts is NULL")?;
                let ms =
                    parse_iso(&ts).ok_or_else(|| format!("event ts {ts:?} is not ISO-8601"))?;
                let ty = ty.ok_or("an event's type is NULL")?;
                let actor_text = actor.ok_or("an event's actor is NULL")?;
                let payload_text = payload.ok_or("an event's payload is NULL")?;
                let parse = |what: &str, text: &str| {
                    serde_json::from_str::<Value>(text).map_err(|err| {
                        format!("event {seq}'s {what} is JSON abstore cannot read ({err})")
                    })
                };
                let actor = parse("actor", &actor_text)?;
                let payload = parse("payload", &payload_text)?;
                Ok((ts, ms, ty, actor_text, actor, payload_text, payload))
            })();
            match verdict {
                Err(why) => bad.push((id, why)),
                Ok((ts, ms, ty, actor_text, actor, payload_text, payload)) => {
                    expected += 1;
                    last.insert(id.clone(), seq);
                    if format_iso(ms) != ts {
                        self.report.note(
                            "event times not in toISOString's spelling (kept as stored)",
                            || format!("{} {} seq {seq}: {ts}", family.noun(), short(&id)),
                        );
                    }
                    let (actor_again, payload_again) = (actor.to_string(), payload.to_string());
                    if actor_again != actor_text || payload_again != payload_text {
                        self.report.note(
                            "events whose JSON a parse and re-serialisation would change (kept byte for byte)",
                            || format!("{} {} seq {seq}", family.noun(), short(&id)),
                        );
                    }
                    if let Some((identity, catalogs)) = catalog
                        && let Err(err) = catalogs.validate(family.catalog(), &actor, &ty, &payload)
                    {
                        let what = format!(
                            "events abstore's catalog for {identity} would refuse (imported as stored)"
                        );
                        self.report.note(&what, || {
                            format!(
                                "{} {} seq {seq} {ty}: {}",
                                family.noun(),
                                short(&id),
                                err.message
                            )
                        });
                    }
                }
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
        let mut chunks: HashMap<String, (i64, i64)> = HashMap::new();
        {
            let mut statement = self.conn().prepare(
                "SELECT stream, COUNT(*), MAX(seq), MIN(seq) FROM stream_chunks GROUP BY stream",
            )?;
            let mut rows = statement.query([])?;
            while let Some(row) = rows.next()? {
                let (count, max, min): (i64, i64, i64) = (row.get(1)?, row.get(2)?, row.get(3)?);
                chunks.insert(row.get(0)?, (if min == 1 { count } else { -1 }, max));
            }
        }
        let mut raw = Vec::new();
        {
            let mut statement = self.conn().prepare(&sql)?;
            let mut rows = statement.query([])?;
            while let Some(row) = rows.next()? {
                let values: Vec<Option<String>> = (0..10)
                    .map(|i| text(row, i))
                    .collect::<rusqlite::Result<_>>()?;
                let revision: Option<i64> = row.get(10)?;
                let blob_ref = text(row, 11)?;
                let created = text(row, 12)?;
                let closed = text(row, 13)?;
                let tie: Option<i64> = row.get(14)?;
                raw.push((
                    values,
                    revision,
                    blob_ref,
                    created,
                    closed,
                    tie.unwrap_or(0),
                ));
            }
        }
        for (values, revision, blob_ref, created, closed, tie) in raw {
            self.report.read("streams", 1);
            let [
                id,
                scope_kind,
                build,
                repo,
                session,
                label,
                format,
                status,
                outcome,
                artifact_kind,
            ] = <[Option<String>; 10]>::try_from(values).map_err(|_| anyhow!("stream columns"))?;
            let id = id.unwrap_or_default();
            let verdict: Result<StreamRow, (&'static str, String)> = (|| {
                let bad = |why: String| ("streams that cannot be carried (with their chunks)", why);
                fit("the stream id", &id).map_err(bad)?;
                let format = format.unwrap_or_default();
                if format != STREAM_FORMAT {
                    return Err((
                        "streams of a format abstore does not serve (with their chunks)",
                        format!("format {format:?}"),
                    ));
                }
                let (family, scope_id) = match (scope_kind.as_deref(), build, repo, session) {
                    (Some("build"), Some(b), None, None) => (Family::Build, b),
                    (Some("repo"), None, Some(r), None) => (Family::Repo, r),
                    (Some("session"), None, None, Some(s)) => (Family::Session, s),
                    (kind, ..) => {
                        return Err(bad(format!(
                            "scope kind {kind:?} does not match its one scope column"
                        )));
                    }
                };
                let scope = (family, scope_id);
                if !self.owners.contains_key(&scope) {
                    return Err((
                        "streams whose scope is not imported (with their chunks)",
                        format!("of {} {}", family.noun(), short(&scope.1)),
                    ));
                }
                let label = label.unwrap_or_default();
                fit("the label", &label).map_err(bad)?;
                let status = status.unwrap_or_default();
                let created_at = required_time(created.as_deref(), "created_at").map_err(bad)?;
                let (count, max) = chunks.get(&id).copied().unwrap_or((0, 0));
                if count != max {
                    return Err(bad(format!("its chunks are not numbered 1 to {max}")));
                }
                let mut row = StreamRow {
                    id: id.clone(),
                    scope,
                    label,
                    status: status.clone(),
                    created_at,
                    creation_tiebreak: tie,
                    last_seq: max,
                    closed_at: None,
                    outcome: None,
                    artifact_kind: None,
                    artifact_revision: None,
                    artifact_blob_ref: None,
                    created_order: 0,
                    closed_order: None,
                };
                match status.as_str() {
                    "open" => {}
                    "closed" => {
                        row.closed_at =
                            Some(required_time(closed.as_deref(), "closed_at").map_err(bad)?);
                        let outcome = outcome.unwrap_or_default();
                        if !matches!(outcome.as_str(), "completed" | "aborted") {
                            return Err(bad(format!("outcome {outcome:?}")));
                        }
                        row.outcome = Some(outcome);
                        let (Some(kind), Some(revision), Some(blob)) =
                            (artifact_kind, revision, blob_ref)
                        else {
                            return Err(bad("closed without its artifact".to_owned()));
                        };
                        fit("the artifact kind", &kind).map_err(bad)?;
                        row.artifact_kind = Some(kind);
                        row.artifact_revision = Some(revision);
                        row.artifact_blob_ref = Some(blob);
                    }
                    other => return Err(bad(format!("status {other:?}"))),
                }
                Ok(row)
            })();
            let mut row = match verdict {
                Ok(row) => row,
                Err((what, why)) => {
                    self.report
                        .problem(what, || format!("{} ({why})", short(&id)));
                    continue;
                }
            };
            if let Some(blob) = row.artifact_blob_ref.clone()
                && let Err(why) = self.blob_verdict(&blob)?
            {
                let what = format!("closed streams {why} (with their chunks)");
                self.report
                    .problem(&what, || format!("{} blob {blob}", short(&id)));
                continue;
            }
            if row.status == "closed" && row.last_seq == 0 {
                // Pruned (§1.5): the count survives in the artifact's metadata.
                match self.chunk_count(&row)? {
                    Some(n) => {
                        row.last_seq = n;
                        self.report.note(
                            "closed streams whose chunks Autobuild had pruned (the count kept from the artifact's chunkCount)",
                            || format!("{} ({n} chunks)", short(&id)),
                        );
                    }
                    None => self.report.note(
                        "closed streams without chunks or a chunkCount (imported with none)",
                        || short(&id),
                    ),
                }
            }
            self.streams.push(row);
        }
        Ok(())
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
                |r| r.get(0),
            )
            .optional()?;
        Ok(metadata
            .flatten()
            .and_then(|m| serde_json::from_str::<Value>(&m).ok())
            .and_then(|m| m.get("chunkCount").and_then(Value::as_i64)))
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
                let id: String = row.get(0)?;
                if !self.owners.contains_key(&(Family::Session, id.clone())) {
                    continue;
                }
                let repo: String = row.get(1)?;
                let at = time(text(row, 2)?.as_deref()).ok().flatten().unwrap_or(0);
                let tie: Option<i64> = row.get(3)?;
                by_scope
                    .entry((Family::Repo, repo))
                    .or_default()
                    .push(Ordered {
                        at,
                        phase: 0,
                        tiebreak: (tie.unwrap_or(0), id.clone()),
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
