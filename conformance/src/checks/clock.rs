//! Checks that need the server's test clock (docs/decisions.md, 11): exact record,
//! event and artifact times, `updatedAt` bookkeeping, lease expiry arithmetic
//! and strict expiry (section 10). They run one at a time, after all other
//! checks, and only move the clock forward from the server's current time.

use serde_json::json;

use super::{CheckResult, Registry};
use crate::client::{Ctx, Res, same, time_of};
use crate::ensure;
use crate::util::{b64, format_iso_ms};

pub fn register(r: &mut Registry) {
    for res in [Res::Build, Res::Repo] {
        let s = res.sec();
        let p = format!("s{s}.clock");
        r.add_clock(format!("{p}.record_times_exact"), s, move |c| {
            record_times(c, res)
        });
        r.add_clock(format!("{p}.append_sets_ts_and_updated_at"), s, move |c| {
            append_times(c, res)
        });
        r.add_clock(format!("{p}.artifact_put_times"), s, move |c| {
            put_times(c, res)
        });
        r.add_clock(format!("{p}.deposit_times"), s, move |c| {
            deposit_times(c, res)
        });
        r.add_clock(
            format!("{p}.rejected_writes_keep_updated_at"),
            s,
            move |c| rejected_keep(c, res),
        );
        r.add_clock(
            format!("s10.clock.{}_claim_expires_at_now_plus_ttl", res.key()),
            "10",
            move |c| claim_expiry(c, res),
        );
        r.add_clock(
            format!("s10.clock.{}_expiry_is_strict", res.key()),
            "10",
            move |c| strict_expiry(c, res),
        );
        r.add_clock(
            format!("s10.clock.{}_heartbeat_at_expiry_false", res.key()),
            "10",
            move |c| heartbeat_at_expiry(c, res),
        );
        r.add_clock(
            format!("s10.clock.{}_expired_lease_claimable", res.key()),
            "10",
            move |c| expired_claimable(c, res),
        );
        r.add_clock(
            format!("s10.clock.{}_same_holder_renew_new_ttl", res.key()),
            "10",
            move |c| renew_new_ttl(c, res),
        );
        r.add_clock(
            format!("s10.clock.{}_heartbeat_extends_by_claimed_ttl", res.key()),
            "10",
            move |c| heartbeat_extends(c, res),
        );
        r.add_clock(
            format!("s10.clock.{}_lease_writes_update_updated_at", res.key()),
            "10",
            move |c| lease_updated_at(c, res),
        );
    }
    r.add_clock(
        "s3.clock.stale_conditional_keeps_updated_at",
        "3",
        stale_cond,
    );
    r.add_clock("s4.clock.ensure_keeps_timestamps", "4", ensure_keeps);
}

fn iso(ms: i64) -> serde_json::Value {
    json!(format_iso_ms(ms))
}

async fn record_times(c: Ctx, res: Res) -> CheckResult {
    let t = c.advance(1_000).await?;
    let id = c.create(res).await?;
    let rec = c.record(res, &id).await?;
    ensure!(
        rec["createdAt"] == iso(t) && rec["updatedAt"] == iso(t),
        "record created at test time {}: got createdAt {} updatedAt {}",
        format_iso_ms(t),
        rec["createdAt"],
        rec["updatedAt"]
    );
    Ok(())
}

async fn append_times(c: Ctx, res: Res) -> CheckResult {
    let t0 = c.advance(1_000).await?;
    let id = c.create(res).await?;
    let t1 = t0 + 1_500;
    c.set_clock(t1).await?;
    let env = c.append(res, &id, &res.simple_event()).await?;
    ensure!(
        env["ts"] == iso(t1),
        "event ts must be the server time {}; got {}",
        format_iso_ms(t1),
        env["ts"]
    );
    let rec = c.record(res, &id).await?;
    ensure!(
        rec["updatedAt"] == iso(t1) && rec["createdAt"] == iso(t0),
        "after an append at {}: expected createdAt {} and updatedAt {}; got {rec}",
        format_iso_ms(t1),
        format_iso_ms(t0),
        format_iso_ms(t1)
    );
    Ok(())
}

async fn put_times(c: Ctx, res: Res) -> CheckResult {
    let t0 = c.advance(1_000).await?;
    let id = c.create(res).await?;
    let t1 = t0 + 2_000;
    c.set_clock(t1).await?;
    let meta = c.put_artifact(res, &id, "notes", b"x", None).await?;
    ensure!(
        meta["createdAt"] == iso(t1),
        "artifact createdAt must be {}; got {}",
        format_iso_ms(t1),
        meta["createdAt"]
    );
    let rec = c.record(res, &id).await?;
    ensure!(
        rec["updatedAt"] == iso(t1),
        "an artifact write updates updatedAt to {}; got {rec}",
        format_iso_ms(t1)
    );
    Ok(())
}

