//! Section 3, build-stream operations: create, list, get, append, conditional
//! append, event reads (lenient `since`) and the bounded wait (strict `wait`).
//! Event-read and append checks are generic over [`Res`] and reused by
//! section 4 (see `repos.rs`).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{CheckResult, Registry};
use crate::client::{Ctx, Res, same, shape, time_of};
use crate::ensure;
use crate::fixtures::build_event;
use crate::util::{enc, unique};

const BUILD_KEYS: [&str; 9] = [
    "slug",
    "repo",
    "repoOrigin",
    "ticket",
    "branch",
    "createdAt",
    "updatedAt",
    "lease",
    "heartbeatAt",
];

pub fn register(r: &mut Registry) {
    r.add("s3.create.status_and_shape", "3", create_shape);
    r.add("s3.create.optional_fields_round_trip", "3", create_optional);
    r.add("s3.create.ticket_minimal", "3", create_ticket_minimal);
    r.add("s3.create.unknown_keys_ignored", "3", create_unknown_keys);
    r.add("s3.create.duplicate_conflict", "3", create_duplicate);
    let bad_bodies: [(&str, Value); 11] = [
        ("missing_slug", json!({"repo": "acme/x"})),
        ("empty_slug", json!({"slug": "", "repo": "acme/x"})),
        ("missing_repo", json!({"slug": "SLUG"})),
        ("empty_repo", json!({"slug": "SLUG", "repo": ""})),
        (
            "empty_branch",
            json!({"slug": "SLUG", "repo": "acme/x", "branch": ""}),
        ),
        ("slug_not_string", json!({"slug": 7, "repo": "acme/x"})),
        (
            "repo_origin_not_string",
            json!({"slug": "SLUG", "repo": "acme/x", "repoOrigin": 5}),
        ),
        (
            "ticket_empty_source",
            json!({"slug": "SLUG", "repo": "acme/x", "ticket": {"source": "", "id": "A-1"}}),
        ),
        (
            "ticket_missing_id",
            json!({"slug": "SLUG", "repo": "acme/x", "ticket": {"source": "linear"}}),
        ),
        ("body_array", json!([{"slug": "SLUG", "repo": "acme/x"}])),
        ("body_null", Value::Null),
    ];
    for (name, body) in bad_bodies {
        r.add(format!("s3.create.rejects_{name}"), "3", move |c| {
            create_rejects(c, body.clone())
        });
    }
    r.add("s3.list.contains_created", "3", list_contains);
    r.add("s3.get.record_matches_create", "3", get_matches);
    r.add("s3.get.unknown_404", "3", |c| get_unknown(c, Res::Build));

    register_stream_checks(r, Res::Build);

    r.add("s3.cond.empty_stream_expected_0", "3", cond_empty);
    r.add("s3.cond.current_seq_appends", "3", cond_current);
    r.add("s3.cond.stale_returns_null", "3", cond_stale_null);
    r.add("s3.cond.stale_consumes_no_sequence", "3", cond_stale_no_seq);
    r.add("s3.cond.ahead_returns_null", "3", cond_ahead);
    r.add(
        "s3.cond.invalid_event_with_stale_seq_422",
        "3",
        cond_invalid_stale,
    );
    r.add(
        "s3.cond.disallowed_actor_with_stale_seq_422",
        "3",
        cond_actor_stale,
    );
    let bad_cond: [(&str, Value); 6] = [
        ("negative", json!({"expectedSeq": -1, "event": "EVENT"})),
        ("fractional", json!({"expectedSeq": 0.5, "event": "EVENT"})),
        ("missing", json!({"event": "EVENT"})),
        ("string", json!({"expectedSeq": "0", "event": "EVENT"})),
        ("null", json!({"expectedSeq": null, "event": "EVENT"})),
        ("missing_event", json!({"expectedSeq": 0})),
    ];
    for (name, body) in bad_cond {
        r.add(
            format!("s3.cond.rejects_expected_seq_{name}"),
            "3",
            move |c| cond_rejects(c, body.clone()),
        );
    }
    r.add("s3.cond.unknown_build_404", "3", cond_unknown);
}

