//! The simulated Autobuild processes: dashboards (`ab dispatch` frontends),
//! dispatchers (their private kernels), build runners and the agents'
//! one-shot `ab` commands. Each is a closed loop with at most one request in
//! flight (a runner's heartbeat timer and held subscription are separate
//! timers of the same process, as in Autobuild). The request sequences are
//! the model of docs/benchmarks/autobuild-replay.md, each
//! step named after the Autobuild function it stands for. They speak
//! protocol 2; a dashboard frame can also be made the protocol-3 way, whose
//! reads (and the protocol-3 dispatcher's) live in `protocol3.rs`.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use base64::Engine as _;
use bytes::Bytes;
use serde_json::{Value, json, value::RawValue};
use tokio::time::{Instant, sleep, sleep_until};

use super::stats::{Op, Recorder};
use super::text::{Text, parse_iso};
use crate::harness::Identity;

/// Autobuild's constants, from its source (docs/benchmarks/autobuild-replay.md
/// names the files).
pub const DASHBOARD_POLL: Duration = Duration::from_millis(500);
pub const DISPATCH_INTERVAL: Duration = Duration::from_secs(10);
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(15);
pub const LEASE_TTL_MS: i64 = 60_000;
/// The build runner's abort watch subscribes with `pollMs: 25`; the client
/// holds each read `wait=25` s and keeps request starts 25 ms apart.
pub const SUBSCRIBE_GAP: Duration = Duration::from_millis(25);
pub const SUBSCRIBE_WAIT_SECS: u32 = 25;
pub const EFFECTIVE_CONFIG: &str = "dispatcher-effective-config";

/// Which protocol a simulated process speaks: what it reads for the same
/// decisions (docs/benchmarks/frame-and-tick.md names the calls each one
/// makes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// Autobuild 0.8.0: whole journals and whole build logs.
    Two,
    /// Autobuild 0.9.0: build digests and the bounded journal read.
    Three,
}

impl Protocol {
    pub fn identity(self) -> Identity {
        match self {
            Protocol::Two => Identity::PROTOCOL_2,
            Protocol::Three => Identity::PROTOCOL_3,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Protocol::Two => "2 (0.8.0)",
            Protocol::Three => "3 (0.9.0)",
        }
    }
}

/// One simulated process: its own HTTP client (connection pool) and the
/// run's recorder.
#[derive(Clone)]
pub struct Proc {
    pub http: reqwest::Client,
    pub base: String,
    /// Sent with every read; answers are decoded after their wire size is
    /// recorded (Bun's fetch decodes transparently).
    pub accept_encoding: String,
    pub rec: Recorder,
}

pub(super) fn enc(repo: &str) -> String {
    repo.replace('%', "%25").replace('/', "%2F")
}

impl Proc {
    async fn send(&self, op: Op, request: reqwest::RequestBuilder, what: &str) -> Result<Bytes> {
        let started = std::time::Instant::now();
        let outcome = async {
            let response = request.send().await?;
            let status = response.status();
            let encoding = response
                .headers()
                .get("content-encoding")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let wire = response.bytes().await?;
            let body = match encoding.as_deref() {
                None | Some("identity") => wire.clone(),
                Some(encoding) => decode(encoding, &wire).with_context(|| what.to_owned())?,
            };
            if !status.is_success() {
                bail!(
                    "{what}: {status}: {}",
                    String::from_utf8_lossy(&body[..body.len().min(200)])
                );
            }
            Ok((body, wire.len()))
        }
        .await;
        match outcome {
            Ok((body, wire)) => {
                self.rec.ok(op, started.elapsed(), wire);
                Ok(body)
            }
            Err(err) => {
                self.rec.error(op, format!("{err:#}"));
                Err(err)
            }
        }
    }

    pub async fn get(&self, op: Op, path: &str) -> Result<Bytes> {
        let url = format!("{}{path}", self.base);
        let request = self
            .http
            .get(&url)
            .header("accept-encoding", &self.accept_encoding);
        self.send(op, request, &format!("GET {path}")).await
    }

    pub async fn post(&self, op: Op, path: &str, body: impl Into<Bytes>) -> Result<Bytes> {
        let url = format!("{}{path}", self.base);
        let request = self
            .http
            .post(&url)
            .header("content-type", "application/json")
            .body(body.into());
        self.send(op, request, &format!("POST {path}")).await
    }

