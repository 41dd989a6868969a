//! `frame` and `tick`: one dashboard frame, or one dispatcher tick, as
//! protocol 2 and as protocol 3 make it, on the replay's aged stores
//! (docs/benchmarks/frame-and-tick.md). Per store age and backend, one
//! server accepting both identities serves a single simulated process that
//! repeats the unit back to back with nothing else running, first as
//! protocol 2, then as protocol 3; per unit the scenario reports the
//! requests, the response bytes, the server's CPU and the latency the
//! process saw.

use std::time::{Duration, Instant};

use anyhow::Result;

use super::clients::{self, Frontend, Proc, Protocol};
use super::protocol3::RepoView;
use super::stats::{Op, Recorder, Totals};
use super::{History, Params, archive, history, import, now_ms, scratch};
use crate::harness::{
    Backend, Ctx, Identity, Server, ServerOpts, Table, client_as, ms, percentile, process_cpu,
    with_db,
};

/// What is repeated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit {
    /// `DispatchFrontend.renderOnce`.
    Frame,
    /// `dispatcherTick`.
    Tick,
}

impl Unit {
    fn name(self) -> &'static str {
        match self {
            Unit::Frame => "frame",
            Unit::Tick => "tick",
        }
    }

    /// The fewest measured units, however short the phase: enough for a
    /// p50, and a p99 that is the slowest but one or two.
    fn min_measured(self) -> usize {
        match self {
            Unit::Frame => 30,
            Unit::Tick => 15,
        }
    }
}

pub async fn frame(ctx: &Ctx, params: &Params) -> Result<Vec<Table>> {
    compare(ctx, params, Unit::Frame).await
}

pub async fn tick(ctx: &Ctx, params: &Params) -> Result<Vec<Table>> {
    compare(ctx, params, Unit::Tick).await
}

/// The request kinds of the traffic table, in its column order.
const TRAFFIC: [(&str, &[Op]); 10] = [
    ("whole journal", &[Op::JournalWhole]),
    ("journal delta", &[Op::JournalDelta]),
    ("state events", &[Op::StateEvents]),
    ("build digests", &[Op::BuildDigests]),
    ("whole build logs", &[Op::BuildWhole]),
    ("build deltas", &[Op::BuildDelta]),
    ("GET /builds", &[Op::ListBuilds]),
    ("repository record", &[Op::Repo]),
    ("journal appends", &[Op::RepoAppend]),
    ("config artifact", &[Op::Artifact]),
];

