//! Sections 3, 4 and 10, leases without clock control: the claim / heartbeat /
//! release truth table, response shapes, body validation and unknown resources.
//! Exact expiry times and strict expiry live in `clock.rs`.
//!
//! TTLs here are long (one hour or more) so that clock checks, which only move
//! the clock forward by minutes and run after these, cannot expire them.

use serde_json::{Value, json};

use super::{CheckResult, Registry};
use crate::client::{Ctx, Res, same};
use crate::ensure;

const LONG: i64 = 3_600_000;

pub fn register(r: &mut Registry) {
    for res in [Res::Build, Res::Repo] {
        let s = res.sec();
        let p = format!("s{s}.lease");
        r.add(format!("{p}.claim_absent_true"), s, move |c| {
            claim_absent(c, res)
        });
        r.add(format!("{p}.other_holder_rejected"), s, move |c| {
            other_rejected(c, res)
        });
        r.add(format!("{p}.same_holder_renews"), s, move |c| {
            same_renews(c, res)
        });
        r.add(format!("{p}.ttl_zero_immediately_expired"), s, move |c| {
            ttl_zero(c, res)
        });
        r.add(
            format!("{p}.heartbeat_holder_sets_heartbeat_at"),
            s,
            move |c| heartbeat_ok(c, res),
        );
        r.add(format!("{p}.heartbeat_without_lease_false"), s, move |c| {
            heartbeat_none(c, res)
        });
        r.add(format!("{p}.heartbeat_wrong_holder_false"), s, move |c| {
            heartbeat_wrong(c, res)
        });
        r.add(format!("{p}.release_wrong_holder_noop"), s, move |c| {
            release_wrong(c, res)
        });
        r.add(format!("{p}.release_holder_removes"), s, move |c| {
            release_holder(c, res)
        });
        r.add(format!("{p}.release_without_lease_ok"), s, move |c| {
            release_none(c, res)
        });
        let bad_claims: [(&str, Value); 8] = [
            ("missing_ttl", json!({"holder": "h"})),
            ("negative_ttl", json!({"holder": "h", "ttlMs": -1})),
            ("fractional_ttl", json!({"holder": "h", "ttlMs": 1.5})),
            ("string_ttl", json!({"holder": "h", "ttlMs": "1000"})),
            ("missing_holder", json!({"ttlMs": 1000})),
            ("empty_holder", json!({"holder": "", "ttlMs": 1000})),
            ("holder_not_string", json!({"holder": 1, "ttlMs": 1000})),
            ("body_array", json!([{"holder": "h", "ttlMs": 1000}])),
        ];
        for (name, body) in bad_claims {
            r.add(format!("{p}.claim_rejects_{name}"), s, move |c| {
                bad_body(c, res, "claim", body.clone())
            });
        }
        for op in ["heartbeat", "release"] {
            for (name, body) in [
                ("missing_holder", json!({})),
                ("empty_holder", json!({"holder": ""})),
            ] {
                r.add(format!("{p}.{op}_rejects_{name}"), s, move |c| {
                    bad_body(c, res, op, body.clone())
                });
            }
            r.add(format!("{p}.{op}_rejects_invalid_json"), s, move |c| {
                bad_json(c, res, op)
            });
        }
        r.add(format!("{p}.claim_rejects_invalid_json"), s, move |c| {
            bad_json(c, res, "claim")
        });
        r.add(format!("{p}.unknown_resource_404"), s, move |c| {
            unknown(c, res)
        });
    }
}

async fn claim_absent(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let r = c
        .post(
            &format!("{}/lease/claim", res.path(&id)),
            &json!({"holder": "runner-1", "ttlMs": LONG}),
        )
        .send()
        .await?;
    same(
        &format!("claim response (sent {})", r.sent),
        &r.json_status(200)?,
        &json!({"ok": true}),
    )?;
    let rec = c.record(res, &id).await?;
    let lease = rec["lease"]
        .as_object()
        .ok_or_else(|| format!("record after claim has no lease: {rec}"))?;
    ensure!(
        lease.len() == 2
            && rec["lease"]["holder"] == json!("runner-1")
            && rec["lease"]["expiresAt"].is_string(),
        "record lease must be exactly {{holder, expiresAt}}; got {}",
        rec["lease"]
    );
    ensure!(
        rec.get("heartbeatAt").is_none(),
        "a claim must not set heartbeatAt; got {rec}"
    );
    Ok(())
}

async fn other_rejected(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    ensure!(
        c.claim(res, &id, "runner-1", LONG).await?,
        "first claim returned false"
    );
    let before = c.record(res, &id).await?;
    let r = c
        .post(
            &format!("{}/lease/claim", res.path(&id)),
            &json!({"holder": "runner-2", "ttlMs": LONG}),
        )
        .send()
        .await?;
    same(
        &format!("claim by another holder while unexpired (sent {})", r.sent),
        &r.json_status(200)?,
        &json!({"ok": false}),
    )?;
    same(
        "record after a rejected claim",
        &c.record(res, &id).await?,
        &before,
    )?;
    Ok(())
}

async fn same_renews(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    ensure!(
        c.claim(res, &id, "runner-1", LONG).await?,
        "first claim returned false"
    );
    ensure!(
        c.claim(res, &id, "runner-1", 2 * LONG).await?,
        "same-holder claim must renew (true)"
    );
    let rec = c.record(res, &id).await?;
    ensure!(
        rec["lease"]["holder"] == json!("runner-1"),
        "holder after renewal: {}",
        rec["lease"]
    );
    Ok(())
}

