//! `abstore serve` and `abstore migrate`: the server's flags, one group
//! per subsystem (each a heading of `serve --help`), turned once into the
//! [`Settings`] the server runs on, and the two runners.
//!
//! - `storage`: the database, retention and collection bounds.
//! - `access`: client identities and authentication.
//! - `requests`: request ceilings, connections, compression.

mod access;
mod console;
mod requests;
mod storage;
mod tickets;

use std::io::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use tokio_util::sync::CancellationToken;

pub use self::access::{AuthArgs, ClientArgs, SecretArgs};
pub use self::requests::{CompressionArgs, ConnectionArgs, RequestArgs};
pub use self::storage::{BoundsArgs, DatabaseArgs, RetentionArgs, ServerDatabaseArgs};
use crate::config::{ConnectionSettings, Settings};
use crate::http::Limits;
use crate::protocol::time::parse_iso;
use crate::store::rows::AnswerTimes;
use crate::store::url::Location;
use crate::store::{DatabaseUrl, StoreOptions};

#[derive(Debug, Args, Clone)]
pub struct ServeArgs {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, env = "ABSTORE_LISTEN", default_value = "127.0.0.1:8787")]
    pub listen: SocketAddr,

    /// Blob location: a directory, `file:///abs/dir`, `memory://`, or an object-store URL.
    #[arg(long, env = "ABSTORE_BLOBS", default_value = "./abstore-data/blobs")]
    pub blobs: String,

    /// Serve Prometheus metrics at `GET /metrics` on this separate address
    /// (off when unset; keep it private).
    #[arg(long, env = "ABSTORE_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,

    /// After SIGTERM/SIGINT, how long in-flight requests may take to finish
    /// before the process exits anyway (held reads answer at once).
    #[arg(long, env = "ABSTORE_SHUTDOWN_GRACE_SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub shutdown_grace_seconds: u64,

    /// Freeze the clock at this ISO time and enable `POST /_test/clock`
    /// (which needs an admin or deployment token when a secret is set). Tests only.
    #[arg(long, env = "ABSTORE_TEST_CLOCK")]
    pub test_clock: Option<String>,

    #[command(flatten)]
    pub database: ServerDatabaseArgs,

    #[command(flatten)]
    pub retention: RetentionArgs,

    #[command(flatten)]
    pub bounds: BoundsArgs,

    #[command(flatten)]
    pub clients: ClientArgs,

    #[command(flatten)]
    pub auth: AuthArgs,

    #[command(flatten)]
    pub requests: RequestArgs,

    #[command(flatten)]
    pub connections: ConnectionArgs,

    #[command(flatten)]
    pub compression: CompressionArgs,

    #[command(flatten)]
    pub tickets: tickets::TicketArgs,

    #[command(flatten)]
    pub console: console::ConsoleArgs,
}

/// A size or count flag between `min` and `max` (inclusive): a value out of
/// range fails the start naming the flag, instead of overflowing a deadline
/// or a semaphore later.
fn bytes_in(min: u64, max: u64) -> impl clap::builder::TypedValueParser<Value = usize> {
    use clap::builder::TypedValueParser as _;
    clap::value_parser!(u64)
        .range(min..=max)
        .map(|value| usize::try_from(value).unwrap_or(usize::MAX))
}