/// Append, event-read and wait checks shared by sections 3 and 4.
pub fn register_stream_checks(r: &mut Registry, res: Res) {
    let s = res.sec();
    let p = format!("s{s}");
    r.add(format!("{p}.append.envelope_shape"), s, move |c| {
        append_shape(c, res)
    });
    r.add(format!("{p}.append.seq_starts_at_1"), s, move |c| {
        seq_starts(c, res)
    });
    r.add(format!("{p}.append.seq_per_resource"), s, move |c| {
        seq_independent(c, res)
    });
    r.add(format!("{p}.append.order_preserved"), s, move |c| {
        order_preserved(c, res)
    });
    r.add(format!("{p}.append.unknown_404_no_mutation"), s, move |c| {
        append_unknown(c, res)
    });

    r.add(format!("{p}.events.empty_stream"), s, move |c| {
        events_empty(c, res)
    });
    r.add(format!("{p}.events.all_in_order"), s, move |c| {
        events_all(c, res)
    });
    r.add(format!("{p}.events.since_strictly_greater"), s, move |c| {
        since_strict(c, res)
    });
    r.add(format!("{p}.events.since_beyond_tail"), s, move |c| {
        since_beyond(c, res)
    });
    r.add(format!("{p}.events.unknown_404"), s, move |c| {
        events_unknown(c, res)
    });
    r.add(format!("{p}.events.numeric_order_past_ten"), s, move |c| {
        numeric_order(c, res)
    });
    register_since_checks(r, res);

    register_wait_checks(r, res);
}

/// Lenient `since` rows (JavaScript `Number(raw)` must give an integer):
/// check name, (raw query value, the seqs a read of a resource holding
/// 4 events returns). Shared with the stream chunk read (section 6), whose
/// stream holds fewer items and keeps the seqs it has.
pub const SINCE_LENIENT: [(&str, (&str, &[i64])); 14] = [
    ("since_hex", ("0x2", &[3, 4])),
    ("since_hex_upper", ("0X3", &[4])),
    ("since_exponent", ("2e0", &[3, 4])),
    ("since_exponent_1e1", ("1e1", &[])),
    ("since_padded", ("%202%20", &[3, 4])),
    ("since_tab_newline_padded", ("%092%0A", &[3, 4])),
    ("since_empty", ("", &[1, 2, 3, 4])),
    ("since_whitespace_only", ("%20%20", &[1, 2, 3, 4])),
    ("since_plus_sign", ("%2B3", &[4])),
    ("since_negative", ("-1", &[1, 2, 3, 4])),
    ("since_integral_decimal", ("2.0", &[3, 4])),
    ("since_binary", ("0b11", &[4])),
    ("since_octal", ("0o2", &[3, 4])),
    ("since_huge_integer", ("1e21", &[])),
];

/// `since` values that are not an integer for JavaScript `Number()`: 400.
/// Name suffix and raw query value; shared with the stream chunk read.
pub const SINCE_REJECTED: [(&str, &str); 9] = [
    ("abc", "abc"),
    ("nan", "NaN"),
    ("infinity", "Infinity"),
    ("negative_infinity", "-Infinity"),
    ("fraction", "1.5"),
    ("overflow_to_infinity", "1e400"),
    ("bare_hex_prefix", "0x"),
    ("underscore", "1_0"),
    ("trailing_garbage", "2abc"),
];

/// `wait` values outside the strict grammar (ASCII digits only): 400, at
/// once. Name suffix and raw query value; shared with the stream chunk read.
pub const WAIT_REJECTED: [(&str, &str); 9] = [
    ("empty", ""),
    ("space_padded", "%201"),
    ("trailing_space", "1%20"),
    ("plus", "%2B1"),
    ("minus", "-1"),
    ("hex", "0x1"),
    ("fraction", "1.5"),
    ("exponent", "1e1"),
    ("alpha", "soon"),
];