    pub(super) async fn journal(&self, repo: &str, since: u64) -> Result<Bytes> {
        let op = if since == 0 {
            Op::JournalWhole
        } else {
            Op::JournalDelta
        };
        self.get(op, &format!("/repos/{}/events?since={since}", enc(repo)))
            .await
    }

    pub(super) async fn build_log(&self, slug: &str, since: u64) -> Result<Bytes> {
        let op = if since == 0 {
            Op::BuildWhole
        } else {
            Op::BuildDelta
        };
        self.get(op, &format!("/builds/{slug}/events?since={since}"))
            .await
    }

    pub(super) async fn list_builds(&self) -> Result<Vec<Listed>> {
        let body = self.get(Op::ListBuilds, "/builds").await?;
        listed(&body)
    }

    pub(super) async fn ensure_repo(&self, repo: &str) -> Result<()> {
        self.post(Op::Repo, "/repos", json!({ "repo": repo }).to_string())
            .await?;
        Ok(())
    }

    pub(super) async fn get_repo(&self, repo: &str) -> Result<()> {
        self.get(Op::Repo, &format!("/repos/{}", enc(repo))).await?;
        Ok(())
    }
}

/// A compressed answer's text (the codings Bun's fetch decodes).
fn decode(encoding: &str, wire: &[u8]) -> Result<Bytes> {
    use std::io::Read as _;
    let mut out = Vec::new();
    match encoding {
        "zstd" => out = zstd::decode_all(wire)?,
        "gzip" => {
            flate2::read::GzDecoder::new(wire).read_to_end(&mut out)?;
        }
        "br" => {
            brotli::Decompressor::new(wire, 4096).read_to_end(&mut out)?;
        }
        other => bail!("an answer in an unexpected coding: {other}"),
    }
    Ok(out.into())
}

/// What a process reads from `GET /builds` for its decisions.
pub struct Listed {
    pub slug: String,
    pub repo: String,
    pub lease_expires: Option<i64>,
    pub updated_at: i64,
}

fn listed(body: &[u8]) -> Result<Vec<Listed>> {
    let records: Vec<Value> = serde_json::from_slice(body).context("GET /builds")?;
    Ok(records
        .into_iter()
        .map(|r| Listed {
            slug: r["slug"].as_str().unwrap_or_default().to_owned(),
            repo: r["repo"].as_str().unwrap_or_default().to_owned(),
            lease_expires: r["lease"]["expiresAt"].as_str().and_then(parse_iso),
            updated_at: r["updatedAt"].as_str().and_then(parse_iso).unwrap_or(0),
        })
        .collect())
}