impl ServeArgs {
    /// The settings these flags give, parsed and checked: every failure
    /// here names the flags at fault, before any port is bound or any file
    /// touched (but a `--retention-policy` file, read here).
    pub fn into_settings(self) -> anyhow::Result<Settings> {
        // Destructured, group by group, so a flag added and not carried
        // over is a compile error.
        let ServeArgs {
            listen,
            blobs,
            metrics_listen,
            shutdown_grace_seconds,
            test_clock,
            database,
            retention,
            bounds,
            clients,
            auth,
            requests,
            connections,
            compression,
            tickets,
            console,
        } = self;
        let ServerDatabaseArgs {
            db,
            no_migrate,
            max_streamed_reads,
            db_write_connections,
            build_records_cache_bytes,
        } = database;
        let migration = db.migration();
        let DatabaseArgs {
            database,
            db_pool_size,
            db_min_connections,
            db_acquire_timeout_ms,
            db_unavailable_acquire_timeout_ms,
            migrate_batch_rows: _,
            migration_wait_seconds: _,
            migration_lock_timeout_ms: _,
        } = db;
        let RequestArgs {
            max_artifact_bytes,
            max_body_bytes,
            max_json_body_bytes,
            max_json_memory_bytes,
            max_stream_batch_bytes,
            max_wait_seconds,
            max_held_reads,
            request_timeout_seconds,
            max_concurrent_requests,
            max_concurrent_stream_closes,
        } = requests;
        let database = DatabaseUrl::parse(&database)?;
        let test_clock =
            match test_clock {
                Some(text) => Some(parse_iso(&text).with_context(|| {
                    format!("--test-clock {text:?} is not an ISO-8601 UTC time")
                })?),
                None => None,
            };
        let connections = ConnectionSettings::from(connections);
        anyhow::ensure!(
            request_timeout_seconds >= max_wait_seconds + 5,
            "--request-timeout-seconds ({request_timeout_seconds}) must exceed --max-wait-seconds ({max_wait_seconds}) by at least 5 so held reads are never cut short",
        );
        let answer_deadline = connections.deadlines.answer_deadline.as_secs();
        anyhow::ensure!(
            answer_deadline > request_timeout_seconds,
            "--answer-deadline-seconds ({answer_deadline}) must exceed --request-timeout-seconds ({request_timeout_seconds}), \
             so that only an answer its client takes too slowly is ever cut",
        );
        anyhow::ensure!(
            max_json_body_bytes >= max_stream_batch_bytes.saturating_add(64 * 1024),
            "--max-json-body-bytes ({max_json_body_bytes}) must exceed --max-stream-batch-bytes ({max_stream_batch_bytes}) by at least 64 KiB, \
             so a batch within its ceiling always fits its request",
        );
        let max_streamed_reads = max_streamed_reads
            .unwrap_or_else(|| StoreOptions::default_streamed_reads(db_pool_size));
        anyhow::ensure!(
            db_pool_size == 1 || max_streamed_reads < db_pool_size,
            "--max-streamed-reads ({max_streamed_reads}) must be below --db-pool-size ({db_pool_size}): \
             otherwise clients reading slowly could hold every database connection",
        );
        let write_connections = db_write_connections
            .unwrap_or_else(|| StoreOptions::default_write_connections(db_pool_size));
        anyhow::ensure!(
            write_connections < db_pool_size,
            "--db-write-connections ({write_connections}) must be below --db-pool-size ({db_pool_size}): \
             reads need at least one connection",
        );
        // On PostgreSQL streamed answers draw on the reads' share, so they
        // must leave short reads a connection in it too. (SQLite's writer
        // has its own connection: its readers are the whole pool.)
        let reads_share = match database.location() {
            Location::Postgres(_) => db_pool_size - write_connections,
            Location::Sqlite(_) => db_pool_size,
        };
        anyhow::ensure!(
            db_pool_size == 1 || reads_share == db_pool_size || max_streamed_reads < reads_share,
            "--max-streamed-reads ({max_streamed_reads}) must be below the connections reads may take \
             (--db-pool-size {db_pool_size} less --db-write-connections {write_connections}): \
             otherwise clients reading slowly could hold every connection short reads need",
        );
        let (retention, retention_source) = retention.load()?;
        let (compress_min_bytes, history_cache, answer_caches) = compression.into_settings();
        let (ticket_lifecycle, ticket_bounds) = tickets.into_config()?;
        let console = console.into_settings()?;
        Ok(Settings {
            listen,
            metrics_listen,
            shutdown_grace: Duration::from_secs(shutdown_grace_seconds),
            test_clock,
            database,
            store: StoreOptions {
                pool_size: db_pool_size,
                min_connections: db_min_connections,
                migrate: !no_migrate,
                migration,
                retention,
                bounds: bounds.into(),
                acquire_timeout: Duration::from_millis(db_acquire_timeout_ms),
                unavailable_acquire_timeout: Duration::from_millis(
                    db_unavailable_acquire_timeout_ms,
                ),
                answer_times: AnswerTimes {
                    stall: connections.deadlines.answer_stall,
                    deadline: connections.deadlines.answer_deadline,
                },
                max_streamed_reads,
                write_connections,
                build_records_cache_bytes,
                exclusive: true,
            },
            retention_source,
            blobs,
            clients: clients.into(),
            auth: auth.into(),
            limits: Limits {
                max_artifact_bytes,
                max_body_bytes,
                max_json_body_bytes,
                max_stream_batch_bytes,
                max_wait: Duration::from_secs(max_wait_seconds),
                request_timeout: Duration::from_secs(request_timeout_seconds),
                max_concurrent_requests: usize::try_from(max_concurrent_requests)
                    .unwrap_or(usize::MAX),
                compress_min_bytes,
            },
            json_memory_bytes: max_json_memory_bytes,
            max_concurrent_stream_closes,
            max_held_reads,
            history_cache,
            answer_caches,
            connections,
            tickets: crate::tickets::TicketSettings {
                lifecycle: ticket_lifecycle,
                bounds: ticket_bounds,
                max_answer_bytes: max_body_bytes,
            },
            console,
        })
    }
}

