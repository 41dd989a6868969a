//! Runs checks against one server: detects the test clock, runs clock-free
//! checks with bounded concurrency (reporting in registration order), then the
//! clock checks one at a time, and tallies the outcomes.

use std::sync::Arc;

use serde_json::json;
use tokio::sync::{Semaphore, mpsc};

use crate::checks::{Check, Failure};
use crate::client::Ctx;

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Fail(String),
    Skip(String),
}

impl Outcome {
    /// The runner's output line: `ok   <id>`, `FAIL <id>: …`, `skip <id>: …`.
    pub fn line(&self, id: &str) -> String {
        match self {
            Outcome::Pass => format!("ok   {id}"),
            Outcome::Fail(why) => format!("FAIL {id}: {why}"),
            Outcome::Skip(why) => format!("skip {id}: {why}"),
        }
    }
}

/// All outcomes of one run, in the order they were reported.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub results: Vec<(String, Outcome)>,
}

impl Report {
    pub fn passed(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Pass))
    }
    pub fn failed(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Fail(_)))
    }
    pub fn skipped(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Skip(_)))
    }
    fn count(&self, f: impl Fn(&Outcome) -> bool) -> usize {
        self.results.iter().filter(|(_, o)| f(o)).count()
    }

    /// The failing checks' lines.
    pub fn failures(&self) -> Vec<String> {
        self.results
            .iter()
            .filter(|(_, o)| matches!(o, Outcome::Fail(_)))
            .map(|(id, o)| o.line(id))
            .collect()
    }

    /// `N passed, N failed, N skipped`, always all three.
    pub fn summary(&self) -> String {
        format!(
            "{} passed, {} failed, {} skipped",
            self.passed(),
            self.failed(),
            self.skipped()
        )
    }
}

/// How far past the server's current time minted tokens expire. The clock
/// checks only move a test clock forward by seconds, and a run against a real
/// clock takes minutes. Well inside a server's bound on token lifetimes
/// (abstore refuses an `exp` more than `--max-token-lifetime`, 90 days by
/// default, beyond its now).
pub const TOKEN_MARGIN_MS: i64 = 7 * 24 * 3_600_000;

/// The server's current time for token expiry: `GET /_test/clock` when the
/// server has a test clock (open to read, so no token is needed yet), else
/// the `createdAt` of a fresh repository, written with `provisional` (a
/// token minted from local time: without a test clock the server's time is
/// the real one).
pub async fn server_now_ms(ctx: &Ctx, provisional: Option<&str>) -> Result<i64, String> {
    let r = ctx.get("/_test/clock").no_auth().send().await?;
    if r.status == 200
        && let Some(ms) = r
            .json
            .as_ref()
            .and_then(|v| v["now"].as_str())
            .and_then(crate::util::parse_iso_ms)
    {
        return Ok(ms);
    }
    let c = ctx.with_token(
        provisional
            .map(str::to_string)
            .or_else(|| ctx.token.clone()),
    );
    c.now_ms().await
}

/// Milliseconds since the Unix epoch on this machine.
pub fn local_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Puts `ctx` in authenticated mode. With a secret: reads the server's clock,
/// sets [`Ctx::exp_ms`] to it plus [`TOKEN_MARGIN_MS`], and mints the admin
/// token every check sends by default (unless `token` is given, which is then
/// sent instead). With only a token: sends it, and checks that mint skip.
/// With neither: open mode, nothing changes.
pub async fn authenticate(
    ctx: &mut Ctx,
    secret: Option<&str>,
    token: Option<&str>,
) -> Result<(), String> {
    ctx.secret = secret.map(str::to_string);
    ctx.token = token.map(str::to_string);
    ctx.exp_ms = local_now_ms() + TOKEN_MARGIN_MS;
    let Some(secret) = secret else {
        return Ok(());
    };
    // Valid a day past local time, which a server without a test clock
    // shares; within any lifetime bound a server may enforce.
    let provisional = crate::token::mint(
        secret,
        &crate::token::admin_scope(local_now_ms() + 86_400_000),
    );
    let now = server_now_ms(ctx, Some(token.unwrap_or(&provisional))).await?;
    ctx.exp_ms = now + TOKEN_MARGIN_MS;
    if ctx.token.is_none() {
        ctx.token = Some(crate::token::mint(
            secret,
            &crate::token::admin_scope(ctx.exp_ms),
        ));
    }
    Ok(())
}