/// The number of envelopes in an event list and the last one's `seq`.
pub(super) fn last_seq(body: &[u8], since: u64) -> Result<u64> {
    let events: Vec<&RawValue> = serde_json::from_slice(body).context("an event list")?;
    match events.last() {
        None => Ok(since),
        Some(last) => {
            let last: Value = serde_json::from_str(last.get())?;
            last["seq"].as_u64().context("an envelope without seq")
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// `ab dispatch`'s terminal frontend (`DispatchFrontend`): a frame on every
/// 500 ms interval tick unless the previous frame is still running.
pub async fn dashboard(p: Proc, repo: String, phase: Duration, deadline: Instant) {
    let origin = Instant::now() + phase;
    sleep_until(origin).await;
    let mut frontend = Frontend::new(p, repo, Protocol::Two);
    while Instant::now() < deadline {
        let started = Instant::now();
        if frontend.frame().await.is_ok() {
            frontend.p.rec.frame(started.elapsed());
        }
        // setInterval keeps its phase: the next frame starts at the first
        // tick after this one ended.
        let elapsed = Instant::now() - origin;
        let ticks = elapsed
            .as_nanos()
            .div_ceil(DASHBOARD_POLL.as_nanos())
            .max(1);
        sleep_until(origin + DASHBOARD_POLL * ticks as u32).await;
    }
}

pub struct Frontend {
    p: Proc,
    repo: String,
    protocol: Protocol,
    /// The repository cursor of `events()`.
    cursor: u64,
    config_loaded: bool,
    /// `DashboardBuildPollCache`: per slug, the last seq read and whether
    /// the build is done (then never read again).
    cache: HashMap<String, (u64, bool)>,
}

impl Frontend {
    pub fn new(p: Proc, repo: String, protocol: Protocol) -> Frontend {
        Frontend {
            p,
            repo,
            protocol,
            cursor: 0,
            config_loaded: false,
            cache: HashMap::new(),
        }
    }

    /// `renderOnce`.
    pub async fn frame(&mut self) -> Result<()> {
        // events(): the repository delta since the cursor.
        let delta = self.p.journal(&self.repo, self.cursor).await?;
        self.cursor = last_seq(&delta, self.cursor)?;
        // loadConfig(): the effective config artifact, cached after the first frame.
        if !self.config_loaded {
            self.p
                .get(
                    Op::Artifact,
                    &format!(
                        "/repos/{}/artifacts?kind={EFFECTIVE_CONFIG}&rev=0",
                        enc(&self.repo)
                    ),
                )
                .await?;
            self.config_loaded = true;
        }
        // The observation pressure.
        match self.protocol {
            Protocol::Two => {
                // scanUnclaimedObservations(): ensure, whole journal, every build's whole log.
                self.p.ensure_repo(&self.repo).await?;
                self.p.journal(&self.repo, 0).await?;
                for build in self.p.list_builds().await? {
                    if build.repo == self.repo {
                        self.p.build_log(&build.slug, 0).await?;
                    }
                }
            }
            Protocol::Three => {
                super::protocol3::sample_unclaimed_observations(&self.p, &self.repo).await?;
            }
        }
        // DashboardBuildPollCache.refresh(): deltas of builds not yet done.
        let mut next = HashMap::new();
        for build in self.p.list_builds().await? {
            if build.repo != self.repo {
                continue;
            }
            let (since, done) = self.cache.get(&build.slug).copied().unwrap_or((0, false));
            if done {
                next.insert(build.slug, (since, true));
                continue;
            }
            let body = self.p.build_log(&build.slug, since).await?;
            let last = last_seq(&body, since)?;
            let completed = body
                .windows(COMPLETED.len())
                .any(|w| w == COMPLETED.as_bytes());
            next.insert(build.slug, (last, completed));
        }
        self.cache = next;
        Ok(())
    }
}

const COMPLETED: &str = "\"type\":\"build.completed\"";

/// The dispatcher kernel's watch loop (`Dispatch.run`): a tick, then 10 s.
pub async fn dispatcher(p: Proc, repo: String, run: String, phase: Duration, deadline: Instant) {
    sleep(phase).await;
    let mut startup = true;
    while Instant::now() < deadline {
        let started = Instant::now();
        if tick(&p, &repo, &run, startup).await.is_ok() {
            p.rec.tick(started.elapsed());
        }
        startup = false;
        sleep(DISPATCH_INTERVAL).await;
    }
}

/// `dispatcherTick` → `Dispatcher.tick` → `publishTickReport`, for a
/// headless kernel with intake on, on protocol 2.
pub async fn tick(p: &Proc, repo: &str, run: &str, startup: bool) -> Result<()> {
    let path = format!("/repos/{}/events", enc(repo));
    let dispatcher = json!({ "kind": "dispatcher" });
    p.post(
        Op::RepoAppend,
        &path,
        json!({ "actor": dispatcher, "type": "dispatcher.tick-started", "payload": { "run": run } })
            .to_string(),
    )
    .await?;
    // readDispatchSettings()
    p.journal(repo, 0).await?;
    // repositoryPaused(): getRepo, then the journal.
    p.get_repo(repo).await?;
    p.journal(repo, 0).await?;
    // janitor(), recoverDispatches(), resumeCurrent() at startup: every build of the repository.
    let passes = if startup { 3 } else { 2 };
    for _ in 0..passes {
        for build in p.list_builds().await? {
            if build.repo == repo {
                p.build_log(&build.slug, 0).await?;
            }
        }
    }
    // leaseSweep(): builds without a live lease, past the first-claim grace.
    let now = now_ms();
    for build in p.list_builds().await? {
        let live = build.lease_expires.is_some_and(|at| at > now);
        let grace = build.lease_expires.is_none() && now - build.updated_at < LEASE_TTL_MS;
        if build.repo == repo && !live && !grace {
            p.build_log(&build.slug, 0).await?;
        }
    }
    // dispatch(): every build, to count the active ones.
    for build in p.list_builds().await? {
        if build.repo == repo {
            p.build_log(&build.slug, 0).await?;
        }
    }
    // triggerHarvest(): getRepo, then the journal.
    p.get_repo(repo).await?;
    p.journal(repo, 0).await?;
    p.post(Op::RepoAppend, &path, tick_completed(run)).await?;
    Ok(())
}

/// The `dispatcher.tick-completed` a tick that changed nothing publishes
/// (21 zero counters, four empty diagnostics arrays).
pub fn tick_completed(run: &str) -> String {
    let zero: serde_json::Map<String, Value> = super::history::COUNTERS
        .iter()
        .map(|name| ((*name).to_owned(), json!(0)))
        .collect();
    json!({ "actor": { "kind": "dispatcher" }, "type": "dispatcher.tick-completed", "payload": {
        "run": run, "queued": 0, "janitorDiagnostics": [], "ticketDiagnostics": [],
        "creationDiagnostics": [], "dependencyDiagnostics": [], "counters": zero,
    } })
    .to_string()
}

/// How a runner's agent sessions are paced (accelerated: see the docs).
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    pub session: Duration,
    pub observation_every: Duration,
    pub transcript_bytes: usize,
}

/// One build runner (`BuildRunner.run`) on an unfinished build: claim,
/// attach, heartbeat every 15 s; then agent sessions, each with the held
/// abort watch open, the agent's observations (each its own `ab` process:
/// `cli`, a client that opens a new connection per request), the transcript
/// deposit and the kernel's next facts.
pub async fn runner(
    p: Proc,
    cli: Proc,
    slug: String,
    pace: Pace,
    corpus: std::sync::Arc<String>,
    seed: u64,
    deadline: Instant,
) {
    let mut tasks = tokio::task::JoinSet::new();
    let result = runner_loop(&p, &cli, &slug, pace, &corpus, seed, deadline, &mut tasks).await;
    if let Err(err) = result {
        p.rec
            .error(Op::Append, format!("runner {slug} stopped: {err:#}"));
    }
    // Dropping the set stops the heartbeat and any open subscription.
}

#[allow(clippy::too_many_arguments)]
async fn runner_loop(
    p: &Proc,
    cli: &Proc,
    slug: &str,
    pace: Pace,
    corpus: &str,
    seed: u64,
    deadline: Instant,
    tasks: &mut tokio::task::JoinSet<()>,
) -> Result<()> {
    let mut text = Text::new(seed);
    let holder = format!("build-{}-runner-{}", text.int(1, 9), text.hex(8));
    let lease = format!("/builds/{slug}/lease");
    let events = format!("/builds/{slug}/events");
    // attach()
    p.post(
        Op::Claim,
        &format!("{lease}/claim"),
        json!({ "holder": holder, "ttlMs": LEASE_TTL_MS }).to_string(),
    )
    .await?;
    p.build_log(slug, 0).await?;
    let beat = Bytes::from(json!({ "holder": holder }).to_string());
    p.post(Op::Heartbeat, &format!("{lease}/heartbeat"), beat.clone())
        .await?;
    {
        let (p, path) = (p.clone(), format!("{lease}/heartbeat"));
        tasks.spawn(async move {
            let mut interval =
                tokio::time::interval_at(Instant::now() + HEARTBEAT_EVERY, HEARTBEAT_EVERY);
            loop {
                interval.tick().await;
                let _ = p.post(Op::Heartbeat, &path, beat.clone()).await;
            }
        });
    }
    let kernel = json!({ "kind": "kernel" });
    let mut round = 0;
    while Instant::now() < deadline {
        round += 1;
        // step(): read the whole log, decide, start a session.
        let log = p.build_log(slug, 0).await?;
        let mut seq = last_seq(&log, 0)?;
        let session = text.id("s");
        let started = p
            .post(
                Op::Append,
                &events,
                json!({ "actor": kernel, "type": "session.started", "payload": {
                    "session": session, "role": "implement", "runner": "claude",
                    "model": "claude-opus-4", "phase": "implement", "round": round,
                } })
                .to_string(),
            )
            .await?;
        seq = serde_json::from_slice::<Value>(&started)?["seq"]
            .as_u64()
            .unwrap_or(seq);
        // The abort watch: held reads while the session runs.
        let watch = {
            let (p, slug) = (p.clone(), slug.to_owned());
            tasks.spawn(async move { subscribe(p, slug, seq).await })
        };
        // The agent works: observations through one-shot `ab` commands.
        let session_end = Instant::now() + jitter(&mut text, pace.session);
        let agent = json!({ "kind": "agent", "role": "implement", "session": session });
        loop {
            let next = Instant::now() + jitter(&mut text, pace.observation_every);
            if next >= session_end || next >= deadline {
                break;
            }
            sleep_until(next).await;
            let files = vec![text.file()];
            let observation = json!({ "actor": agent, "type": "observation.recorded", "payload": {
                "id": text.id("o"), "kind": "followup", "summary": text.sentence(6, 20), "files": files,
            } });
            let _ = cli.post(Op::Append, &events, observation.to_string()).await;
        }
        sleep_until(session_end.min(deadline)).await;
        watch.abort();
        if Instant::now() >= deadline {
            break;
        }
        // depositTranscriptAndEnd(): the transcript and session.ended, atomically.
        let transcript = transcript(&mut text, corpus, pace.transcript_bytes);
        let usage = json!({ "inputTokens": text.int(8_000, 900_000), "outputTokens": text.int(500, 60_000), "turns": text.int(3, 120) });
        let deposit = json!({
            "artifacts": [{
                "kind": "transcript",
                "contentBase64": base64::engine::general_purpose::STANDARD.encode(transcript.as_bytes()),
                "metadata": { "phase": "implement", "round": round, "role": "implement", "runner": "claude", "model": "claude-opus-4", "session": session, "usage": usage },
            }],
            "event": { "actor": kernel, "type": "session.ended", "payload": {
                "session": session, "transcript": { "kind": "transcript", "rev": -1 }, "usage": usage,
            } },
        });
        let _ = p
            .post(
                Op::Deposit,
                &format!("/builds/{slug}/deposits"),
                deposit.to_string(),
            )
            .await;
        // The kernel's next facts: a verify step.
        let step = text.pick(&["types", "unit", "lint", "integration"]);
        for (kind, payload) in [
            ("verify.started", json!({ "step": step, "attempt": round })),
            (
                "verify.completed",
                json!({ "step": step, "attempt": round, "outcome": "pass" }),
            ),
        ] {
            let _ = p
                .post(
                    Op::Append,
                    &events,
                    json!({ "actor": kernel, "type": kind, "payload": payload }).to_string(),
                )
                .await;
        }
    }
    Ok(())
}

/// `RemoteBuildStore.subscribe` against a server that holds reads: one
/// `wait=25` read per cycle, request starts at least 25 ms apart (against a
/// server that ignores `wait`, a read every 25 ms).
async fn subscribe(p: Proc, slug: String, mut seq: u64) {
    loop {
        let started = Instant::now();
        let path = format!("/builds/{slug}/events?since={seq}&wait={SUBSCRIBE_WAIT_SECS}");
        if let Ok(body) = p.get(Op::HeldRead, &path).await {
            seq = last_seq(&body, seq).unwrap_or(seq);
        }
        sleep_until(started + SUBSCRIBE_GAP).await;
    }
}

fn jitter(text: &mut Text, mean: Duration) -> Duration {
    mean.mul_f64(0.5 + text.int(0, 1000) as f64 / 1000.0)
}

/// A session transcript: a window of the corpus (JSON lines of a
/// conversation) with its own first line, `bytes` ±50 % long.
fn transcript(text: &mut Text, corpus: &str, bytes: usize) -> String {
    let scale = 0.5 + text.int(0, 1000) as f64 / 1000.0;
    let len = ((bytes as f64 * scale) as usize).clamp(1, corpus.len().max(1));
    let start = text.int(0, (corpus.len() - len) as i64) as usize;
    let mut window = &corpus[start..start + len];
    // Whole lines only.
    if let Some(cut) = window.find('\n') {
        window = &window[cut + 1..];
    }
    format!(
        "{{\"session\":\"{}\",\"started\":{}}}\n{window}",
        text.hex(16),
        now_ms()
    )
}

/// JSON lines of an agent conversation, `bytes` long, drawn from `seed`.
pub fn corpus(bytes: usize, seed: u64) -> String {
    let mut text = Text::new(seed);
    let mut out = String::with_capacity(bytes + 4096);
    while out.len() < bytes {
        let role = text.pick(&["user", "assistant", "tool"]);
        let content = match role {
            "tool" => format!("$ {} {}\n{}", text.word(), text.file(), text.paragraph(2)),
            _ => {
                let sentences = text.int(1, 5) as usize;
                text.paragraph(sentences)
            }
        };
        out.push_str(&json!({ "role": role, "content": content }).to_string());
        out.push('\n');
    }
    out
}
