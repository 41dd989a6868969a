//! `migrate`: what the newest migrations cost the writers of a big store
//! (issue 53, item 3). A PostgreSQL store at the previous schema version
//! (the commit before the newest change to `migrations/postgres`, built by
//! `scripts/previous-release`) is filled to `--store-events` events; a
//! server of that version serves closed-loop appends while the current
//! binary's `abstore migrate` applies the newest migrations under it (the
//! rolling upgrade: expand, backfill in batches, index concurrently). Every
//! append's latency is kept with the moment it was sent, so the longest
//! wait is attributed to the migration step it overlapped (from the
//! durations `abstore migrate` prints). The same load without a migration
//! first is the baseline. Target: no append waits more than 100 ms.
//!
//! The store is built fast: the old server creates the builds and writes
//! one real event to each, and one `INSERT … SELECT` copies that event's
//! text to every later sequence number (the `seq` member rewritten), so
//! every envelope is one the server wrote, as a real store's are.

use std::cell::RefCell;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use sqlx::Connection as _;

use crate::harness::{self, Backend, Ctx, Db, Server, Table, ms};

/// `abstore-load migrate`'s own settings.
#[derive(clap::Args)]
#[command(next_help_heading = "migrate")]
pub struct MigrateArgs {
    /// The previous schema version's server binary (`scripts/previous-release` prints its path).
    #[arg(long, env = "ABSTORE_BENCH_PREVIOUS_SERVER")]
    pub previous_server: Option<PathBuf>,

    /// Events in the store the migrations run on.
    #[arg(long, default_value_t = 1_000_000)]
    pub store_events: u64,

    /// Builds they are spread over.
    #[arg(long, default_value_t = 1_000)]
    pub store_builds: u64,

    /// Clients appending (closed loop, a build each) while the migrations run.
    #[arg(long, default_value_t = 4)]
    pub appenders: usize,

    /// `--migrate-batch-rows` of the migration.
    #[arg(long, default_value_t = 10_000)]
    pub batch_rows: u32,
}

/// One append: when it was sent and how long it took.
type Sample = (Instant, Duration);

pub async fn migrate(ctx: &Ctx, args: &MigrateArgs) -> Result<Vec<Table>> {
    let previous = args.previous_server.clone().context(
        "--previous-server (ABSTORE_BENCH_PREVIOUS_SERVER) is needed: run scripts/previous-release",
    )?;
    if ctx.pg_base.is_none() {
        bail!("the migrate scenario needs PostgreSQL");
    }
    harness::with_db(ctx, Backend::Postgres, |db| async move {
        run(ctx, args, &previous, &db).await
    })
    .await
}