/// The lenient `since` grammar (JavaScript `Number()` must give an integer)
/// and its 400s, as request → expected rows; shared by sections 3, 4 and 5.
pub fn register_since_checks(r: &mut Registry, res: Res) {
    let s = res.sec();
    let (events, rejects) = (
        format!("s{s}.events."),
        format!("s{s}.events.since_rejects_"),
    );
    r.rows(&events, s, SINCE_LENIENT, move |c, (raw, want)| {
        since_ok(c, res, raw, want)
    });
    r.rows(&rejects, s, SINCE_REJECTED, move |c, raw| {
        since_rejects(c, res, raw)
    });
}

/// The bounded wait (strict `wait` grammar, holds, wakes); shared by
/// sections 3, 4 and 5. Reads ask past the resource's initial events (a
/// session's `session.created`), so a new resource has nothing newer.
pub fn register_wait_checks(r: &mut Registry, res: Res) {
    let s = res.sec();
    let p = format!("s{s}");
    r.add(format!("{p}.wait.zero_is_immediate"), s, move |c| {
        wait_zero(c, res)
    });
    r.add(format!("{p}.wait.empty_tail_answers_empty"), s, move |c| {
        wait_empty_tail(c, res)
    });
    r.add(format!("{p}.wait.existing_event_immediate"), s, move |c| {
        wait_existing(c, res)
    });
    r.add(format!("{p}.wait.wakes_on_append"), s, move |c| {
        wait_wakes(c, res)
    });
    r.add(format!("{p}.wait.huge_value_clamped"), s, move |c| {
        wait_huge(c, res)
    });
    r.add(format!("{p}.wait.identity_not_held"), s, move |c| {
        wait_identity(c, res)
    });
    r.add(format!("{p}.wait.unknown_404"), s, move |c| {
        wait_unknown(c, res)
    });
    let rejects = format!("{p}.wait.rejects_");
    r.rows(&rejects, s, WAIT_REJECTED, move |c, raw| {
        wait_rejects(c, res, raw)
    });
}

// ── create / list / get ─────────────────────────────────────────────────────

async fn create_shape(c: Ctx) -> CheckResult {
    let slug = unique("conf");
    let r = c
        .post("/builds", &json!({"slug": slug, "repo": "acme/widgets"}))
        .send()
        .await?;
    let rec = r.json_status(201)?;
    shape(
        "BuildRecord",
        &rec,
        &["slug", "repo", "createdAt", "updatedAt"],
        &BUILD_KEYS,
    )?;
    ensure!(
        rec["slug"] == json!(slug) && rec["repo"] == json!("acme/widgets"),
        "{}",
        r.fail("slug and repo echoed")
    );
    let created = time_of("BuildRecord", &rec, "createdAt")?;
    let updated = time_of("BuildRecord", &rec, "updatedAt")?;
    ensure!(
        created == updated,
        "{}",
        r.fail("createdAt == updatedAt on a new build")
    );
    for k in ["lease", "heartbeatAt", "ticket", "branch", "repoOrigin"] {
        ensure!(
            rec.get(k).is_none(),
            "{}",
            r.fail(format!("no {k:?} on a new build created without it"))
        );
    }
    Ok(())
}

async fn create_optional(c: Ctx) -> CheckResult {
    let slug = unique("conf");
    let body = json!({
        "slug": slug,
        "repo": "acme/widgets",
        "repoOrigin": "https://github.com/acme/widgets",
        "ticket": {"source": "linear", "id": "AUT-123", "url": "https://linear.app/acme/AUT-123", "title": "Document ü"},
        "branch": "ab/conformance",
    });
    let r = c.post("/builds", &body).send().await?;
    let rec = r.json_status(201)?;
    for k in ["slug", "repo", "repoOrigin", "ticket", "branch"] {
        same(
            &format!("created record {k} (sent {})", r.sent),
            &rec[k],
            &body[k],
        )?;
    }
    let got = c.record(Res::Build, &slug).await?;
    same("GET record vs create response", &got, &rec)?;
    let list = c.get("/builds").send().await?.json_status(200)?;
    let found = list
        .as_array()
        .and_then(|a| a.iter().find(|b| b["slug"] == json!(slug)));
    ensure!(
        found == Some(&rec),
        "GET /builds entry for {slug}: expected {rec}; got {found:?}"
    );
    Ok(())
}

