//! A generated store history with the shape of a real Autobuild
//! installation: per repository, finished builds of ~100 catalog events each
//! (ticket → spec → plan/review rounds → implement → verify → code review →
//! finalize → merge), a few unfinished builds (the ones runners work on
//! during the replay), and a repository journal dominated by the
//! dispatcher's `tick-started`/`tick-completed` pairs, with runs starting
//! and stopping, runners settling, operators reporting and harvests running.
//!
//! Every payload is valid in abstore's catalogs (the tests check each one)
//! and already in its validated form (defaults filled in), so both servers
//! store the same text. Everything is drawn from one seed: the same
//! parameters always give the same store.

use serde_json::{Value, json};

use super::text::{self, Text, USERS};

/// One event as both servers store it: the time, the actor and payload as
/// compact JSON text, and the type.
#[derive(Clone, Debug)]
pub struct Event {
    pub ts: i64,
    pub actor: String,
    pub kind: &'static str,
    pub payload: String,
}

pub struct Build {
    pub slug: String,
    pub repo: String,
    /// `{source, id, url, title}`.
    pub ticket: Value,
    pub branch: String,
    pub created_at: i64,
    pub updated_at: i64,
    /// Has `build.completed`: dashboards stop delta-reading it.
    pub finished: bool,
    pub events: Vec<Event>,
}

impl Build {
    /// The create-time members (`POST /builds` body without the slug).
    pub fn attrs(&self) -> Value {
        json!({ "repo": self.repo, "ticket": self.ticket, "branch": self.branch })
    }
}

/// How much history one repository has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Size {
    pub journal_events: u64,
    pub builds: u64,
    pub events_per_build: u64,
    /// The time the history spans, in seconds.
    pub span_secs: i64,
}

pub struct Repo {
    pub id: String,
    pub created_at: i64,
    /// Builds in creation order; the last `active` are unfinished.
    pub builds: Vec<Build>,
    journal_seed: u64,
    journal_events: u64,
    start: i64,
    end: i64,
}

impl Repo {
    pub fn journal_len(&self) -> u64 {
        self.journal_events
    }

    /// The last journal event's time.
    pub fn updated_at(&self) -> i64 {
        self.end
    }

    /// The journal, generated again on every call (a month is ~500,000
    /// events: it is streamed, never held).
    pub fn journal(&self) -> impl Iterator<Item = Event> + '_ {
        Journal::new(self).take(self.journal_events as usize)
    }
}

pub struct History {
    pub repos: Vec<Repo>,
    /// The time the history ends (the replay starts right after).
    pub now: i64,
}

const REPO_NAMES: &[&str] = &[
    "acme/widgets",
    "acme/storefront",
    "acme/billing",
    "acme/mobile",
    "acme/infra",
    "acme/search",
    "acme/docs",
    "acme/auth",
];

/// The id of repository `i`: a realistic owner/name (percent-encoded as
/// `acme%2Fwidgets` in paths).
pub fn repo_id(i: usize) -> String {
    match REPO_NAMES.get(i) {
        Some(name) => (*name).to_owned(),
        None => format!("acme/service-{i}"),
    }
}

