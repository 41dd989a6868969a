//! The write routes' checks, applied to the rows an import carries
//! (docs/decisions.md, 25; docs/security.md, "Files we import"): a row gets
//! in only if the route that writes such a row could have stored it, so a
//! store filled by an import serves nothing its own routes would have
//! refused. Each check calls the route's own validator: the identifier rule
//! (`protocol::ident`), the body schemas (`protocol::wire`), the ticket-asset
//! put validation (`protocol::ticket_assets::validate`) and the ticket
//! schemas' identifier rule; nothing here is a second copy of one.
//!
//! [`row`] judges one archive row. `verify`, and so every `import` of an
//! archive, runs it on every record and refuses the archive at the first
//! failure; the Autobuild importers run it on every row they build, before
//! sending it, and leave out (reported) what fails.
//!
//! Left to others: an event's payload against a catalog (the Autobuild
//! importers check it with the catalogs of the clients abstore serves; an
//! abstore archive's events passed the catalogs of the server that wrote
//! them, which may have been its own `--catalog DIR`), rows against each
//! other (foreign keys, sequences: the destination's schema and `verify`),
//! and the bounds a server sets for itself (`--max-artifact-bytes`, the
//! stream batch ceiling, the ticket bounds), which an import cannot know;
//! the protocol's own limits apply (ticket assets: 25 MiB and 1,000
//! entries a revision, as with no request ceiling).

use serde_json::{Map, Value};

use super::format::{MAX_BLOB_BYTES, TABLES, Val};
use crate::protocol::numbers::MAX_SAFE_INTEGER;
use crate::protocol::ticket_assets::validate::{EntryInput, PutInput, is_label, validate};
use crate::protocol::ticket_assets::{Layout, Limits};
use crate::protocol::time::{MAX_JS_TIME_MS, parse_iso};
use crate::protocol::{ResourceKind, ident, wire};
use crate::store::AssetEntry;

type Checked<T = ()> = Result<T, String>;

/// Whether `row`, a row of `TABLES[table]`, is one the write routes could
/// have stored; the reason when it is not.
pub fn row(table: usize, row: &[Val]) -> Checked {
    let Some(t) = TABLES.get(table) else {
        return Err(format!("no table {table}"));
    };
    let cells = Cells {
        names: t.columns.iter().map(|c| c.name).collect(),
        row,
    };
    if row.len() != t.columns.len() {
        return Err(format!(
            "{} columns where {} has {}",
            row.len(),
            t.record,
            t.columns.len()
        ));
    }
    cells.no_nul()?;
    match t.record {
        "resource" => resource(&cells),
        "event" => event(&cells),
        "artifact_head" => artifact_head(&cells),
        "artifact" => artifact(&cells),
        "stream" => stream(&cells),
        "stream_chunk" => stream_chunk(&cells),
        "ticket_asset_head" => ticket_asset_head(&cells),
        "ticket_asset" => ticket_asset(&cells),
        "revoked_token" => revoked_token(&cells),
        "ticket_team" => ticket_team(&cells),
        "ticket" => ticket(&cells),
        "ticket_blocker" => ticket_blocker(&cells),
        "ticket_comment" => ticket_comment(&cells),
        "ticket_history" => ticket_history(&cells),
        other => Err(format!("no check for {other} records")),
    }
}

/// A row with its column names, read by name.
struct Cells<'a> {
    names: Vec<&'static str>,
    row: &'a [Val],
}

