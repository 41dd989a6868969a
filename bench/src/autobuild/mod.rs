//! `autobuild`: a replay of how Autobuild uses its store
//! (docs/benchmarks/autobuild-replay.md). For each store age, a history is
//! generated once, written as an abstore archive and imported into a SQLite
//! file and a PostgreSQL database (and written straight into the reference
//! server's SQLite file); then dashboards, dispatchers, build runners and
//! agents run against each server in turn for the modelled seconds, and the
//! server's CPU, the bytes it sent, append and heartbeat latencies and its
//! memory are reported, with the disk's own `fsync` latency in the same run.

mod archive;
mod clients;
mod disk;
mod history;
mod protocol3;
mod protocols;
mod reference_seed;
mod stats;
mod text;
mod threads;
mod whole;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use base64::Engine as _;
use serde_json::json;

use crate::harness::{Backend, Ctx, Db, Server, ServerOpts, Table, client_with_timeout, mib};
pub use clients::Pace;
use clients::Proc;
use history::{History, Size};
pub use protocols::{frame, tick};
use stats::{Op, Recorder, Totals};
use threads::Priority;
pub use whole::whole;

/// A store age: history per repository.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Age {
    pub name: String,
    pub size: Size,
}

impl std::str::FromStr for Age {
    type Err = String;

    /// `day`, `week`, `month`, or `JOURNAL:BUILDS[:EVENTS_PER_BUILD]` (a
    /// custom size, spanning as long as the dispatcher takes to write that
    /// journal: ~17,000 events a day).
    fn from_str(text: &str) -> Result<Age, String> {
        let (journal, builds, span) = match text {
            "day" => (17_000, 30, 86_400),
            "week" => (120_000, 200, 7 * 86_400),
            "month" => (500_000, 1_000, 30 * 86_400),
            custom => {
                let parts: Vec<u64> = custom
                    .split(':')
                    .map(|p| p.parse::<u64>())
                    .collect::<Result<_, _>>()
                    .map_err(|_| {
                        format!(
                            "an age is day, week, month or JOURNAL:BUILDS[:EVENTS], not {custom:?}"
                        )
                    })?;
                let (journal, builds, per_build) = match parts[..] {
                    [j, b] => (j, b, 100),
                    [j, b, e] => (j, b, e),
                    _ => return Err(format!("an age is JOURNAL:BUILDS[:EVENTS], not {custom:?}")),
                };
                let span = (journal as i64 * 86_400 / 17_000).max(3_600);
                return Ok(Age {
                    name: custom.to_owned(),
                    size: Size {
                        journal_events: journal,
                        builds,
                        events_per_build: per_build,
                        span_secs: span,
                    },
                });
            }
        };
        Ok(Age {
            name: text.to_owned(),
            size: Size {
                journal_events: journal,
                builds,
                events_per_build: 100,
                span_secs: span,
            },
        })
    }
}

/// The scenario's parameters (the command line's replay options).
#[derive(Clone, Debug)]
pub struct Params {
    pub ages: Vec<Age>,
    pub repos: usize,
    /// Per repository.
    pub runners: u64,
    pub dashboards: usize,
    pub dispatchers: usize,
    pub seconds: f64,
    /// Sent with every read (`Accept-Encoding`); `None`: each scenario's
    /// default ([`Params::replay_encoding`], [`Params::compare_encoding`]).
    pub accept_encoding: Option<String>,
    pub pace: Pace,
    /// Whether `frame` and `tick` measure protocol 2 too (protocol 3 always).
    pub protocol_2: bool,
}

impl Params {
    /// The replay's `Accept-Encoding`: Bun's fetch's (Autobuild's client)
    /// unless one was given.
    pub fn replay_encoding(&self) -> String {
        self.accept_encoding
            .clone()
            .unwrap_or_else(|| "gzip, deflate, br, zstd".to_owned())
    }