/// Generate `repos` repositories of `size` each, ending at `now`, with
/// `active` unfinished builds per repository.
pub fn generate(repos: usize, size: Size, active: u64, now: i64, seed: u64) -> History {
    let start = now - size.span_secs * 1000;
    let repos = (0..repos)
        .map(|i| {
            let id = repo_id(i);
            let mut text = Text::new(seed ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let builds = builds(&mut text, &id, size, active, start, now);
            Repo {
                id,
                created_at: start - 60_000,
                builds,
                journal_seed: seed.wrapping_add(i as u64 * 7919),
                journal_events: size.journal_events,
                start,
                end: now,
            }
        })
        .collect();
    History { repos, now }
}

fn builds(
    text: &mut Text,
    repo: &str,
    size: Size,
    active: u64,
    start: i64,
    now: i64,
) -> Vec<Build> {
    let mut seen = std::collections::HashSet::new();
    let active = active.min(size.builds);
    let finished = size.builds - active;
    let mut out = Vec::with_capacity(size.builds as usize);
    for i in 0..size.builds {
        let title = text.title();
        let base = text::kebab(&title);
        let mut slug = base.clone();
        let mut n = 2;
        while !seen.insert(slug.clone()) {
            slug = format!("{base}-{n}");
            n += 1;
        }
        let number = 1000 + text.int(0, 8999);
        let ticket = json!({
            "source": "linear",
            "id": format!("ENG-{number}"),
            "url": format!("https://linear.app/acme/issue/ENG-{number}/{slug}"),
            "title": title,
        });
        let branch = format!("ab/{slug}");
        let is_active = i >= finished;
        // Target length varies around the mean (60%..140%).
        let mean = size.events_per_build.max(12) as i64;
        let target = text.int(mean * 6 / 10, mean * 14 / 10) as usize;
        let life = Lifecycle::new(text, repo, &slug, &ticket, &branch);
        let mut events = life.run(target);
        if is_active {
            // Cut it mid-flight (a runner is working on it) and end it now.
            let keep = (events.len() * text.int(30, 80) as usize / 100).max(6);
            events.truncate(keep);
            let shift = now - 5_000 - events.last().map_or(0, |e| e.ts);
            for event in &mut events {
                event.ts += shift;
            }
        } else {
            // Spread the finished builds over the span, oldest first.
            let duration = events.last().map_or(0, |e| e.ts);
            let window = (now - 3_600_000 - duration - start).max(1);
            let offset = start + window * i as i64 / finished.max(1) as i64;
            for event in &mut events {
                event.ts += offset;
            }
        }
        let created_at = events.first().map_or(start, |e| e.ts);
        let updated_at = events.last().map_or(start, |e| e.ts);
        out.push(Build {
            slug,
            repo: repo.to_owned(),
            ticket,
            branch,
            created_at,
            updated_at,
            finished: !is_active,
            events,
        });
    }
    out
}

/// Writes one build's events, times relative to its creation (0).
struct Lifecycle<'a> {
    text: &'a mut Text,
    repo: String,
    slug: String,
    ticket: Value,
    branch: String,
    events: Vec<Event>,
    /// Indexes of `session.started` events (observations go after them).
    sessions: Vec<usize>,
    t: i64,
    transcripts: i64,
    revs: std::collections::HashMap<&'static str, i64>,
    head: String,
}

const DISPATCHER: &str = r#"{"kind":"dispatcher"}"#;
const KERNEL: &str = r#"{"kind":"kernel"}"#;
const RUNNERS: &[(&str, &str)] = &[
    ("claude", "claude-opus-4"),
    ("claude", "claude-sonnet-4"),
    ("codex", "gpt-5-codex"),
    ("pi", "provider/primary"),
];
const VERIFY_STEPS: &[&str] = &["types", "unit", "lint", "integration", "e2e"];

impl<'a> Lifecycle<'a> {
    fn new(text: &'a mut Text, repo: &str, slug: &str, ticket: &Value, branch: &str) -> Self {
        let head = text.hex(40);
        Lifecycle {
            text,
            repo: repo.to_owned(),
            slug: slug.to_owned(),
            ticket: ticket.clone(),
            branch: branch.to_owned(),
            events: Vec::new(),
            sessions: Vec::new(),
            t: 0,
            transcripts: 0,
            revs: Default::default(),
            head,
        }
    }

    fn push(&mut self, actor: &str, kind: &'static str, payload: Value) {
        self.t += self.text.int(2, 90) * 1000 + self.text.int(0, 999);
        self.events.push(Event {
            ts: self.t,
            actor: actor.to_owned(),
            kind,
            payload: payload.to_string(),
        });
    }

    fn rev(&mut self, kind: &'static str) -> i64 {
        let rev = self.revs.entry(kind).or_insert(-1);
        *rev += 1;
        *rev
    }

    fn agent(role: &str, session: &str) -> String {
        json!({ "kind": "agent", "role": role, "session": session }).to_string()
    }

    /// A session bracket; returns the session id and the agent actor.
    fn session(&mut self, role: &str, phase: &str, round: i64) -> (String, String) {
        let session = self.text.id("s");
        let (runner, model) = RUNNERS[self.text.int(0, RUNNERS.len() as i64 - 1) as usize];
        self.push(
            KERNEL,
            "session.started",
            json!({ "session": session, "role": role, "runner": runner, "model": model, "phase": phase, "round": round }),
        );
        self.sessions.push(self.events.len() - 1);
        let actor = Self::agent(role, &session);
        (session, actor)
    }