impl<'a> Cells<'a> {
    fn at(&self, name: &str) -> Checked<&'a Val> {
        self.names
            .iter()
            .position(|n| *n == name)
            .and_then(|i| self.row.get(i))
            .ok_or_else(|| format!("no {name} column"))
    }

    fn opt_text(&self, name: &str) -> Checked<Option<&'a str>> {
        match self.at(name)? {
            Val::Text(text) => Ok(Some(text)),
            Val::Null => Ok(None),
            Val::Int(_) => Err(format!("its {name} is a number, not text")),
        }
    }

    fn text(&self, name: &str) -> Checked<&'a str> {
        self.opt_text(name)?
            .ok_or_else(|| format!("its {name} is null"))
    }

    fn opt_int(&self, name: &str) -> Checked<Option<i64>> {
        match self.at(name)? {
            Val::Int(n) => Ok(Some(*n)),
            Val::Null => Ok(None),
            Val::Text(_) => Err(format!("its {name} is text, not a number")),
        }
    }

    fn int(&self, name: &str) -> Checked<i64> {
        self.opt_int(name)?
            .ok_or_else(|| format!("its {name} is null"))
    }

    /// An identifier column: nonempty, the identifier rule.
    fn id(&self, name: &str) -> Checked<&'a str> {
        let value = self.text(name)?;
        identifier(name, value)?;
        Ok(value)
    }

    /// A count or sequence in `min..=MAX_SAFE_INTEGER`.
    fn count(&self, name: &str, min: i64) -> Checked<i64> {
        let n = self.int(name)?;
        in_range(name, n, min, MAX_SAFE_INTEGER)?;
        Ok(n)
    }

    /// A time in epoch milliseconds that a JavaScript date can hold.
    fn time(&self, name: &str) -> Checked<i64> {
        let t = self.int(name)?;
        time(name, t)?;
        Ok(t)
    }

    /// PostgreSQL's `text` refuses NUL: no column may hold one (JSON text
    /// keeps a NUL escaped).
    fn no_nul(&self) -> Checked {
        for (name, value) in self.names.iter().zip(self.row) {
            if let Val::Text(text) = value
                && text.contains('\0')
            {
                return Err(format!("its {name} contains NUL"));
            }
        }
        Ok(())
    }

    fn nulls(&self, names: &[&str], why: &str) -> Checked {
        for name in names {
            if *self.at(name)? != Val::Null {
                return Err(format!("its {name} is set {why}"));
            }
        }
        Ok(())
    }
}

fn identifier(name: &str, value: &str) -> Checked {
    if value.is_empty() {
        return Err(format!("its {name} is empty"));
    }
    match ident::field_problem(name, value) {
        None => Ok(()),
        Some(problem) => Err(problem),
    }
}

fn in_range(name: &str, n: i64, min: i64, max: i64) -> Checked {
    if (min..=max).contains(&n) {
        Ok(())
    } else {
        Err(format!("its {name} {n} is outside {min}..={max}"))
    }
}

fn time(name: &str, t: i64) -> Checked {
    in_range(name, t, -MAX_JS_TIME_MS, MAX_JS_TIME_MS)
}

fn kind(tag: &str) -> Checked<ResourceKind> {
    match ResourceKind::from_tag(tag) {
        Some(kind @ (ResourceKind::Build | ResourceKind::Repo | ResourceKind::Session)) => Ok(kind),
        _ => Err(format!(
            "its kind {:?} is not build, repo or session",
            ident::shown(tag)
        )),
    }
}

/// A JSON text (`what` for messages).
fn json(what: &str, text: &str) -> Checked<Value> {
    serde_json::from_str(text).map_err(|err| format!("its {what} is not JSON ({err})"))
}

fn json_object(what: &str, text: &str) -> Checked<Map<String, Value>> {
    match json(what, text)? {
        Value::Object(map) => Ok(map),
        _ => Err(format!("its {what} is not a JSON object")),
    }
}

/// A SHA-256 blob address: 64 lowercase hex digits.
fn blob_address(name: &str, value: &str) -> Checked {
    if value.len() == 64
        && value
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        Ok(())
    } else {
        Err(format!(
            "its {name} {:?} is not a SHA-256 hex digest",
            ident::shown(value)
        ))
    }
}

fn schema(result: wire::SchemaResult<Map<String, Value>>) -> Checked<Map<String, Value>> {
    result.map_err(|wire::SchemaError(why)| why)
}

