//! Sections 3, 8 and 10, atomicity under concurrent HTTP callers: appends get
//! exactly 1..N, one conditional append wins per sequence, one claim wins,
//! concurrent puts and deposits get distinct revisions.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use tokio::task::JoinSet;

use super::{CheckResult, Registry};
use crate::client::{Ctx, Res, Resp};
use crate::ensure;
use crate::util::b64;

pub fn register(r: &mut Registry) {
    for res in [Res::Build, Res::Repo] {
        let k = res.key();
        r.add(
            format!("s10.concurrency.{k}_appends_32_get_1_to_32"),
            "10",
            move |c| appends(c, res, 32),
        );
        r.add(
            format!("s10.concurrency.{k}_claims_16_one_wins"),
            "10",
            move |c| claims(c, res, 16),
        );
        r.add(
            format!("s10.concurrency.{k}_puts_16_distinct_revisions"),
            "10",
            move |c| puts(c, res, 16),
        );
        r.add(
            format!("s10.concurrency.{k}_holder_heartbeats_vs_rival_claims"),
            "10",
            move |c| heartbeats_vs_claims(c, res, 16),
        );
        r.add(
            format!("s8.concurrency.{k}_deposits_8_distinct"),
            "8",
            move |c| deposits(c, res, 8),
        );
    }
    r.add("s10.concurrency.conditional_16_one_wins", "10", |c| {
        conditional(c, 16)
    });
    r.add("s3.concurrency.create_same_slug_one_wins", "3", |c| {
        create_race(c, 16)
    });
    r.add("s4.concurrency.ensure_same_repo_one_record", "4", |c| {
        ensure_race(c, 16)
    });
}

async fn gather(
    c: &Ctx,
    n: usize,
    make: impl Fn(usize) -> (String, Value),
) -> Result<Vec<Resp>, String> {
    let mut set = JoinSet::new();
    for i in 0..n {
        let c = c.clone();
        let (path, body) = make(i);
        set.spawn(async move { c.post(&path, &body).send().await });
    }
    let mut out = Vec::new();
    while let Some(r) = set.join_next().await {
        out.push(r.map_err(|e| format!("task failed: {e}"))??);
    }
    Ok(out)
}

async fn appends(c: Ctx, res: Res, n: usize) -> CheckResult {
    let id = c.create(res).await?;
    let path = format!("{}/events", res.path(&id));
    let resps = gather(&c, n, |_| (path.clone(), res.simple_event())).await?;
    let mut seqs = BTreeSet::new();
    for r in &resps {
        let env = r.json_status(201)?;
        seqs.insert(env["seq"].as_i64().unwrap_or(-1));
    }
    let want: BTreeSet<i64> = (1..=n as i64).collect();
    ensure!(
        seqs == want,
        "{n} concurrent appends: expected distinct seqs 1..={n}; got {seqs:?}"
    );
    let read = c.seqs(res, &id).await?;
    ensure!(
        read == want.iter().copied().collect::<Vec<_>>(),
        "read-back seqs after concurrent appends: {read:?}"
    );
    Ok(())
}

async fn conditional(c: Ctx, n: usize) -> CheckResult {
    let res = Res::Build;
    let id = c.create(res).await?;
    c.append_n(res, &id, 3).await?;
    let path = format!("{}/events/conditional", res.path(&id));
    let resps = gather(&c, n, |_| {
        (
            path.clone(),
            json!({"expectedSeq": 3, "event": res.simple_event()}),
        )
    })
    .await?;
    let mut won = 0;
    for r in &resps {
        match r.status {
            201 => {
                won += 1;
                ensure!(
                    r.json_status(201)?["seq"] == json!(4),
                    "{}",
                    r.fail("the winner gets seq 4")
                );
            }
            200 => ensure!(
                r.json_status(200)?.is_null(),
                "{}",
                r.fail("200 null for the losers")
            ),
            _ => return Err(r.fail("201 (one winner) or 200 null").into()),
        }
    }
    ensure!(
        won == 1,
        "{n} concurrent conditional appends with expectedSeq 3: expected exactly one 201; got {won}"
    );
    let seqs = c.seqs(res, &id).await?;
    ensure!(
        seqs == vec![1, 2, 3, 4],
        "events after the race: expected seqs [1,2,3,4]; got {seqs:?}"
    );
    Ok(())
}