async fn deposit_times(c: Ctx, res: Res) -> CheckResult {
    let t0 = c.advance(1_000).await?;
    let id = c.create(res).await?;
    let t1 = t0 + 3_000;
    c.set_clock(t1).await?;
    let body = json!({"artifacts": [{"kind": "plan", "contentBase64": b64(b"p")}], "event": res.ref_event(json!({"kind": "plan", "rev": -1}))});
    let v = c.deposit(res, &id, &body).await?.json_status(201)?;
    ensure!(
        v["event"]["ts"] == iso(t1) && v["artifacts"][0]["createdAt"] == iso(t1),
        "deposit at {}: event ts {} artifact createdAt {}",
        format_iso_ms(t1),
        v["event"]["ts"],
        v["artifacts"][0]["createdAt"]
    );
    let rec = c.record(res, &id).await?;
    ensure!(
        rec["updatedAt"] == iso(t1),
        "a deposit updates updatedAt to {}; got {rec}",
        format_iso_ms(t1)
    );
    Ok(())
}

async fn rejected_keep(c: Ctx, res: Res) -> CheckResult {
    let t0 = c.advance(1_000).await?;
    let id = c.create(res).await?;
    c.set_clock(t0 + 1_000).await?;
    let mut bad = res.simple_event();
    bad["payload"] = json!({"unexpected": true});
    c.post(&format!("{}/events", res.path(&id)), &bad)
        .send()
        .await?
        .e422()?;
    let dep = json!({"artifacts": [{"kind": "plan", "contentBase64": "YQ=="}], "event": res.disallowed_actor_event()});
    c.deposit(res, &id, &dep).await?.e422()?;
    c.post(
        &format!("{}/artifacts", res.path(&id)),
        &json!({"kind": "plan", "contentBase64": "YR=="}),
    )
    .send()
    .await?
    .e400()?;
    let rec = c.record(res, &id).await?;
    ensure!(
        rec["updatedAt"] == iso(t0),
        "rejected writes must not touch updatedAt ({}); got {rec}",
        format_iso_ms(t0)
    );
    Ok(())
}

async fn claim_expiry(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let t = c.advance(1_000).await?;
    ensure!(
        c.claim(res, &id, "runner-1", 60_000).await?,
        "claim returned false"
    );
    let rec = c.record(res, &id).await?;
    same(
        "lease after a claim at T with ttl 60000",
        &rec["lease"],
        &json!({"holder": "runner-1", "expiresAt": format_iso_ms(t + 60_000)}),
    )?;
    ensure!(
        rec["updatedAt"] == iso(t),
        "a successful claim updates updatedAt to {}; got {rec}",
        format_iso_ms(t)
    );
    Ok(())
}

async fn strict_expiry(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let t = c.advance(1_000).await?;
    ensure!(
        c.claim(res, &id, "runner-1", 1_000).await?,
        "claim returned false"
    );
    c.set_clock(t + 999).await?;
    ensure!(
        !c.claim(res, &id, "runner-2", 1_000).await?,
        "1 ms before expiresAt the lease is unexpired: another holder's claim must be false"
    );
    c.set_clock(t + 1_000).await?;
    ensure!(
        c.claim(res, &id, "runner-2", 1_000).await?,
        "at exactly expiresAt (expiresAt <= now) the lease is expired: another holder's claim must be true"
    );
    let rec = c.record(res, &id).await?;
    same(
        "lease after takeover",
        &rec["lease"],
        &json!({"holder": "runner-2", "expiresAt": format_iso_ms(t + 2_000)}),
    )?;
    Ok(())
}

async fn heartbeat_at_expiry(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let t = c.advance(1_000).await?;
    ensure!(
        c.claim(res, &id, "runner-1", 1_000).await?,
        "claim returned false"
    );
    c.set_clock(t + 1_000).await?;
    let before = c.record(res, &id).await?;
    ensure!(
        !c.heartbeat(res, &id, "runner-1").await?,
        "a heartbeat at exactly expiresAt must be false (expired)"
    );
    same(
        "record after an expired heartbeat (no-op)",
        &c.record(res, &id).await?,
        &before,
    )?;
    Ok(())
}

async fn expired_claimable(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let t = c.advance(1_000).await?;
    ensure!(
        c.claim(res, &id, "runner-1", 1_000).await?,
        "claim returned false"
    );
    c.set_clock(t + 5_000).await?;
    ensure!(
        c.claim(res, &id, "runner-2", 7_000).await?,
        "another holder must claim an expired lease"
    );
    let rec = c.record(res, &id).await?;
    same(
        "lease after claiming an expired lease",
        &rec["lease"],
        &json!({"holder": "runner-2", "expiresAt": format_iso_ms(t + 12_000)}),
    )?;
    Ok(())
}