/// A build, repository or session record: the members its create route
/// keeps (no others), its lease as a claim sets it, its counters.
fn resource(c: &Cells<'_>) -> Checked {
    let kind = kind(c.text("kind")?)?;
    c.id("id")?;
    c.time("created_at")?;
    c.time("updated_at")?;
    c.count("last_seq", 0)?;
    c.count("stream_counter", 0)?;
    let attrs = c.opt_text("attrs")?;
    match kind {
        ResourceKind::Build => {
            let attrs = json_object("record", attrs.ok_or("its record is null")?)?;
            if schema(wire::build_attrs(&attrs))? != attrs {
                return Err("its record has members createBuild does not keep".into());
            }
            c.nulls(&["parent", "created_order"], "on a build")?;
        }
        ResourceKind::Repo => c.nulls(&["attrs", "parent", "created_order"], "on a repository")?,
        _ => {
            let attrs = json_object("record", attrs.ok_or("its record is null")?)?;
            let parent = c.id("parent")?;
            if schema(wire::session_attrs(&attrs, parent))? != attrs {
                return Err("its record has members createSession does not keep".into());
            }
            c.count("created_order", 1)?;
            c.nulls(
                &[
                    "lease_holder",
                    "lease_expires_at",
                    "lease_ttl_ms",
                    "heartbeat_at",
                ],
                "on a session (sessions have no leases)",
            )?;
        }
    }
    match (c.opt_text("lease_holder")?, c.opt_int("lease_expires_at")?) {
        (Some(holder), Some(expires)) => {
            identifier("lease_holder", holder)?;
            time("lease_expires_at", expires)?;
        }
        (None, None) => {}
        _ => return Err("its lease has a holder without an expiry, or the reverse".into()),
    }
    if let Some(ttl) = c.opt_int("lease_ttl_ms")? {
        in_range("lease_ttl_ms", ttl, 0, MAX_SAFE_INTEGER)?;
    }
    if let Some(at) = c.opt_int("heartbeat_at")? {
        time("heartbeat_at", at)?;
    }
    Ok(())
}

/// An event: its envelope is the one the store writes for its key
/// (`{"<family>", "seq", "ts", "actor", "type", "payload"}`, in that
/// order), with an actor object and a nonempty type.
fn event(c: &Cells<'_>) -> Checked {
    let kind = kind(c.text("kind")?)?;
    let id = c.id("resource_id")?;
    let seq = c.count("seq", 1)?;
    let envelope = json_object("envelope", c.text("envelope")?)?;
    let key = kind.wire_key();
    let members: Vec<&str> = envelope.keys().map(String::as_str).collect();
    if members != [key, "seq", "ts", "actor", "type", "payload"] {
        return Err(format!(
            "its envelope's members are {members:?}, not a {} event's",
            kind.noun()
        ));
    }
    if envelope[key].as_str() != Some(id) || envelope["seq"].as_i64() != Some(seq) {
        return Err("its envelope names another resource or sequence".into());
    }
    if !is_time(&envelope["ts"]) {
        return Err("its envelope's ts is not an ISO-8601 time".into());
    }
    if !envelope["actor"].is_object() {
        return Err("its envelope's actor is not an object".into());
    }
    if envelope["type"].as_str().is_none_or(str::is_empty) {
        return Err("its envelope's type is not a nonempty string".into());
    }
    Ok(())
}

/// A string holding an ISO-8601 time.
fn is_time(value: &Value) -> bool {
    value.as_str().and_then(parse_iso).is_some()
}

fn artifact_head(c: &Cells<'_>) -> Checked {
    kind(c.text("kind")?)?;
    c.id("resource_id")?;
    c.id("artifact_kind")?;
    c.count("next_revision", 0)?;
    Ok(())
}

/// An artifact revision as a put stores it: an identifier kind, a revision
/// the next one still fits after, a blob address, a metadata object.
fn artifact(c: &Cells<'_>) -> Checked {
    kind(c.text("kind")?)?;
    c.id("resource_id")?;
    c.id("artifact_kind")?;
    in_range("revision", c.int("revision")?, 0, MAX_SAFE_INTEGER - 1)?;
    blob_address("blob_ref", c.text("blob_ref")?)?;
    in_range("size", c.int("size")?, 0, blob_bytes())?;
    json_object("metadata", c.text("metadata")?)?;
    c.time("created_at")?;
    Ok(())
}

fn blob_bytes() -> i64 {
    i64::try_from(MAX_BLOB_BYTES).unwrap_or(i64::MAX)
}