async fn create_ticket_minimal(c: Ctx) -> CheckResult {
    let slug = unique("conf");
    let body = json!({"slug": slug, "repo": "acme/w", "ticket": {"source": "github", "id": "42"}});
    let rec = c.post("/builds", &body).send().await?.json_status(201)?;
    same(
        "ticket without optional url/title",
        &rec["ticket"],
        &body["ticket"],
    )?;
    Ok(())
}

async fn create_unknown_keys(c: Ctx) -> CheckResult {
    let slug = unique("conf");
    let body =
        json!({"slug": slug, "repo": "acme/w", "status": "running", "seq": 9, "x-extra": {"a": 1}});
    let r = c.post("/builds", &body).send().await?;
    let rec = r.json_status(201)?;
    for k in ["status", "seq", "x-extra"] {
        ensure!(
            rec.get(k).is_none(),
            "{}",
            r.fail(format!("unknown key {k:?} ignored, not stored"))
        );
    }
    let got = c.record(Res::Build, &slug).await?;
    shape(
        "GET record after unknown keys",
        &got,
        &["slug", "repo"],
        &BUILD_KEYS,
    )?;
    Ok(())
}

async fn create_duplicate(c: Ctx) -> CheckResult {
    let (slug, rec) = c.new_build().await?;
    let r = c
        .post(
            "/builds",
            &json!({"slug": slug, "repo": "other/repo", "branch": "b"}),
        )
        .send()
        .await?;
    r.error_msg(409, "conflict", &format!("build \"{slug}\" already exists"))?;
    let got = c.record(Res::Build, &slug).await?;
    same("record after duplicate create", &got, &rec)?;
    Ok(())
}

async fn create_rejects(c: Ctx, body: Value) -> CheckResult {
    let slug = unique("conf");
    let text = body.to_string().replace("SLUG", &slug);
    let r = c.post_raw("/builds", text).send().await?;
    r.e400()?;
    let g = c.get(&format!("/builds/{}", enc(&slug))).send().await?;
    ensure!(
        g.status == 404,
        "{}",
        g.fail("404: a rejected create must not create the build")
    );
    Ok(())
}

async fn list_contains(c: Ctx) -> CheckResult {
    let (a, ra) = c.new_build().await?;
    let (b, rb) = c.new_build().await?;
    let r = c.get("/builds").send().await?;
    let list = r.json_status(200)?;
    let arr = list.as_array().ok_or_else(|| r.fail("a JSON array"))?;
    for (slug, rec) in [(a, ra), (b, rb)] {
        let found = arr.iter().find(|x| x["slug"] == json!(slug));
        ensure!(
            found == Some(&rec),
            "GET /builds: expected entry {rec}; got {found:?}"
        );
    }
    for item in arr {
        shape(
            "GET /builds item",
            item,
            &["slug", "repo", "createdAt", "updatedAt"],
            &BUILD_KEYS,
        )?;
    }
    Ok(())
}

async fn get_matches(c: Ctx) -> CheckResult {
    let (slug, rec) = c.new_build().await?;
    same(
        "GET /builds/{slug} vs create response",
        &c.record(Res::Build, &slug).await?,
        &rec,
    )?;
    Ok(())
}

pub async fn get_unknown(c: Ctx, res: Res) -> CheckResult {
    let id = res.unknown_id();
    let r = c.get(&res.path(&id)).send().await?;
    r.error_msg(404, "not-found", &res.unknown_msg(&id))?;
    Ok(())
}

// ── append ──────────────────────────────────────────────────────────────────

async fn append_shape(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let ev = res.other_event();
    let r = c
        .post(&format!("{}/events", res.path(&id)), &ev)
        .send()
        .await?;
    let env = r.json_status(201)?;
    let keys = [res.key(), "seq", "ts", "actor", "type", "payload"];
    shape("event envelope", &env, &keys, &keys)?;
    ensure!(
        env[res.key()] == json!(id),
        "{}",
        r.fail(format!("{} = {id:?}", res.key()))
    );
    ensure!(
        env["seq"].is_u64() && env["seq"] == json!(1),
        "{}",
        r.fail("integer seq 1")
    );
    time_of("event envelope", &env, "ts")?;
    same("envelope actor", &env["actor"], &ev["actor"])?;
    same("envelope type", &env["type"], &ev["type"])?;
    same("envelope payload", &env["payload"], &ev["payload"])?;
    let listed = c.events(res, &id, "").await?;
    ensure!(
        listed.len() == 1,
        "expected 1 event after one append; got {}",
        listed.len()
    );
    same("read-back envelope", &listed[0], &env)?;
    Ok(())
}

