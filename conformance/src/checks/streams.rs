//! Section 6, streams: create/list/get/append/read/close under each of the
//! three scopes (`/builds/{slug}`, `/repos/{repo}`, `/sessions/{id}`) and
//! through the top-level `/streams/{id}` routes; the append order (resolution
//! → body schema → batch ceiling → closed); held reads; close (assembly into
//! `UIMessage[]`, the `stream:<id>` artifact, idempotence, concurrency); and
//! count-based chunk retention. Assembly is checked end to end with fixtures
//! from `fixtures/streams/` whose expectations come from the AI SDK.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::builds::{SINCE_LENIENT, SINCE_REJECTED, WAIT_REJECTED};
use super::sessions::{create_session, unknown_session_id};
use super::{CheckResult, Registry};
use crate::client::{Ctx, Res, Resp, same, shape, time_of};
use crate::ensure;
use crate::util::{enc, sha256_hex, unb64};

pub const FORMAT: &str = "ai-ui-message-stream/v1";
const STREAM_KEYS: [&str; 9] = [
    "id",
    "scope",
    "label",
    "format",
    "status",
    "createdAt",
    "closedAt",
    "outcome",
    "artifact",
];
const CEILING: usize = 1_048_576;

/// The three stream scopes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Build,
    Repo,
    Session,
}

impl Scope {
    pub const ALL: [Scope; 3] = [Scope::Build, Scope::Repo, Scope::Session];

    pub fn key(self) -> &'static str {
        match self {
            Scope::Build => "build",
            Scope::Repo => "repo",
            Scope::Session => "session",
        }
    }

    /// `/builds/{slug}`, `/repos/{repo}` or `/sessions/{id}`.
    pub fn path(self, id: &str) -> String {
        let coll = match self {
            Scope::Build => "/builds",
            Scope::Repo => "/repos",
            Scope::Session => "/sessions",
        };
        format!("{coll}/{}", enc(id))
    }

    /// A fresh resource of this scope; returns its id.
    pub async fn create(self, c: &Ctx) -> Result<String, String> {
        match self {
            Scope::Build => c.create(Res::Build).await,
            Scope::Repo => c.create(Res::Repo).await,
            Scope::Session => {
                let (repo, _) = c.new_repo().await?;
                let rec = create_session(c, &repo, "alice", None).await?;
                Ok(rec["id"].as_str().unwrap_or_default().to_string())
            }
        }
    }

    pub fn unknown_id(self) -> String {
        match self {
            Scope::Build => Res::Build.unknown_id(),
            Scope::Repo => Res::Repo.unknown_id(),
            Scope::Session => unknown_session_id(),
        }
    }

    pub fn unknown_msg(self, id: &str) -> String {
        format!("unknown {} \"{id}\"", self.key())
    }

    /// The record's `scope` member.
    pub fn json(self, id: &str) -> Value {
        json!({"kind": self.key(), self.key(): id})
    }

    /// `…/artifacts{query}` of the scope (expects 200).
    pub async fn artifact(self, c: &Ctx, id: &str, query: &str) -> Result<Value, String> {
        c.get(&format!("{}/artifacts{query}", self.path(id)))
            .send()
            .await?
            .json_status(200)
    }

    pub async fn artifact_list(self, c: &Ctx, id: &str) -> Result<Vec<Value>, String> {
        let v = c
            .get(&format!("{}/artifact-list", self.path(id)))
            .send()
            .await?
            .json_status(200)?;
        Ok(v.as_array().cloned().unwrap_or_default())
    }
}

/// `…/streams` of a scope.
pub fn streams_path(scope: Scope, id: &str) -> String {
    format!("{}/streams", scope.path(id))
}

/// The family route of one stream.
pub fn stream_path(scope: Scope, id: &str, sid: &str) -> String {
    format!("{}/streams/{}", scope.path(id), enc(sid))
}

/// The top-level route of one stream.
pub fn top_path(sid: &str) -> String {
    format!("/streams/{}", enc(sid))
}

pub fn unknown_stream_msg(sid: &str) -> String {
    format!("unknown stream \"{sid}\"")
}

fn unknown_sid() -> String {
    format!("st_{}", crate::util::random_hex())
}

/// `POST …/streams {"label"}` (expects 201); returns the record.
pub async fn create_stream(c: &Ctx, scope: Scope, id: &str, label: &str) -> Result<Value, String> {
    c.post(&streams_path(scope, id), &json!({"label": label}))
        .send()
        .await?
        .json_status(201)
}

/// A fresh resource of `scope` with one open stream; returns `(id, sid)`.
pub async fn fresh_stream(c: &Ctx, scope: Scope) -> Result<(String, String), String> {
    let id = scope.create(c).await?;
    let rec = create_stream(c, scope, &id, "conformance").await?;
    Ok((id, sid_of(&rec)))
}

fn sid_of(rec: &Value) -> String {
    rec["id"].as_str().unwrap_or_default().to_string()
}

/// `POST {base}/chunks {"parts"}` (expects 201); returns the chunk.
pub async fn append(c: &Ctx, base: &str, parts: &Value) -> Result<Value, String> {
    c.post(&format!("{base}/chunks"), &json!({"parts": parts}))
        .send()
        .await?
        .json_status(201)
}

/// `GET {base}/chunks{query}` (expects 200); returns the read response.
pub async fn read(c: &Ctx, base: &str, query: &str) -> Result<Value, String> {
    c.get(&format!("{base}/chunks{query}"))
        .send()
        .await?
        .json_status(200)
}

/// `POST {base}/close {"outcome"}` (any status).
pub async fn close_resp(c: &Ctx, base: &str, outcome: &str) -> Result<Resp, String> {
    c.post(&format!("{base}/close"), &json!({"outcome": outcome}))
        .send()
        .await
}

/// `POST {base}/close` (expects 200); returns the record.
pub async fn close(c: &Ctx, base: &str, outcome: &str) -> Result<Value, String> {
    close_resp(c, base, outcome).await?.json_status(200)
}

fn chunk_seqs(read: &Value) -> Vec<i64> {
    read["chunks"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|ch| ch["seq"].as_i64().unwrap_or(-1))
                .collect()
        })
        .unwrap_or_default()
}

fn text_parts(n: usize) -> Value {
    let mut parts = vec![
        json!({"type": "start", "messageId": "m1"}),
        json!({"type": "text-start", "id": "t"}),
    ];
    for i in 0..n {
        parts.push(json!({"type": "text-delta", "id": "t", "delta": format!("w{i} ")}));
    }
    Value::Array(parts)
}

/// The example of the brief: assembles to one assistant message "Hi".
fn hi_parts() -> Value {
    json!([
        {"type": "start", "messageId": "m1"},
        {"type": "text-start", "id": "t"},
        {"type": "text-delta", "id": "t", "delta": "Hi"},
        {"type": "text-end", "id": "t"},
        {"type": "finish"},
    ])
}

fn hi_messages() -> Value {
    json!([{"id": "m1", "role": "assistant", "parts": [{"type": "text", "text": "Hi", "state": "done"}]}])
}

