//! abstore-load: load scenarios against real `abstore serve` processes.
//!
//! Each scenario spawns its own server process(es) on loopback, with a fresh
//! database (a PostgreSQL database `abstore_bench_<random>` is created and
//! dropped per use), runs bounded phases of a few seconds and prints markdown
//! tables. With `--reference`, each throughput scenario also runs against
//! Autobuild's reference server, side by side. See docs/benchmarks.md. Never
//! part of the test suite.

mod autobuild;
mod harness;
mod memory;
mod migrate;
mod raw;
mod reference;
mod streams;
mod tail;
mod throughput;
mod tickets;
mod wake;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context as _, Result, bail};
use clap::{Parser, ValueEnum};

use harness::{Ctx, Table};

#[derive(Parser)]
#[command(
    name = "abstore-load",
    about = "Load scenarios for abstore (see docs/benchmarks.md)"
)]
struct Cli {
    /// Scenario to run.
    #[arg(value_enum)]
    scenario: Scenario,

    /// The server binary (build it with `cargo build --release --bin abstore`).
    #[arg(long, env = "ABSTORE_BENCH_SERVER")]
    server: Option<PathBuf>,

    /// PostgreSQL base URL without a database; fresh databases are created under it.
    #[arg(
        long,
        env = "ABSTORE_BENCH_POSTGRES",
        default_value = "postgres://postgres@127.0.0.1:5432"
    )]
    postgres: String,

    /// Skip every PostgreSQL measurement.
    #[arg(long)]
    no_postgres: bool,

    /// Measured seconds per load phase.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,

    /// Unmeasured warm-up seconds before each load phase.
    #[arg(long, default_value_t = 0.5)]
    warmup: f64,

    /// An Autobuild checkout with its dependencies installed: run the
    /// throughput scenarios against its reference server too (under Bun).
    #[arg(long, env = "ABSTORE_BENCH_REFERENCE")]
    reference: Option<PathBuf>,

    /// The Bun executable for `--reference` (default: `bun` on PATH).
    #[arg(long, env = "ABSTORE_BENCH_BUN", requires = "reference")]
    bun: Option<PathBuf>,

    /// Also write the result tables (markdown) to this file.
    #[arg(long)]
    out: Option<PathBuf>,

    /// `whole`: the repository journals to read, in events (60,000 is the
    /// memory target's; a week-old store's journal is about 120,000).
    #[arg(long, value_delimiter = ',', default_value = "60000,120000")]
    journal_events: Vec<u64>,

    #[command(flatten)]
    replay: ReplayArgs,

    #[command(flatten)]
    migrate: migrate::MigrateArgs,
}

/// The `autobuild` scenario's model (docs/benchmarks/autobuild-replay.md);
/// `frame` and `tick` use `--age` and `--runners`.
#[derive(clap::Args)]
#[command(next_help_heading = "autobuild replay, frame, tick")]
struct ReplayArgs {
    /// Store ages to replay: day, week, month, or JOURNAL:BUILDS[:EVENTS]
    /// (events per repository journal, builds per repository, events per build).
    #[arg(long, value_delimiter = ',', default_value = "day,week")]
    age: Vec<autobuild::Age>,

    /// Repositories (each with the age's history, its dashboards, dispatchers and runners).
    #[arg(long, default_value_t = 1)]
    repos: usize,

    /// Active builds per repository, each with a build runner.
    #[arg(long, default_value_t = 2)]
    runners: u64,

    /// Open dashboards (`ab dispatch` frontends) per repository.
    #[arg(long, default_value_t = 2)]
    dashboards: usize,

    /// Dispatchers (kernels ticking every 10 s) per repository.
    #[arg(long, default_value_t = 1)]
    dispatchers: usize,

    /// Modelled (and wall-clock) seconds of each replay.
    #[arg(long, default_value_t = 60.0)]
    modelled_seconds: f64,