async fn renew_new_ttl(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let t = c.advance(1_000).await?;
    ensure!(
        c.claim(res, &id, "runner-1", 60_000).await?,
        "claim returned false"
    );
    c.set_clock(t + 10).await?;
    ensure!(
        c.claim(res, &id, "runner-1", 5_000).await?,
        "same-holder renewal returned false"
    );
    let rec = c.record(res, &id).await?;
    same(
        "lease after renewal with a shorter TTL",
        &rec["lease"],
        &json!({"holder": "runner-1", "expiresAt": format_iso_ms(t + 10 + 5_000)}),
    )?;
    c.set_clock(t + 20).await?;
    ensure!(
        c.heartbeat(res, &id, "runner-1").await?,
        "heartbeat after renewal returned false"
    );
    let rec = c.record(res, &id).await?;
    same(
        "heartbeat extends by the renewed TTL",
        &rec["lease"]["expiresAt"],
        &iso(t + 20 + 5_000),
    )?;
    Ok(())
}

async fn heartbeat_extends(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let t = c.advance(1_000).await?;
    ensure!(
        c.claim(res, &id, "runner-1", 60_000).await?,
        "claim returned false"
    );
    c.set_clock(t + 30_000).await?;
    // A TTL in the heartbeat body is not accepted: expiry uses the claim's TTL.
    let ok = c
        .lease(
            res,
            &id,
            "heartbeat",
            &json!({"holder": "runner-1", "ttlMs": 1}),
        )
        .await?;
    ensure!(ok, "heartbeat by the unexpired holder returned false");
    let rec = c.record(res, &id).await?;
    same(
        "lease after heartbeat",
        &rec["lease"],
        &json!({"holder": "runner-1", "expiresAt": format_iso_ms(t + 90_000)}),
    )?;
    ensure!(
        rec["heartbeatAt"] == iso(t + 30_000) && rec["updatedAt"] == iso(t + 30_000),
        "heartbeat at {} must set heartbeatAt and updatedAt; got {rec}",
        format_iso_ms(t + 30_000)
    );
    Ok(())
}

async fn lease_updated_at(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let t = c.advance(1_000).await?;
    ensure!(
        c.claim(res, &id, "runner-1", 600_000).await?,
        "claim returned false"
    );
    let mut want = c.record(res, &id).await?;
    ensure!(
        want["updatedAt"] == iso(t),
        "claim at {} must set updatedAt; got {want}",
        format_iso_ms(t)
    );
    c.set_clock(t + 100).await?;
    ensure!(
        !c.claim(res, &id, "runner-2", 1_000).await?,
        "rival claim returned true"
    );
    ensure!(
        !c.heartbeat(res, &id, "runner-2").await?,
        "rival heartbeat returned true"
    );
    ensure!(
        c.release(res, &id, "runner-2").await?,
        "rival release must answer ok:true"
    );
    same(
        "record after failed lease writes (updatedAt unchanged)",
        &c.record(res, &id).await?,
        &want,
    )?;
    c.set_clock(t + 200).await?;
    ensure!(
        c.release(res, &id, "runner-1").await?,
        "holder release must answer ok:true"
    );
    let rec = c.record(res, &id).await?;
    ensure!(
        rec.get("lease").is_none(),
        "lease remains after holder release: {rec}"
    );
    want.as_object_mut().map(|o| o.remove("lease"));
    want["updatedAt"] = iso(t + 200);
    same("record after holder release", &rec, &want)?;
    Ok(())
}

async fn stale_cond(c: Ctx) -> CheckResult {
    let res = Res::Build;
    let id = c.create(res).await?;
    let t0 = c.advance(1_000).await?;
    c.append(res, &id, &res.simple_event()).await?;
    let before = c.record(res, &id).await?;
    ensure!(
        before["updatedAt"] == iso(t0),
        "append at {} must set updatedAt; got {before}",
        format_iso_ms(t0)
    );
    c.set_clock(t0 + 1_000).await?;
    let path = format!("{}/events/conditional", res.path(&id));
    let r = c
        .post(
            &path,
            &json!({"expectedSeq": 0, "event": res.simple_event()}),
        )
        .send()
        .await?;
    ensure!(r.json_status(200)?.is_null(), "{}", r.fail("200 null"));
    same(
        "record after a stale conditional append (updatedAt untouched)",
        &c.record(res, &id).await?,
        &before,
    )?;
    let r = c
        .post(
            &path,
            &json!({"expectedSeq": 1, "event": res.simple_event()}),
        )
        .send()
        .await?;
    let env = r.json_status(201)?;
    ensure!(
        env["ts"] == iso(t0 + 1_000),
        "{}",
        r.fail(format!("ts {}", format_iso_ms(t0 + 1_000)))
    );
    let rec = c.record(res, &id).await?;
    time_of("record", &rec, "updatedAt")?;
    ensure!(
        rec["updatedAt"] == iso(t0 + 1_000),
        "a successful conditional append updates updatedAt; got {rec}"
    );
    Ok(())
}

async fn ensure_keeps(c: Ctx) -> CheckResult {
    let (id, first) = c.new_repo().await?;
    c.advance(5_000).await?;
    let again = c
        .post("/repos", &json!({"repo": id}))
        .send()
        .await?
        .json_status(200)?;
    same(
        "ensureRepo later (timestamps must not be reset)",
        &again,
        &first,
    )?;
    Ok(())
}