    fn end_session(&mut self, session: &str) {
        self.transcripts += 1;
        let usage = json!({
            "inputTokens": self.text.int(8_000, 900_000),
            "outputTokens": self.text.int(500, 60_000),
            "turns": self.text.int(3, 120),
        });
        self.push(
            KERNEL,
            "session.ended",
            json!({ "session": session, "transcript": { "kind": "transcript", "rev": self.transcripts - 1 }, "usage": usage }),
        );
    }

    fn findings(&mut self, n: usize) -> Vec<Value> {
        (0..n)
            .map(|_| {
                let severity = self.text.pick(&["blocking", "important", "minor"]);
                let mut finding = json!({ "id": self.text.id("f"), "severity": severity });
                let object = finding.as_object_mut().expect("an object");
                if self.text.chance(0.7) {
                    object.insert("file".into(), self.text.file().into());
                    let line = self.text.int(1, 900);
                    object.insert("lines".into(), json!([line, line + self.text.int(0, 40)]));
                }
                object.insert("summary".into(), self.text.sentence(5, 14).into());
                if self.text.chance(0.5) {
                    object.insert("detail".into(), self.text.paragraph(2).into());
                }
                object.insert("persists".into(), json!([]));
                finding
            })
            .collect()
    }

    /// A review phase: started, a session, the verdict. Returns the ids of
    /// blocking/important findings when the verdict is `revise`.
    fn review(&mut self, phase: &'static str, round: i64, revise: bool) -> Vec<String> {
        let (started, verdict_type, artifact) = match phase {
            "plan-review" => ("plan-review.started", "plan-review.verdict", "plan-review"),
            _ => ("code-review.started", "code-review.verdict", "code-review"),
        };
        self.push(KERNEL, started, json!({ "round": round }));
        let (session, actor) = self.session("review", phase, round);
        let findings = if revise {
            let n = self.text.int(1, 4) as usize;
            self.findings(n)
        } else {
            let n = self.text.int(0, 2) as usize;
            self.findings(n)
        };
        let ids: Vec<String> = findings
            .iter()
            .map(|f| f["id"].as_str().unwrap_or("f").to_owned())
            .collect();
        let rev = self.rev(artifact);
        let verdict = if revise { "revise" } else { "approve" };
        self.end_session(&session);
        self.push(
            &actor,
            verdict_type,
            json!({ "round": round, "verdict": verdict, "findings": findings, "artifact": { "kind": artifact, "rev": rev } }),
        );
        if revise { ids } else { Vec::new() }
    }

    fn maybe_phase_failure(&mut self, phase: &str, round: i64) {
        if self.text.chance(0.08) {
            let error = format!(
                "{} ({})",
                self.text.sentence(3, 8),
                self.text.pick(&[
                    "rate limited",
                    "provider unavailable",
                    "context window exceeded",
                    "session budget exhausted"
                ])
            );
            self.push(
                KERNEL,
                "phase.failed",
                json!({ "phase": phase, "round": round, "attempt": 1, "error": error, "willRetry": true }),
            );
        }
    }

    fn implement(&mut self, round: i64, feedback: &[String]) {
        let mut started = json!({ "round": round });
        if !feedback.is_empty() {
            started["feedback"] = json!({ "findings": feedback });
        }
        self.push(KERNEL, "implement.started", started);
        self.maybe_phase_failure("implement", round);
        let (session, actor) = self.session("implement", "implement", round);
        self.end_session(&session);
        let base = std::mem::replace(&mut self.head, self.text.hex(40));
        let rev = self.rev("implement-notes");
        let head = self.head.clone();
        self.push(
            &actor,
            "implement.completed",
            json!({ "round": round, "commits": { "base": base, "head": head }, "artifact": { "kind": "implement-notes", "rev": rev } }),
        );
    }

    fn verify(&mut self, steps: &[&str]) {
        for step in steps {
            let mut attempt = 1;
            loop {
                self.push(
                    KERNEL,
                    "verify.started",
                    json!({ "step": step, "attempt": attempt }),
                );
                let fails = attempt == 1 && self.text.chance(0.12);
                let outcome = if fails { "fail" } else { "pass" };
                self.push(
                    KERNEL,
                    "verify.completed",
                    json!({ "step": step, "attempt": attempt, "outcome": outcome }),
                );
                if !fails {
                    break;
                }
                attempt += 1;
            }
        }
    }