/// A stream as create and close leave it.
fn stream(c: &Cells<'_>) -> Checked {
    c.id("id")?;
    kind(c.text("scope_kind")?)?;
    c.id("scope_id")?;
    c.id("label")?;
    c.time("created_at")?;
    c.count("created_order", 1)?;
    c.count("last_seq", 0)?;
    match c.text("status")? {
        "open" => c.nulls(
            &[
                "closed_at",
                "closed_order",
                "outcome",
                "artifact_kind",
                "artifact_revision",
                "artifact_blob_ref",
            ],
            "on an open stream",
        ),
        "closed" => {
            c.time("closed_at")?;
            c.count("closed_order", 1)?;
            if !matches!(c.text("outcome")?, "completed" | "aborted") {
                return Err("its outcome is not completed or aborted".into());
            }
            c.id("artifact_kind")?;
            in_range(
                "artifact_revision",
                c.int("artifact_revision")?,
                0,
                MAX_SAFE_INTEGER - 1,
            )?;
            blob_address("artifact_blob_ref", c.text("artifact_blob_ref")?)
        }
        other => Err(format!(
            "its status {:?} is not open or closed",
            ident::shown(other)
        )),
    }
}

/// A chunk as an append stores it: `{"stream", "seq", "ts", "parts"}` with
/// the batch the append route accepts.
fn stream_chunk(c: &Cells<'_>) -> Checked {
    let id = c.id("stream_id")?;
    let seq = c.count("seq", 1)?;
    let chunk = json_object("chunk", c.text("chunk")?)?;
    let members: Vec<&str> = chunk.keys().map(String::as_str).collect();
    if members != ["stream", "seq", "ts", "parts"] {
        return Err(format!(
            "its chunk's members are {members:?}, not a chunk's"
        ));
    }
    if chunk["stream"].as_str() != Some(id) || chunk["seq"].as_i64() != Some(seq) {
        return Err("its chunk names another stream or sequence".into());
    }
    if !is_time(&chunk["ts"]) {
        return Err("its chunk's ts is not an ISO-8601 time".into());
    }
    wire::stream_parts(&chunk).map_err(|wire::SchemaError(why)| format!("its chunk: {why}"))?;
    Ok(())
}

/// A ticket asset's key as the put route takes it: repository and ticket
/// ids by the identifier rule (the route's path check), kind and name by the
/// label rule.
fn asset_key<'a>(c: &Cells<'a>) -> Checked<(&'a str, &'a str)> {
    c.id("repo")?;
    c.id("ticket_id")?;
    let (kind, name) = (c.text("asset_kind")?, c.text("name")?);
    for (column, label) in [("asset_kind", kind), ("name", name)] {
        if !is_label(label) {
            return Err(format!(
                "its {column} {:?} is not a ticket-asset label (letters, digits, '.', '_' and '-', at most 64)",
                ident::shown(label)
            ));
        }
    }
    Ok((kind, name))
}

fn ticket_asset_head(c: &Cells<'_>) -> Checked {
    asset_key(c)?;
    c.count("next_revision", 0)?;
    c.time("created_at")?;
    Ok(())
}

/// A ticket-asset revision: a tombstone, or a manifest that passes the put
/// route's validation (paths, types, duplicates, ancestors, the protocol's
/// limits) with the size and counts it adds up to.
fn ticket_asset(c: &Cells<'_>) -> Checked {
    let (kind, name) = asset_key(c)?;
    in_range("revision", c.int("revision")?, 0, MAX_SAFE_INTEGER - 1)?;
    c.time("created_at")?;
    let Some(layout) = c.opt_text("layout")? else {
        c.nulls(&["entries"], "on a removal")?;
        for column in ["size", "file_count", "dir_count"] {
            if c.int(column)? != 0 {
                return Err(format!("its {column} is not 0 on a removal"));
            }
        }
        return Ok(());
    };
    let entries: Vec<AssetEntry> = serde_json::from_str(c.text("entries")?)
        .map_err(|err| format!("its manifest is not a list of entries ({err})"))?;
    manifest(kind, name, layout, &entries)?;
    let valid_size: u64 = entries
        .iter()
        .map(|e| match e {
            AssetEntry::File { size, .. } => *size,
            AssetEntry::Dir { .. } => 0,
        })
        .fold(0, u64::saturating_add);
    let files = entries
        .iter()
        .filter(|e| matches!(e, AssetEntry::File { .. }))
        .count();
    let counted = [
        ("size", u64::try_from(c.int("size")?).ok(), valid_size),
        (
            "file_count",
            u64::try_from(c.int("file_count")?).ok(),
            files as u64,
        ),
        (
            "dir_count",
            u64::try_from(c.int("dir_count")?).ok(),
            (entries.len() - files) as u64,
        ),
    ];
    for (column, stored, actual) in counted {
        if stored != Some(actual) {
            return Err(format!("its {column} is not its manifest's ({actual})"));
        }
    }
    Ok(())
}