/// `abstore serve`: build, announce the ports, serve until SIGINT/SIGTERM.
pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    // Before anything that can wait or fail: SIGTERM must always stop
    // the process, however far the start got.
    tokio::spawn(signal_shutdown(shutdown.clone()));
    let settings = args.into_settings()?;
    let (database, blobs) = (
        settings.database.to_string(),
        crate::store::url::redact(&settings.blobs),
    );
    let app = match crate::app::App::build(settings, shutdown.clone()).await {
        Ok(app) => app,
        // SIGTERM while waiting for a migration (say) is a clean stop.
        Err(err) if shutdown.is_cancelled() => {
            tracing::info!(error = %format!("{err:#}"), "stopped before serving");
            return Ok(());
        }
        Err(err) => return Err(err),
    };
    let addr = app.local_addr()?;
    let metrics = app.metrics_addr().transpose()?;
    announce(addr, metrics);
    tracing::info!(%addr, %database, %blobs, "serving");
    if let Some(secret) = app.secret() {
        tokio::spawn(secret.clone().watch(SECRET_FILE_POLL));
    }
    app.serve().await
}

/// `abstore migrate`: apply what is pending (on PostgreSQL under the same
/// lock and guarantees as a starting replica), then print each migration
/// applied and how long it took.
pub async fn migrate(db: DatabaseArgs) -> anyhow::Result<()> {
    let report = DatabaseUrl::parse(&db.database)?
        .migrate_with(&db.migration(), &crate::store::Progress::default())
        .await?;
    tracing::info!(
        applied = report.applied.len(),
        already_applied = report.already_applied,
        "migrations applied"
    );
    let mut text = report.lines().join("\n");
    text.push('\n');
    let mut stdout = std::io::stdout();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .context("writing the migration report to stdout")?;
    Ok(())
}

/// Print the lines harnesses read to learn the bound ports (the metrics line
/// first, so it is known once the server is). Nobody may be reading: stdout
/// closed (`abstore serve | head -1`) or full is logged and the server goes
/// on serving, and stopping on a signal.
fn announce(addr: SocketAddr, metrics: Option<SocketAddr>) {
    let mut stdout = std::io::stdout();
    let mut lines = String::new();
    if let Some(metrics) = metrics {
        lines.push_str(&format!("abstore metrics on http://{metrics}/metrics\n"));
    }
    lines.push_str(&format!("abstore listening on http://{addr}\n"));
    if let Err(err) = stdout
        .write_all(lines.as_bytes())
        .and_then(|()| stdout.flush())
    {
        tracing::warn!(error = %err, %addr, "cannot print the listening line on stdout; serving anyway");
    }
}

/// How often a `--secret-file` is re-read for changes (`SIGHUP` reloads at
/// once): a mounted secret that changes takes effect within this.
const SECRET_FILE_POLL: std::time::Duration = std::time::Duration::from_secs(10);