    fn escalation(&mut self) {
        let id = self.text.id("esc");
        let question = format!("{}?", self.text.sentence(6, 18));
        let session = self.text.id("s");
        self.push(
            &Self::agent("implement", &session),
            "escalation.raised",
            json!({ "id": id, "phase": "implement", "source": "agent", "question": question }),
        );
        let user = self.text.pick(USERS);
        let answer = self.text.sentence(4, 20);
        self.push(
            &json!({ "kind": "human", "user": user }).to_string(),
            "escalation.answered",
            json!({ "id": id, "answer": answer, "resolution": "guidance" }),
        );
    }

    /// The whole pipeline, with observations spread over the sessions so
    /// the build has about `target` events.
    fn run(mut self, target: usize) -> Vec<Event> {
        let ticket_ref = json!({ "source": self.ticket["source"], "id": self.ticket["id"] });
        self.push(
            DISPATCHER,
            "build.created",
            json!({ "ticket": self.ticket, "repo": self.repo, "baseBranch": "main" }),
        );
        let spec = self.rev("spec");
        self.push(
            DISPATCHER,
            "spec.imported",
            json!({ "artifact": { "kind": "spec", "rev": spec }, "ticket": ticket_ref }),
        );
        let wt = self.text.id("wt");
        let base_sha = self.head.clone();
        self.push(
            DISPATCHER,
            "workspace.provisioned",
            json!({ "provider": "worktree", "ref": wt, "path": format!("/var/lib/autobuild/worktrees/{}", self.slug), "branch": self.branch, "base": { "source": "remote", "sha": base_sha } }),
        );
        let host = format!("build-{}", self.text.int(1, 9));
        let instance = format!("{host}-runner-{}", self.text.hex(8));
        self.push(
            KERNEL,
            "runner.attached",
            json!({ "instance": instance, "host": host }),
        );

        // Plan, reviewed until approved (1-2 rounds).
        let plan_rounds = self.text.int(1, 2);
        let steps: Vec<&str> =
            VERIFY_STEPS[..self.text.int(2, VERIFY_STEPS.len() as i64) as usize].to_vec();
        let mut feedback: Vec<String> = Vec::new();
        for round in 1..=plan_rounds {
            let mut started = json!({ "round": round });
            if !feedback.is_empty() {
                started["feedback"] = json!({ "findings": feedback });
            }
            self.push(KERNEL, "plan.started", started);
            let (session, actor) = self.session("plan", "plan", round);
            self.end_session(&session);
            let rev = self.rev("plan");
            self.push(
                &actor,
                "plan.completed",
                json!({ "round": round, "artifact": { "kind": "plan", "rev": rev }, "verifySteps": steps }),
            );
            feedback = self.review("plan-review", round, round < plan_rounds);
        }
        // Implement → verify → code review, until approved (1-3 rounds).
        let review_rounds = self.text.int(1, 3);
        let mut feedback: Vec<String> = Vec::new();
        for round in 1..=review_rounds {
            self.implement(round, &feedback);
            if self.text.chance(0.1) {
                self.escalation();
            }
            self.verify(&steps);
            feedback = self.review("code-review", round, round < review_rounds);
        }
        // Finalize, merge, release.
        self.push(KERNEL, "finalize.started", json!({}));
        for step in ["push", "release-notes", "pr-body"] {
            let head = self.head.clone();
            let note = self.text.sentence(3, 9);
            self.push(
                KERNEL,
                "finalize.step-completed",
                json!({ "step": step, "ok": true, "note": note, "headSha": head }),
            );
        }
        let number = self.text.int(100, 9999);
        let head = self.head.clone();
        self.push(
            KERNEL,
            "finalize.completed",
            json!({ "pr": { "number": number, "url": format!("https://github.com/{}/pull/{number}", self.repo), "headSha": head } }),
        );
        let merge = self.text.hex(40);
        self.push(DISPATCHER, "pr.merged", json!({ "sha": merge }));
        self.push(DISPATCHER, "workspace.released", json!({}));
        self.push(
            DISPATCHER,
            "build.completed",
            json!({ "outcome": "merged" }),
        );
        self.add_observations(target);
        self.events
    }