    /// Mean length of an agent session (seconds).
    #[arg(long, default_value_t = 20.0)]
    session_seconds: f64,

    /// Mean seconds between an agent's observations within a session.
    #[arg(long, default_value_t = 2.0)]
    observation_every: f64,

    /// Mean size of a session transcript deposit (KiB).
    #[arg(long, default_value_t = 1024)]
    transcript_kib: usize,

    /// The `Accept-Encoding` every read sends. The replay's default is what
    /// Bun's fetch (Autobuild's client) sends; `frame` and `tick` default to
    /// `identity` (asks for none), as their recorded figures were measured.
    #[arg(long)]
    accept_encoding: Option<String>,

    /// The protocols `frame` and `tick` measure: `2,3` (and the ratio of
    /// the two), or `3` alone (a month-old store's protocol-2 frame reads
    /// hundreds of megabytes).
    #[arg(long, value_delimiter = ',', default_value = "2,3", value_parser = clap::value_parser!(u8).range(2..=3))]
    protocols: Vec<u8>,
}

impl ReplayArgs {
    fn params(&self) -> autobuild::Params {
        autobuild::Params {
            ages: self.age.clone(),
            repos: self.repos.max(1),
            runners: self.runners,
            dashboards: self.dashboards,
            dispatchers: self.dispatchers,
            seconds: self.modelled_seconds,
            accept_encoding: self.accept_encoding.clone(),
            protocol_2: self.protocols.contains(&2),
            pace: autobuild::Pace {
                session: std::time::Duration::from_secs_f64(self.session_seconds),
                observation_every: std::time::Duration::from_secs_f64(self.observation_every),
                transcript_bytes: self.transcript_kib * 1024,
            },
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    Append,
    Read,
    Deposit,
    Put,
    Health,
    Wake,
    Memory,
    Streams,
    /// Per-route latency from fresh servers on (not part of `all`).
    Tail,
    /// Whole-journal reads: CPU per MB, compression, memory (not part of `all`).
    Whole,
    /// The replay of Autobuild's use of its store (not part of `all`).
    Autobuild,
    /// One dashboard frame, protocol 2 against protocol 3, on aged stores (not part of `all`).
    Frame,
    /// One dispatcher tick, protocol 2 against protocol 3, on aged stores (not part of `all`).
    Tick,
    /// Hosted tickets: list-ready and dependency-states at a team of 10,000 (not part of `all`).
    Tickets,
    /// Appends served by the previous version while the newest migrations
    /// run on a store of a million events (PostgreSQL; not part of `all`).
    Migrate,
    All,
}

fn default_server() -> PathBuf {
    // bench/ sits in the workspace root, next to target/.
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/release/abstore")
}

fn clk_tck() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100)
}