/// Fails with what to do when the server refuses the credentials the run
/// will send (none, or a token): without this every check would fail on
/// the same `401`, and a run reports hundreds of failures and no cause.
pub async fn check_credentials(ctx: &Ctx) -> Result<(), String> {
    let r = ctx.get("/builds").send().await?;
    if r.status != 401 {
        return Ok(());
    }
    if ctx.authenticated() {
        Err(format!(
            "{} refused the run's token (GET /builds answered 401): check that --secret is the server's \
             signing secret, or that --token is valid, unexpired and an admin or deployment token",
            ctx.base
        ))
    } else {
        Err(format!(
            "{} requires a bearer token (GET /builds answered 401): pass --secret with the server's \
             signing secret (ABSTORE_CONFORMANCE_SECRET; the suite mints its tokens and runs the \
             section 7 checks) or --token with an admin or deployment token (ABSTORE_CONFORMANCE_TOKEN)",
            ctx.base
        ))
    }
}

/// Detects `POST /_test/clock` without moving the clock: reads the server's
/// current time from a fresh record and sets the clock to that same instant.
/// In authenticated mode the request carries the run's token (an admin token
/// when the runner has the secret), which abstore requires there.
pub async fn detect_clock(ctx: &Ctx) -> Result<bool, String> {
    let now = ctx.now_ms().await?;
    let r = ctx
        .post(
            "/_test/clock",
            &json!({"now": crate::util::format_iso_ms(now)}),
        )
        .send()
        .await?;
    Ok(r.status == 200)
}

async fn run_one(check: &Check, ctx: Ctx) -> Outcome {
    let fut = (check.run)(ctx);
    // A panicking check must not take the runner down.
    match tokio::spawn(fut).await {
        Ok(Ok(())) => Outcome::Pass,
        Ok(Err(Failure::Fail(m))) => Outcome::Fail(m),
        Ok(Err(Failure::Skip(m))) => Outcome::Skip(m),
        Err(e) => Outcome::Fail(format!("check panicked: {e}")),
    }
}

/// Runs `checks` (those whose id contains `filter`, when given) against the
/// server in `ctx`. `on_result` sees each outcome as it is reported.
pub async fn run_checks(
    ctx: &Ctx,
    checks: Vec<Check>,
    filter: Option<&str>,
    jobs: usize,
    mut on_result: impl FnMut(&str, &Outcome),
) -> Report {
    let mut ctx = ctx.clone();
    let checks: Vec<Check> = checks
        .into_iter()
        .filter(|c| filter.is_none_or(|f| c.id.contains(f)))
        .collect();
    let mut report = Report::default();

    let needs_clock = checks.iter().any(|c| c.clock);
    // Absent clock route → skip; a failed detection (e.g. malformed times)
    // → fail, so a broken server cannot hide behind skips.
    let mut no_clock =
        Outcome::Skip("server has no test clock (POST /_test/clock is not 200)".into());
    if needs_clock {
        match detect_clock(&ctx).await {
            Ok(v) => ctx.clock = v,
            Err(e) => no_clock = Outcome::Fail(format!("test clock detection failed: {e}")),
        }
    }

    let (parallel, serial): (Vec<Check>, Vec<Check>) = checks.into_iter().partition(|c| !c.clock);

    // Phase 1: clock-free checks, bounded concurrency, reported in order.
    let sem = Arc::new(Semaphore::new(jobs.max(1)));
    let (tx, mut rx) = mpsc::unbounded_channel::<(usize, Outcome)>();
    for (i, check) in parallel.iter().enumerate() {
        let check = check.clone();
        let ctx = ctx.clone();
        let sem = sem.clone();
        let tx = tx.clone();
        tokio::spawn(async move {
            let _permit = sem.acquire_owned().await;
            let outcome = run_one(&check, ctx).await;
            let _ = tx.send((i, outcome));
        });
    }
    drop(tx);
    let mut pending: Vec<Option<Outcome>> = vec![None; parallel.len()];
    let mut next = 0;
    while let Some((i, outcome)) = rx.recv().await {
        pending[i] = Some(outcome);
        while next < pending.len() {
            let Some(outcome) = pending[next].take() else {
                break;
            };
            on_result(&parallel[next].id, &outcome);
            report.results.push((parallel[next].id.clone(), outcome));
            next += 1;
        }
    }

    // Phase 2: clock checks, strictly one at a time.
    for check in &serial {
        let outcome = if ctx.clock {
            run_one(check, ctx.clone()).await
        } else {
            no_clock.clone()
        };
        on_result(&check.id, &outcome);
        report.results.push((check.id.clone(), outcome));
    }
    report
}