async fn compare(ctx: &Ctx, params: &Params, unit: Unit) -> Result<Vec<Table>> {
    let name = unit.name();
    let mut results = Table::new(
        &format!(
            "{name}: protocol 2 against protocol 3 (one process, back to back, nothing else running; {} unfinished builds)",
            params.runners
        ),
        &[
            "age",
            "backend",
            "protocol",
            &format!("{name}s"),
            &format!("requests / {name}"),
            &format!("KB sent / {name}"),
            &format!("server CPU ms / {name}"),
            &format!("PostgreSQL backends CPU ms / {name}"),
            &format!("{name} p50 / p99 ms"),
            "protocol 3 ÷ 2: CPU (server + backends), bytes",
        ],
    );
    let mut header = vec!["age", "backend", "protocol"];
    header.extend(TRAFFIC.iter().map(|(kind, _)| *kind));
    let mut traffic = Table::new(
        &format!("{name}: requests / KB sent per {name}, by request kind"),
        &header,
    );
    for age in &params.ages {
        eprintln!("{name}: generating the {} store", age.name);
        let history = history::generate(1, age.size, params.runners, now_ms() - 10_000, 0x5eed);
        let archive_path = ctx
            .work_dir
            .join(format!("{name}-{}.ndjson", age.name.replace(':', "-")));
        archive::write(&history, &archive_path)?;
        let mut backends = vec![Backend::SqliteFile];
        if ctx.pg_base.is_some() {
            backends.push(Backend::Postgres);
        }
        for backend in backends {
            eprintln!("{name}: {} on {}", age.name, backend.label());
            let measured = with_db(ctx, backend, |db| {
                let (history, archive_path) = (&history, &archive_path);
                async move {
                    let blobs = scratch(ctx, &format!("{name}-blobs"))?;
                    // On PostgreSQL the import leaves planner statistics.
                    import(ctx, archive_path, &db.url, &blobs)?;
                    let mut opts = ServerOpts::new(&db, format!("{name}-{:?}", db.backend));
                    opts.blobs = format!("file://{}", blobs.display());
                    for identity in [Identity::PROTOCOL_2, Identity::PROTOCOL_3] {
                        opts.extra.push("--accept-client".into());
                        opts.extra.push(identity.accept_arg());
                    }
                    let server = Server::start(ctx, opts).await?;
                    let backends = match db.backend {
                        Backend::Postgres => Some(Backends::connect(&db.url, ctx.clk_tck).await?),
                        _ => None,
                    };
                    let measured = both(ctx, &server, backends, history, params, unit).await;
                    server.stop().await?;
                    let _ = std::fs::remove_dir_all(&blobs);
                    measured
                }
            })
            .await;
            let (two, three) = match measured {
                Ok(both) => both,
                Err(err) => {
                    eprintln!(
                        "{name}: {} on {} failed: {err:#}",
                        age.name,
                        backend.label()
                    );
                    results.push(vec![
                        age.name.clone(),
                        backend.label().into(),
                        format!("failed: {err:#}"),
                    ]);
                    continue;
                }
            };
            let runs = two
                .iter()
                .map(|two| (Protocol::Two, two))
                .chain([(Protocol::Three, &three)]);
            for (protocol, run) in runs {
                let ratio = match (protocol, &two) {
                    (Protocol::Three, Some(two)) => format!(
                        "{:.3}, {:.4}",
                        run.total_cpu_ms() / two.total_cpu_ms().max(1e-9),
                        run.bytes() / two.bytes().max(1e-9)
                    ),
                    _ => "–".to_owned(),
                };
                let mut sorted = run.latencies.clone();
                sorted.sort_unstable();
                results.push(vec![
                    age.name.clone(),
                    backend.label().into(),
                    protocol.label().into(),
                    run.units().to_string(),
                    format!("{:.1}", run.requests()),
                    format!("{:.1}", run.bytes() / 1e3),
                    format!("{:.2}", run.cpu_ms()),
                    run.backends_ms()
                        .map_or_else(|| "–".to_owned(), |ms| format!("{ms:.2}")),
                    format!(
                        "{} / {}",
                        ms(percentile(&sorted, 0.5)),
                        ms(percentile(&sorted, 0.99))
                    ),
                    ratio,
                ]);
                let mut row = vec![
                    age.name.clone(),
                    backend.label().into(),
                    protocol.label().into(),
                ];
                row.extend(TRAFFIC.iter().map(|(_, ops)| run.kind(ops)));
                traffic.push(row);
            }
        }
        let _ = std::fs::remove_file(&archive_path);
    }
    Ok(vec![results, traffic])
}

/// The CPU of the PostgreSQL backends serving the scratch database (the
/// server's pool), from /proc like the server's own: the database runs on
/// this machine. A backend that exits during a phase takes its CPU with it;
/// the server's pool keeps its connections open.
struct Backends {
    conn: sqlx::PgConnection,
    clk_tck: u64,
}

impl Backends {
    async fn connect(url: &str, clk_tck: u64) -> Result<Backends> {
        use sqlx::Connection as _;
        Ok(Backends {
            conn: sqlx::PgConnection::connect(url).await?,
            clk_tck,
        })
    }

    /// `None` when no backend is a process of this machine.
    async fn cpu(&mut self) -> Result<Option<Duration>> {
        let pids: Vec<i32> = sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        .fetch_all(&mut self.conn)
        .await?;
        let cpus: Vec<Duration> = pids
            .iter()
            .filter_map(|pid| process_cpu(*pid as u32, self.clk_tck).ok())
            .collect();
        Ok((!cpus.is_empty()).then(|| cpus.iter().sum()))
    }
}

/// What repeating one unit measured.
struct Measured {
    latencies: Vec<Duration>,
    cpu: Duration,
    /// PostgreSQL's backends, when they could be read.
    backends: Option<Duration>,
    totals: Totals,
}

impl Measured {
    fn units(&self) -> usize {
        self.latencies.len()
    }

    fn per_unit(&self, x: f64) -> f64 {
        x / self.units().max(1) as f64
    }

    fn requests(&self) -> f64 {
        self.per_unit(self.totals.requests() as f64)
    }

    /// Response bytes (bodies) per unit.
    fn bytes(&self) -> f64 {
        self.per_unit(self.totals.bytes() as f64)
    }

    fn cpu_ms(&self) -> f64 {
        self.per_unit(self.cpu.as_secs_f64() * 1e3)
    }

    fn backends_ms(&self) -> Option<f64> {
        self.backends
            .map(|cpu| self.per_unit(cpu.as_secs_f64() * 1e3))
    }

    fn total_cpu_ms(&self) -> f64 {
        self.cpu_ms() + self.backends_ms().unwrap_or(0.0)
    }

