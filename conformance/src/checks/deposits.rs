//! Section 8, atomic deposits: response shape and order, negative placeholder
//! substitution (exact two-key `{kind, rev}` objects only, deposited kind wins,
//! nested objects), out-of-range placeholders, and all-or-nothing visibility.

use serde_json::{Value, json};

use super::{CheckResult, Failure, Registry};
use crate::client::{Ctx, Res, same, shape};
use crate::ensure;
use crate::fixtures::{build_event, repo_event};
use crate::util::{b64, sha256_hex, unb64};

pub fn register(r: &mut Registry) {
    for res in [Res::Build, Res::Repo] {
        let s = "8";
        let p = format!("s8.{}", res.key());
        r.add(format!("{p}.response_shape"), s, move |c| {
            response_shape(c, res)
        });
        r.add(format!("{p}.placeholder_substituted"), s, move |c| {
            substituted(c, res)
        });
        r.add(format!("{p}.validated_payload_stored"), s, move |c| {
            validated_payload(c, res)
        });
        r.add(
            format!("{p}.placeholder_index_maps_to_request_order"),
            s,
            move |c| index_order(c, res),
        );
        r.add(
            format!("{p}.same_kind_twice_consecutive_revisions"),
            s,
            move |c| same_kind_twice(c, res),
        );
        r.add(format!("{p}.deposited_kind_wins"), s, move |c| {
            kind_wins(c, res)
        });
        r.add(format!("{p}.nonnegative_refs_untouched"), s, move |c| {
            nonnegative_untouched(c, res)
        });
        r.add(format!("{p}.extra_keys_not_replaced_422"), s, move |c| {
            not_replaced(c, res, json!({"kind": "plan", "rev": -1, "note": "x"}))
        });
        r.add(
            format!("{p}.non_integer_rev_not_replaced_422"),
            s,
            move |c| not_replaced(c, res, json!({"kind": "plan", "rev": -1.5})),
        );
        r.add(format!("{p}.string_rev_not_replaced_422"), s, move |c| {
            not_replaced(c, res, json!({"kind": "plan", "rev": "-1"}))
        });
        r.add(
            format!("{p}.non_string_kind_not_replaced_422"),
            s,
            move |c| not_replaced(c, res, json!({"kind": 5, "rev": -1})),
        );
        r.add(format!("{p}.out_of_range_placeholder_422"), s, move |c| {
            not_replaced(c, res, json!({"kind": "plan", "rev": -2}))
        });
        r.add(format!("{p}.invalid_event_nothing_written"), s, move |c| {
            invalid_event(c, res)
        });
        r.add(
            format!("{p}.failure_consumes_no_revision_or_seq"),
            s,
            move |c| failure_consumes_nothing(c, res),
        );
        r.add(format!("{p}.bad_base64_400_nothing_written"), s, move |c| {
            bad_base64(c, res)
        });
        let bad: [(&str, Value); 6] = [
            ("missing_event", json!({"artifacts": []})),
            ("missing_artifacts", json!({"event": "EVENT"})),
            (
                "artifacts_not_array",
                json!({"artifacts": {}, "event": "EVENT"}),
            ),
            (
                "artifact_missing_kind",
                json!({"artifacts": [{"contentBase64": "YQ=="}], "event": "EVENT"}),
            ),
            (
                "artifact_empty_kind",
                json!({"artifacts": [{"kind": "", "contentBase64": "YQ=="}], "event": "EVENT"}),
            ),
            (
                "event_type_missing",
                json!({"artifacts": [{"kind": "plan", "contentBase64": "YQ=="}], "event": {"actor": {"kind": "kernel"}, "payload": {}}}),
            ),
        ];
        let more: [(&str, Value); 4] = [
            (
                "artifact_metadata_array",
                json!({"artifacts": [{"kind": "plan", "contentBase64": "YQ==", "metadata": [1]}], "event": "EVENT"}),
            ),
            (
                "artifact_not_object",
                json!({"artifacts": ["YQ=="], "event": "EVENT"}),
            ),
            (
                "event_type_empty",
                json!({"artifacts": [{"kind": "plan", "contentBase64": "YQ=="}], "event": {"actor": {"kind": "kernel"}, "type": "", "payload": {}}}),
            ),
            ("body_array", json!([{"artifacts": [], "event": "EVENT"}])),
        ];
        for (name, body) in bad.into_iter().chain(more) {
            r.add(format!("{p}.rejects_{name}"), s, move |c| {
                bad_body(c, res, body.clone())
            });
        }
        r.add(format!("{p}.invalid_json_400"), s, move |c| {
            invalid_json(c, res)
        });
        r.add(format!("{p}.artifacts_readable_after"), s, move |c| {
            readable_after(c, res)
        });
        r.add(format!("{p}.zero_artifacts_appends_event"), s, move |c| {
            zero_artifacts(c, res)
        });
        r.add(format!("{p}.unknown_resource_404"), s, move |c| {
            unknown(c, res)
        });
    }
    r.add("s8.build.nested_object_placeholder", "8", nested);
    r.add(
        "s8.repo.two_placeholders_in_one_payload",
        "8",
        repo_two_refs,
    );
    r.add("s8.repo.same_placeholder_twice", "8", repo_same_twice);
}