/// A manifest against the put route's validation, each file's blob an
/// address; the first failure is the route's own `422` message.
pub fn manifest(kind: &str, name: &str, layout: &str, entries: &[AssetEntry]) -> Checked<Layout> {
    let inputs: Vec<EntryInput<'_>> = entries
        .iter()
        .map(|entry| match entry {
            AssetEntry::File { path, size, .. } => EntryInput {
                entry_type: "file",
                path,
                size: *size,
            },
            AssetEntry::Dir { path } => EntryInput {
                entry_type: "dir",
                path,
                size: 0,
            },
        })
        .collect();
    let input = PutInput {
        kind,
        name,
        layout,
        entries: &inputs,
    };
    let valid = validate(&input, &Limits::effective(None))?;
    for entry in entries {
        if let AssetEntry::File { blob_ref, .. } = entry {
            blob_address("file's blobRef", blob_ref)?;
        }
    }
    Ok(valid.layout)
}

fn revoked_token(c: &Cells<'_>) -> Checked {
    // `expires_at` is the token's own `exp`, whatever its minter chose.
    blob_address("digest", c.text("digest")?)?;
    c.time("revoked_at")?;
    if c.opt_text("note")?
        .is_some_and(|note| note.len() > crate::revocation::MAX_NOTE_BYTES)
    {
        return Err(format!(
            "its note is over {} bytes",
            crate::revocation::MAX_NOTE_BYTES
        ));
    }
    Ok(())
}

fn ticket_team(c: &Cells<'_>) -> Checked {
    c.id("team_key")?;
    c.count("last_seq", 0)?;
    Ok(())
}

/// A JSON string literal (a stored title, body or comment).
fn json_string(c: &Cells<'_>, name: &str) -> Checked<String> {
    match json(name, c.text(name)?)? {
        Value::String(text) => Ok(text),
        _ => Err(format!("its {name} is not a JSON string")),
    }
}

/// A hosted ticket: ids, idempotency key, state and every label by the
/// identifier rule (the ticket schemas' `storable`); texts as JSON strings.
fn ticket(c: &Cells<'_>) -> Checked {
    c.id("team_key")?;
    c.id("id")?;
    c.count("seq", 1)?;
    if let Some(key) = c.opt_text("creation_key")? {
        identifier("creation_key", key)?;
    }
    json_string(c, "title_json")?;
    json_string(c, "body_json")?;
    c.id("state")?;
    let labels: Vec<String> = serde_json::from_str(c.text("labels_json")?)
        .map_err(|err| format!("its labels_json is not a JSON array of strings ({err})"))?;
    for label in &labels {
        identifier("label", label)?;
    }
    c.time("created_at")?;
    c.time("updated_at")?;
    Ok(())
}

fn ticket_blocker(c: &Cells<'_>) -> Checked {
    c.id("team_key")?;
    let (ticket, blocker) = (c.id("ticket_id")?, c.id("blocker_id")?);
    if ticket == blocker {
        return Err("a ticket blocks itself".into());
    }
    Ok(())
}

fn ticket_comment(c: &Cells<'_>) -> Checked {
    c.id("team_key")?;
    c.id("ticket_id")?;
    c.count("seq", 1)?;
    json_string(c, "body_json")?;
    c.time("created_at")?;
    Ok(())
}