async fn seq_starts(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    for want in 1..=3 {
        let env = c.append(res, &id, &res.simple_event()).await?;
        ensure!(
            env["seq"] == json!(want),
            "append #{want} to a fresh stream: expected seq {want}; got {}",
            env["seq"]
        );
    }
    Ok(())
}

async fn seq_independent(c: Ctx, res: Res) -> CheckResult {
    let a = c.create(res).await?;
    let b = c.create(res).await?;
    c.append_n(res, &a, 3).await?;
    let env = c.append(res, &b, &res.simple_event()).await?;
    ensure!(
        env["seq"] == json!(1),
        "first append to a second resource: expected seq 1; got {}",
        env["seq"]
    );
    let env = c.append(res, &a, &res.simple_event()).await?;
    ensure!(
        env["seq"] == json!(4),
        "fourth append to the first resource: expected seq 4; got {}",
        env["seq"]
    );
    Ok(())
}

async fn order_preserved(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let mut sent = Vec::new();
    for i in 0..5 {
        let ev = if i % 2 == 0 {
            res.simple_event()
        } else {
            res.other_event()
        };
        c.append(res, &id, &ev).await?;
        sent.push(ev["type"].clone());
    }
    let got: Vec<Value> = c
        .events(res, &id, "")
        .await?
        .iter()
        .map(|e| e["type"].clone())
        .collect();
    ensure!(
        got == sent,
        "event types read back out of append order: sent {sent:?}; got {got:?}"
    );
    let seqs = c.seqs(res, &id).await?;
    ensure!(
        seqs == vec![1, 2, 3, 4, 5],
        "expected seqs 1..5; got {seqs:?}"
    );
    Ok(())
}

async fn append_unknown(c: Ctx, res: Res) -> CheckResult {
    let id = res.unknown_id();
    let r = c
        .post(&format!("{}/events", res.path(&id)), &res.simple_event())
        .send()
        .await?;
    r.error_msg(404, "not-found", &res.unknown_msg(&id))?;
    let g = c.get(&res.path(&id)).send().await?;
    ensure!(
        g.status == 404,
        "{}",
        g.fail("404: appending to an unknown resource must not create it")
    );
    Ok(())
}

// ── conditional append ──────────────────────────────────────────────────────

fn cond_path(slug: &str) -> String {
    format!("/builds/{}/events/conditional", enc(slug))
}

async fn cond_empty(c: Ctx) -> CheckResult {
    let (slug, _) = c.new_build().await?;
    let ev = build_event("observation");
    let r = c
        .post(&cond_path(&slug), &json!({"expectedSeq": 0, "event": ev}))
        .send()
        .await?;
    let env = r.json_status(201)?;
    ensure!(
        env["seq"] == json!(1) && env["build"] == json!(slug),
        "{}",
        r.fail("201 envelope with seq 1")
    );
    same(
        "conditional envelope payload",
        &env["payload"],
        &ev["payload"],
    )?;
    Ok(())
}

async fn cond_current(c: Ctx) -> CheckResult {
    let (slug, _) = c.new_build().await?;
    c.append_n(Res::Build, &slug, 2).await?;
    let r = c
        .post(
            &cond_path(&slug),
            &json!({"expectedSeq": 2, "event": build_event("pauseRequested")}),
        )
        .send()
        .await?;
    let env = r.json_status(201)?;
    ensure!(
        env["seq"] == json!(3),
        "{}",
        r.fail("201 envelope with seq 3")
    );
    Ok(())
}

