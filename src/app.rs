//! Assembling a server from its [`Settings`]: clock, store, blobs,
//! catalogs, router; binding the listener; serving until shutdown.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::blobs::Blobs;
use crate::clock::{Clock, SystemClock, TestClock};
use crate::config::{ConnectionSettings, Settings};
use crate::connections::ConnectionLimits;
use crate::held::HeldReads;
use crate::http::{Access, AppState, SharedState, router};
use crate::notify::Notifier;
use crate::protocol::time::format_iso;
use crate::store::url::redact;
use crate::store::{Phase, Progress};

pub struct App {
    listener: TcpListener,
    state: SharedState,
    grace: Duration,
    /// How often the revoked tokens are re-read (authenticated mode).
    revocation_refresh: Duration,
    connection_limits: ConnectionLimits,
    metrics: Option<crate::metrics::MetricsServer>,
}

impl App {
    /// Bind the listeners, then open everything; fails with a clear message
    /// on a port in use, an unreachable database, a catalog that does not
    /// compile, or open mode on a non-loopback address (what needs no I/O
    /// was checked when `settings` were parsed). The server stops when
    /// `shutdown` is cancelled; cancelled before it is ready, this fails.
    ///
    /// From the moment the port is bound until the store is open (which,
    /// on PostgreSQL, may mean waiting for another replica's migration),
    /// the port answers as a starting server (`crate::http::starting`):
    /// `/readyz` says what the start waits for, other routes `503`.
    pub async fn build(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<App> {
        // The ports are bound before storage is touched: a start that fails
        // (port in use) creates no data directory and runs no migration.
        // First the accepted client identities and their catalogs (compiled
        // once), and the secret.
        let clients = crate::protocol::Clients::resolve(
            &settings.clients.accept,
            settings.clients.autobuild_version.as_deref(),
            settings.clients.catalog.as_deref(),
        )?;
        let secret = resolve_secret(&settings)?;
        let hosts = host_check(&settings, secret.is_some());
        let listener = TcpListener::bind(settings.listen)
            .await
            .with_context(|| format!("binding {}", settings.listen))?;
        let metrics = match settings.metrics_listen {
            Some(addr) => {
                Some(crate::metrics::MetricsServer::bind(addr, &settings.auth.allow_hosts).await?)
            }
            None => None,
        };
        let connection_limits = connection_limits(&settings.connections);
        let progress = Progress::default();
        let primary = clients.primary();
        let starting = StartingServer::spawn(
            listener,
            crate::http::Starting {
                progress: progress.clone(),
                identity: (
                    primary.version.clone(),
                    primary.protocol.as_str().to_owned(),
                ),
                shutdown: shutdown.clone(),
            },
            connection_limits,
            &shutdown,
        );
        let opened = tokio::select! {
            opened = open(&settings, clients, secret, hosts, &progress, &shutdown) => opened,
            () = shutdown.cancelled() => Err(anyhow::anyhow!(
                "stopped by a signal before the server was ready ({})",
                progress.phase()
            )),
        };
        // The starting server stops accepting either way; its connections
        // close after their answers.
        let listener = starting.stop().await?;
        let state = opened?;
        log_configuration(
            &settings,
            &state.access.clients.describe(),
            &connection_limits,
        );
        Ok(App {
            listener,
            state,
            metrics,
            grace: settings.shutdown_grace,
            revocation_refresh: settings.auth.revocation_refresh,
            connection_limits,
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
        let server = crate::connections::serve(
            &self.listener,
            app,
            self.connection_limits,
            shutdown.clone(),
        );
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

/// Open what a request needs (store, revoked tokens, blobs, caches) into
/// the state every route shares, saying how far it got in `progress`.
async fn open(
    settings: &Settings,
    clients: crate::protocol::Clients,
    secret: Option<crate::secret::Secret>,
    hosts: Option<crate::hosts::HostCheck>,
    progress: &Progress,
    shutdown: &CancellationToken,
) -> anyhow::Result<SharedState> {
    let test_clock = settings.test_clock.map(|now| {
        tracing::warn!(
            "TEST CLOCK ENABLED: time is frozen at {} and POST /_test/clock can change it; never use this in production",
            format_iso(now)
        );
        Arc::new(TestClock::new(now))
    });
    let clock: Arc<dyn Clock> = match &test_clock {
        Some(clock) => clock.clone(),
        None => Arc::new(SystemClock),
    };
    let notifier = Arc::new(Notifier::new());
    let store = settings
        .database
        .open(&settings.store, clock.clone(), notifier.clone(), progress)
        .await
        .with_context(|| format!("opening the database ({})", settings.database))?;
    progress.set(Phase::Finishing);
    // Authenticated mode refuses revoked tokens from its first request:
    // a start that cannot read them fails.
    let revocations = match &secret {
        Some(_) => Some(Arc::new(
            crate::revocation::Revocations::load(&*store).await?,
        )),
        None => None,
    };
    let blobs = Blobs::open(&settings.blobs)
        .with_context(|| format!("opening the blob store ({})", redact(&settings.blobs)))?;
    // Exact only where every write to a log is announced before its
    // client is answered: this process's own (src/history/short_logs.rs).
    let short_logs = settings
        .answer_caches
        .short_logs
        .filter(|_| settings.database.backend() == "sqlite")
        .and_then(|bytes| {
            let cache = Arc::new(crate::history::ShortLogCache::new(bytes));
            let forget = cache.clone();
            // Unobserved writes would leave answers stale: no cache then
            // (the notifier is new, so it is always observed).
            notifier
                .observe_writes(Box::new(move |resource| forget.forget(resource)))
                .is_ok()
                .then_some(cache)
        });
    let held = HeldReads::new(
        store.clone(),
        notifier,
        settings.max_held_reads,
        settings.store.pool_size as usize,
        shutdown.clone(),
    );
    let auth = &settings.auth;
    let state = Arc::new(AppState {
        store: store.clone(),
        blobs,
        access: Access {
            clients,
            secret,
            clock,
            max_token_lifetime: auth.max_token_lifetime,
            revocations,
            hosts,
        },
        limits: settings.limits.clone(),
        held: Arc::new(held),
        history: crate::history::reader::HistoryReader::new(
            store.clone(),
            settings.history_cache.map(|cache| {
                Arc::new(crate::history::HistoryCache::new(
                    cache.chunk_events,
                    cache.bytes,
                    settings.store.answer_times,
                ))
            }),
            short_logs,
            settings
                .answer_caches
                .state_events
                .map(crate::history::StateEventsCache::new),
            settings
                .answer_caches
                .build_digests
                .map(crate::history::DigestsCache::new),
            settings.limits.compress_min_bytes,
        ),
        json_budget: crate::http::JsonBudget::new(settings.json_memory_bytes),
        stream_closes: tokio::sync::Semaphore::new(settings.max_concurrent_stream_closes as usize),
        test_clock,
        tickets: Arc::new(settings.tickets.clone()),
        console: settings
            .console()
            .map(|console| std::sync::Arc::new(crate::http::console::Console::new(console))),
        shutdown: shutdown.clone(),
    });
    crate::metrics::record_build_info(settings.database.backend());
    Ok(state)
}

/// The starting server (`crate::http::starting`) on the bound port, until
/// the real one takes the port over.
struct StartingServer {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<TcpListener>,
}

impl StartingServer {
    fn spawn(
        listener: TcpListener,
        starting: crate::http::Starting,
        limits: ConnectionLimits,
        shutdown: &CancellationToken,
    ) -> StartingServer {
        // A child token: a signal stops it too.
        let stop = shutdown.child_token();
        let router = crate::http::starting_router(starting);
        let token = stop.clone();
        let task = tokio::spawn(async move {
            // Its connections drain by themselves (each closes after its
            // answer, or at once when idle); nothing waits for them.
            drop(crate::connections::accept_until(&listener, router, limits, token).await);
            listener
        });
        StartingServer { stop, task }
    }

    /// Stop accepting and hand the listener back.
    async fn stop(self) -> anyhow::Result<TcpListener> {
        self.stop.cancel();
        self.task.await.context("the starting server failed")
    }
}

/// The secrets, creating the file first when `--create-secret-file` asks;
/// without any, open mode, which a non-loopback address must opt into.
fn resolve_secret(settings: &Settings) -> anyhow::Result<Option<crate::secret::Secret>> {
    let auth = &settings.auth;
    if auth.create_secret_file
        && let Some(path) = &auth.secret.file
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
    let secret = auth.secret.resolve()?;
    let listen = settings.listen;
    match &secret {
        Some(secret) => tracing::info!(secrets = secret.len(), "authenticated mode"),
        None if listen.ip().is_loopback() => tracing::warn!(
            "no token secret: open mode, every route is unauthenticated (loopback only)"
        ),
        None if auth.open => tracing::warn!(
            %listen,
            "OPEN MODE ON A NETWORK ADDRESS (--open): every route is unauthenticated; anyone who reaches the port can read and write"
        ),
        None => anyhow::bail!(
            "refusing to serve {listen} without a token secret: anyone who reaches the port could read and write. \
             Give a secret with --secret-file PATH (ABSTORE_SECRET_FILE) or ABSTORE_SECRET, \
             or accept open mode explicitly with --open (ABSTORE_OPEN=true)",
        ),
    }
    Ok(secret)
}

/// Open mode on a loopback address answers only loopback `Host` names and
/// the `--allow-host` ones (`crate::hosts::HostCheck`); otherwise any.
fn host_check(settings: &Settings, authenticated: bool) -> Option<crate::hosts::HostCheck> {
    let guarded = !authenticated && settings.listen.ip().is_loopback();
    let allowed = &settings.auth.allow_hosts;
    let metrics_guarded = settings
        .metrics_listen
        .is_some_and(|m| m.ip().is_loopback());
    if !guarded && !metrics_guarded && !allowed.is_empty() {
        tracing::info!(
            "--allow-host has no effect: only open mode on a loopback address, and a metrics \
             listener on one, check the Host"
        );
    }
    guarded.then(|| crate::hosts::HostCheck::new(allowed))
}

/// The connection caps in force: the global one lowered to what the
/// open-file limit allows, the per-address one a quarter of it by default.
fn connection_limits(asked: &ConnectionSettings) -> ConnectionLimits {
    let max_connections = crate::connections::effective_max_connections(asked.max_connections);
    let max_per_address = asked
        .max_per_address
        .unwrap_or((max_connections / 4).max(1))
        .min(max_connections);
    ConnectionLimits {
        deadlines: asked.deadlines,
        body_read: asked.body_read,
        max_connections,
        max_per_address,
    }
}

/// One line with the effective settings (a connection cap lowered to the
/// open-file limit shows the lowered value), passwords and secrets redacted.
fn log_configuration(settings: &Settings, clients: &str, connections: &ConnectionLimits) {
    let Settings {
        store,
        limits,
        auth,
        ..
    } = settings;
    let deadlines = &connections.deadlines;
    let seconds = |duration: Duration| duration.as_secs();
    tracing::info!(
        listen = %settings.listen,
        database = %settings.database,
        db_pool_size = store.pool_size,
        db_min_connections = store.min_connections.min(store.pool_size),
        db_acquire_timeout_ms = store.acquire_timeout.as_millis(),
        db_unavailable_acquire_timeout_ms = store.unavailable_acquire_timeout.as_millis(),
        blobs = %redact(&settings.blobs),
        auth = if auth.secret.is_given() { "token (secret redacted)" } else { "open" },
        max_token_lifetime = %auth.max_token_lifetime,
        revocation_refresh_seconds = seconds(auth.revocation_refresh),
        allow_hosts = %auth.allow_hosts.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
        accept_clients = %clients,
        max_artifact_bytes = limits.max_artifact_bytes,
        max_body_bytes = limits.max_body_bytes,
        max_json_body_bytes = limits.max_json_body_bytes,
        max_json_memory_bytes = settings.json_memory_bytes,
        max_stream_batch_bytes = limits.max_stream_batch_bytes,
        max_wait_seconds = seconds(limits.max_wait),
        max_held_reads = settings.max_held_reads,
        shutdown_grace_seconds = seconds(settings.shutdown_grace),
        request_timeout_seconds = seconds(limits.request_timeout),
        max_concurrent_requests = limits.max_concurrent_requests,
        max_connections = connections.max_connections,
        max_connections_per_address = connections.max_per_address,
        header_read_timeout_seconds = seconds(deadlines.header_read),
        idle_timeout_seconds = seconds(deadlines.idle),
        body_read_timeout_seconds = seconds(connections.body_read),
        read_stall_timeout_seconds = seconds(deadlines.answer_stall),
        answer_deadline_seconds = seconds(deadlines.answer_deadline),
        max_streamed_reads = store.max_streamed_reads,
        max_concurrent_stream_closes = settings.max_concurrent_stream_closes,
        compression = match limits.compress_min_bytes { None => "off".to_owned(), Some(min) => format!("zstd, br, gzip from {min} bytes") },
        history_cache = match settings.history_cache { None => "off".to_owned(), Some(cache) => format!("{} bytes, chunks of {} events", cache.bytes, cache.chunk_events) },
        state_events_cache = match settings.answer_caches.state_events { None => "off".to_owned(), Some(bytes) => format!("{bytes} bytes") },
        build_digests_cache = match settings.answer_caches.build_digests { None => "off".to_owned(), Some(bytes) => format!("{bytes} bytes") },
        short_log_cache = match settings.answer_caches.short_logs { None => "off".to_owned(), Some(_) if settings.database.backend() != "sqlite" => "off (SQLite files only)".to_owned(), Some(bytes) => format!("{bytes} bytes") },
        metrics_listen = ?settings.metrics_listen,
        catalog = %settings.clients.catalog.as_ref().map_or_else(|| "embedded".to_owned(), |dir| dir.display().to_string()),
        retention = %store.retention.policy,
        retention_source = %settings.retention_source.as_ref().map_or_else(|| "embedded".to_owned(), |p| p.display().to_string()),
        retention_prune_limit = store.retention.prune_limit,
        max_stream_chunks = store.bounds.max_stream_chunks,
        max_stream_bytes = store.bounds.max_stream_bytes,
        max_events_per_log = store.bounds.max_events_per_log,
        max_artifact_revisions = store.bounds.max_artifact_revisions,
        max_ticket_asset_revisions = store.bounds.max_ticket_asset_revisions,
        max_ticket_assets = store.bounds.max_ticket_assets,
        ticket_states = %settings.tickets.lifecycle.states().join(", "),
        max_team_tickets = settings.tickets.bounds.max_team_tickets,
        max_ticket_labels = settings.tickets.bounds.max_ticket_labels,
        max_ticket_blockers = settings.tickets.bounds.max_ticket_blockers,
        max_ticket_comments = settings.tickets.bounds.max_ticket_comments,
        max_ticket_text_bytes = settings.tickets.bounds.max_ticket_text_bytes,
        test_clock = ?settings.test_clock.map(format_iso),
        migrate = store.migrate,
        "configuration"
    );
}