fn art(kind: &str, bytes: &[u8]) -> Value {
    json!({"kind": kind, "contentBase64": b64(bytes)})
}

async fn response_shape(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let body = json!({
        "artifacts": [{"kind": "plan", "contentBase64": b64(b"# Plan"), "metadata": {"round": 1}}],
        "event": res.ref_event(json!({"kind": "plan", "rev": -1})),
    });
    let r = c.deposit(res, &id, &body).await?;
    let v = r.json_status(201)?;
    shape(
        "deposit response",
        &v,
        &["event", "artifacts"],
        &["event", "artifacts"],
    )?;
    let ev_keys = [res.key(), "seq", "ts", "actor", "type", "payload"];
    shape("deposit event", &v["event"], &ev_keys, &ev_keys)?;
    ensure!(
        v["event"]["seq"] == json!(1) && v["event"][res.key()] == json!(id),
        "{}",
        r.fail("event seq 1 on the addressed resource")
    );
    let arts = v["artifacts"]
        .as_array()
        .ok_or_else(|| r.fail("artifacts array"))?;
    ensure!(arts.len() == 1, "{}", r.fail("one artifact meta"));
    let meta_keys = [
        res.key(),
        "kind",
        "revision",
        "blobRef",
        "metadata",
        "createdAt",
    ];
    shape("deposit artifact meta", &arts[0], &meta_keys, &meta_keys)?;
    ensure!(
        arts[0]["blobRef"] == json!(sha256_hex(b"# Plan")),
        "{}",
        r.fail("blobRef = sha256 of the bytes")
    );
    same(
        "deposit artifact metadata",
        &arts[0]["metadata"],
        &json!({"round": 1}),
    )?;
    same(
        "substituted ref",
        &v["event"]["payload"]["artifact"],
        &json!({"kind": "plan", "rev": 0}),
    )?;
    let events = c.events(res, &id, "").await?;
    same(
        "event read back after deposit",
        &json!(events),
        &json!([v["event"]]),
    )?;
    Ok(())
}

async fn substituted(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    c.put_artifact(res, &id, "plan", b"r0", None).await?;
    c.put_artifact(res, &id, "plan", b"r1", None).await?;
    let body = json!({"artifacts": [art("plan", b"r2")], "event": res.ref_event(json!({"kind": "plan", "rev": -1}))});
    let r = c.deposit(res, &id, &body).await?;
    let v = r.json_status(201)?;
    ensure!(
        v["artifacts"][0]["revision"] == json!(2),
        "{}",
        r.fail("artifact revision 2")
    );
    same(
        &format!("placeholder -1 (sent {})", r.sent),
        &v["event"]["payload"]["artifact"],
        &json!({"kind": "plan", "rev": 2}),
    )?;
    Ok(())
}