async fn cond_stale_null(c: Ctx) -> CheckResult {
    let (slug, _) = c.new_build().await?;
    c.append_n(Res::Build, &slug, 2).await?;
    let r = c
        .post(
            &cond_path(&slug),
            &json!({"expectedSeq": 1, "event": build_event("observation")}),
        )
        .send()
        .await?;
    let v = r.json_status(200)?;
    ensure!(
        v.is_null(),
        "{}",
        r.fail("200 null for a stale expectedSeq")
    );
    Ok(())
}

async fn cond_stale_no_seq(c: Ctx) -> CheckResult {
    let (slug, _) = c.new_build().await?;
    c.append_n(Res::Build, &slug, 1).await?;
    let before = c.record(Res::Build, &slug).await?;
    let r = c
        .post(
            &cond_path(&slug),
            &json!({"expectedSeq": 0, "event": build_event("observation")}),
        )
        .send()
        .await?;
    ensure!(r.json_status(200)?.is_null(), "{}", r.fail("200 null"));
    let seqs = c.seqs(Res::Build, &slug).await?;
    ensure!(
        seqs == vec![1],
        "a stale conditional append must not append; events now {seqs:?}"
    );
    let after = c.record(Res::Build, &slug).await?;
    same("record after a stale conditional append", &after, &before)?;
    let env = c
        .append(Res::Build, &slug, &build_event("observation"))
        .await?;
    ensure!(
        env["seq"] == json!(2),
        "next append after a stale comparison: expected seq 2; got {}",
        env["seq"]
    );
    Ok(())
}

async fn cond_ahead(c: Ctx) -> CheckResult {
    let (slug, _) = c.new_build().await?;
    let r = c
        .post(
            &cond_path(&slug),
            &json!({"expectedSeq": 5, "event": build_event("observation")}),
        )
        .send()
        .await?;
    ensure!(
        r.json_status(200)?.is_null(),
        "{}",
        r.fail("200 null when expectedSeq is ahead of the stream")
    );
    c.no_events(Res::Build, &slug, "an expectedSeq miss appended an event")
        .await?;
    Ok(())
}

async fn cond_invalid_stale(c: Ctx) -> CheckResult {
    let (slug, _) = c.new_build().await?;
    c.append_n(Res::Build, &slug, 1).await?;
    let bad = json!({"actor": {"kind": "kernel"}, "type": "observation.recorded", "payload": {"id": "x"}});
    let r = c
        .post(&cond_path(&slug), &json!({"expectedSeq": 0, "event": bad}))
        .send()
        .await?;
    let msg = r.e422()?;
    ensure!(
        msg.starts_with("invalid payload for \"observation.recorded\": "),
        "{}",
        r.fail("422 with message `invalid payload for \"observation.recorded\": …`")
    );
    Ok(())
}

async fn cond_actor_stale(c: Ctx) -> CheckResult {
    let (slug, _) = c.new_build().await?;
    c.append_n(Res::Build, &slug, 1).await?;
    let mut bad = build_event("observation");
    bad["actor"] = json!({"kind": "human", "user": "alice"});
    let r = c
        .post(&cond_path(&slug), &json!({"expectedSeq": 0, "event": bad}))
        .send()
        .await?;
    r.error_msg(
        422,
        "validation",
        "actor kind \"human\" may not emit \"observation.recorded\" (allowed: kernel, agent)",
    )?;
    Ok(())
}

async fn cond_rejects(c: Ctx, body: Value) -> CheckResult {
    let (slug, _) = c.new_build().await?;
    let text = body
        .to_string()
        .replace("\"EVENT\"", &build_event("observation").to_string());
    let r = c.post_raw(&cond_path(&slug), text).send().await?;
    r.e400()?;
    c.no_events(
        Res::Build,
        &slug,
        "a 400-rejected conditional append wrote an event",
    )
    .await?;
    Ok(())
}

async fn cond_unknown(c: Ctx) -> CheckResult {
    let slug = Res::Build.unknown_id();
    let r = c
        .post(
            &cond_path(&slug),
            &json!({"expectedSeq": 0, "event": build_event("observation")}),
        )
        .send()
        .await?;
    r.error_msg(404, "not-found", &Res::Build.unknown_msg(&slug))?;
    Ok(())
}