/// Cancel `token` on SIGINT or SIGTERM.
async fn signal_shutdown(token: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
    tracing::info!("shutting down");
    token.cancel();
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser as _;

    use crate::cli::{Cli, Command};
    use crate::config::Settings;
    use crate::store::rows::AnswerTimes;

    fn parse(flags: &[&str]) -> Settings {
        let cli = Cli::try_parse_from(["abstore", "serve"].iter().chain(flags)).unwrap();
        let Command::Serve(args) = cli.command else {
            unreachable!("parsed a serve command line")
        };
        args.into_settings().unwrap()
    }

    /// The defaults docs/configuration.md lists arrive as typed values, in
    /// the structs their subsystems run on.
    #[test]
    fn the_defaults_become_the_documented_settings() {
        let settings = parse(&[]);
        assert_eq!(settings.listen.to_string(), "127.0.0.1:8787");
        assert_eq!(settings.shutdown_grace, Duration::from_secs(10));
        assert_eq!(settings.test_clock, None);
        let store = &settings.store;
        assert_eq!((store.pool_size, store.min_connections), (16, 4));
        assert_eq!(store.acquire_timeout, Duration::from_millis(10_000));
        assert_eq!(
            store.unavailable_acquire_timeout,
            Duration::from_millis(250)
        );
        assert_eq!(store.max_streamed_reads, 8);
        assert!(store.migrate && store.exclusive);
        assert_eq!(
            store.migration,
            crate::store::MigrationSettings {
                batch_rows: 10_000,
                wait: Duration::from_secs(600),
                lock_timeout: Duration::from_millis(50),
            }
        );
        assert_eq!(
            store.answer_times,
            AnswerTimes {
                stall: Duration::from_secs(30),
                deadline: Duration::from_secs(300),
            }
        );
        assert_eq!(store.retention.prune_limit, 1000);
        assert_eq!(settings.retention_source, None);
        let limits = &settings.limits;
        assert_eq!(limits.max_wait, Duration::from_secs(30));
        assert_eq!(limits.request_timeout, Duration::from_secs(60));
        assert_eq!(limits.compress_min_bytes, Some(1024));
        assert_eq!(limits.max_json_body_bytes, 4 * 1_048_576);
        let cache = settings.history_cache.expect("the history cache is on");
        assert_eq!((cache.chunk_events, cache.bytes), (256, 64 * 1_048_576));
        assert_eq!(settings.answer_caches.state_events, Some(64 * 1_048_576));
        assert_eq!(settings.answer_caches.build_digests, Some(64 * 1_048_576));
        assert_eq!(settings.answer_caches.short_logs, Some(32 * 1_048_576));
        let connections = &settings.connections;
        assert_eq!(connections.max_connections, 16_384);
        assert_eq!(connections.max_per_address, None);
        assert_eq!(connections.deadlines.header_read, Duration::from_secs(10));
        assert_eq!(connections.body_read, Duration::from_secs(10));
        assert_eq!(settings.auth.revocation_refresh, Duration::from_secs(5));
        assert!(!settings.auth.secret.is_given());
    }

    /// One flag turns compression off and, with it, the history cache;
    /// the test clock is an instant from the moment it is parsed.
    #[test]
    fn one_flag_sets_every_subsystem_it_concerns() {
        let settings = parse(&[
            "--no-compression",
            "--test-clock",
            "2026-07-15T12:00:00.000Z",
            "--db-pool-size",
            "5",
        ]);
        assert_eq!(settings.limits.compress_min_bytes, None);
        assert!(settings.history_cache.is_none());
        assert_eq!(settings.test_clock, Some(1_784_116_800_000));
        assert_eq!(settings.store.max_streamed_reads, 3);
        // The answer caches keep identity answers too.
        assert_eq!(settings.answer_caches.state_events, Some(64 * 1_048_576));
        assert_eq!(settings.answer_caches.short_logs, Some(32 * 1_048_576));
        let settings = parse(&["--history-cache-bytes", "0"]);
        assert_eq!(settings.limits.compress_min_bytes, Some(1024));
        assert!(settings.history_cache.is_none());
        let settings = parse(&[
            "--state-events-cache-bytes",
            "0",
            "--build-digests-cache-bytes",
            "0",
            "--short-log-cache-bytes",
            "0",
        ]);
        assert_eq!(
            settings.answer_caches,
            crate::config::AnswerCaches::default()
        );
    }
}