/// Section 3's envelope carries the *validated* payload, and section 9 has
/// the deposit validate after substitution: a review verdict whose finding
/// omits `persists` is stored with Autobuild's default `persists: []` (and
/// the substituted artifact), in the response and when read back.
async fn validated_payload(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let agent = json!({"kind": "agent", "role": "review", "session": "s_conformance"});
    let finding = json!({"id": "f_1", "severity": "minor", "summary": "no persists sent"});
    let mut payload = json!({
        "round": 1,
        "verdict": "revise",
        "findings": [finding],
        "artifact": {"kind": "review", "rev": -1},
    });
    let event_type = match res {
        Res::Build => "plan-review.verdict",
        Res::Repo => {
            payload["run"] = json!("h_conformance");
            "harvest.review.verdict"
        }
        Res::Session => return Err(Failure::Skip("a build and repository check".into())),
    };
    let body = json!({
        "artifacts": [art("review", b"verdict")],
        "event": {"actor": agent, "type": event_type, "payload": payload},
    });
    let r = c.deposit(res, &id, &body).await?;
    let v = r.json_status(201)?;
    let mut want = body["event"]["payload"].clone();
    want["artifact"] = json!({"kind": "review", "rev": 0});
    want["findings"][0]["persists"] = json!([]);
    same(
        &format!("deposited payload (sent {})", r.sent),
        &v["event"]["payload"],
        &want,
    )?;
    let events = c.events(res, &id, "").await?;
    let stored = events.last().ok_or("the deposit appended no event")?;
    same("payload read back", &stored["payload"], &want)?;
    Ok(())
}

async fn index_order(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    c.put_artifact(res, &id, "second", b"pre", None).await?;
    let body = json!({
        "artifacts": [art("first", b"a"), art("second", b"b"), art("third", b"c")],
        "event": res.ref_event(json!({"kind": "second", "rev": -2})),
    });
    let r = c.deposit(res, &id, &body).await?;
    let v = r.json_status(201)?;
    let got: Vec<(Value, Value)> = v["artifacts"]
        .as_array()
        .ok_or_else(|| r.fail("artifacts array"))?
        .iter()
        .map(|m| (m["kind"].clone(), m["revision"].clone()))
        .collect();
    let want = vec![
        (json!("first"), json!(0)),
        (json!("second"), json!(1)),
        (json!("third"), json!(0)),
    ];
    ensure!(
        got == want,
        "{}",
        r.fail(format!("artifacts in request order {want:?}; were {got:?}"))
    );
    same(
        "placeholder -2 → second request artifact",
        &v["event"]["payload"]["artifact"],
        &json!({"kind": "second", "rev": 1}),
    )?;
    Ok(())
}

async fn same_kind_twice(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    c.put_artifact(res, &id, "plan", b"r0", None).await?;
    let body = json!({
        "artifacts": [art("plan", b"r1"), art("plan", b"r2")],
        "event": res.ref_event(json!({"kind": "plan", "rev": -2})),
    });
    let r = c.deposit(res, &id, &body).await?;
    let v = r.json_status(201)?;
    let revs: Vec<Value> = v["artifacts"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|m| m["revision"].clone())
        .collect();
    ensure!(
        revs == vec![json!(1), json!(2)],
        "{}",
        r.fail("revisions [1, 2] for two same-kind artifacts")
    );
    same(
        "placeholder -2",
        &v["event"]["payload"]["artifact"],
        &json!({"kind": "plan", "rev": 2}),
    )?;
    Ok(())
}

async fn kind_wins(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let body = json!({"artifacts": [art("plan", b"p")], "event": res.ref_event(json!({"kind": "not-the-kind", "rev": -1}))});
    let r = c.deposit(res, &id, &body).await?;
    let v = r.json_status(201)?;
    same(
        &format!(
            "placeholder kind replaced by the deposited kind (sent {})",
            r.sent
        ),
        &v["event"]["payload"]["artifact"],
        &json!({"kind": "plan", "rev": 0}),
    )?;
    Ok(())
}

async fn nonnegative_untouched(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    c.put_artifact(res, &id, "spec", b"s", None).await?;
    let body = json!({"artifacts": [art("plan", b"p")], "event": res.ref_event(json!({"kind": "spec", "rev": 0}))});
    let r = c.deposit(res, &id, &body).await?;
    let v = r.json_status(201)?;
    same(
        "a nonnegative ref is not a placeholder",
        &v["event"]["payload"]["artifact"],
        &json!({"kind": "spec", "rev": 0}),
    )?;
    Ok(())
}