// ── event reads ─────────────────────────────────────────────────────────────

async fn events_empty(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let r = c.get(&format!("{}/events", res.path(&id))).send().await?;
    let v = r.json_status(200)?;
    ensure!(
        v == json!([]),
        "{}",
        r.fail("[] for a stream with no events")
    );
    Ok(())
}

async fn events_all(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let mut envs = Vec::new();
    for _ in 0..3 {
        envs.push(c.append(res, &id, &res.simple_event()).await?);
    }
    let got = c.events(res, &id, "").await?;
    same(
        "all events",
        &Value::Array(got),
        &Value::Array(envs.clone()),
    )?;
    let got = c.events(res, &id, "?since=0").await?;
    same("events since=0", &Value::Array(got), &Value::Array(envs))?;
    Ok(())
}

async fn since_strict(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    c.append_n(res, &id, 3).await?;
    for (since, want) in [(1, vec![2, 3]), (2, vec![3]), (3, vec![])] {
        let got: Vec<i64> = c
            .events(res, &id, &format!("?since={since}"))
            .await?
            .iter()
            .map(|e| e["seq"].as_i64().unwrap_or(-1))
            .collect();
        ensure!(
            got == want,
            "GET events?since={since}: expected seqs {want:?} (strictly greater); got {got:?}"
        );
    }
    Ok(())
}

async fn since_beyond(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    c.append_n(res, &id, 2).await?;
    let got = c.events(res, &id, "?since=99").await?;
    ensure!(
        got.is_empty(),
        "since beyond the tail: expected []; got {} events",
        got.len()
    );
    Ok(())
}

async fn numeric_order(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    c.append_n(res, &id, 12).await?;
    let seqs = c.seqs(res, &id).await?;
    ensure!(
        seqs == (1..=12).collect::<Vec<i64>>(),
        "12 events must read back in numeric sequence order; got {seqs:?}"
    );
    let tail: Vec<i64> = c
        .events(res, &id, "?since=9")
        .await?
        .iter()
        .map(|e| e["seq"].as_i64().unwrap_or(-1))
        .collect();
    ensure!(
        tail == vec![10, 11, 12],
        "since=9 compares numerically: expected [10, 11, 12]; got {tail:?}"
    );
    Ok(())
}

async fn events_unknown(c: Ctx, res: Res) -> CheckResult {
    let id = res.unknown_id();
    let r = c.get(&format!("{}/events", res.path(&id))).send().await?;
    r.error_msg(404, "not-found", &res.unknown_msg(&id))?;
    Ok(())
}

async fn since_ok(c: Ctx, res: Res, raw: &'static str, want: &'static [i64]) -> CheckResult {
    let id = c.with_events(res, 4).await?;
    let r = c
        .get(&format!("{}/events?since={raw}", res.path(&id)))
        .send()
        .await?;
    let v = r.json_status(200)?;
    let got: Vec<i64> = v
        .as_array()
        .ok_or_else(|| r.fail("an array"))?
        .iter()
        .map(|e| e["seq"].as_i64().unwrap_or(-1))
        .collect();
    ensure!(
        got == want,
        "{}",
        r.fail(format!(
            "200 with seqs {want:?} (since parsed by JavaScript Number()); seqs were {got:?}"
        ))
    );
    Ok(())
}

async fn since_rejects(c: Ctx, res: Res, raw: &'static str) -> CheckResult {
    let id = c.with_events(res, 1).await?;
    c.get(&format!("{}/events?since={raw}", res.path(&id)))
        .send()
        .await?
        .e400()?;
    Ok(())
}

// ── bounded wait ────────────────────────────────────────────────────────────

/// `since=<n>&` past a new resource's initial events; nothing for builds
/// and repositories, which start empty.
fn past_initial(res: Res) -> String {
    match res.initial_events() {
        0 => String::new(),
        n => format!("since={n}&"),
    }
}