    /// Insert `observation.recorded` events after the sessions' starts, with
    /// times between their neighbours, until the build has `target` events.
    fn add_observations(&mut self, target: usize) {
        let missing = target.saturating_sub(self.events.len());
        if missing == 0 || self.sessions.is_empty() {
            return;
        }
        let per_session = missing / self.sessions.len();
        let mut extra = missing % self.sessions.len();
        let sessions = std::mem::take(&mut self.sessions);
        let old = std::mem::take(&mut self.events);
        let mut out = Vec::with_capacity(target);
        let mut next_session = sessions.iter().peekable();
        for (index, event) in old.iter().enumerate() {
            out.push(event.clone());
            if next_session.peek() == Some(&&index) {
                next_session.next();
                let mut n = per_session;
                if extra > 0 {
                    n += 1;
                    extra -= 1;
                }
                let after = old.get(index + 1).map_or(event.ts + 60_000, |e| e.ts);
                let session: Value = serde_json::from_str(&event.payload).unwrap_or(Value::Null);
                let actor = Self::agent(
                    session["role"].as_str().unwrap_or("implement"),
                    session["session"].as_str().unwrap_or("s"),
                );
                for k in 0..n {
                    let ts = event.ts + (after - event.ts) * (k as i64 + 1) / (n as i64 + 1);
                    let payload = self.observation();
                    out.push(Event {
                        ts,
                        actor: actor.clone(),
                        kind: "observation.recorded",
                        payload: payload.to_string(),
                    });
                }
            }
        }
        self.events = out;
    }

    fn observation(&mut self) -> Value {
        let kind = self.text.pick(&["followup", "refactor", "latent-bug"]);
        let mut payload =
            json!({ "id": self.text.id("o"), "kind": kind, "summary": self.text.sentence(6, 22) });
        if self.text.chance(0.6) {
            let n = self.text.int(1, 3);
            let files: Vec<String> = (0..n).map(|_| self.text.file()).collect();
            payload["files"] = json!(files);
        }
        if self.text.chance(0.2) {
            payload["refs"] = json!([format!(
                "https://github.com/{}/issues/{}",
                self.repo,
                self.text.int(1, 4000)
            )]);
        }
        payload
    }
}

/// The repository journal as the dispatcher writes it, generated lazily.
struct Journal<'r> {
    repo: &'r Repo,
    text: Text,
    t: f64,
    step: f64,
    run: Option<String>,
    effective_rev: i64,
    pending: std::collections::VecDeque<(i64, String, &'static str, Value)>,
}

/// `tickCounters` of `dispatcher.tick-completed`, in Autobuild's order.
pub const COUNTERS: &[&str] = &[
    "merged",
    "closed",
    "conflicted",
    "abandoned",
    "discarded",
    "janitorFailed",
    "recovered",
    "dispatchFailed",
    "resumed",
    "swept",
    "dispatched",
    "authored",
    "bounced",
    "claimRaces",
    "invalidTickets",
    "dependencyBlocked",
    "harvestStarted",
    "harvestResumed",
    "harvestCompleted",
    "harvestEscalated",
    "harvestFailed",
];

impl<'r> Journal<'r> {
    fn new(repo: &'r Repo) -> Self {
        let span = (repo.end - repo.start) as f64;
        Journal {
            repo,
            text: Text::new(repo.journal_seed),
            t: repo.start as f64,
            // A little under the span, so the journal ends before `now`.
            step: span / (repo.journal_events.max(1) as f64 * 1.02),
            run: None,
            effective_rev: 0,
            pending: Default::default(),
        }
    }

    /// The next time: about one step on, never going back.
    fn tick_time(&mut self) -> i64 {
        let jitter = 0.5 + self.text.int(0, 1000) as f64 / 1000.0;
        self.t += self.step * jitter;
        self.t as i64
    }

    fn queue(&mut self, actor: String, kind: &'static str, payload: Value) {
        let ts = self.tick_time();
        self.pending.push_back((ts, actor, kind, payload));
    }

    fn slug(&mut self) -> String {
        let builds = &self.repo.builds;
        if builds.is_empty() {
            return "none".into();
        }
        let i = self.text.int(0, builds.len() as i64 - 1) as usize;
        builds[i].slug.clone()
    }

    fn human(&mut self) -> String {
        json!({ "kind": "human", "user": self.text.pick(USERS) }).to_string()
    }