/// Asserts a StreamRecord's shape (and, when closed, the closed members).
fn record_shape(what: &str, rec: &Value) -> Result<(), String> {
    shape(
        what,
        rec,
        &["id", "scope", "label", "format", "status", "createdAt"],
        &STREAM_KEYS,
    )?;
    time_of(what, rec, "createdAt")?;
    let id = rec["id"].as_str().unwrap_or_default();
    ensure!(
        id.starts_with("st_") && id.len() > 3,
        "{what}: id must be `st_`-prefixed; got {}",
        rec["id"]
    );
    ensure!(
        rec["format"] == json!(FORMAT),
        "{what}: format must be {FORMAT:?}; got {}",
        rec["format"]
    );
    match rec["status"].as_str() {
        Some("open") => {
            for k in ["closedAt", "outcome", "artifact"] {
                ensure!(
                    rec.get(k).is_none(),
                    "{what}: an open stream has no {k:?}; got {rec}"
                );
            }
        }
        Some("closed") => {
            time_of(what, rec, "closedAt")?;
            ensure!(
                matches!(rec["outcome"].as_str(), Some("completed" | "aborted")),
                "{what}: outcome must be completed or aborted; got {rec}"
            );
            let a = &rec["artifact"];
            shape(
                &format!("{what} artifact"),
                a,
                &["kind", "revision", "blobRef"],
                &["kind", "revision", "blobRef"],
            )?;
            let blob = a["blobRef"].as_str().unwrap_or_default();
            ensure!(
                a["kind"] == json!(format!("stream:{id}"))
                    && a["revision"] == json!(0)
                    && blob.len() == 64
                    && blob
                        .bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
                "{what}: artifact must be {{kind: \"stream:{id}\", revision: 0, blobRef: 64 lowercase hex}}; got {a}"
            );
        }
        _ => return Err(format!("{what}: status must be open or closed; got {rec}")),
    }
    Ok(())
}

fn chunk_shape(what: &str, ch: &Value, sid: &str, seq: i64, parts: &Value) -> Result<(), String> {
    shape(
        what,
        ch,
        &["stream", "seq", "ts", "parts"],
        &["stream", "seq", "ts", "parts"],
    )?;
    time_of(what, ch, "ts")?;
    ensure!(
        ch["stream"] == json!(sid) && ch["seq"] == json!(seq),
        "{what}: expected stream {sid} and seq {seq}; got {ch}"
    );
    same(&format!("{what} parts"), &ch["parts"], parts)
}

/// JSON equality with numbers compared as doubles (as the fixture test does)
/// and object members in any order.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

/// Reads the `stream:<sid>` artifact of a scope and returns `(meta, document)`.
async fn stream_artifact(
    c: &Ctx,
    scope: Scope,
    id: &str,
    sid: &str,
) -> Result<(Value, Value), String> {
    let v = scope
        .artifact(c, id, &format!("?kind={}", enc(&format!("stream:{sid}"))))
        .await?;
    ensure!(
        !v.is_null(),
        "GET {}/artifacts?kind=stream:{sid}: expected the finalized artifact; got null",
        scope.path(id)
    );
    let bytes = v["contentBase64"]
        .as_str()
        .and_then(unb64)
        .ok_or_else(|| format!("stream artifact contentBase64 is not canonical base64: {v}"))?;
    let doc: Value = serde_json::from_slice(&bytes).map_err(|e| {
        format!(
            "stream artifact content is not JSON ({e}): {}",
            String::from_utf8_lossy(&bytes)
        )
    })?;
    ensure!(
        v["meta"]["blobRef"] == json!(sha256_hex(&bytes)),
        "stream artifact blobRef must be the SHA-256 of its content; got {}",
        v["meta"]
    );
    Ok((v["meta"].clone(), doc))
}

// ── registry ────────────────────────────────────────────────────────────────