async fn run(
    ctx: &Ctx,
    args: &MigrateArgs,
    previous: &std::path::Path,
    db: &Db,
) -> Result<Vec<Table>> {
    let (ok, out) = run_to_end(previous, &["migrate", "--database", &db.url])?;
    if !ok {
        bail!("the previous version's migrate failed: {out}");
    }
    let mut cmd = Command::new(previous);
    cmd.arg("serve").args([
        "--listen",
        "127.0.0.1:0",
        "--database",
        &db.url,
        "--blobs",
        "memory://",
    ]);
    let old = Server::spawn(ctx, cmd, "previous", "abstore listening on ").await?;
    let http = harness::client();
    let started = Instant::now();
    fill_store(&http, &old, db, args).await?;
    eprintln!(
        "  store: {} events in {} builds, built in {:.0} s",
        args.store_events,
        args.store_builds,
        started.elapsed().as_secs_f64()
    );
    for b in 0..args.appenders {
        harness::create_build(&http, &old, &format!("appender-{b}")).await?;
    }
    let baseline = appends_while(&http, &old, args.appenders, Waiting::For(ctx.phase())).await?;
    let migration_started = Instant::now();
    let mut child = Command::new(&ctx.server_bin)
        .args([
            "migrate",
            "--database",
            &db.url,
            "--migrate-batch-rows",
            &args.batch_rows.to_string(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting abstore migrate")?;
    let during = appends_while(&http, &old, args.appenders, Waiting::Child(&mut child)).await?;
    let migration_took = migration_started.elapsed();
    let output = child.wait_with_output()?;
    let report = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        bail!(
            "abstore migrate failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    old.stop().await?;

    let steps = steps(&report, migration_started);
    let mut appends = Table::new(
        &format!(
            "Appends while the newest migrations run, {} events, {} appenders (previous version serving)",
            args.store_events, args.appenders
        ),
        &[
            "phase",
            "appends",
            "p50",
            "p99",
            "max",
            "over 50 ms",
            "over 100 ms",
            "the longest overlapped",
        ],
    );
    appends.push(row("no migration (baseline)", &baseline, &[]));
    appends.push(row(
        &format!("abstore migrate ({:.1} s)", migration_took.as_secs_f64()),
        &during,
        &steps,
    ));
    let mut per_step = Table::new(
        "The migration's steps (abstore migrate's report) and the appends during each",
        &[
            "step",
            "took",
            "appends",
            "p99",
            "max append",
            "over 100 ms",
        ],
    );
    for (name, from, to) in &steps {
        let mut inside: Vec<Duration> = during
            .iter()
            .filter(|(at, took)| *at + *took > *from && *at < *to)
            .map(|(_, took)| *took)
            .collect();
        inside.sort_unstable();
        per_step.push(vec![
            name.clone(),
            ms(*to - *from),
            inside.len().to_string(),
            ms(harness::percentile(&inside, 0.99)),
            inside.last().map_or("-".into(), |d| ms(*d)),
            over(&inside, 100),
        ]);
    }
    Ok(vec![appends, per_step])
}

/// The builds and their events: `store_builds` builds created by the old
/// server with one event each, then every later sequence number copied
/// from that event in one statement.
async fn fill_store(
    http: &reqwest::Client,
    old: &Server,
    db: &Db,
    args: &MigrateArgs,
) -> Result<()> {
    let per_build = (args.store_events / args.store_builds.max(1)).max(2);
    for b in 0..args.store_builds {
        let slug = format!("aged-{b}");
        harness::create_build(http, old, &slug).await?;
        harness::post(
            http,
            &old.url(&format!("/builds/{slug}/events")),
            harness::event_body(),
            201,
        )
        .await?;
    }
    let mut conn = sqlx::PgConnection::connect(&db.url).await?;
    // Sequence 1 is the appended event (creating a build writes none);
    // 2..=per_build are copies of it.
    let copied = sqlx::query(
        "INSERT INTO events (kind, resource_id, seq, envelope) \
         SELECT e.kind, e.resource_id, g.seq, \
                replace(e.envelope, ',\"seq\":1,', ',\"seq\":' || g.seq || ',') \
         FROM events e CROSS JOIN generate_series(2, $1::bigint) AS g(seq) \
         WHERE e.kind = 'build' AND e.resource_id LIKE 'aged-%' AND e.seq = 1",
    )
    .bind(per_build as i64)
    .execute(&mut conn)
    .await
    .context("copying events")?
    .rows_affected();
    let expected = args.store_builds * (per_build - 1);
    if copied != expected {
        bail!("copied {copied} events, expected {expected}");
    }
    sqlx::query("UPDATE resources SET last_seq = $1 WHERE kind = 'build' AND id LIKE 'aged-%'")
        .bind(per_build as i64)
        .execute(&mut conn)
        .await?;
    // One statement each: several in one query run as one transaction,
    // where VACUUM cannot.
    for table in ["VACUUM ANALYZE events", "VACUUM ANALYZE resources"] {
        sqlx::raw_sql(table).execute(&mut conn).await?;
    }
    conn.close().await?;
    Ok(())
}

/// How long a load phase lasts.
enum Waiting<'a> {
    For(Duration),
    /// Until this process exits.
    Child(&'a mut std::process::Child),
}

/// Closed-loop appends by `clients` workers (a build each) until `until`
/// ends: every append's start and latency; an error fails the run.
async fn appends_while(
    http: &reqwest::Client,
    server: &Server,
    clients: usize,
    until: Waiting<'_>,
) -> Result<Vec<Sample>> {
    let stop = Rc::new(std::cell::Cell::new(false));
    let failure: Rc<RefCell<Option<String>>> = Rc::default();
    let local = tokio::task::LocalSet::new();
    let samples: Rc<RefCell<Vec<Sample>>> = Rc::default();
    for b in 0..clients {
        let (http, url) = (
            http.clone(),
            server.url(&format!("/builds/appender-{b}/events")),
        );
        let (stop, samples, failure) = (stop.clone(), samples.clone(), failure.clone());
        local.spawn_local(async move {
            while !stop.get() {
                let at = Instant::now();
                match harness::post(&http, &url, harness::event_body(), 201).await {
                    Ok(_) => samples.borrow_mut().push((at, at.elapsed())),
                    Err(err) => {
                        failure.borrow_mut().get_or_insert(format!("{err:#}"));
                        break;
                    }
                }
            }
        });
    }
    local
        .run_until(async {
            match until {
                Waiting::For(duration) => tokio::time::sleep(duration).await,
                Waiting::Child(child) => {
                    while child.try_wait().ok().flatten().is_none() {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
            stop.set(true);
        })
        .await;
    local.await;
    if let Some(err) = failure.borrow().clone() {
        bail!("an append failed: {err}");
    }
    let mut samples = samples.take();
    samples.sort_by_key(|(at, _)| *at);
    Ok(samples)
}

/// The steps `abstore migrate` reported (`applied 0011 … in 35 ms`,
/// `filled … in 41.0 s`), laid end to end from `started`: (name, from, to).
fn steps(report: &str, started: Instant) -> Vec<(String, Instant, Instant)> {
    let mut at = started;
    let mut steps = Vec::new();
    for line in report.lines() {
        let Some((name, took)) = line.rsplit_once(" in ") else {
            continue;
        };
        let took = took.split(" (").next().unwrap_or(took);
        let duration = if let Some(v) = took.strip_suffix(" ms") {
            v.parse::<f64>().ok().map(|v| v / 1000.0)
        } else {
            took.strip_suffix(" s").and_then(|v| v.parse::<f64>().ok())
        };
        if let Some(seconds) = duration {
            let to = at + Duration::from_secs_f64(seconds);
            steps.push((name.to_owned(), at, to));
            at = to;
        }
    }
    steps
}

/// A table row: the phase's appends, percentiles, and the step its
/// longest append overlapped.
fn row(phase: &str, samples: &[Sample], steps: &[(String, Instant, Instant)]) -> Vec<String> {
    let mut latencies: Vec<Duration> = samples.iter().map(|(_, d)| *d).collect();
    latencies.sort_unstable();
    let longest = samples.iter().max_by_key(|(_, d)| *d);
    let overlapped = longest
        .and_then(|(at, took)| {
            steps
                .iter()
                .find(|(_, from, to)| *at + *took > *from && *at < *to)
                .map(|(name, ..)| name.clone())
        })
        .unwrap_or_else(|| "-".to_owned());
    vec![
        phase.to_owned(),
        samples.len().to_string(),
        ms(harness::percentile(&latencies, 0.5)),
        ms(harness::percentile(&latencies, 0.99)),
        latencies.last().map_or("-".into(), |d| ms(*d)),
        over(&latencies, 50),
        over(&latencies, 100),
        overlapped,
    ]
}

/// How many of `sorted` took longer than `millis`.
fn over(sorted: &[Duration], millis: u64) -> String {
    let bound = Duration::from_millis(millis);
    (sorted.len() - sorted.partition_point(|d| *d <= bound)).to_string()
}

/// Run `program args…` to its end: (success, stdout and stderr).
fn run_to_end(program: &std::path::Path, args: &[&str]) -> Result<(bool, String)> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {}", program.display()))?;
    Ok((
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    ))
}