    fn episode(&mut self) {
        let Some(run) = self.run.clone() else {
            if self.text.chance(0.3) {
                let actor = self.human();
                self.queue(actor, "dispatcher.intake-set", json!({ "enabled": true }));
            }
            let run = format!("run_{}", self.text.hex(12));
            self.effective_rev += 1;
            let pid = self.text.int(1000, 400_000);
            let warnings: Vec<String> = if self.text.chance(0.2) {
                vec![format!("roles.{} is not consumed", self.text.word())]
            } else {
                Vec::new()
            };
            self.queue(
                DISPATCHER.into(),
                "dispatcher.run-started",
                json!({ "run": run, "pid": pid, "effectiveConfig": { "kind": "dispatcher-effective-config", "rev": self.effective_rev - 1 }, "roleWarnings": warnings }),
            );
            self.run = Some(run);
            return;
        };
        let roll = self.text.int(0, 99_999);
        match roll {
            0..=29 => {
                self.queue(
                    DISPATCHER.into(),
                    "dispatcher.run-stopped",
                    json!({ "run": run, "outcome": "normal", "exitCode": 0 }),
                );
                self.run = None;
            }
            30..=429 => {
                let slug = self.slug();
                let (outcome, status) = match self.text.int(0, 3) {
                    0 => ("parked", "blocked"),
                    1 => ("parked", "done"),
                    2 => ("parked", "paused"),
                    _ => ("lease-held", "running"),
                };
                self.queue(
                    DISPATCHER.into(),
                    "dispatcher.runner-settled",
                    json!({ "run": run, "slug": slug, "outcome": outcome, "status": status }),
                );
            }
            430..=529 => {
                let actor = self.human();
                let level = self.text.pick(&["info", "warning"]);
                let message = self.text.sentence(4, 14);
                self.queue(
                    actor,
                    "dispatcher.operator-reported",
                    json!({ "run": run, "level": level, "message": message }),
                );
            }
            530..=579 => {
                self.effective_rev += 1;
                self.queue(
                    DISPATCHER.into(),
                    "dispatcher.config-reloaded",
                    json!({ "artifact": { "kind": "dispatcher-config", "rev": self.effective_rev }, "restartRequired": [], "effectiveChanged": true, "run": run, "effectiveConfig": { "kind": "dispatcher-effective-config", "rev": self.effective_rev - 1 }, "roleWarnings": [] }),
                );
            }
            580..=639 => self.harvest(),
            640..=739 => {
                let error = format!(
                    "{}: {}",
                    self.text.pick(&[
                        "forge timeout",
                        "ticket source unavailable",
                        "git fetch failed"
                    ]),
                    self.text.sentence(3, 10)
                );
                self.queue(
                    DISPATCHER.into(),
                    "dispatcher.tick-failed",
                    json!({ "run": run, "error": error }),
                );
            }
            _ => self.tick(&run),
        }
    }

    fn tick(&mut self, run: &str) {
        self.queue(
            DISPATCHER.into(),
            "dispatcher.tick-started",
            json!({ "run": run }),
        );
        let mut counters = serde_json::Map::new();
        for name in COUNTERS {
            let busy = self.text.chance(0.02);
            counters.insert(
                (*name).into(),
                json!(if busy { self.text.int(1, 2) } else { 0 }),
            );
        }
        let diagnostics = |text: &mut Text, p: f64| -> Vec<String> {
            if text.chance(p) {
                vec![format!(
                    "ENG-{}: {}",
                    text.int(1000, 9999),
                    text.sentence(4, 12)
                )]
            } else {
                Vec::new()
            }
        };
        let janitor = diagnostics(&mut self.text, 0.01);
        let tickets = diagnostics(&mut self.text, 0.05);
        let dependencies = diagnostics(&mut self.text, 0.02);
        let queued = self.text.int(0, 6);
        self.queue(
            DISPATCHER.into(),
            "dispatcher.tick-completed",
            json!({ "run": run, "queued": queued, "janitorDiagnostics": janitor, "ticketDiagnostics": tickets, "creationDiagnostics": [], "dependencyDiagnostics": dependencies, "counters": counters }),
        );
    }