async fn ttl_zero(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    ensure!(
        c.claim(res, &id, "runner-1", 0).await?,
        "a zero-TTL claim is valid and must succeed"
    );
    ensure!(
        !c.heartbeat(res, &id, "runner-1").await?,
        "a zero-TTL lease is immediately expired: heartbeat must be false"
    );
    ensure!(
        c.claim(res, &id, "runner-2", LONG).await?,
        "a zero-TTL lease is immediately expired: another holder must be able to claim"
    );
    let rec = c.record(res, &id).await?;
    ensure!(
        rec["lease"]["holder"] == json!("runner-2"),
        "lease holder after takeover: {}",
        rec["lease"]
    );
    Ok(())
}

async fn heartbeat_ok(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    ensure!(
        c.claim(res, &id, "runner-1", LONG).await?,
        "claim returned false"
    );
    let r = c
        .post(
            &format!("{}/lease/heartbeat", res.path(&id)),
            &json!({"holder": "runner-1"}),
        )
        .send()
        .await?;
    same(
        &format!("heartbeat by the holder (sent {})", r.sent),
        &r.json_status(200)?,
        &json!({"ok": true}),
    )?;
    let rec = c.record(res, &id).await?;
    ensure!(
        rec["heartbeatAt"].is_string(),
        "a successful heartbeat must record heartbeatAt; got {rec}"
    );
    Ok(())
}

async fn heartbeat_none(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    ensure!(
        !c.heartbeat(res, &id, "runner-1").await?,
        "heartbeat without a lease must be false"
    );
    let rec = c.record(res, &id).await?;
    ensure!(
        rec.get("heartbeatAt").is_none() && rec.get("lease").is_none(),
        "a failed heartbeat must not write; got {rec}"
    );
    Ok(())
}

async fn heartbeat_wrong(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    ensure!(
        c.claim(res, &id, "runner-1", LONG).await?,
        "claim returned false"
    );
    let before = c.record(res, &id).await?;
    ensure!(
        !c.heartbeat(res, &id, "runner-2").await?,
        "heartbeat by a non-holder must be false"
    );
    same(
        "record after a wrong-holder heartbeat",
        &c.record(res, &id).await?,
        &before,
    )?;
    Ok(())
}

async fn release_wrong(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    ensure!(
        c.claim(res, &id, "runner-1", LONG).await?,
        "claim returned false"
    );
    let before = c.record(res, &id).await?;
    let r = c
        .post(
            &format!("{}/lease/release", res.path(&id)),
            &json!({"holder": "runner-2"}),
        )
        .send()
        .await?;
    same(
        &format!("wrong-holder release (sent {})", r.sent),
        &r.json_status(200)?,
        &json!({"ok": true}),
    )?;
    same(
        "record after a wrong-holder release",
        &c.record(res, &id).await?,
        &before,
    )?;
    ensure!(
        !c.claim(res, &id, "runner-2", LONG).await?,
        "the lease must survive a wrong-holder release"
    );
    Ok(())
}

async fn release_holder(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    ensure!(
        c.claim(res, &id, "runner-1", LONG).await?,
        "claim returned false"
    );
    ensure!(
        c.release(res, &id, "runner-1").await?,
        "release must answer {{\"ok\":true}}"
    );
    let rec = c.record(res, &id).await?;
    ensure!(
        rec.get("lease").is_none(),
        "release by the holder must remove the lease; got {rec}"
    );
    ensure!(
        !c.heartbeat(res, &id, "runner-1").await?,
        "heartbeat after release must be false"
    );
    ensure!(
        c.claim(res, &id, "runner-2", LONG).await?,
        "another holder must be able to claim after release"
    );
    Ok(())
}

async fn release_none(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    ensure!(
        c.release(res, &id, "runner-1").await?,
        "release without a lease must answer {{\"ok\":true}}"
    );
    Ok(())
}

async fn bad_body(c: Ctx, res: Res, op: &'static str, body: Value) -> CheckResult {
    let id = c.create(res).await?;
    c.post(&format!("{}/lease/{op}", res.path(&id)), &body)
        .send()
        .await?
        .e400()?;
    let rec = c.record(res, &id).await?;
    ensure!(
        rec.get("lease").is_none(),
        "a 400-rejected {op} wrote a lease: {rec}"
    );
    Ok(())
}

async fn bad_json(c: Ctx, res: Res, op: &'static str) -> CheckResult {
    let id = c.create(res).await?;
    let r = c
        .post_raw(&format!("{}/lease/{op}", res.path(&id)), "{\"holder\":")
        .send()
        .await?;
    r.error_msg(400, "validation", "request body is not valid JSON")?;
    Ok(())
}

async fn unknown(c: Ctx, res: Res) -> CheckResult {
    let id = res.unknown_id();
    let msg = res.unknown_msg(&id);
    for (op, body) in [
        ("claim", json!({"holder": "h", "ttlMs": 1000})),
        ("heartbeat", json!({"holder": "h"})),
        ("release", json!({"holder": "h"})),
    ] {
        c.post(&format!("{}/lease/{op}", res.path(&id)), &body)
            .send()
            .await?
            .error_msg(404, "not-found", &msg)?;
    }
    let g = c.get(&res.path(&id)).send().await?;
    ensure!(
        g.status == 404,
        "{}",
        g.fail("404: lease writes must not create the resource")
    );
    Ok(())
}
