//! Assembling a server from its configuration: clock, store, blobs,
//! catalogs, router; binding the listener; serving until shutdown.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::blobs::Blobs;
use crate::clock::{Clock, SystemClock, TestClock};
use crate::config::ServeConfig;
use crate::held::HeldReads;
use crate::http::{Access, AppState, Limits, SharedState, router};
use crate::notify::Notifier;
use crate::protocol::time::parse_iso;
use crate::store::url::redact;
use crate::store::{self, StoreOptions};

pub struct App {
    listener: TcpListener,
    state: SharedState,
    grace: Duration,
    /// How often the revoked tokens are re-read (authenticated mode).
    revocation_refresh: Duration,
    connection_limits: crate::connections::ConnectionLimits,
    metrics: Option<crate::metrics::MetricsServer>,
}

impl App {
    /// Bind the listeners, then open everything; fails with a clear message
    /// on a port in use, a bad URL, an unreachable database, a catalog that
    /// does not compile, a retention policy that does not load, or open mode
    /// on a non-loopback address. The server stops when `shutdown` is
    /// cancelled.
    pub async fn build(args: &ServeConfig, shutdown: CancellationToken) -> anyhow::Result<App> {
        // Settings that need no I/O are checked first, and the ports are
        // bound before storage is touched: a start that fails (port in use)
        // creates no data directory and runs no migration.
        let test_clock = match &args.test_clock {
            Some(text) => {
                let now = parse_iso(text).with_context(|| {
                    format!("--test-clock {text:?} is not an ISO-8601 UTC time")
                })?;
                Some(Arc::new(TestClock::new(now)))
            }
            None => None,
        };
        anyhow::ensure!(
            args.request_timeout_seconds >= args.max_wait_seconds + 5,
            "--request-timeout-seconds ({}) must exceed --max-wait-seconds ({}) by at least 5 so held reads are never cut short",
            args.request_timeout_seconds,
            args.max_wait_seconds
        );
        anyhow::ensure!(
            args.answer_deadline_seconds > args.request_timeout_seconds,
            "--answer-deadline-seconds ({}) must exceed --request-timeout-seconds ({}), \
             so that only an answer its client takes too slowly is ever cut",
            args.answer_deadline_seconds,
            args.request_timeout_seconds
        );
        anyhow::ensure!(
            args.max_json_body_bytes >= args.max_stream_batch_bytes.saturating_add(64 * 1024),
            "--max-json-body-bytes ({}) must exceed --max-stream-batch-bytes ({}) by at least 64 KiB, \
             so a batch within its ceiling always fits its request",
            args.max_json_body_bytes,
            args.max_stream_batch_bytes
        );
        let retention = store::retention::Retention::load(
            args.retention_policy.as_deref(),
            args.retention_prune_limit,
        )?;
        // The accepted client identities and their catalogs (compiled once).
        let clients = crate::http::Clients::resolve(
            &args.accept_clients,
            args.autobuild_version.as_deref(),
            args.catalog.as_deref(),
        )?;
        let secret = resolve_secret(args)?;
        let hosts = host_check(args, secret.is_some());
        let listener = TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("binding {}", args.listen))?;
        let metrics = match args.metrics_listen {
            Some(addr) => Some(crate::metrics::MetricsServer::bind(addr).await?),
            None => None,
        };
        if let Some(text) = &args.test_clock {
            tracing::warn!(
                "TEST CLOCK ENABLED: time is frozen at {text} and POST /_test/clock can change it; never use this in production"
            );
        }
        let clock: Arc<dyn Clock> = match &test_clock {
            Some(clock) => clock.clone(),
            None => Arc::new(SystemClock),
        };
        let max_streamed_reads = args
            .max_streamed_reads
            .unwrap_or_else(|| StoreOptions::default_streamed_reads(args.db.db_pool_size));
        anyhow::ensure!(
            args.db.db_pool_size == 1 || max_streamed_reads < args.db.db_pool_size,
            "--max-streamed-reads ({max_streamed_reads}) must be below --db-pool-size ({}): \
             otherwise clients reading slowly could hold every database connection",
            args.db.db_pool_size
        );
        let notifier = Arc::new(Notifier::new());
        let options = StoreOptions {
            pool_size: args.db.db_pool_size,
            min_connections: args.db.db_min_connections,
            migrate: !args.no_migrate,
            retention: retention.clone(),
            bounds: args.bounds,
            acquire_timeout: Duration::from_millis(args.db.db_acquire_timeout_ms),
            unavailable_acquire_timeout: Duration::from_millis(
                args.db.db_unavailable_acquire_timeout_ms,
            ),
            answer_times: answer_times(args),
            max_streamed_reads,
            exclusive: true,
        };
        let store = args
            .db
            .database
            .open(&options, clock.clone(), notifier.clone())
            .await
            .with_context(|| format!("opening the database ({})", args.db.database))?;
        // Authenticated mode refuses revoked tokens from its first request:
        // a start that cannot read them fails.
        let revocations = match &secret {
            Some(_) => Some(Arc::new(
                crate::revocation::Revocations::load(&*store).await?,
            )),
            None => None,
        };
        let blobs = Blobs::open(&args.blobs)
            .with_context(|| format!("opening the blob store ({})", redact(&args.blobs)))?;
        let held = HeldReads::new(
            store.clone(),
            notifier,
            args.max_held_reads,
            args.db.db_pool_size as usize,
            shutdown.clone(),
        );
        let state = Arc::new(AppState {
            store,
            blobs,
            access: Access {
                clients,
                secret,
                clock,
                max_token_lifetime: args.max_token_lifetime,
                revocations,
                hosts,
            },
            limits: Limits {
                max_artifact_bytes: args.max_artifact_bytes,
                max_body_bytes: args.max_body_bytes,
                max_json_body_bytes: args.max_json_body_bytes,
                max_stream_batch_bytes: args.max_stream_batch_bytes,
                max_wait: Duration::from_secs(args.max_wait_seconds),
                request_timeout: Duration::from_secs(args.request_timeout_seconds),
                max_concurrent_requests: usize::try_from(args.max_concurrent_requests)
                    .unwrap_or(usize::MAX),
                compress_min_bytes: (!args.no_compression).then_some(args.compress_min_bytes),
            },
            held: Arc::new(held),
            sealed: history_cache(args),
            json_budget: crate::http::JsonBudget::new(args.max_json_memory_bytes),
            stream_closes: tokio::sync::Semaphore::new(args.max_concurrent_stream_closes as usize),
            test_clock,
            shutdown,
        });
        crate::metrics::record_build_info(args.db.database.backend());
        let max_connections = crate::connections::effective_max_connections(args.max_connections);
        let max_per_address = args
            .max_connections_per_address
            .unwrap_or((max_connections / 4).max(1))
            .min(max_connections);
        log_configuration(
            args,
            &catalog_source(args),
            &state.access.clients.describe(),
            &retention,
            max_connections,
            max_per_address,
            max_streamed_reads,
        );
        Ok(App {
            listener,
            state,
            metrics,
            grace: Duration::from_secs(args.shutdown_grace_seconds),
            revocation_refresh: Duration::from_secs(args.revocation_refresh_seconds),
            connection_limits: crate::connections::ConnectionLimits {
                deadlines: crate::connections::Deadlines {
                    header_read: Duration::from_secs(args.header_read_timeout_seconds),
                    idle: Duration::from_secs(args.idle_timeout_seconds),
                    answer_stall: Duration::from_secs(args.read_stall_timeout_seconds),
                    answer_deadline: Duration::from_secs(args.answer_deadline_seconds),
                },
                body_read: Duration::from_secs(args.body_read_timeout_seconds),
                max_connections,
                max_per_address,
            },
        })
    }

    /// The token secrets in force (`None` in open mode), for the reload task.
    pub fn secret(&self) -> Option<&crate::secret::Secret> {
        self.state.access.secret.as_ref()
    }

    pub fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    /// The metrics listener's address, when `--metrics-listen` is set.
    pub fn metrics_addr(&self) -> Option<std::io::Result<std::net::SocketAddr>> {
        self.metrics
            .as_ref()
            .map(crate::metrics::MetricsServer::local_addr)
    }

    /// Serve until the shutdown token given to [`App::build`] is cancelled;
    /// held reads answer at once and in-flight requests finish.
    pub async fn serve(self) -> anyhow::Result<()> {
        let state = self.state.clone();
        let shutdown = state.shutdown.clone();
        if let Some(metrics) = self.metrics {
            let sampled = state.clone();
            metrics.spawn(shutdown.clone(), move || crate::metrics::Gauges {
                held_reads: sampled.held.in_flight(),
                pool: sampled.store.pool_stats(),
            });
        }
        tokio::spawn(state.held.clone().sweep());
        if let Some(revocations) = &state.access.revocations {
            tokio::spawn(revocations.clone().watch(
                state.store.clone(),
                self.revocation_refresh,
                shutdown.clone(),
            ));
        }
        let app = router(self.state);
        let server =
            crate::connections::serve(self.listener, app, self.connection_limits, shutdown.clone());
        let grace = self.grace;
        tokio::select! {
            () = server => {}
            _ = async { shutdown.cancelled().await; tokio::time::sleep(grace).await } => {
                tracing::warn!(?grace, "requests still running after the shutdown grace period; exiting");
            }
        }
        Ok(())
    }
}