pub fn register(r: &mut Registry) {
    for scope in Scope::ALL {
        let k = scope.key();
        r.add(format!("s6.{k}.create_shape"), "6", move |c| {
            create_shape(c, scope)
        });
        r.add(format!("s6.{k}.list_creation_order"), "6", move |c| {
            list_order(c, scope)
        });
        r.add(format!("s6.{k}.get_family_and_top_level"), "6", move |c| {
            get_both(c, scope)
        });
        r.add(format!("s6.{k}.lifecycle_and_artifact"), "6", move |c| {
            lifecycle(c, scope)
        });
        r.add(format!("s6.{k}.foreign_scope_404"), "6", move |c| {
            foreign_scope(c, scope)
        });
        r.add(format!("s6.{k}.unknown_resource_404"), "6", move |c| {
            unknown_resource(c, scope)
        });
        r.add(format!("s6.{k}.retention"), "6", move |c| {
            retention(c, scope)
        });
    }
    // create
    for (name, body) in [
        ("missing_label", r#"{}"#),
        ("empty_label", r#"{"label":""}"#),
        ("label_not_string", r#"{"label":7}"#),
        ("label_null", r#"{"label":null}"#),
        ("body_array", r#"[{"label":"x"}]"#),
        ("invalid_json", r#"{"label":"#),
    ] {
        r.add(format!("s6.create.rejects_{name}"), "6", move |c| {
            create_rejects(c, body)
        });
    }
    r.add("s6.create.unknown_keys_ignored", "6", create_unknown_keys);
    r.add("s6.list.empty_and_per_resource", "6", list_per_resource);
    // append
    r.add("s6.append.seq_from_1_per_stream", "6", append_seqs);
    r.add(
        "s6.append.unknown_part_keys_survive",
        "6",
        append_keys_survive,
    );
    r.add(
        "s6.append.no_protocol_validation",
        "6",
        append_no_validation,
    );
    let bad: [(&str, &str); 14] = [
        ("parts_missing", r#"{}"#),
        ("parts_null", r#"{"parts":null}"#),
        ("parts_not_array", r#"{"parts":{"type":"start"}}"#),
        ("parts_empty", r#"{"parts":[]}"#),
        ("part_string", r#"{"parts":["text-delta"]}"#),
        ("part_null", r#"{"parts":[{"type":"start"},null]}"#),
        ("part_array", r#"{"parts":[[{"type":"start"}]]}"#),
        ("part_number", r#"{"parts":[1]}"#),
        ("type_missing", r#"{"parts":[{"id":"t","delta":"x"}]}"#),
        ("type_empty", r#"{"parts":[{"type":""}]}"#),
        ("type_not_string", r#"{"parts":[{"type":7}]}"#),
        ("type_null", r#"{"parts":[{"type":null}]}"#),
        ("body_array", r#"[{"type":"start"}]"#),
        ("invalid_json", r#"{"parts":[{"type":"#),
    ];
    for (name, body) in bad {
        r.add(format!("s6.append.rejects_{name}"), "6", move |c| {
            append_rejects(c, body)
        });
    }
    r.add("s6.append.batch_ceiling_413", "6", append_ceiling);
    r.add("s6.append.closed_409_writes_nothing", "6", append_closed);
    r.add(
        "s6.append.concurrent_16_distinct_seqs",
        "6",
        append_concurrent,
    );
    r.add(
        "s6.order.unknown_stream_before_body_400",
        "6",
        order_unknown_400,
    );
    r.add(
        "s6.order.unknown_stream_before_ceiling_413",
        "6",
        order_unknown_413,
    );
    r.add(
        "s6.order.foreign_scope_before_body_400",
        "6",
        order_foreign_400,
    );
    r.add("s6.order.body_400_before_closed_409", "6", order_400_409);
    r.add("s6.order.ceiling_413_before_closed_409", "6", order_413_409);
    // read
    r.add("s6.read.since_strictly_greater", "6", read_since);
    r.add("s6.read.since_lenient", "6", read_since_lenient);
    r.add("s6.read.since_rejects", "6", read_since_rejects);
    r.add("s6.read.wait_rejects_non_digits", "6", read_wait_rejects);
    r.add("s6.read.wait_zero_immediate", "6", read_wait_zero);
    r.add("s6.read.wait_existing_immediate", "6", read_wait_existing);
    r.add("s6.read.wait_huge_clamped", "6", read_wait_huge);
    r.add("s6.read.wait_wakes_on_append", "6", read_wakes_append);
    r.add("s6.read.wait_wakes_on_close", "6", read_wakes_close);
    r.add("s6.read.closed_never_waits", "6", read_closed_no_wait);
    r.add("s6.read.identity_not_held", "6", read_identity);
    // close
    r.add("s6.close.aborted_outcome", "6", close_aborted);
    r.add("s6.close.empty_stream", "6", close_empty);
    r.add("s6.close.second_close_unchanged", "6", close_twice);
    r.add("s6.close.concurrent_two_same_record", "6", close_concurrent);
    r.add("s6.close.artifact_listed_once", "6", close_listed);
    for (name, body) in [
        ("missing_outcome", r#"{}"#),
        ("unknown_outcome", r#"{"outcome":"done"}"#),
        ("outcome_case", r#"{"outcome":"Completed"}"#),
        ("outcome_null", r#"{"outcome":null}"#),
        ("outcome_number", r#"{"outcome":1}"#),
        ("body_array", r#"["completed"]"#),
        ("invalid_json", r#"{"outcome":"#),
    ] {
        r.add(format!("s6.close.rejects_{name}"), "6", move |c| {
            close_rejects(c, body)
        });
    }
    r.add(
        "s6.close.undefined_types_dropped_and_counted",
        "6",
        close_dropped,
    );
    // top-level routes
    r.add("s6.toplevel.full_lifecycle", "6", toplevel_lifecycle);
    r.add("s6.toplevel.unknown_404_every_route", "6", toplevel_unknown);
    r.add("s6.toplevel.identity_409", "6", toplevel_identity);
    // retention across scopes; clock ordering
    r.add(
        "s6.retention.other_scopes_untouched",
        "6",
        retention_isolated,
    );
    r.add_clock(
        "s6.retention.most_recent_by_close_time",
        "6",
        retention_by_time,
    );
    // assembly fixtures
    for (name, parts, expected) in ASSEMBLY {
        r.add(format!("s6.assembly.{name}"), "6", move |c| {
            assembly(c, name, parts, expected)
        });
    }
}

macro_rules! fixture {
    ($name:literal) => {
        (
            $name,
            include_str!(concat!("../../../fixtures/streams/", $name, ".parts.json")),
            include_str!(concat!(
                "../../../fixtures/streams/",
                $name,
                ".expected.json"
            )),
        )
    };
}

/// AI SDK–generated fixtures (no `abstoreDiffers`) whose parts all pass
/// append validation, chosen to cover each family of part types.
const ASSEMBLY: [(&str, &str, &str); 17] = [
    fixture!("agent-turn"),
    fixture!("text-basic"),
    fixture!("text-unicode"),
    fixture!("reasoning-basic"),
    fixture!("steps-multi"),
    fixture!("steps-only-non-writing"),
    fixture!("tool-static-full"),
    fixture!("tool-dynamic-full"),
    fixture!("tool-approval-denied"),
    fixture!("tool-partial-json-cuts"),
    fixture!("data-replace-by-id"),
    fixture!("metadata-merge"),
    fixture!("messages-multiple-ids"),
    fixture!("sources"),
    fixture!("files"),
    fixture!("numbers"),
    fixture!("schema-failures"),
];

// ── per scope ───────────────────────────────────────────────────────────────

async fn create_shape(c: Ctx, scope: Scope) -> CheckResult {
    let id = scope.create(&c).await?;
    let label = "implement round 1 — ü";
    let r = c
        .post(&streams_path(scope, &id), &json!({"label": label}))
        .send()
        .await?;
    let rec = r.json_status(201)?;
    record_shape("StreamRecord", &rec)?;
    ensure!(
        rec["status"] == json!("open")
            && rec["label"] == json!(label)
            && rec["scope"] == scope.json(&id),
        "{}",
        r.fail(format!(
            "an open record with label {label:?} and scope {}",
            scope.json(&id)
        ))
    );
    Ok(())
}

async fn list_order(c: Ctx, scope: Scope) -> CheckResult {
    let id = scope.create(&c).await?;
    let mut made = Vec::new();
    for label in ["zeta", "alpha", "mid"] {
        made.push(create_stream(&c, scope, &id, label).await?);
    }
    let list = c
        .get(&streams_path(scope, &id))
        .send()
        .await?
        .json_status(200)?;
    same(
        "streams in creation order",
        &list,
        &Value::Array(made.clone()),
    )?;
    // A closed stream is listed with its closed record.
    let closed = close(&c, &stream_path(scope, &id, &sid_of(&made[1])), "completed").await?;
    made[1] = closed;
    let list = c
        .get(&streams_path(scope, &id))
        .send()
        .await?
        .json_status(200)?;
    same("streams after a close", &list, &Value::Array(made))?;
    Ok(())
}

async fn get_both(c: Ctx, scope: Scope) -> CheckResult {
    let id = scope.create(&c).await?;
    let rec = create_stream(&c, scope, &id, "g").await?;
    let sid = sid_of(&rec);
    for path in [stream_path(scope, &id, &sid), top_path(&sid)] {
        let got = c.get(&path).send().await?.json_status(200)?;
        same(&format!("GET {path}"), &got, &rec)?;
    }
    Ok(())
}

async fn lifecycle(c: Ctx, scope: Scope) -> CheckResult {
    let id = scope.create(&c).await?;
    let rec = create_stream(&c, scope, &id, "round 1").await?;
    let sid = sid_of(&rec);
    let base = stream_path(scope, &id, &sid);
    let parts = hi_parts();
    let all = parts.as_array().cloned().unwrap_or_default();
    let batches = [
        Value::Array(all[..3].to_vec()),
        Value::Array(all[3..].to_vec()),
    ];
    let mut chunks = Vec::new();
    for (i, b) in batches.iter().enumerate() {
        let ch = append(&c, &base, b).await?;
        chunk_shape("StreamChunk", &ch, &sid, i as i64 + 1, b)?;
        chunks.push(ch);
    }
    let rd = read(&c, &base, "").await?;
    same(
        "read of an open stream",
        &rd,
        &json!({"chunks": chunks, "status": "open"}),
    )?;
    let closed = close(&c, &base, "completed").await?;
    record_shape("closed StreamRecord", &closed)?;
    for k in ["id", "scope", "label", "format", "createdAt"] {
        same(&format!("closed record {k}"), &closed[k], &rec[k])?;
    }
    ensure!(
        closed["status"] == json!("closed") && closed["outcome"] == json!("completed"),
        "close: expected status closed, outcome completed; got {closed}"
    );
    let rd = read(&c, &base, "").await?;
    same(
        "read of the closed stream",
        &rd,
        &json!({"chunks": chunks, "status": "closed", "outcome": "completed", "artifact": closed["artifact"]}),
    )?;
    let (meta, doc) = stream_artifact(&c, scope, &id, &sid).await?;
    ensure!(
        json_eq(&doc, &hi_messages()),
        "assembled document: expected {}; got {doc}",
        hi_messages()
    );
    ensure!(
        meta[scope.key()] == json!(id)
            && meta["kind"] == json!(format!("stream:{sid}"))
            && meta["revision"] == json!(0)
            && meta["blobRef"] == closed["artifact"]["blobRef"],
        "stream artifact meta must name the {} {id}, kind stream:{sid}, revision 0 and the record's blobRef; got {meta}",
        scope.key()
    );
    same(
        "stream artifact metadata",
        &meta["metadata"],
        &json!({
            "streamId": sid, "label": "round 1", "scope": scope.json(&id),
            "outcome": "completed", "chunkCount": 2, "droppedParts": 0,
        }),
    )?;
    Ok(())
}

async fn foreign_scope(c: Ctx, scope: Scope) -> CheckResult {
    let (id, sid) = fresh_stream(&c, scope).await?;
    let other = scope.create(&c).await?;
    let msg = unknown_stream_msg(&sid);
    let mut bases = vec![stream_path(scope, &other, &sid)];
    // The same stream id under the other families' existing resources.
    for s in Scope::ALL {
        if s != scope {
            bases.push(stream_path(s, &s.create(&c).await?, &sid));
        }
    }
    for base in &bases {
        c.get(base)
            .send()
            .await?
            .error_msg(404, "not-found", &msg)?;
        c.get(&format!("{base}/chunks"))
            .send()
            .await?
            .error_msg(404, "not-found", &msg)?;
        c.post(
            &format!("{base}/chunks"),
            &json!({"parts": [{"type": "start"}]}),
        )
        .send()
        .await?
        .error_msg(404, "not-found", &msg)?;
        c.post(&format!("{base}/close"), &json!({"outcome": "aborted"}))
            .send()
            .await?
            .error_msg(404, "not-found", &msg)?;
    }
    let rd = read(&c, &stream_path(scope, &id, &sid), "").await?;
    same(
        "the stream after foreign-scope writes",
        &rd,
        &json!({"chunks": [], "status": "open"}),
    )?;
    let list = c
        .get(&streams_path(scope, &other))
        .send()
        .await?
        .json_status(200)?;
    ensure!(
        list == json!([]),
        "the other resource lists a foreign stream: {list}"
    );
    Ok(())
}

async fn unknown_resource(c: Ctx, scope: Scope) -> CheckResult {
    let (_, sid) = fresh_stream(&c, scope).await?;
    let id = scope.unknown_id();
    let msg = scope.unknown_msg(&id);
    let p = streams_path(scope, &id);
    c.post(&p, &json!({"label": "x"}))
        .send()
        .await?
        .error_msg(404, "not-found", &msg)?;
    c.get(&p).send().await?.error_msg(404, "not-found", &msg)?;
    for sid in [sid, unknown_sid()] {
        let base = stream_path(scope, &id, &sid);
        c.get(&base)
            .send()
            .await?
            .error_msg(404, "not-found", &msg)?;
        c.get(&format!("{base}/chunks?wait=5"))
            .send()
            .await?
            .error_msg(404, "not-found", &msg)?;
        c.post(&format!("{base}/chunks"), &json!({"parts": []}))
            .send()
            .await?
            .error_msg(404, "not-found", &msg)?;
        c.post(&format!("{base}/close"), &json!({"outcome": "x"}))
            .send()
            .await?
            .error_msg(404, "not-found", &msg)?;
    }
    Ok(())
}

/// Creating a stream prunes the chunks of every closed stream of the scope
/// except the most recently closed; open streams and artifacts are kept.
async fn retention(c: Ctx, scope: Scope) -> CheckResult {
    let id = scope.create(&c).await?;
    let mut sids = Vec::new();
    for label in ["a", "b", "c"] {
        let sid = sid_of(&create_stream(&c, scope, &id, label).await?);
        append(&c, &stream_path(scope, &id, &sid), &hi_parts()).await?;
        sids.push(sid);
    }
    let base = |sid: &str| stream_path(scope, &id, sid);
    let ca = close(&c, &base(&sids[0]), "completed").await?;
    let cb = close(&c, &base(&sids[1]), "aborted").await?;
    // Before the next create nothing is pruned.
    for sid in &sids {
        let n = chunk_seqs(&read(&c, &base(sid), "").await?).len();
        ensure!(
            n == 1,
            "stream {sid} lost chunks before any create: {n} left"
        );
    }
    create_stream(&c, scope, &id, "d").await?;
    let ra = read(&c, &base(&sids[0]), "").await?;
    same(
        "read of a pruned stream",
        &ra,
        &json!({"chunks": [], "status": "closed", "outcome": "completed", "artifact": ca["artifact"]}),
    )?;
    let ra = read(&c, &base(&sids[0]), "?since=0&wait=5").await?;
    ensure!(
        ra["chunks"] == json!([]) && ra["status"] == json!("closed"),
        "a held read of a pruned stream: expected no chunks and closed at once; got {ra}"
    );
    let rb = read(&c, &base(&sids[1]), "").await?;
    ensure!(
        chunk_seqs(&rb) == vec![1] && rb["outcome"] == json!("aborted"),
        "the most recently closed stream keeps its chunks; got {rb}"
    );
    let rc = read(&c, &top_path(&sids[2]), "").await?;
    ensure!(
        chunk_seqs(&rc) == vec![1] && rc["status"] == json!("open"),
        "an open stream is never pruned; got {rc}"
    );
    // The pruned stream's record and artifact are untouched.
    let got = c.get(&base(&sids[0])).send().await?.json_status(200)?;
    same("record of a pruned stream", &got, &ca)?;
    let (meta, doc) = stream_artifact(&c, scope, &id, &sids[0]).await?;
    ensure!(
        json_eq(&doc, &hi_messages()) && meta["metadata"]["chunkCount"] == json!(1),
        "the pruned stream's artifact must stay readable; got meta {meta} and {doc}"
    );
    // Closing the open one and creating again prunes b, keeps c.
    close(&c, &base(&sids[2]), "completed").await?;
    create_stream(&c, scope, &id, "e").await?;
    let rb = read(&c, &base(&sids[1]), "").await?;
    same(
        "read of b after c closed and another create",
        &rb,
        &json!({"chunks": [], "status": "closed", "outcome": "aborted", "artifact": cb["artifact"]}),
    )?;
    ensure!(
        chunk_seqs(&read(&c, &base(&sids[2]), "").await?) == vec![1],
        "the most recently closed stream (c) lost its chunks"
    );
    Ok(())
}

// ── create / list ───────────────────────────────────────────────────────────

async fn create_rejects(c: Ctx, body: &'static str) -> CheckResult {
    let id = Scope::Build.create(&c).await?;
    c.post_raw(&streams_path(Scope::Build, &id), body)
        .send()
        .await?
        .e400()?;
    let list = c
        .get(&streams_path(Scope::Build, &id))
        .send()
        .await?
        .json_status(200)?;
    ensure!(
        list == json!([]),
        "a 400-rejected create made a stream: {list}"
    );
    Ok(())
}

async fn create_unknown_keys(c: Ctx) -> CheckResult {
    let id = Scope::Repo.create(&c).await?;
    let r = c
        .post(
            &streams_path(Scope::Repo, &id),
            &json!({"label": "l", "id": "st_mine", "status": "closed", "format": "other",
                    "scope": {"kind": "build", "build": "x"}, "x-extra": 1}),
        )
        .send()
        .await?;
    let rec = r.json_status(201)?;
    record_shape("StreamRecord", &rec)?;
    ensure!(
        rec["id"] != json!("st_mine")
            && rec["status"] == json!("open")
            && rec["scope"] == Scope::Repo.json(&id),
        "{}",
        r.fail("unknown and server-owned keys ignored: a server id, status open, the path's scope")
    );
    Ok(())
}

async fn list_per_resource(c: Ctx) -> CheckResult {
    let a = Scope::Build.create(&c).await?;
    let b = Scope::Build.create(&c).await?;
    let empty = c
        .get(&streams_path(Scope::Build, &a))
        .send()
        .await?
        .json_status(200)?;
    ensure!(empty == json!([]), "a fresh build lists streams: {empty}");
    let sa = create_stream(&c, Scope::Build, &a, "a").await?;
    let sb = create_stream(&c, Scope::Build, &b, "b").await?;
    same(
        "streams of build a",
        &c.get(&streams_path(Scope::Build, &a))
            .send()
            .await?
            .json_status(200)?,
        &json!([sa]),
    )?;
    same(
        "streams of build b",
        &c.get(&streams_path(Scope::Build, &b))
            .send()
            .await?
            .json_status(200)?,
        &json!([sb]),
    )?;
    Ok(())
}

// ── append ──────────────────────────────────────────────────────────────────

async fn append_seqs(c: Ctx) -> CheckResult {
    let (id, s1) = fresh_stream(&c, Scope::Build).await?;
    let s2 = sid_of(&create_stream(&c, Scope::Build, &id, "second").await?);
    for want in 1..=3 {
        let ch = append(&c, &top_path(&s1), &json!([{"type": "start-step"}])).await?;
        ensure!(
            ch["seq"] == json!(want),
            "append #{want}: expected seq {want}; got {ch}"
        );
    }
    let ch = append(&c, &top_path(&s2), &json!([{"type": "start-step"}])).await?;
    ensure!(
        ch["seq"] == json!(1),
        "the first append to a second stream of the same build: expected seq 1; got {ch}"
    );
    // Stream chunks are not events.
    c.no_events(Res::Build, &id, "stream appends appended build events")
        .await?;
    Ok(())
}

async fn append_keys_survive(c: Ctx) -> CheckResult {
    let (_, sid) = fresh_stream(&c, Scope::Repo).await?;
    let parts = json!([
        {"type": "data-weather", "id": "w", "data": {"nested": [1, 2.5, null, {"é": "ü🙂"}]},
         "x-unknown": {"deep": true}, "providerMetadata": {"p": {"k": "v"}}},
        {"type": "text-delta", "id": "t", "delta": "", "zz": 1e3, "aa": -0.5},
    ]);
    let ch = append(&c, &top_path(&sid), &parts).await?;
    same("parts echoed in the chunk", &ch["parts"], &parts)?;
    let rd = read(&c, &top_path(&sid), "").await?;
    same("parts read back", &rd["chunks"][0]["parts"], &parts)?;
    Ok(())
}

/// Append checks only the part shape: unknown types and out-of-sequence
/// parts are accepted (assembly judges them at close).
async fn append_no_validation(c: Ctx) -> CheckResult {
    let (_, sid) = fresh_stream(&c, Scope::Session).await?;
    let parts = json!([
        {"type": "text-delta", "id": "never-started", "delta": "x"},
        {"type": "not-a-protocol-type"},
        {"type": "tool-input-foo"},
        {"type": "text-delta"},
        {"type": "finish", "finishReason": "no-such-reason"},
    ]);
    let ch = append(&c, &top_path(&sid), &parts).await?;
    same("accepted parts", &ch["parts"], &parts)?;
    Ok(())
}

async fn append_rejects(c: Ctx, body: &'static str) -> CheckResult {
    let (id, sid) = fresh_stream(&c, Scope::Build).await?;
    let base = stream_path(Scope::Build, &id, &sid);
    c.post_raw(&format!("{base}/chunks"), body)
        .send()
        .await?
        .e400()?;
    ensure!(
        chunk_seqs(&read(&c, &base, "").await?).is_empty(),
        "a 400-rejected append wrote a chunk"
    );
    let ch = append(&c, &base, &json!([{"type": "start"}])).await?;
    ensure!(
        ch["seq"] == json!(1),
        "a 400 consumed a sequence: next append got {ch}"
    );
    Ok(())
}

/// `parts` whose compact JSON serialization is exactly `len` bytes.
fn parts_of_len(len: usize) -> Value {
    // [{"type":"data-x","data":"<pad>"}]
    let overhead = r#"[{"type":"data-x","data":""}]"#.len();
    json!([{"type": "data-x", "data": "a".repeat(len - overhead)}])
}

async fn append_ceiling(c: Ctx) -> CheckResult {
    let (_, sid) = fresh_stream(&c, Scope::Build).await?;
    let base = top_path(&sid);
    let over = parts_of_len(CEILING + 1);
    let r = c
        .unpooled()?
        .post(&format!("{base}/chunks"), &json!({"parts": over}))
        .send()
        .await?;
    let msg = r.error(413, "validation")?;
    ensure!(
        msg.contains("1048576") || msg.contains("1,048,576"),
        "{}",
        r.fail("413 whose message names the 1048576-byte ceiling")
    );
    ensure!(
        chunk_seqs(&read(&c, &base, "").await?).is_empty(),
        "a 413-rejected append wrote a chunk"
    );
    let at = parts_of_len(CEILING);
    let r = c
        .unpooled()?
        .post(&format!("{base}/chunks"), &json!({"parts": at}))
        .send()
        .await?;
    let ch = r.json_status(201).map_err(|e| {
        format!("a batch of exactly 1048576 bytes of serialized parts is within the ceiling: {e}")
    })?;
    ensure!(
        ch["seq"] == json!(1),
        "the batch at the ceiling: expected seq 1; got seq {}",
        ch["seq"]
    );
    Ok(())
}

async fn append_closed(c: Ctx) -> CheckResult {
    let (id, sid) = fresh_stream(&c, Scope::Repo).await?;
    let base = stream_path(Scope::Repo, &id, &sid);
    append(&c, &base, &hi_parts()).await?;
    let rec = close(&c, &base, "completed").await?;
    let msg = format!("stream \"{sid}\" is closed");
    for path in [base.clone(), top_path(&sid)] {
        c.post(
            &format!("{path}/chunks"),
            &json!({"parts": [{"type": "finish"}]}),
        )
        .send()
        .await?
        .error_msg(409, "conflict", &msg)?;
    }
    let rd = read(&c, &base, "").await?;
    ensure!(
        chunk_seqs(&rd) == vec![1],
        "a 409-rejected append wrote a chunk: {rd}"
    );
    let got = c.get(&base).send().await?.json_status(200)?;
    same("record after refused appends", &got, &rec)?;
    Ok(())
}

async fn append_concurrent(c: Ctx) -> CheckResult {
    let (_, sid) = fresh_stream(&c, Scope::Build).await?;
    let base = top_path(&sid);
    let mut tasks = Vec::new();
    for i in 0..16 {
        let c = c.clone();
        let base = base.clone();
        tasks.push(tokio::spawn(async move {
            append(&c, &base, &json!([{"type": "data-n", "data": i}])).await
        }));
    }
    let mut seqs = Vec::new();
    let mut by_seq = std::collections::BTreeMap::new();
    for t in tasks {
        let ch = t.await.map_err(|e| format!("append task failed: {e}"))??;
        let seq = ch["seq"].as_i64().unwrap_or(-1);
        seqs.push(seq);
        by_seq.insert(seq, ch["parts"].clone());
    }
    seqs.sort_unstable();
    ensure!(
        seqs == (1..=16).collect::<Vec<i64>>(),
        "16 concurrent appends must get seqs 1..16 exactly once; got {seqs:?}"
    );
    let rd = read(&c, &base, "").await?;
    ensure!(
        chunk_seqs(&rd) == (1..=16).collect::<Vec<i64>>(),
        "read after concurrent appends: expected seqs 1..16 in order; got {:?}",
        chunk_seqs(&rd)
    );
    for ch in rd["chunks"].as_array().into_iter().flatten() {
        let seq = ch["seq"].as_i64().unwrap_or(-1);
        ensure!(
            by_seq.get(&seq) == Some(&ch["parts"]),
            "chunk {seq} read back with other parts than its append returned: {ch}"
        );
    }
    Ok(())
}

// ── append order ────────────────────────────────────────────────────────────

async fn order_unknown_400(c: Ctx) -> CheckResult {
    let sid = unknown_sid();
    let msg = unknown_stream_msg(&sid);
    let id = Scope::Build.create(&c).await?;
    for base in [top_path(&sid), stream_path(Scope::Build, &id, &sid)] {
        for body in [
            r#"{"parts":[]}"#,
            r#"{"parts":[{"type":""}]}"#,
            r#"{"#,
            "[]",
        ] {
            c.post_raw(&format!("{base}/chunks"), body)
                .send()
                .await?
                .error_msg(404, "not-found", &msg)?;
        }
        c.post_raw(&format!("{base}/close"), r#"{"outcome":"nope"}"#)
            .send()
            .await?
            .error_msg(404, "not-found", &msg)?;
    }
    Ok(())
}

async fn order_unknown_413(c: Ctx) -> CheckResult {
    let sid = unknown_sid();
    let big = json!({"parts": parts_of_len(CEILING + 10)});
    c.unpooled()?
        .post(&format!("{}/chunks", top_path(&sid)), &big)
        .send()
        .await?
        .error_msg(404, "not-found", &unknown_stream_msg(&sid))?;
    Ok(())
}

async fn order_foreign_400(c: Ctx) -> CheckResult {
    let (_, sid) = fresh_stream(&c, Scope::Build).await?;
    let other = Scope::Build.create(&c).await?;
    let base = stream_path(Scope::Build, &other, &sid);
    let msg = unknown_stream_msg(&sid);
    c.post_raw(&format!("{base}/chunks"), r#"{"parts":[]}"#)
        .send()
        .await?
        .error_msg(404, "not-found", &msg)?;
    c.unpooled()?
        .post(
            &format!("{base}/chunks"),
            &json!({"parts": parts_of_len(CEILING + 10)}),
        )
        .send()
        .await?
        .error_msg(404, "not-found", &msg)?;
    Ok(())
}

async fn closed_stream(c: &Ctx) -> Result<String, String> {
    let (_, sid) = fresh_stream(c, Scope::Repo).await?;
    close(c, &top_path(&sid), "aborted").await?;
    Ok(sid)
}

async fn order_400_409(c: Ctx) -> CheckResult {
    let sid = closed_stream(&c).await?;
    for body in [r#"{"parts":[]}"#, r#"{"parts":[{"type":7}]}"#, r#"{}"#] {
        c.post_raw(&format!("{}/chunks", top_path(&sid)), body)
            .send()
            .await?
            .e400()?;
    }
    Ok(())
}

async fn order_413_409(c: Ctx) -> CheckResult {
    let sid = closed_stream(&c).await?;
    let r = c
        .unpooled()?
        .post(
            &format!("{}/chunks", top_path(&sid)),
            &json!({"parts": parts_of_len(CEILING + 1)}),
        )
        .send()
        .await?;
    r.error(413, "validation")?;
    Ok(())
}

// ── read ────────────────────────────────────────────────────────────────────

async fn three_chunks(c: &Ctx) -> Result<String, String> {
    let (_, sid) = fresh_stream(c, Scope::Build).await?;
    for i in 0..3 {
        append(c, &top_path(&sid), &json!([{"type": "data-n", "data": i}])).await?;
    }
    Ok(sid)
}

async fn read_since(c: Ctx) -> CheckResult {
    let sid = three_chunks(&c).await?;
    for (since, want) in [
        (0, vec![1, 2, 3]),
        (1, vec![2, 3]),
        (3, vec![]),
        (50, vec![]),
    ] {
        let rd = read(&c, &top_path(&sid), &format!("?since={since}")).await?;
        ensure!(
            chunk_seqs(&rd) == want && rd["status"] == json!("open"),
            "read since={since}: expected seqs {want:?} and status open; got {rd}"
        );
    }
    Ok(())
}

/// The lenient `since` rows of sections 3–5 on the chunk read. The table's
/// expectations are for 4 items; this stream holds 3, so a row expects the
/// seqs of its expectation that the stream has.
async fn read_since_lenient(c: Ctx) -> CheckResult {
    let sid = three_chunks(&c).await?;
    for (_, (raw, want)) in SINCE_LENIENT {
        let want: Vec<i64> = want.iter().copied().filter(|&seq| seq <= 3).collect();
        let rd = read(&c, &top_path(&sid), &format!("?since={raw}")).await?;
        ensure!(
            chunk_seqs(&rd) == want,
            "read since={raw:?} (JavaScript Number()): expected {want:?}; got {:?}",
            chunk_seqs(&rd)
        );
    }
    Ok(())
}

async fn read_since_rejects(c: Ctx) -> CheckResult {
    let (_, sid) = fresh_stream(&c, Scope::Build).await?;
    for (_, raw) in SINCE_REJECTED {
        c.get(&format!("{}/chunks?since={raw}", top_path(&sid)))
            .send()
            .await?
            .e400()?;
    }
    Ok(())
}

async fn read_wait_rejects(c: Ctx) -> CheckResult {
    let (id, sid) = fresh_stream(&c, Scope::Repo).await?;
    for base in [top_path(&sid), stream_path(Scope::Repo, &id, &sid)] {
        for (_, raw) in WAIT_REJECTED {
            let r = c.get(&format!("{base}/chunks?wait={raw}")).send().await?;
            r.e400()?;
            ensure!(
                r.elapsed < Duration::from_secs(3),
                "a 400 wait must be answered at once; took {:?}",
                r.elapsed
            );
        }
    }
    Ok(())
}

async fn read_wait_zero(c: Ctx) -> CheckResult {
    let (_, sid) = fresh_stream(&c, Scope::Session).await?;
    let r = c
        .get(&format!("{}/chunks?wait=0", top_path(&sid)))
        .send()
        .await?;
    same(
        "wait=0 read",
        &r.json_status(200)?,
        &json!({"chunks": [], "status": "open"}),
    )?;
    ensure!(
        r.elapsed < Duration::from_secs(3),
        "wait=0 must not hold; took {:?}",
        r.elapsed
    );
    Ok(())
}

async fn read_wait_existing(c: Ctx) -> CheckResult {
    let sid = three_chunks(&c).await?;
    let r = c
        .get(&format!("{}/chunks?since=2&wait=10", top_path(&sid)))
        .send()
        .await?;
    let v = r.json_status(200)?;
    ensure!(
        chunk_seqs(&v) == vec![3],
        "{}",
        r.fail("the one newer chunk")
    );
    ensure!(
        r.elapsed < Duration::from_secs(5),
        "a newer chunk existed, so the read must answer at once; took {:?}",
        r.elapsed
    );
    Ok(())
}

async fn read_wait_huge(c: Ctx) -> CheckResult {
    let sid = three_chunks(&c).await?;
    for raw in ["31", "3600", "99999999999999999999999"] {
        let r = c
            .get(&format!("{}/chunks?wait={raw}", top_path(&sid)))
            .send()
            .await?;
        let v = r.json_status(200)?;
        ensure!(
            chunk_seqs(&v) == vec![1, 2, 3],
            "{}",
            r.fail("200 with the chunks (waits above 30 are clamped, not rejected)")
        );
    }
    Ok(())
}

async fn read_wakes_append(c: Ctx) -> CheckResult {
    let (_, sid) = fresh_stream(&c, Scope::Build).await?;
    let c2 = c.clone();
    let path = format!("{}/chunks?since=0&wait=10", top_path(&sid));
    let reader = tokio::spawn(async move { c2.get(&path).send().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let start = Instant::now();
    let ch = append(&c, &top_path(&sid), &json!([{"type": "start"}])).await?;
    let r = reader
        .await
        .map_err(|e| format!("reader task failed: {e}"))??;
    let v = r.json_status(200)?;
    if !chunk_seqs(&v).is_empty() {
        same("held read", &v, &json!({"chunks": [ch], "status": "open"}))?;
        ensure!(
            start.elapsed() < Duration::from_millis(8000),
            "the held read returned {:?} after the append; it should wake well before the 10 s bound",
            start.elapsed()
        );
    }
    Ok(())
}

async fn read_wakes_close(c: Ctx) -> CheckResult {
    let (_, sid) = fresh_stream(&c, Scope::Repo).await?;
    append(&c, &top_path(&sid), &json!([{"type": "start"}])).await?;
    let c2 = c.clone();
    let path = format!("{}/chunks?since=1&wait=10", top_path(&sid));
    let reader = tokio::spawn(async move { c2.get(&path).send().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let start = Instant::now();
    let rec = close(&c, &top_path(&sid), "completed").await?;
    let r = reader
        .await
        .map_err(|e| format!("reader task failed: {e}"))??;
    let v = r.json_status(200)?;
    ensure!(
        chunk_seqs(&v).is_empty(),
        "{}",
        r.fail("no chunks past since=1")
    );
    // A server may answer before the close (open, nothing new); if it held
    // the read, the close must wake it with the closed status.
    if v["status"] == json!("closed") {
        same(
            "held read woken by the close",
            &v,
            &json!({"chunks": [], "status": "closed", "outcome": "completed", "artifact": rec["artifact"]}),
        )?;
        ensure!(
            start.elapsed() < Duration::from_millis(8000),
            "the held read returned {:?} after the close; the close should wake it",
            start.elapsed()
        );
    } else {
        ensure!(
            v == json!({"chunks": [], "status": "open"}),
            "{}",
            r.fail("either the closed status (woken by the close) or an early open answer")
        );
    }
    Ok(())
}

async fn read_closed_no_wait(c: Ctx) -> CheckResult {
    let (id, sid) = fresh_stream(&c, Scope::Session).await?;
    append(&c, &top_path(&sid), &hi_parts()).await?;
    let rec = close(&c, &top_path(&sid), "completed").await?;
    for base in [top_path(&sid), stream_path(Scope::Session, &id, &sid)] {
        let r = c
            .get(&format!("{base}/chunks?since=1&wait=20"))
            .send()
            .await?;
        same(
            "held read of a closed stream",
            &r.json_status(200)?,
            &json!({"chunks": [], "status": "closed", "outcome": "completed", "artifact": rec["artifact"]}),
        )?;
        ensure!(
            r.elapsed < Duration::from_secs(4),
            "reads of a closed stream never wait; wait=20 took {:?}",
            r.elapsed
        );
    }
    Ok(())
}

async fn read_identity(c: Ctx) -> CheckResult {
    let (_, sid) = fresh_stream(&c, Scope::Build).await?;
    let r = c
        .get(&format!("{}/chunks?wait=10", top_path(&sid)))
        .version(Some("0.0.1"))
        .send()
        .await?;
    r.error(409, "conflict")?;
    ensure!(
        r.elapsed < Duration::from_secs(4),
        "a 409 identity failure must be answered at once; took {:?}",
        r.elapsed
    );
    Ok(())
}

// ── close ───────────────────────────────────────────────────────────────────

async fn close_aborted(c: Ctx) -> CheckResult {
    let (id, sid) = fresh_stream(&c, Scope::Build).await?;
    append(&c, &top_path(&sid), &text_parts(2)).await?;
    let rec = close(&c, &stream_path(Scope::Build, &id, &sid), "aborted").await?;
    record_shape("closed StreamRecord", &rec)?;
    ensure!(
        rec["outcome"] == json!("aborted"),
        "expected outcome aborted; got {rec}"
    );
    let (meta, doc) = stream_artifact(&c, Scope::Build, &id, &sid).await?;
    ensure!(
        meta["metadata"]["outcome"] == json!("aborted"),
        "artifact metadata outcome: expected aborted; got {meta}"
    );
    // Unfinished text stays streaming: nothing is finalized at close.
    let want = json!([{"id": "m1", "role": "assistant",
        "parts": [{"type": "text", "text": "w0 w1 ", "state": "streaming"}]}]);
    ensure!(
        json_eq(&doc, &want),
        "aborted stream document: expected {want}; got {doc}"
    );
    Ok(())
}

async fn close_empty(c: Ctx) -> CheckResult {
    let (id, sid) = fresh_stream(&c, Scope::Repo).await?;
    let rec = close(&c, &top_path(&sid), "completed").await?;
    record_shape("closed StreamRecord", &rec)?;
    let (meta, doc) = stream_artifact(&c, Scope::Repo, &id, &sid).await?;
    ensure!(
        doc == json!([]),
        "an empty stream assembles to []; got {doc}"
    );
    ensure!(
        meta["metadata"]["chunkCount"] == json!(0) && meta["metadata"]["droppedParts"] == json!(0),
        "empty stream metadata: expected chunkCount 0, droppedParts 0; got {meta}"
    );
    Ok(())
}

async fn close_twice(c: Ctx) -> CheckResult {
    let (id, sid) = fresh_stream(&c, Scope::Session).await?;
    append(&c, &top_path(&sid), &hi_parts()).await?;
    let first = close(&c, &top_path(&sid), "completed").await?;
    for (path, outcome) in [
        (top_path(&sid), "completed"),
        (top_path(&sid), "aborted"),
        (stream_path(Scope::Session, &id, &sid), "aborted"),
    ] {
        let again = close(&c, &path, outcome).await?;
        same(
            &format!("second close ({outcome}) returns the record unchanged"),
            &again,
            &first,
        )?;
    }
    let list = Scope::Session.artifact_list(&c, &id).await?;
    ensure!(
        list.len() == 1 && list[0]["metadata"]["outcome"] == json!("completed"),
        "repeated closes must not deposit again; artifact-list: {list:?}"
    );
    Ok(())
}

async fn close_concurrent(c: Ctx) -> CheckResult {
    let (id, sid) = fresh_stream(&c, Scope::Build).await?;
    append(&c, &top_path(&sid), &hi_parts()).await?;
    let mut tasks = Vec::new();
    for outcome in ["completed", "aborted"] {
        let c = c.clone();
        let path = top_path(&sid);
        tasks.push(tokio::spawn(async move { close(&c, &path, outcome).await }));
    }
    let mut recs = Vec::new();
    for t in tasks {
        recs.push(t.await.map_err(|e| format!("close task failed: {e}"))??);
    }
    same("the two concurrent closes", &recs[1], &recs[0])?;
    record_shape("closed StreamRecord", &recs[0])?;
    let list = Scope::Build.artifact_list(&c, &id).await?;
    ensure!(
        list.len() == 1 && list[0]["revision"] == json!(0),
        "two concurrent closes must deposit exactly one artifact; got {list:?}"
    );
    ensure!(
        list[0]["metadata"]["outcome"] == recs[0]["outcome"],
        "the artifact's outcome must be the record's: {} vs {}",
        list[0]["metadata"]["outcome"],
        recs[0]["outcome"]
    );
    Ok(())
}

async fn close_listed(c: Ctx) -> CheckResult {
    let id = Scope::Repo.create(&c).await?;
    let a = sid_of(&create_stream(&c, Scope::Repo, &id, "a").await?);
    let b = sid_of(&create_stream(&c, Scope::Repo, &id, "b").await?);
    c.put_artifact(Res::Repo, &id, "notes", b"n", None).await?;
    close(&c, &top_path(&a), "completed").await?;
    close(&c, &top_path(&b), "aborted").await?;
    let list = Scope::Repo.artifact_list(&c, &id).await?;
    let kinds: Vec<String> = list
        .iter()
        .map(|m| format!("{}@{}", m["kind"].as_str().unwrap_or("?"), m["revision"]))
        .collect();
    let mut want = vec![
        "notes@0".to_string(),
        format!("stream:{a}@0"),
        format!("stream:{b}@0"),
    ];
    want.sort();
    ensure!(
        kinds == want,
        "artifact-list after two closes (ordered by kind): expected {want:?}; got {kinds:?}"
    );
    let only = c
        .get(&format!(
            "{}/artifact-list?kind={}",
            Scope::Repo.path(&id),
            enc(&format!("stream:{a}"))
        ))
        .send()
        .await?
        .json_status(200)?;
    ensure!(
        only.as_array().map(Vec::len) == Some(1),
        "artifact-list?kind=stream:{a}: expected one entry; got {only}"
    );
    Ok(())
}

async fn close_rejects(c: Ctx, body: &'static str) -> CheckResult {
    let (id, sid) = fresh_stream(&c, Scope::Build).await?;
    let base = stream_path(Scope::Build, &id, &sid);
    c.post_raw(&format!("{base}/close"), body)
        .send()
        .await?
        .e400()?;
    let rec = c.get(&base).send().await?.json_status(200)?;
    ensure!(
        rec["status"] == json!("open"),
        "a 400-rejected close closed the stream: {rec}"
    );
    ensure!(
        Scope::Build.artifact_list(&c, &id).await?.is_empty(),
        "a 400-rejected close deposited an artifact"
    );
    append(&c, &base, &json!([{"type": "start"}])).await?;
    Ok(())
}

async fn close_dropped(c: Ctx) -> CheckResult {
    let (id, sid) = fresh_stream(&c, Scope::Build).await?;
    let mut parts = hi_parts().as_array().cloned().unwrap_or_default();
    parts.insert(2, json!({"type": "not-a-part"}));
    parts.insert(4, json!({"type": "tool-input-foo", "toolCallId": "x"}));
    append(&c, &top_path(&sid), &Value::Array(parts[..3].to_vec())).await?;
    append(&c, &top_path(&sid), &Value::Array(parts[3..].to_vec())).await?;
    append(&c, &top_path(&sid), &json!([{"type": "steering-message"}])).await?;
    close(&c, &top_path(&sid), "completed").await?;
    let (meta, doc) = stream_artifact(&c, Scope::Build, &id, &sid).await?;
    ensure!(
        json_eq(&doc, &hi_messages()),
        "undefined part types are dropped: expected {}; got {doc}",
        hi_messages()
    );
    ensure!(
        meta["metadata"]["droppedParts"] == json!(3) && meta["metadata"]["chunkCount"] == json!(3),
        "expected droppedParts 3 and chunkCount 3; got {}",
        meta["metadata"]
    );
    Ok(())
}

// ── top-level routes ────────────────────────────────────────────────────────

async fn toplevel_lifecycle(c: Ctx) -> CheckResult {
    for scope in [Scope::Repo, Scope::Session] {
        let (id, sid) = fresh_stream(&c, scope).await?;
        let base = top_path(&sid);
        let ch = append(&c, &base, &hi_parts()).await?;
        chunk_shape("top-level chunk", &ch, &sid, 1, &hi_parts())?;
        let fam = read(&c, &stream_path(scope, &id, &sid), "").await?;
        same(
            "family read after a top-level append",
            &fam,
            &json!({"chunks": [ch], "status": "open"}),
        )?;
        let rec = close(&c, &base, "completed").await?;
        let got = c.get(&base).send().await?.json_status(200)?;
        same("GET /streams/{id} after close", &got, &rec)?;
        let (meta, doc) = stream_artifact(&c, scope, &id, &sid).await?;
        ensure!(
            json_eq(&doc, &hi_messages()) && meta[scope.key()] == json!(id),
            "a top-level close deposits on the stream's own scope ({} {id}); got meta {meta}, document {doc}",
            scope.key()
        );
    }
    Ok(())
}

async fn toplevel_unknown(c: Ctx) -> CheckResult {
    let sid = unknown_sid();
    let msg = unknown_stream_msg(&sid);
    let base = top_path(&sid);
    c.get(&base)
        .send()
        .await?
        .error_msg(404, "not-found", &msg)?;
    let r = c.get(&format!("{base}/chunks?wait=10")).send().await?;
    r.error_msg(404, "not-found", &msg)?;
    ensure!(
        r.elapsed < Duration::from_secs(4),
        "an unknown stream must be answered at once; took {:?}",
        r.elapsed
    );
    c.post(
        &format!("{base}/chunks"),
        &json!({"parts": [{"type": "start"}]}),
    )
    .send()
    .await?
    .error_msg(404, "not-found", &msg)?;
    c.post(&format!("{base}/close"), &json!({"outcome": "completed"}))
        .send()
        .await?
        .error_msg(404, "not-found", &msg)?;
    Ok(())
}

async fn toplevel_identity(c: Ctx) -> CheckResult {
    let (_, sid) = fresh_stream(&c, Scope::Build).await?;
    let base = top_path(&sid);
    for (method, path, body) in [
        ("GET", base.clone(), None),
        ("GET", format!("{base}/chunks"), None),
        (
            "POST",
            format!("{base}/chunks"),
            Some(json!({"parts": [{"type": "start"}]})),
        ),
        (
            "POST",
            format!("{base}/close"),
            Some(json!({"outcome": "completed"})),
        ),
    ] {
        for variant in 0..2 {
            let mut call = c.call(method, &path);
            call = if variant == 0 {
                call.no_identity()
            } else {
                call.version(Some("0.0.1"))
            };
            if let Some(b) = &body {
                call = call.raw(b.to_string());
            }
            call.send().await?.error(409, "conflict")?;
        }
    }
    let rd = read(&c, &base, "").await?;
    same(
        "the stream after 409-refused writes",
        &rd,
        &json!({"chunks": [], "status": "open"}),
    )?;
    Ok(())
}

// ── retention across scopes and by time ─────────────────────────────────────

async fn retention_isolated(c: Ctx) -> CheckResult {
    // Two closed streams in a build; creates elsewhere never prune them.
    let b = Scope::Build.create(&c).await?;
    let mut sids = Vec::new();
    for _ in 0..2 {
        let sid = sid_of(&create_stream(&c, Scope::Build, &b, "x").await?);
        append(&c, &top_path(&sid), &hi_parts()).await?;
        close(&c, &top_path(&sid), "completed").await?;
        sids.push(sid);
    }
    for scope in Scope::ALL {
        let other = scope.create(&c).await?;
        create_stream(&c, scope, &other, "elsewhere").await?;
    }
    for sid in &sids {
        ensure!(
            chunk_seqs(&read(&c, &top_path(sid), "").await?) == vec![1],
            "a create in another scope pruned stream {sid} of build {b}"
        );
    }
    create_stream(&c, Scope::Build, &b, "here").await?;
    ensure!(
        chunk_seqs(&read(&c, &top_path(&sids[0]), "").await?).is_empty()
            && chunk_seqs(&read(&c, &top_path(&sids[1]), "").await?) == vec![1],
        "a create in the build itself prunes the older closed stream only"
    );
    Ok(())
}

/// "Most recently closed" is by close time: a stream created first but
/// closed last keeps its chunks.
async fn retention_by_time(c: Ctx) -> CheckResult {
    let id = Scope::Repo.create(&c).await?;
    let a = sid_of(&create_stream(&c, Scope::Repo, &id, "a").await?);
    let b = sid_of(&create_stream(&c, Scope::Repo, &id, "b").await?);
    for sid in [&a, &b] {
        append(&c, &top_path(sid), &hi_parts()).await?;
    }
    let rb = close(&c, &top_path(&b), "completed").await?;
    let t = c.advance(1_000).await?;
    let ra = close(&c, &top_path(&a), "completed").await?;
    let (ta, tb) = (
        crate::util::parse_iso_ms(ra["closedAt"].as_str().unwrap_or_default()),
        crate::util::parse_iso_ms(rb["closedAt"].as_str().unwrap_or_default()),
    );
    ensure!(
        ta == Some(t) && tb.is_some_and(|tb| tb < t),
        "closedAt must be the server's clock at close: expected a at {} after b; got a {} and b {}",
        crate::util::format_iso_ms(t),
        ra["closedAt"],
        rb["closedAt"]
    );
    create_stream(&c, Scope::Repo, &id, "c").await?;
    ensure!(
        chunk_seqs(&read(&c, &top_path(&a), "").await?) == vec![1],
        "stream a (created first, closed last) must keep its chunks"
    );
    ensure!(
        chunk_seqs(&read(&c, &top_path(&b), "").await?).is_empty(),
        "stream b (closed earlier) must be pruned"
    );
    Ok(())
}

// ── assembly fixtures ───────────────────────────────────────────────────────

async fn assembly(
    c: Ctx,
    name: &'static str,
    parts: &'static str,
    expected: &'static str,
) -> CheckResult {
    let parts: Value =
        serde_json::from_str(parts).map_err(|e| format!("{name}.parts.json: {e}"))?;
    let parts = parts.get("parts").cloned().unwrap_or(parts);
    let expected: Value =
        serde_json::from_str(expected).map_err(|e| format!("{name}.expected.json: {e}"))?;
    let parts = parts.as_array().cloned().unwrap_or_default();
    let scope = Scope::ALL[name.len() % 3];
    let (id, sid) = fresh_stream(&c, scope).await?;
    // Chunks of up to four parts: assembly concatenates them in seq order.
    let mut n = 0;
    for batch in parts.chunks(4) {
        append(&c, &top_path(&sid), &Value::Array(batch.to_vec())).await?;
        n += 1;
    }
    close(&c, &top_path(&sid), "completed").await?;
    let (meta, doc) = stream_artifact(&c, scope, &id, &sid).await?;
    ensure!(
        json_eq(&doc, &expected["messages"]),
        "fixture {name}: the stream artifact differs from the AI SDK's UIMessage[]:\n  expected {}\n  got      {doc}",
        expected["messages"]
    );
    ensure!(
        meta["metadata"]["droppedParts"] == expected["dropped"]
            && meta["metadata"]["chunkCount"] == json!(n),
        "fixture {name}: expected droppedParts {} and chunkCount {n}; got {}",
        expected["dropped"],
        meta["metadata"]
    );
    Ok(())
}