// One runtime thread: the load generator shares the cores with the server,
// and a single-threaded client costs the least CPU per request (no
// cross-thread wake-ups).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let server_bin = cli.server.clone().unwrap_or_else(default_server);
    if !server_bin.is_file() {
        bail!(
            "no server binary at {}; run `cargo build --release --bin abstore` or pass --server",
            server_bin.display()
        );
    }
    let reference = cli
        .reference
        .as_deref()
        .map(|checkout| reference::Reference::new(checkout, cli.bun.clone()))
        .transpose()?;
    let work_dir = std::env::temp_dir().join(format!("abstore-bench-{}", harness::unique_suffix()));
    std::fs::create_dir_all(&work_dir)?;
    let ctx = Ctx {
        server_bin: server_bin.canonicalize()?,
        pg_base: (!cli.no_postgres).then(|| cli.postgres.trim_end_matches('/').to_owned()),
        seconds: cli.seconds,
        warmup: cli.warmup,
        work_dir: work_dir.clone(),
        clk_tck: clk_tck(),
        reference,
    };
    if let Some(base) = &ctx.pg_base {
        use sqlx::Connection as _;
        sqlx::PgConnection::connect(&format!("{base}/postgres"))
            .await
            .with_context(|| {
                format!("PostgreSQL at {base} is not reachable (pass --no-postgres to skip it)")
            })?
            .close()
            .await?;
    }
    let started = Instant::now();
    let load_before = harness::loadavg();
    let reference_line = ctx.reference.as_ref().map_or_else(
        || "no reference server".to_owned(),
        |r| {
            format!(
                "reference: Autobuild checkout {} under Bun {}",
                r.checkout.display(),
                r.bun_version
            )
        },
    );
    eprintln!(
        "abstore-load: server {}, {reference_line}, scratch {}, load average {load_before}",
        ctx.server_bin.display(),
        work_dir.display()
    );
    let scenarios: Vec<Scenario> = match cli.scenario {
        Scenario::All => vec![
            Scenario::Append,
            Scenario::Read,
            Scenario::Deposit,
            Scenario::Put,
            Scenario::Health,
            Scenario::Wake,
            Scenario::Memory,
            Scenario::Streams,
        ],
        one => vec![one],
    };
    let mut tables: Vec<Table> = Vec::new();
    let mut failure = None;
    for scenario in scenarios {
        let result = match scenario {
            Scenario::Append => throughput::append(&ctx).await.map(|t| vec![t]),
            Scenario::Read => throughput::read(&ctx).await.map(|t| vec![t]),
            Scenario::Deposit => throughput::deposit(&ctx).await.map(|t| vec![t]),
            Scenario::Put => throughput::put(&ctx).await.map(|t| vec![t]),
            Scenario::Health => throughput::health(&ctx).await.map(|t| vec![t]),
            Scenario::Wake => wake::wake(&ctx).await.map(|t| vec![t]),
            Scenario::Memory => memory::memory(&ctx).await.map(|t| vec![t]),
            Scenario::Streams => streams::streams(&ctx).await.map(|t| vec![t]),
            Scenario::Tail => tail::tail(&ctx).await.map(|t| vec![t]),
            Scenario::Whole => autobuild::whole(&ctx, &cli.journal_events).await,
            Scenario::Autobuild => autobuild::autobuild(&ctx, &cli.replay.params()).await,
            Scenario::Frame => autobuild::frame(&ctx, &cli.replay.params()).await,
            Scenario::Tick => autobuild::tick(&ctx, &cli.replay.params()).await,
            Scenario::Tickets => tickets::tickets(&ctx).await.map(|t| vec![t]),
            Scenario::Migrate => migrate::migrate(&ctx, &cli.migrate).await,
            Scenario::All => unreachable!(),
        };
        match result {
            Ok(done) => {
                for table in done {
                    println!("{}", table.render());
                    tables.push(table);
                }
            }
            Err(err) => {
                eprintln!("scenario failed: {err:#}");
                failure.get_or_insert(err);
            }
        }
    }
    let phases = match cli.scenario {
        Scenario::Autobuild => format!("replays of {} modelled s", cli.replay.modelled_seconds),
        Scenario::Frame | Scenario::Tick => format!(
            "per protocol, {} s measured (and at least the scenario's minimum count) after {} s warm-up",
            ctx.seconds, ctx.warmup
        ),
        _ => format!("{} s phases after {} s warm-up", ctx.seconds, ctx.warmup),
    };
    let summary = format!(
        "run: {:.0} s on {} CPUs; load average before {load_before}, after {}; {phases}; server CPU from /proc/<pid>/stat at {} ticks/s; {reference_line}\n",
        started.elapsed().as_secs_f64(),
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        harness::loadavg(),
        ctx.clk_tck,
    );
    println!("{summary}");
    if let Some(path) = &cli.out {
        let mut text = summary;
        for table in &tables {
            text.push('\n');
            text.push_str(&table.render());
        }
        std::fs::write(path, text)?;
    }
    let _ = std::fs::remove_dir_all(&work_dir);
    match failure {
        Some(err) => Err(err),
        None => Ok(()),
    }
}