/// The secrets, creating the file first when `--create-secret-file` asks;
/// without any, open mode, which a non-loopback address must opt into.
fn resolve_secret(args: &ServeConfig) -> anyhow::Result<Option<crate::secret::Secret>> {
    if args.create_secret_file
        && let Some(path) = &args.secret.secret_file
        && !path.exists()
    {
        crate::secret::create_file(path)?;
        // The path only, never the secret: whoever can read the file can mint.
        tracing::warn!(
            path = %path.display(),
            "created a new token secret; mint an admin token with: abstore token mint --secret-file {} --admin --ttl 12h",
            path.display()
        );
    }
    let secret = args.secret.resolve()?;
    match &secret {
        Some(secret) => tracing::info!(secrets = secret.len(), "authenticated mode"),
        None if args.listen.ip().is_loopback() => tracing::warn!(
            "no token secret: open mode, every route is unauthenticated (loopback only)"
        ),
        None if args.open => tracing::warn!(
            listen = %args.listen,
            "OPEN MODE ON A NETWORK ADDRESS (--open): every route is unauthenticated; anyone who reaches the port can read and write"
        ),
        None => anyhow::bail!(
            "refusing to serve {} without a token secret: anyone who reaches the port could read and write. \
             Give a secret with --secret-file PATH (ABSTORE_SECRET_FILE) or ABSTORE_SECRET, \
             or accept open mode explicitly with --open (ABSTORE_OPEN=true)",
            args.listen
        ),
    }
    Ok(secret)
}