    fn harvest(&mut self) {
        let run = format!("h_{}", self.text.hex(8));
        let observations: Vec<Value> = (0..self.text.int(1, 6))
            .map(|_| {
                let build = self.slug();
                json!({ "build": build, "seq": self.text.int(5, 90) })
            })
            .collect();
        let scan = self.text.int(0, 500);
        self.queue(
            DISPATCHER.into(),
            "harvest.started",
            json!({ "run": run, "observations": observations, "scan": { "kind": "harvest-scan", "rev": scan }, "trigger": "count" }),
        );
        let session = format!("hs_{}", self.text.hex(6));
        self.queue(
            KERNEL.into(),
            "harvest.session.started",
            json!({ "run": run, "session": session, "role": "harvest", "runner": "claude", "step": "synthesize", "round": 1 }),
        );
        let usage = json!({ "inputTokens": self.text.int(5_000, 300_000), "outputTokens": self.text.int(200, 20_000), "turns": self.text.int(2, 40) });
        self.queue(
            KERNEL.into(),
            "harvest.session.ended",
            json!({ "run": run, "session": session, "transcript": { "kind": "transcript", "rev": scan }, "usage": usage }),
        );
        self.queue(
            KERNEL.into(),
            "harvest.step.completed",
            json!({ "run": run, "step": "synthesize", "outcome": "approve", "round": 1, "artifact": { "kind": "harvest-proposals", "rev": scan } }),
        );
        let dispositions: Vec<Value> = observations
            .iter()
            .map(|occurrence| {
                json!({ "occurrence": occurrence, "action": "filed", "proposalKey": format!("cluster-{}", self.text.hex(4)), "ticket": { "source": "linear", "id": format!("ENG-{}", self.text.int(1000, 9999)) } })
            })
            .collect();
        self.queue(
            KERNEL.into(),
            "harvest.completed",
            json!({ "run": run, "dispositions": dispositions, "report": { "kind": "harvest-report", "rev": scan } }),
        );
    }
}

impl Iterator for Journal<'_> {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        while self.pending.is_empty() {
            self.episode();
        }
        let (ts, actor, kind, payload) = self.pending.pop_front()?;
        Some(Event {
            ts,
            actor,
            kind,
            payload: payload.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use abstore_catalog::{Catalogs, Family};

    fn small() -> History {
        let size = Size {
            journal_events: 3_000,
            builds: 12,
            events_per_build: 100,
            span_secs: 86_400,
        };
        generate(2, size, 2, 1_784_116_800_000, 42)
    }

    fn check(catalogs: &Catalogs, family: Family, event: &Event) {
        let actor: Value = serde_json::from_str(&event.actor).expect("actor JSON");
        let payload: Value = serde_json::from_str(&event.payload).expect("payload JSON");
        let validated = catalogs
            .validate(family, &actor, event.kind, &payload)
            .unwrap_or_else(|err| panic!("{} {}: {err}", event.kind, event.payload));
        // Stored as validated: the catalog changes nothing.
        assert_eq!(
            validated.as_ref(),
            &payload,
            "{} is not in its validated form",
            event.kind
        );
    }

    #[test]
    fn every_generated_event_is_valid_in_the_catalogs() {
        let catalogs = Catalogs::embedded().expect("catalogs");
        let history = small();
        let mut types = std::collections::BTreeSet::new();
        for repo in &history.repos {
            for build in &repo.builds {
                for event in &build.events {
                    check(&catalogs, Family::Build, event);
                    types.insert(event.kind);
                }
            }
            assert_eq!(repo.journal().count(), 3_000);
            for event in repo.journal() {
                check(&catalogs, Family::Repository, &event);
                types.insert(event.kind);
            }
        }
        assert!(types.len() > 30, "too few event types: {types:?}");
    }

    #[test]
    fn histories_have_the_asked_shape() {
        let history = small();
        assert_eq!(history.repos.len(), 2);
        for repo in &history.repos {
            assert_eq!(repo.builds.len(), 12);
            let finished = repo.builds.iter().filter(|b| b.finished).count();
            assert_eq!(finished, 10);
            for build in &repo.builds {
                let times: Vec<i64> = build.events.iter().map(|e| e.ts).collect();
                assert!(
                    times.windows(2).all(|w| w[0] <= w[1]),
                    "{} goes back in time",
                    build.slug
                );
                assert!(build.updated_at <= history.now);
                let completed = build.events.iter().any(|e| e.kind == "build.completed");
                assert_eq!(completed, build.finished);
                if build.finished {
                    assert!(
                        (60..=140).contains(&build.events.len()),
                        "{}",
                        build.events.len()
                    );
                }
            }
            let times: Vec<i64> = repo.journal().map(|e| e.ts).collect();
            assert!(times.windows(2).all(|w| w[0] <= w[1]));
            assert!(*times.last().unwrap() <= history.now + 60_000);
        }
        // Deterministic.
        let again = small();
        assert_eq!(
            again.repos[1].builds[3].events[7].payload,
            history.repos[1].builds[3].events[7].payload
        );
    }
}