fn ticket_history(c: &Cells<'_>) -> Checked {
    c.id("team_key")?;
    c.id("ticket_id")?;
    c.count("seq", 1)?;
    c.time("at")?;
    if c.text("actor")?.is_empty() {
        return Err("its actor is empty".into());
    }
    if let Some(digest) = c.opt_text("token_digest")? {
        blob_address("token_digest", digest)?;
    }
    let change = json_object("change_json", c.text("change_json")?)?;
    if !change.get("op").is_some_and(Value::is_string) {
        return Err("its change_json has no op".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: &str) -> Val {
        Val::Text(n.to_owned())
    }

    const HEX: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    fn asset(entries: &str) -> Vec<Val> {
        vec![
            t("/r"),
            t("T-1"),
            t("design"),
            t("home"),
            Val::Int(0),
            t("tree"),
            Val::Int(0),
            Val::Int(1),
            Val::Int(0),
            t(entries),
            Val::Int(1),
        ]
    }

    fn table(record: &str) -> usize {
        TABLES.iter().position(|t| t.record == record).unwrap()
    }

    #[test]
    fn manifests_pass_the_put_routes_validation() {
        let file = |path: &str| {
            format!(r#"[{{"type":"file","path":"{path}","size":0,"blobRef":"{HEX}"}}]"#)
        };
        let at = table("ticket_asset");
        assert_eq!(row(at, &asset(&file("a/b.txt"))), Ok(()));
        for (path, why) in [
            ("../../../etc/cron.d/x", "'..' segment"),
            ("/abs/evil", "must be relative"),
            ("a\\\\b", "'/' separators"),
            ("a\\u0000b", "NUL"),
        ] {
            let err = row(at, &asset(&file(path))).unwrap_err();
            assert!(err.contains(why), "{path}: {err}");
        }
        let twice = format!(
            r#"[{{"type":"dir","path":"d"}},{{"type":"file","path":"d","size":0,"blobRef":"{HEX}"}}]"#
        );
        let mut dup = asset(&twice);
        dup[8] = Val::Int(1);
        assert!(row(at, &dup).unwrap_err().contains("duplicate"));
        let mut bad_kind = asset(&file("x"));
        bad_kind[2] = t("..");
        assert!(row(at, &bad_kind).unwrap_err().contains("label"));
        let mut wrong_size = asset(&file("x"));
        wrong_size[6] = Val::Int(5);
        assert!(row(at, &wrong_size).unwrap_err().contains("size"));
    }

    #[test]
    fn identifiers_and_envelopes_are_checked() {
        let ev = table("event");
        let envelope = r#"{"build":"b","seq":1,"ts":"2026-01-01T00:00:00.000Z","actor":{"kind":"human"},"type":"x","payload":{}}"#;
        let event = |id: &str, seq: i64, env: &str| vec![t("build"), t(id), Val::Int(seq), t(env)];
        assert_eq!(row(ev, &event("b", 1, envelope)), Ok(()));
        assert!(
            row(ev, &event("c", 1, envelope)).is_err(),
            "another resource"
        );
        assert!(row(ev, &event("b", 2, envelope)).is_err(), "another seq");
        assert!(row(ev, &event("b", 1, "{\"build\"")).is_err(), "not JSON");
        assert!(row(ev, &event("", 1, envelope)).is_err(), "an empty id");
        assert!(row(ev, &event(&"b".repeat(513), 1, envelope)).is_err());
        assert!(
            row(ev, &event("b\0", 1, envelope))
                .unwrap_err()
                .contains("NUL")
        );
        let art = table("artifact");
        let artifact = |rev: i64, blob: &str| {
            vec![
                t("build"),
                t("b"),
                t("plan"),
                Val::Int(rev),
                t(blob),
                Val::Int(1),
                t("{}"),
                Val::Int(0),
            ]
        };
        assert_eq!(row(art, &artifact(0, HEX)), Ok(()));
        assert!(row(art, &artifact(i64::MAX, HEX)).is_err());
        assert!(row(art, &artifact(0, "../x")).is_err());
    }

    #[test]
    fn records_keep_only_what_their_create_route_keeps() {
        let res = table("resource");
        let build = |attrs: &str, holder: Option<&str>| {
            vec![
                t("build"),
                t("b"),
                t(attrs),
                Val::Int(0),
                Val::Int(0),
                Val::Int(0),
                holder.map_or(Val::Null, t),
                holder.map_or(Val::Null, |_| Val::Int(5)),
                Val::Null,
                Val::Null,
                Val::Int(0),
                Val::Null,
                Val::Null,
            ]
        };
        assert_eq!(
            row(res, &build(r#"{"repo":"/r","branch":"main"}"#, None)),
            Ok(())
        );
        assert_eq!(row(res, &build(r#"{"repo":"/r"}"#, Some("w"))), Ok(()));
        assert!(row(res, &build(r#"{"repo":""}"#, None)).is_err());
        assert!(row(res, &build(r#"{"repo":"/r","evil":1}"#, None)).is_err());
        assert!(row(res, &build(r#"{"repo":"/r","ticket":{"id":"x"}}"#, None)).is_err());
        assert!(row(res, &build(r#"{"repo":"/r"}"#, Some(""))).is_err());
    }
}