/// The placeholder-like value is left unchanged, so the catalog's artifact-ref
/// schema rejects it: 422, and nothing is written.
async fn not_replaced(c: Ctx, res: Res, placeholder: Value) -> CheckResult {
    let id = c.create(res).await?;
    let body = json!({"artifacts": [art("plan", b"p")], "event": res.ref_event(placeholder)});
    let r = c.deposit(res, &id, &body).await?;
    let msg = r.e422()?;
    ensure!(
        msg.starts_with("invalid payload for "),
        "{}",
        r.fail("422 `invalid payload for \"…\": …` (the value is not substituted)")
    );
    nothing_written(&c, res, &id).await
}

async fn nothing_written(c: &Ctx, res: Res, id: &str) -> CheckResult {
    let list = c.list_artifacts(res, id, "").await?;
    ensure!(
        list.is_empty(),
        "a failed deposit exposed artifact metadata: {list:?}"
    );
    let got = c.get_artifact(res, id, "?kind=plan").await?;
    ensure!(
        got.is_null(),
        "a failed deposit's artifact is readable: {got}"
    );
    let seqs = c.seqs(res, id).await?;
    ensure!(seqs.is_empty(), "a failed deposit appended events {seqs:?}");
    Ok(())
}

async fn invalid_event(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let body = json!({"artifacts": [art("plan", b"p")], "event": res.disallowed_actor_event()});
    let r = c.deposit(res, &id, &body).await?;
    let msg = r.e422()?;
    ensure!(
        msg.starts_with("actor kind \"human\" may not emit "),
        "{}",
        r.fail("422 `actor kind \"human\" may not emit …`")
    );
    nothing_written(&c, res, &id).await
}

async fn failure_consumes_nothing(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    c.put_artifact(res, &id, "plan", b"r0", None).await?;
    c.append(res, &id, &res.simple_event()).await?;
    let before = c.record(res, &id).await?;
    let bad = json!({"artifacts": [art("plan", b"bad")], "event": res.disallowed_actor_event()});
    c.deposit(res, &id, &bad).await?.e422()?;
    same(
        "record after a failed deposit",
        &c.record(res, &id).await?,
        &before,
    )?;
    let list = c.list_artifacts(res, &id, "?kind=plan").await?;
    ensure!(
        list.len() == 1,
        "a failed deposit exposed metadata: {list:?}"
    );
    let good = json!({"artifacts": [art("plan", b"good")], "event": res.ref_event(json!({"kind": "plan", "rev": -1}))});
    let r = c.deposit(res, &id, &good).await?;
    let v = r.json_status(201)?;
    ensure!(
        v["artifacts"][0]["revision"] == json!(1),
        "{}",
        r.fail("revision 1: the failed deposit must not consume a revision")
    );
    ensure!(
        v["event"]["seq"] == json!(2),
        "{}",
        r.fail("seq 2: the failed deposit must not consume a sequence")
    );
    Ok(())
}

async fn bad_base64(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let body = json!({
        "artifacts": [art("plan", b"fine"), {"kind": "other", "contentBase64": "YR=="}],
        "event": res.ref_event(json!({"kind": "plan", "rev": -1})),
    });
    c.deposit(res, &id, &body).await?.e400()?;
    nothing_written(&c, res, &id).await
}

async fn bad_body(c: Ctx, res: Res, body: Value) -> CheckResult {
    let id = c.create(res).await?;
    let ev = res
        .ref_event(json!({"kind": "plan", "rev": -1}))
        .to_string();
    let text = body.to_string().replace("\"EVENT\"", &ev);
    c.post_raw(&format!("{}/deposits", res.path(&id)), text)
        .send()
        .await?
        .e400()?;
    nothing_written(&c, res, &id).await
}

async fn invalid_json(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let r = c
        .post_raw(&format!("{}/deposits", res.path(&id)), "{\"artifacts\": [")
        .send()
        .await?;
    r.error_msg(400, "validation", "request body is not valid JSON")?;
    Ok(())
}