async fn wait_zero(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let r = c
        .get(&format!(
            "{}/events?{}wait=0",
            res.path(&id),
            past_initial(res)
        ))
        .send()
        .await?;
    ensure!(r.json_status(200)? == json!([]), "{}", r.fail("200 []"));
    ensure!(
        r.elapsed < Duration::from_secs(3),
        "wait=0 must not hold the request; took {:?}",
        r.elapsed
    );
    Ok(())
}

async fn wait_empty_tail(c: Ctx, res: Res) -> CheckResult {
    let id = c.with_events(res, 1).await?;
    let r = c
        .get(&format!("{}/events?since=1&wait=1", res.path(&id)))
        .send()
        .await?;
    ensure!(
        r.json_status(200)? == json!([]),
        "{}",
        r.fail("200 [] at the bound")
    );
    ensure!(
        r.elapsed < Duration::from_secs(4),
        "wait=1 held the request for {:?} (bound is 1 s)",
        r.elapsed
    );
    Ok(())
}

async fn wait_existing(c: Ctx, res: Res) -> CheckResult {
    let id = c.with_events(res, 2).await?;
    let r = c
        .get(&format!("{}/events?since=1&wait=5", res.path(&id)))
        .send()
        .await?;
    let v = r.json_status(200)?;
    ensure!(
        v.as_array().map(Vec::len) == Some(1),
        "{}",
        r.fail("the one newer event")
    );
    ensure!(
        r.elapsed < Duration::from_secs(4),
        "a newer event existed, so wait=5 must answer immediately; took {:?}",
        r.elapsed
    );
    Ok(())
}

async fn wait_wakes(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let c2 = c.clone();
    let since = res.initial_events();
    let path = format!("{}/events?since={since}&wait=5", res.path(&id));
    let reader = tokio::spawn(async move { c2.get(&path).send().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let start = Instant::now();
    let env = c.append(res, &id, &res.simple_event()).await?;
    let r = reader
        .await
        .map_err(|e| format!("reader task failed: {e}"))??;
    let v = r.json_status(200)?;
    let arr = v.as_array().ok_or_else(|| r.fail("an array"))?;
    // A server may answer before the bound (even immediately with []); if it
    // held the request, it must deliver the appended event.
    if !arr.is_empty() {
        same("held read result", &v, &json!([env]))?;
    }
    // Woken by the append, the read must not run to the 5 s bound.
    if !arr.is_empty() {
        ensure!(
            start.elapsed() < Duration::from_millis(4500),
            "the held read returned {:?} after the append; it should wake on the append, well before the 5 s bound",
            start.elapsed()
        );
    }
    Ok(())
}

async fn wait_huge(c: Ctx, res: Res) -> CheckResult {
    let id = c.with_events(res, 1).await?;
    for raw in ["3600", "99999999999999999999999"] {
        let r = c
            .get(&format!("{}/events?wait={raw}", res.path(&id)))
            .send()
            .await?;
        let v = r.json_status(200)?;
        ensure!(
            v.as_array().map(Vec::len) == Some(1),
            "{}",
            r.fail("200 with the event (large waits are clamped, not rejected)")
        );
    }
    Ok(())
}

async fn wait_identity(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let r = c
        .get(&format!("{}/events?wait=5", res.path(&id)))
        .version(Some("0.0.1"))
        .send()
        .await?;
    r.error(409, "conflict")?;
    ensure!(
        r.elapsed < Duration::from_secs(4),
        "a 409 identity failure must be answered immediately; took {:?}",
        r.elapsed
    );
    Ok(())
}

async fn wait_unknown(c: Ctx, res: Res) -> CheckResult {
    let id = res.unknown_id();
    let r = c
        .get(&format!("{}/events?wait=5", res.path(&id)))
        .send()
        .await?;
    r.error_msg(404, "not-found", &res.unknown_msg(&id))?;
    ensure!(
        r.elapsed < Duration::from_secs(4),
        "an unknown resource must be answered immediately; took {:?}",
        r.elapsed
    );
    Ok(())
}

async fn wait_rejects(c: Ctx, res: Res, raw: &'static str) -> CheckResult {
    let id = c.create(res).await?;
    c.get(&format!("{}/events?wait={raw}", res.path(&id)))
        .send()
        .await?
        .e400()?;
    Ok(())
}