/// Open mode on a loopback address answers only loopback `Host` names and
/// the `--allow-host` ones (`crate::http::HostCheck`); otherwise any.
fn host_check(args: &ServeConfig, authenticated: bool) -> Option<crate::http::HostCheck> {
    let guarded = !authenticated && args.listen.ip().is_loopback();
    if !guarded && !args.allow_hosts.is_empty() {
        tracing::info!(
            "--allow-host has no effect: only open mode on a loopback address checks the Host"
        );
    }
    guarded.then(|| crate::http::HostCheck::new(&args.allow_hosts))
}

fn catalog_source(args: &ServeConfig) -> String {
    args.catalog
        .as_ref()
        .map_or_else(|| "embedded".to_owned(), |dir| dir.display().to_string())
}

/// One line with the effective settings (a connection cap lowered to the
/// open-file limit shows the lowered value), passwords and secrets redacted.
fn log_configuration(
    args: &ServeConfig,
    catalog: &str,
    clients: &str,
    retention: &store::retention::Retention,
    max_connections: u32,
    max_connections_per_address: u32,
    max_streamed_reads: u32,
) {
    tracing::info!(
        listen = %args.listen,
        database = %args.db.database,
        db_pool_size = args.db.db_pool_size,
        db_min_connections = args.db.db_min_connections.min(args.db.db_pool_size),
        db_acquire_timeout_ms = args.db.db_acquire_timeout_ms,
        db_unavailable_acquire_timeout_ms = args.db.db_unavailable_acquire_timeout_ms,
        blobs = %redact(&args.blobs),
        auth = if args.secret.secret.is_some() || args.secret.secret_file.is_some() { "token (secret redacted)" } else { "open" },
        max_token_lifetime = %args.max_token_lifetime,
        revocation_refresh_seconds = args.revocation_refresh_seconds,
        allow_hosts = %args.allow_hosts.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
        accept_clients = %clients,
        max_artifact_bytes = args.max_artifact_bytes,
        max_body_bytes = args.max_body_bytes,
        max_json_body_bytes = args.max_json_body_bytes,
        max_json_memory_bytes = args.max_json_memory_bytes,
        max_stream_batch_bytes = args.max_stream_batch_bytes,
        max_wait_seconds = args.max_wait_seconds,
        max_held_reads = args.max_held_reads,
        shutdown_grace_seconds = args.shutdown_grace_seconds,
        request_timeout_seconds = args.request_timeout_seconds,
        max_concurrent_requests = args.max_concurrent_requests,
        max_connections,
        max_connections_per_address,
        header_read_timeout_seconds = args.header_read_timeout_seconds,
        idle_timeout_seconds = args.idle_timeout_seconds,
        body_read_timeout_seconds = args.body_read_timeout_seconds,
        read_stall_timeout_seconds = args.read_stall_timeout_seconds,
        answer_deadline_seconds = args.answer_deadline_seconds,
        max_streamed_reads,
        max_concurrent_stream_closes = args.max_concurrent_stream_closes,
        compression = if args.no_compression { "off".to_owned() } else { format!("zstd, br, gzip from {} bytes", args.compress_min_bytes) },
        history_cache = if history_cache(args).is_none() { "off".to_owned() } else { format!("{} bytes, chunks of {} events", args.history_cache_bytes, args.history_chunk_events) },
        metrics_listen = ?args.metrics_listen,
        catalog = %catalog,
        retention = %retention.policy,
        retention_source = %args.retention_policy.as_ref().map_or_else(|| "embedded".to_owned(), |p| p.display().to_string()),
        retention_prune_limit = retention.prune_limit,
        max_stream_chunks = args.bounds.max_stream_chunks,
        max_stream_bytes = args.bounds.max_stream_bytes,
        max_events_per_log = args.bounds.max_events_per_log,
        max_artifact_revisions = args.bounds.max_artifact_revisions,
        max_ticket_asset_revisions = args.bounds.max_ticket_asset_revisions,
        max_ticket_assets = args.bounds.max_ticket_assets,
        test_clock = ?args.test_clock,
        migrate = !args.no_migrate,
        "configuration"
    );
}

/// The sealed-chunk cache, unless compression or the cache is off.
fn history_cache(args: &ServeConfig) -> Option<Arc<crate::http::SealedChunks>> {
    (!args.no_compression && args.history_cache_bytes > 0).then(|| {
        Arc::new(crate::http::SealedChunks::new(
            args.history_chunk_events,
            args.history_cache_bytes,
            answer_times(args),
        ))
    })
}

/// How long a streamed answer may take its client.
fn answer_times(args: &ServeConfig) -> store::rows::AnswerTimes {
    store::rows::AnswerTimes {
        stall: Duration::from_secs(args.read_stall_timeout_seconds),
        deadline: Duration::from_secs(args.answer_deadline_seconds),
    }
}