async fn claims(c: Ctx, res: Res, n: usize) -> CheckResult {
    let id = c.create(res).await?;
    let path = format!("{}/lease/claim", res.path(&id));
    let resps = gather(&c, n, |i| {
        (
            path.clone(),
            json!({"holder": format!("runner-{i}"), "ttlMs": 3_600_000}),
        )
    })
    .await?;
    let mut winners = Vec::new();
    for (i, r) in resps.iter().enumerate() {
        let v = r.json_status(200)?;
        if v == json!({"ok": true}) {
            winners.push(i);
        } else if v != json!({"ok": false}) {
            return Err(r.fail(r#"{"ok": true|false}"#).into());
        }
    }
    ensure!(
        winners.len() == 1,
        "{n} concurrent claims by different holders: expected exactly one true; got {}",
        winners.len()
    );
    let rec = c.record(res, &id).await?;
    ensure!(
        rec["lease"]["holder"]
            .as_str()
            .is_some_and(|h| h.starts_with("runner-")),
        "lease after the race: {}",
        rec["lease"]
    );
    Ok(())
}

async fn heartbeats_vs_claims(c: Ctx, res: Res, n: usize) -> CheckResult {
    let id = c.create(res).await?;
    ensure!(
        c.claim(res, &id, "holder", 3_600_000).await?,
        "initial claim returned false"
    );
    let base = res.path(&id);
    let resps = gather(&c, n, |i| {
        if i % 2 == 0 {
            (
                format!("{base}/lease/heartbeat"),
                json!({"holder": "holder"}),
            )
        } else {
            (
                format!("{base}/lease/claim"),
                json!({"holder": format!("rival-{i}"), "ttlMs": 3_600_000}),
            )
        }
    })
    .await?;
    for r in &resps {
        let v = r.json_status(200)?;
        let is_heartbeat = r.sent.contains("/lease/heartbeat");
        let want = json!({"ok": is_heartbeat});
        ensure!(
            v == want,
            "{}",
            r.fail(format!(
                "200 {want} while the holder keeps an unexpired lease"
            ))
        );
    }
    let rec = c.record(res, &id).await?;
    ensure!(
        rec["lease"]["holder"] == json!("holder"),
        "lease holder after the race: {}",
        rec["lease"]
    );
    Ok(())
}

async fn puts(c: Ctx, res: Res, n: usize) -> CheckResult {
    let id = c.create(res).await?;
    let path = format!("{}/artifacts", res.path(&id));
    let resps = gather(&c, n, |i| {
        (
            path.clone(),
            json!({"kind": "plan", "contentBase64": b64(format!("p{i}").as_bytes())}),
        )
    })
    .await?;
    let mut revs = BTreeSet::new();
    for r in &resps {
        revs.insert(r.json_status(201)?["revision"].as_i64().unwrap_or(-1));
    }
    let want: BTreeSet<i64> = (0..n as i64).collect();
    ensure!(
        revs == want,
        "{n} concurrent puts of one kind: expected revisions 0..{n}; got {revs:?}"
    );
    Ok(())
}

async fn deposits(c: Ctx, res: Res, n: usize) -> CheckResult {
    let id = c.create(res).await?;
    let path = format!("{}/deposits", res.path(&id));
    let resps = gather(&c, n, |i| {
        (
            path.clone(),
            json!({
                "artifacts": [{"kind": "plan", "contentBase64": b64(format!("d{i}").as_bytes())}],
                "event": res.ref_event(json!({"kind": "plan", "rev": -1})),
            }),
        )
    })
    .await?;
    let mut revs = BTreeSet::new();
    let mut seqs = BTreeSet::new();
    for r in &resps {
        let v = r.json_status(201)?;
        let rev = v["artifacts"][0]["revision"].as_i64().unwrap_or(-1);
        ensure!(
            v["event"]["payload"]["artifact"] == json!({"kind": "plan", "rev": rev}),
            "{}",
            r.fail(format!(
                "the event's ref to match its own artifact revision {rev}"
            ))
        );
        revs.insert(rev);
        seqs.insert(v["event"]["seq"].as_i64().unwrap_or(-1));
    }
    ensure!(
        revs == (0..n as i64).collect(),
        "{n} concurrent deposits: expected revisions 0..{n}; got {revs:?}"
    );
    ensure!(
        seqs == (1..=n as i64).collect(),
        "{n} concurrent deposits: expected seqs 1..={n}; got {seqs:?}"
    );
    Ok(())
}

async fn create_race(c: Ctx, n: usize) -> CheckResult {
    let slug = crate::util::unique("conf-race");
    let resps = gather(&c, n, |i| {
        (
            "/builds".to_string(),
            json!({"slug": slug, "repo": format!("acme/r{i}")}),
        )
    })
    .await?;
    let mut created = Vec::new();
    for r in &resps {
        match r.status {
            201 => created.push(r.json_status(201)?),
            409 => r.error_msg(409, "conflict", &format!("build \"{slug}\" already exists"))?,
            _ => return Err(r.fail("201 once, then 409 conflict").into()),
        }
    }
    ensure!(
        created.len() == 1,
        "{n} concurrent creates of one slug: expected exactly one 201; got {}",
        created.len()
    );
    let rec = c.record(Res::Build, &slug).await?;
    ensure!(
        rec == created[0],
        "stored record {rec} differs from the winning create {}",
        created[0]
    );
    Ok(())
}

async fn ensure_race(c: Ctx, n: usize) -> CheckResult {
    let id = format!("{}/race", crate::util::unique("acme"));
    let resps = gather(&c, n, |_| ("/repos".to_string(), json!({"repo": id}))).await?;
    let mut records = BTreeSet::new();
    for r in &resps {
        records.insert(r.json_status(200)?.to_string());
    }
    ensure!(
        records.len() == 1,
        "{n} concurrent ensureRepo calls must all return the one record; got {records:?}"
    );
    Ok(())
}