async fn readable_after(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let md = json!({"round": 2, "nested": {"k": [1, null]}});
    let body = json!({
        "artifacts": [{"kind": "plan", "contentBase64": b64(b"plan bytes"), "metadata": md}, art("notes", b"n")],
        "event": res.ref_event(json!({"kind": "plan", "rev": -1})),
    });
    let v = c.deposit(res, &id, &body).await?.json_status(201)?;
    let got = c.get_artifact(res, &id, "?kind=plan&rev=0").await?;
    same("deposited meta read back", &got["meta"], &v["artifacts"][0])?;
    ensure!(
        got["contentBase64"].as_str().and_then(unb64).as_deref() == Some(&b"plan bytes"[..]),
        "deposited bytes read back as {}",
        got["contentBase64"]
    );
    same(
        "deposited artifact without metadata",
        &v["artifacts"][1]["metadata"],
        &json!({}),
    )?;
    let list = c.list_artifacts(res, &id, "").await?;
    same(
        "artifact-list after deposit",
        &json!(list),
        &json!([v["artifacts"][1], v["artifacts"][0]]),
    )?;
    Ok(())
}

async fn zero_artifacts(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let ev = res.simple_event();
    let r = c
        .deposit(res, &id, &json!({"artifacts": [], "event": ev}))
        .await?;
    let v = r.json_status(201)?;
    ensure!(
        v["artifacts"] == json!([]) && v["event"]["seq"] == json!(1),
        "{}",
        r.fail("201 {event: seq 1, artifacts: []}")
    );
    same("event payload", &v["event"]["payload"], &ev["payload"])?;
    Ok(())
}

async fn unknown(c: Ctx, res: Res) -> CheckResult {
    let id = res.unknown_id();
    let body = json!({"artifacts": [art("plan", b"p")], "event": res.ref_event(json!({"kind": "plan", "rev": -1}))});
    c.deposit(res, &id, &body)
        .await?
        .error_msg(404, "not-found", &res.unknown_msg(&id))?;
    let g = c.get(&res.path(&id)).send().await?;
    ensure!(
        g.status == 404,
        "{}",
        g.fail("404: a deposit must not create the resource")
    );
    Ok(())
}

async fn nested(c: Ctx) -> CheckResult {
    let res = Res::Build;
    let id = c.create(res).await?;
    c.put_artifact(res, &id, "verify-report", b"r0", None)
        .await?;
    let body = json!({"artifacts": [art("verify-report", b"r1")], "event": build_event("implementStartedFeedback")});
    let r = c.deposit(res, &id, &body).await?;
    let v = r.json_status(201)?;
    same(
        &format!(
            "placeholder nested in payload.feedback.verify.report (sent {})",
            r.sent
        ),
        &v["event"]["payload"]["feedback"]["verify"]["report"],
        &json!({"kind": "verify-report", "rev": 1}),
    )?;
    Ok(())
}

async fn repo_two_refs(c: Ctx) -> CheckResult {
    let res = Res::Repo;
    let id = c.create(res).await?;
    c.put_artifact(res, &id, "conf-effective", b"e0", None)
        .await?;
    let body = json!({
        "artifacts": [art("conf-config", b"c"), art("conf-effective", b"e1")],
        "event": repo_event("configReloaded"),
    });
    let r = c.deposit(res, &id, &body).await?;
    let v = r.json_status(201)?;
    same(
        "payload.artifact (-1)",
        &v["event"]["payload"]["artifact"],
        &json!({"kind": "conf-config", "rev": 0}),
    )?;
    same(
        "payload.effectiveConfig (-2)",
        &v["event"]["payload"]["effectiveConfig"],
        &json!({"kind": "conf-effective", "rev": 1}),
    )?;
    Ok(())
}

async fn repo_same_twice(c: Ctx) -> CheckResult {
    let res = Res::Repo;
    let id = c.create(res).await?;
    let mut ev = repo_event("configReloaded");
    ev["payload"]["effectiveConfig"] = json!({"kind": "x", "rev": -1});
    let body = json!({"artifacts": [art("conf-config", b"c")], "event": ev});
    let r = c.deposit(res, &id, &body).await?;
    let v = r.json_status(201)?;
    let want = json!({"kind": "conf-config", "rev": 0});
    same(
        "payload.artifact (-1)",
        &v["event"]["payload"]["artifact"],
        &want,
    )?;
    same(
        "payload.effectiveConfig (also -1)",
        &v["event"]["payload"]["effectiveConfig"],
        &want,
    )?;
    Ok(())
}