    /// `requests / KB` per unit of some request kinds, or a dash.
    fn kind(&self, ops: &[Op]) -> String {
        let (n, bytes) = ops.iter().fold((0, 0), |(n, b), op| {
            let s = self.totals.op(*op);
            (n + s.ok + s.errors, b + s.bytes)
        });
        if n == 0 {
            return "–".into();
        }
        format!(
            "{:.1} / {:.1}",
            self.per_unit(n as f64),
            self.per_unit(bytes as f64) / 1e3
        )
    }
}

/// Protocol 2 (unless left out), then protocol 3, against one server.
async fn both(
    ctx: &Ctx,
    server: &Server,
    mut backends: Option<Backends>,
    history: &History,
    params: &Params,
    unit: Unit,
) -> Result<(Option<Measured>, Measured)> {
    let seed = Proc {
        http: crate::harness::client(),
        base: server.base.clone(),
        accept_encoding: "identity".to_owned(),
        rec: Recorder::new(),
    };
    super::publish_effective_config(&seed, history, params.runners).await?;
    let repo = history.repos[0].id.clone();
    let encoding = params.compare_encoding();
    let two = if params.protocol_2 {
        Some(
            repeat(
                ctx,
                server,
                backends.as_mut(),
                &repo,
                unit,
                Protocol::Two,
                &encoding,
            )
            .await?,
        )
    } else {
        None
    };
    let three = repeat(
        ctx,
        server,
        backends.as_mut(),
        &repo,
        unit,
        Protocol::Three,
        &encoding,
    )
    .await?;
    Ok((two, three))
}

/// One simulated process of `protocol` doing `unit`.
enum Driver {
    Frame(Frontend),
    TickTwo { p: Proc, repo: String, first: bool },
    TickThree { p: Proc, view: RepoView },
}

impl Driver {
    async fn run(&mut self) -> Result<()> {
        match self {
            Driver::Frame(frontend) => frontend.frame().await,
            Driver::TickTwo { p, repo, first } => {
                let startup = std::mem::take(first);
                clients::tick(p, repo, "run_compare", startup).await
            }
            Driver::TickThree { p, view } => view.tick(p, "run_compare").await,
        }
    }
}

/// Warm up (the first unit is the cold one: whole logs into the poll cache
/// or the view, the config artifact), then repeat the unit for the measured
/// phase, at least [`Unit::min_measured`] times.
async fn repeat(
    ctx: &Ctx,
    server: &Server,
    mut backends: Option<&mut Backends>,
    repo: &str,
    unit: Unit,
    protocol: Protocol,
    accept_encoding: &str,
) -> Result<Measured> {
    let rec = Recorder::new();
    let p = Proc {
        http: client_as(protocol.identity(), Duration::from_secs(300)),
        base: server.base.clone(),
        accept_encoding: accept_encoding.to_owned(),
        rec: rec.clone(),
    };
    let repo = repo.to_owned();
    let mut driver = match (unit, protocol) {
        (Unit::Frame, _) => Driver::Frame(Frontend::new(p, repo, protocol)),
        (Unit::Tick, Protocol::Two) => Driver::TickTwo {
            p,
            repo,
            first: true,
        },
        (Unit::Tick, Protocol::Three) => Driver::TickThree {
            view: RepoView::new(repo),
            p,
        },
    };
    let started = Instant::now();
    let mut warm = 0;
    while warm < 2 || started.elapsed() < ctx.warmup() {
        driver.run().await?;
        warm += 1;
    }
    rec.take();
    let backends0 = match backends.as_deref_mut() {
        Some(b) => b.cpu().await?,
        None => None,
    };
    let cpu0 = server.cpu()?;
    let started = Instant::now();
    let mut latencies = Vec::new();
    while latencies.len() < unit.min_measured() || started.elapsed() < ctx.phase() {
        let t = Instant::now();
        driver.run().await?;
        latencies.push(t.elapsed());
    }
    let cpu = server.cpu()? - cpu0;
    let backends = match (backends, backends0) {
        (Some(b), Some(before)) => b.cpu().await?.map(|after| after.saturating_sub(before)),
        _ => None,
    };
    let totals = rec.take();
    if let Some(err) = &totals.first_error {
        anyhow::bail!("protocol {}: {err}", protocol.label());
    }
    eprintln!(
        "  protocol {}: {} {}s in {:.1} s",
        protocol.label(),
        latencies.len(),
        unit.name(),
        started.elapsed().as_secs_f64()
    );
    Ok(Measured {
        latencies,
        cpu,
        backends,
        totals,
    })
}