    /// `frame`'s and `tick`'s: `identity` unless one was given, as their
    /// recorded figures were measured.
    pub fn compare_encoding(&self) -> String {
        self.accept_encoding
            .clone()
            .unwrap_or_else(|| "identity".to_owned())
    }
}

/// The servers a run compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Abstore(Backend),
    Reference,
}

impl Target {
    fn label(self) -> &'static str {
        match self {
            Target::Abstore(Backend::Postgres) => "abstore, PostgreSQL",
            Target::Abstore(_) => "abstore, SQLite file",
            Target::Reference => "reference (Bun, SQLite file)",
        }
    }
}

pub async fn autobuild(ctx: &Ctx, params: &Params) -> Result<Vec<Table>> {
    let mut seeding = Table::new(
        "autobuild replay: seeding the aged stores",
        &[
            "age",
            "journal events / repo",
            "builds / repo (events)",
            "archive MB",
            "generate + write s",
            "import SQLite file s",
            "import PostgreSQL s",
            "reference seed s",
        ],
    );
    let mut results = Table::new(
        &format!(
            "autobuild replay: {} repo(s) × ({} dashboard(s), {} dispatcher(s), {} runner(s)), {} modelled s",
            params.repos, params.dashboards, params.dispatchers, params.runners, params.seconds
        ),
        &[
            "age",
            "server",
            "server CPU s / modelled s",
            "MB sent",
            "MB sent / server CPU s",
            "requests (errors)",
            "frames / s / dashboard",
            "frame p50 ms",
            "ticks (mean s)",
            "append p50 / p99 / p99.9 ms (n)",
            "heartbeat p50 / p99 ms (n)",
            "deposit p50 / p99 ms (n)",
            "disk fsync p50 / p99 / p99.9 ms (n)",
            "RSS MiB idle / peak / 5 s after",
            "notes",
        ],
    );
    let mut traffic = Table::new(
        "autobuild replay: traffic by request kind (requests / MB sent)",
        &[
            "age",
            "server",
            "whole journal",
            "journal delta",
            "whole build log",
            "build delta",
            "held read",
            "GET /builds",
            "appends (build + repo)",
            "deposits",
        ],
    );
    let corpus = Arc::new(clients::corpus(
        4 * params.pace.transcript_bytes.max(64 * 1024),
        17,
    ));
    for age in &params.ages {
        eprintln!("autobuild: generating the {} store", age.name);
        let started = Instant::now();
        let now = now_ms() - 10_000;
        let history = history::generate(params.repos, age.size, params.runners, now, 0x5eed);
        let archive_path = ctx
            .work_dir
            .join(format!("age-{}.ndjson", age.name.replace(':', "-")));
        let written = archive::write(&history, &archive_path)?;
        let generated = started.elapsed();
        eprintln!(
            "autobuild: {} resources, {} events, {:.1} MB in {:.1} s",
            written.resources,
            written.events,
            written.bytes as f64 / 1e6,
            generated.as_secs_f64()
        );
        let mut seed_times: [Option<Duration>; 3] = [None; 3];
        let mut targets = vec![Target::Abstore(Backend::SqliteFile)];
        if ctx.pg_base.is_some() {
            targets.push(Target::Abstore(Backend::Postgres));
        }
        if ctx.reference.is_some() {
            targets.push(Target::Reference);
        }
        for target in targets {
            eprintln!("autobuild: {} on {}", age.name, target.label());
            let outcome =
                match target {
                    Target::Abstore(backend) => {
                        crate::harness::with_db(ctx, backend, |db| {
                            let (history, archive_path, corpus) =
                                (&history, &archive_path, corpus.clone());
                            async move {
                                run_abstore(ctx, params, &db, history, archive_path, corpus).await
                            }
                        })
                        .await
                    }
                    Target::Reference => run_reference(ctx, params, &history, corpus.clone()).await,
                };
            let (seeded, run) = match outcome {
                Ok(outcome) => outcome,
                Err(err) => {
                    eprintln!(
                        "autobuild: {} on {} failed: {err:#}",
                        age.name,
                        target.label()
                    );
                    results.push(vec![
                        age.name.clone(),
                        target.label().into(),
                        format!("failed: {err:#}"),
                    ]);
                    continue;
                }
            };
            let slot = match target {
                Target::Abstore(Backend::Postgres) => 1,
                Target::Abstore(_) => 0,
                Target::Reference => 2,
            };
            seed_times[slot] = Some(seeded);
            results.push(run.row(&age.name, target.label(), params));
            traffic.push(run.traffic(&age.name, target.label()));
        }
        let secs = |d: Option<Duration>| {
            d.map_or_else(|| "–".to_owned(), |d| format!("{:.1}", d.as_secs_f64()))
        };
        seeding.push(vec![
            age.name.clone(),
            age.size.journal_events.to_string(),
            format!("{} ({})", age.size.builds, age.size.events_per_build),
            format!("{:.1}", written.bytes as f64 / 1e6),
            format!("{:.1}", generated.as_secs_f64()),
            secs(seed_times[0]),
            secs(seed_times[1]),
            secs(seed_times[2]),
        ]);
        let _ = std::fs::remove_file(&archive_path);
    }
    Ok(vec![seeding, results, traffic])
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// `abstore import --apply` of the archive into the database; its duration.
fn import(ctx: &Ctx, archive: &Path, database: &str, blobs: &Path) -> Result<Duration> {
    let started = Instant::now();
    let output = Command::new(&ctx.server_bin)
        .arg("import")
        .arg(archive)
        .args(["--database", database, "--blobs"])
        .arg(blobs)
        .args(["--apply", "--quiet"])
        .output()
        .context("running abstore import")?;
    if !output.status.success() {
        bail!(
            "abstore import failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(started.elapsed())
}

fn scratch(ctx: &Ctx, name: &str) -> Result<PathBuf> {
    let dir = ctx
        .work_dir
        .join(format!("{name}-{}", crate::harness::unique_suffix()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

async fn run_abstore(
    ctx: &Ctx,
    params: &Params,
    db: &Db,
    history: &History,
    archive: &Path,
    corpus: Arc<String>,
) -> Result<(Duration, Run)> {
    let blobs = scratch(ctx, "blobs")?;
    let seeded = import(ctx, archive, &db.url, &blobs)?;
    let mut opts = ServerOpts::new(db, format!("autobuild-{:?}", db.backend));
    opts.blobs = format!("file://{}", blobs.display());
    // Session transcripts are MB-scale: raise the artifact ceiling (1 MiB by default).
    opts.extra = [
        "--max-artifact-bytes",
        "16777216",
        "--max-body-bytes",
        "33554432",
    ]
    .map(String::from)
    .to_vec();
    let server = Server::start(ctx, opts).await?;
    let run = replay(&server, params, history, corpus, &ctx.work_dir).await;
    server.stop().await?;
    let _ = std::fs::remove_dir_all(&blobs);
    Ok((seeded, run?))
}

async fn run_reference(
    ctx: &Ctx,
    params: &Params,
    history: &History,
    corpus: Arc<String>,
) -> Result<(Duration, Run)> {
    let reference = ctx
        .reference
        .as_ref()
        .context("no reference server configured")?;
    let dir = scratch(ctx, "reference")?;
    let file = dir.join("reference.sqlite");
    let blobs = dir.join("blobs");
    std::fs::create_dir_all(&blobs)?;
    let store = format!("sqlite-file:{}", file.display());
    let args = [store, blobs.display().to_string()];
    // First start: the store creates its tables; then its rows are written
    // into the file while it is stopped.
    let started = Instant::now();
    reference
        .start(ctx, &args, "autobuild-reference-schema")
        .await?
        .stop()
        .await?;
    let rows = reference_seed::seed(history, &file)?;
    let seeded = started.elapsed();
    eprintln!(
        "autobuild: reference seeded with {rows} rows in {:.1} s",
        seeded.as_secs_f64()
    );
    let server = reference.start(ctx, &args, "autobuild-reference").await?;
    let run = replay(&server, params, history, corpus, &dir).await;
    server.stop().await?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok((seeded, run?))
}

/// What one replay against one server measured.
struct Run {
    seconds: f64,
    cpu: Duration,
    totals: Totals,
    rss_idle: u64,
    rss_peak: u64,
    rss_after: u64,
    dashboards: usize,
    /// The disk's `fsync` latencies in the same run ([`disk`]).
    disk_fsyncs: Vec<Duration>,
}

/// Appends a run needs before its p99 says anything about the tail.
const MIN_TAIL_SAMPLES: usize = 1_000;

impl Run {
    fn row(&self, age: &str, server: &str, params: &Params) -> Vec<String> {
        let t = &self.totals;
        let frames = t.frames.len() as f64 / self.seconds / self.dashboards.max(1) as f64;
        let mut sorted_frames = t.frames.clone();
        sorted_frames.sort_unstable();
        let mean_tick = if t.ticks.is_empty() {
            "–".to_owned()
        } else {
            format!(
                "{:.2}",
                t.ticks.iter().map(Duration::as_secs_f64).sum::<f64>() / t.ticks.len() as f64
            )
        };
        // Build and repository appends together.
        let appends: Vec<Duration> = [Op::Append, Op::RepoAppend]
            .iter()
            .flat_map(|op| t.op(*op).latencies.iter().copied())
            .collect();
        let mut notes = Vec::new();
        if let Some(err) = &t.first_error {
            notes.push(format!(
                "first error: {}",
                err.chars().take(160).collect::<String>()
            ));
        }
        notes.push(format!(
            "{} runners",
            params.runners as usize * params.repos
        ));
        if appends.len() < MIN_TAIL_SAMPLES {
            // Issue 52: with a few hundred appends the p99 is nearly the
            // slowest one; more runners or modelled seconds give more.
            notes.push(format!(
                "only {} appends: the p99 is not a tail (≥ {MIN_TAIL_SAMPLES} needed)",
                appends.len()
            ));
        }
        vec![
            age.into(),
            server.into(),
            format!("{:.3}", self.cpu.as_secs_f64() / self.seconds),
            format!("{:.0}", t.bytes() as f64 / 1e6),
            // Work per CPU: closed loops saturate a slow server, which then
            // shows the same CPU per second for less work.
            format!(
                "{:.0}",
                t.bytes() as f64 / 1e6 / self.cpu.as_secs_f64().max(0.01)
            ),
            format!("{} ({})", t.requests(), t.errors()),
            format!("{frames:.2}"),
            if sorted_frames.is_empty() {
                "–".into()
            } else {
                crate::harness::ms(crate::harness::percentile(&sorted_frames, 0.5))
            },
            format!("{} ({mean_tick})", t.ticks.len()),
            stats::tail_latency(&appends),
            t.latency(Op::Heartbeat),
            t.latency(Op::Deposit),
            stats::tail_latency(&self.disk_fsyncs),
            format!(
                "{} / {} / {}",
                mib(self.rss_idle),
                mib(self.rss_peak),
                mib(self.rss_after)
            ),
            notes.join("; "),
        ]
    }

    fn traffic(&self, age: &str, server: &str) -> Vec<String> {
        let t = &self.totals;
        let cell = |ops: &[Op]| {
            let (n, bytes) = ops.iter().fold((0u64, 0u64), |(n, b), op| {
                let s = t.op(*op);
                (n + s.ok + s.errors, b + s.bytes)
            });
            format!("{n} / {:.1}", bytes as f64 / 1e6)
        };
        vec![
            age.into(),
            server.into(),
            cell(&[Op::JournalWhole]),
            cell(&[Op::JournalDelta]),
            cell(&[Op::BuildWhole]),
            cell(&[Op::BuildDelta]),
            cell(&[Op::HeldRead]),
            cell(&[Op::ListBuilds]),
            cell(&[Op::Append, Op::RepoAppend]),
            cell(&[Op::Deposit]),
        ]
    }
}

/// Before any load: each repository's effective config, which every
/// dashboard loads once (a dispatcher run publishes it at start).
async fn publish_effective_config(p: &Proc, history: &History, capacity: u64) -> Result<()> {
    for repo in &history.repos {
        let config = json!({ "capacity": capacity, "policy": { "sessionBudgetSeconds": 3600 }, "repo": repo.id });
        let body = json!({
            "kind": clients::EFFECTIVE_CONFIG,
            "contentBase64": base64::engine::general_purpose::STANDARD.encode(config.to_string()),
            "metadata": { "run": "run_replay" },
        });
        p.post(
            Op::Artifact,
            &format!("/repos/{}/artifacts", clients::enc(&repo.id)),
            body.to_string(),
        )
        .await?;
    }
    Ok(())
}

/// Run every simulated process against `server` for the modelled seconds.
async fn replay(
    server: &Server,
    params: &Params,
    history: &History,
    corpus: Arc<String>,
    disk: &Path,
) -> Result<Run> {
    let rec = Recorder::new();
    // Long whole-history reads on a slow server must not time out early.
    let timeout = Duration::from_secs(300);
    let process = || Proc {
        http: client_with_timeout(timeout),
        base: server.base.clone(),
        accept_encoding: params.replay_encoding(),
        rec: rec.clone(),
    };
    publish_effective_config(&process(), history, params.runners).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_idle = server.rss()?;
    rec.take();
    let seconds = params.seconds;
    let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(seconds);
    let cpu0 = server.cpu()?;
    let probe = disk::Probe::start(disk)?;
    let mut tasks = tokio::task::JoinSet::new();
    let mut threads = threads::ProcessThreads::default();
    let mut n = 0u64;
    for repo in &history.repos {
        for d in 0..params.dashboards {
            let phase = Duration::from_millis(137 * d as u64 % 500);
            threads.spawn(
                &mut tasks,
                Priority::Load,
                clients::dashboard(process(), repo.id.clone(), phase, deadline),
            );
        }
        for d in 0..params.dispatchers {
            let phase = Duration::from_millis(3_000 * d as u64 + 250);
            let run = format!("run_replay{d}");
            threads.spawn(
                &mut tasks,
                Priority::Load,
                clients::dispatcher(process(), repo.id.clone(), run, phase, deadline),
            );
        }
        for build in repo.builds.iter().filter(|b| !b.finished) {
            n += 1;
            // The agent's `ab` commands: a new process, so a new connection, per request.
            let cli = Proc {
                http: crate::harness::one_shot_client(timeout),
                base: server.base.clone(),
                accept_encoding: params.replay_encoding(),
                rec: rec.clone(),
            };
            threads.spawn(
                &mut tasks,
                Priority::Timed,
                clients::runner(
                    process(),
                    cli,
                    build.slug.clone(),
                    params.pace,
                    corpus.clone(),
                    0xb01d ^ n,
                    deadline,
                ),
            );
        }
    }
    tokio::time::sleep_until(deadline).await;
    let cpu = server.cpu()? - cpu0;
    let rss_peak = server.peak_rss()?;
    let disk_fsyncs = probe.stop()?;
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    threads.stop();
    let totals = rec.take();
    // Memory 5 s after the load stops (the clients have gone).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss_after = server.rss()?;
    Ok(Run {
        seconds,
        cpu,
        totals,
        rss_idle,
        rss_peak,
        rss_after,
        dashboards: params.dashboards * params.repos,
        disk_fsyncs,
    })
}
