//! Prometheus metrics on their own listener (`--metrics-listen`, off by
//! default): operators scrape a private port while the protocol port keeps
//! exactly the spec's routes (anything else there is `404 no route`).
//!
//! Labels are bounded: matched route templates, methods, status codes and
//! resource families. Never slugs, ids or tokens.
//!
//! The listener has no tokens, so on a loopback address it answers only
//! loopback and `--allow-host` names, as open mode does ([`crate::hosts`]):
//! a page rebinding its DNS name to `127.0.0.1` must not read it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, LazyLock, RwLock};
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::routing::get;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::hosts::{AllowedHost, HostCheck};
use crate::store::PoolStats;
// Recorded by the SQLite writer thread itself; described and bucketed here.
use crate::store::sqlite::{COMMIT_BATCH_JOBS, COMMIT_SECONDS};

/// Install the process-wide recorder and describe every metric; call once,
/// before serving.
pub fn install() -> anyhow::Result<PrometheusHandle> {
    let handle = PrometheusBuilder::new()
        .set_buckets(&[
            0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
        ])
        .context("metric buckets")?
        // Jobs per SQLite commit are counts, not seconds: powers of two up
        // to the writer's batch bound.
        .set_buckets_for_metric(
            Matcher::Full(COMMIT_BATCH_JOBS.to_owned()),
            &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0],
        )
        .context("commit batch buckets")?
        .install_recorder()
        .context("installing the metrics recorder")?;
    INSTALLED.store(true, Relaxed);
    // The console's operator page reads the same numbers (`rendered`).
    let _ = HANDLE.set(handle.clone());
    describe();
    // Present from the start, so that an alert on its rate sees a series
    // before the first refusal.
    for storage in crate::storage_full::Storage::ALL {
        metrics::counter!("abstore_storage_full_total", "storage" => storage.label()).absolute(0);
    }
    for failure in crate::auth::Failure::ALL {
        metrics::counter!("abstore_auth_failures_total", "reason" => failure.label()).absolute(0);
    }
    Ok(handle)
}

/// The installed recorder's handle, for [`rendered`].
static HANDLE: std::sync::OnceLock<PrometheusHandle> = std::sync::OnceLock::new();

/// Every metric in the Prometheus text format, as `/metrics` serves it
/// (without the sampled gauges); `None` before [`install`].
pub fn rendered() -> Option<String> {
    HANDLE.get().map(PrometheusHandle::render)
}

/// `# HELP` text for every metric the server records. A metric added
/// anywhere must be described here (a test scrapes for HELP on each one).
fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        "abstore_http_requests_total",
        "Requests answered, by matched route, method and status."
    );
    describe_histogram!(
        "abstore_http_request_duration_seconds",
        Unit::Seconds,
        "Time from request to response head, by matched route and method."
    );
    describe_histogram!(
        COMMIT_BATCH_JOBS,
        "Jobs (writes) carried by each SQLite commit of the writer thread: \
         how many writes share one fsync (group commit)."
    );
    describe_histogram!(
        COMMIT_SECONDS,
        Unit::Seconds,
        "Time each SQLite writer batch takes from BEGIN until its jobs are answered (the COMMIT's fsync included)."
    );
    describe_counter!(
        "abstore_appends_total",
        "Events appended, by resource family."
    );
    describe_counter!(
        "abstore_deposits_total",
        "Artifact deposits stored, by resource family."
    );
    describe_counter!(
        "abstore_blob_bytes_written_total",
        Unit::Bytes,
        "Artifact bytes written to the blob store."
    );
    describe_counter!(
        "abstore_artifact_revisions_pruned_total",
        "Artifact revisions deleted by the retention policy, by resource family."
    );
    describe_counter!(
        "abstore_history_chunks_total",
        "Sealed history chunks sent in zstd answers, by source (cache or database)."
    );
    describe_gauge!(
        "abstore_history_cache_bytes",
        Unit::Bytes,
        "Bytes of zstd frames the history cache holds."
    );
    describe_gauge!(
        "abstore_state_events_cache_bytes",
        Unit::Bytes,
        "Bytes of protocol-3 state-events answers (identity and zstd) the state-events cache holds."
    );
    describe_counter!(
        "abstore_state_events_answers_total",
        "State-events answers, by source (cache, database, or streamed when too large to keep)."
    );
    describe_gauge!(
        "abstore_build_digests_cache_bytes",
        Unit::Bytes,
        "Bytes of protocol-3 build digests (each build's, and each repository's answer as identity and zstd) the digests cache holds."
    );
    describe_counter!(
        "abstore_build_digests_answers_total",
        "Build-digests answers, by source (cache: no tail moved; advanced: only the events past the kept tails read; database: derived from the first event)."
    );
    describe_gauge!(
        "abstore_build_records_cache_bytes",
        Unit::Bytes,
        "Bytes of build records (their wire JSON and the columns it was rendered from) the build-records cache holds."
    );
    describe_counter!(
        "abstore_build_records_total",
        "Build records written into `GET /builds` answers, by source (cache: its columns unchanged since rendered; rendered)."
    );
    describe_gauge!(
        "abstore_short_log_cache_bytes",
        Unit::Bytes,
        "Bytes of whole short event logs (identity and zstd) the short-log cache holds."
    );
    describe_counter!(
        "abstore_short_log_answers_total",
        "Whole-log reads the short-log cache was asked for, by source (cache, or database)."
    );
    describe_gauge!(
        "abstore_held_reads_in_flight",
        "Held reads (wait=) currently waiting."
    );
    describe_counter!(
        "abstore_db_queries_total",
        "Database statements run by the store."
    );
    describe_gauge!(
        "abstore_db_pool_connections",
        "Database pool connections, by state (idle, busy)."
    );
    describe_gauge!(
        "abstore_db_pool_max_connections",
        "The database pool's size limit."
    );
    describe_gauge!(
        "abstore_db_available",
        "0 while PostgreSQL is known to be unreachable (requests answer 503), else 1."
    );
    describe_counter!(
        "abstore_db_read_share_timeouts_total",
        "PostgreSQL reads answered 503 because the reads' share of the pool (--db-pool-size less --db-write-connections) stayed full for --db-acquire-timeout-ms."
    );
    describe_counter!(
        "abstore_storage_full_total",
        "Writes refused (503) because the disk under the database or the blob store was full, by storage (database, blobs)."
    );
    describe_gauge!(
        "abstore_listen_connected",
        "1 while the PostgreSQL LISTEN connection for held-read wake-ups is up."
    );
    describe_counter!(
        "abstore_stream_chunks_total",
        "Stream chunk batches appended."
    );
    describe_counter!("abstore_stream_closes_total", "Streams closed, by outcome.");
    describe_counter!(
        "abstore_stream_dropped_parts_total",
        "Stream parts dropped by assembly."
    );
    describe_counter!(
        "abstore_sessions_created_total",
        "Operator sessions created."
    );
    describe_counter!(
        "abstore_auth_failures_total",
        "Requests refused by authentication or authorization, by reason (missing, malformed_or_bad_signature, expired, revoked, lifetime, forbidden, host)."
    );
    describe_gauge!(
        "abstore_revoked_tokens",
        "Revoked tokens this server refuses, as last read from the database."
    );
    describe_counter!(
        "abstore_secret_reloads_total",
        "Token secret file reloads that changed the secrets or failed, by result."
    );
    describe_gauge!(
        "abstore_connections_open",
        "Client connections open now (capped by --max-connections)."
    );
    describe_gauge!(
        "abstore_build_info",
        "Always 1; the labels name the server version and storage backend."
    );
    describe_gauge!(
        "process_cpu_seconds_total",
        Unit::Seconds,
        "User and system CPU time the process has used."
    );
    describe_gauge!(
        "process_resident_memory_bytes",
        Unit::Bytes,
        "Resident set size of the process."
    );
    describe_gauge!("process_open_fds", "File descriptors the process has open.");
    describe_gauge!(
        "process_max_fds",
        "The process's limit on open file descriptors."
    );
}

/// Count one request refused for `failure` (`abstore_auth_failures_total`).
pub fn record_auth_failure(failure: crate::auth::Failure) {
    if INSTALLED.load(Relaxed) {
        metrics::counter!("abstore_auth_failures_total", "reason" => failure.label()).increment(1);
    }
}

/// Publish `abstore_build_info{version, backend} 1`.
pub fn record_build_info(backend: &'static str) {
    metrics::gauge!("abstore_build_info", "version" => env!("CARGO_PKG_VERSION"), "backend" => backend).set(1.0);
}

/// Sample CPU time, resident memory and file descriptors from `/proc/self`
/// (Linux; elsewhere the gauges are absent). Hand-written because these
/// four numbers are three small kernel files away, where the usual crate
/// (`metrics-process`) brings a platform layer for each OS.
fn record_process() {
    /// `/proc` reports CPU time in USER_HZ ticks, 100 per second in Linux's
    /// ABI on every architecture.
    const TICKS_PER_SECOND: f64 = 100.0;
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
        // Fields after the command name (which may hold spaces) start at
        // field 3; utime and stime are fields 14 and 15.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
        let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
        if let (Some(user), Some(system)) = (ticks(11), ticks(12)) {
            metrics::gauge!("process_cpu_seconds_total").set((user + system) / TICKS_PER_SECOND);
        }
    }
    if let Ok(status) = std::fs::read_to_string("/proc/self/status")
        && let Some(kib) = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
    {
        metrics::gauge!("process_resident_memory_bytes").set(kib * 1024.0);
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        metrics::gauge!("process_open_fds").set(fds.count() as f64);
    }
    if let Ok(limits) = std::fs::read_to_string("/proc/self/limits")
        && let Some(max) = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .and_then(|l| l.split_whitespace().nth(3))
            .and_then(|v| v.parse::<f64>().ok())
    {
        metrics::gauge!("process_max_fds").set(max);
    }
}

/// The bound metrics listener, the recorder's handle and, on a loopback
/// address, the names it answers.
pub struct MetricsServer {
    listener: TcpListener,
    handle: PrometheusHandle,
    hosts: Option<Arc<HostCheck>>,
}

impl MetricsServer {
    /// Install the recorder and bind `addr`; on a loopback address only
    /// loopback names and `allowed` are answered.
    pub async fn bind(addr: SocketAddr, allowed: &[AllowedHost]) -> anyhow::Result<MetricsServer> {
        let handle = install()?;
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding --metrics-listen {addr}"))?;
        let hosts = addr
            .ip()
            .is_loopback()
            .then(|| Arc::new(HostCheck::new(allowed)));
        Ok(MetricsServer {
            listener,
            handle,
            hosts,
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serve `GET /metrics` in the background until `shutdown`; each scrape
    /// first records the gauges `sample` reads.
    pub fn spawn(
        self,
        shutdown: CancellationToken,
        sample: impl Fn() -> Gauges + Send + Sync + 'static,
    ) {
        let sampler: Sampler = Arc::new(sample);
        let mut app = Router::new()
            .route("/metrics", get(render))
            .with_state((self.handle, sampler));
        if let Some(hosts) = self.hosts {
            app = app.layer(axum::middleware::from_fn(move |request, next| {
                admit_host(hosts.clone(), request, next)
            }));
        }
        serve(self.listener, app, shutdown);
    }
}

/// `403` (counted as a `host` refusal) for a request naming a host the
/// check refuses; the scrape otherwise.
async fn admit_host(
    hosts: Arc<HostCheck>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    match hosts.admit(request.uri(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refused) => {
            record_auth_failure(crate::auth::Failure::Host);
            (StatusCode::FORBIDDEN, format!("{refused}\n")).into_response()
        }
    }
}

/// The server's gauges that are cheapest to read at scrape time.
pub struct Gauges {
    /// Held reads in flight.
    pub held_reads: usize,
    pub pool: PoolStats,
}

type Sampler = Arc<dyn Fn() -> Gauges + Send + Sync>;

fn serve(listener: TcpListener, app: Router, shutdown: CancellationToken) {
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
        if let Err(err) = served {
            tracing::error!(error = %err, "metrics listener failed");
        }
    });
}

/// Sample the gauges that are cheapest to read at scrape time, then render.
async fn render(State((handle, sample)): State<(PrometheusHandle, Sampler)>) -> String {
    let Gauges { held_reads, pool } = sample();
    metrics::gauge!("abstore_held_reads_in_flight").set(held_reads as f64);
    metrics::gauge!("abstore_db_pool_connections", "state" => "idle").set(f64::from(pool.idle));
    metrics::gauge!("abstore_db_pool_connections", "state" => "busy")
        .set(f64::from(pool.size.saturating_sub(pool.idle)));
    metrics::gauge!("abstore_db_pool_max_connections").set(f64::from(pool.max));
    record_process();
    handle.render()
}

/// Whether [`install`] ran: without a recorder the per-request recording
/// is skipped outright instead of building keys for the no-op recorder.
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// The request metrics' handles for one route, method and status.
struct RequestSeries {
    method: &'static str,
    status: u16,
    count: metrics::Counter,
    duration: metrics::Histogram,
}

/// Handles already registered, by route: the recorder's own lookup builds
/// and hashes a labelled key (three owned strings) per call, this one
/// hashes the route and scans a short list.
static SERIES: LazyLock<RwLock<HashMap<Box<str>, Vec<RequestSeries>>>> =
    LazyLock::new(Default::default);

/// Count and time one answered request by matched route, method and status.
pub fn record_request(route: &str, method: &Method, status: StatusCode, latency: Duration) {
    if !INSTALLED.load(Relaxed) {
        return;
    }
    let (method, status) = (method_label(method), status.as_u16());
    let seconds = latency.as_secs_f64();
    let find = |series: &[RequestSeries]| {
        series
            .iter()
            .find(|s| s.method == method && s.status == status)
            .map(|s| {
                s.count.increment(1);
                s.duration.record(seconds);
            })
            .is_some()
    };
    let known = SERIES
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .get(route)
        .is_some_and(|series| find(series));
    if known {
        return;
    }
    let mut all = SERIES
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let series = all.entry(route.into()).or_default();
    if !find(series) {
        let entry = RequestSeries {
            method,
            status,
            count: metrics::counter!("abstore_http_requests_total", "route" => route.to_owned(), "method" => method, "status" => status.to_string()),
            duration: metrics::histogram!("abstore_http_request_duration_seconds", "route" => route.to_owned(), "method" => method),
        };
        entry.count.increment(1);
        entry.duration.record(seconds);
        series.push(entry);
    }
}

/// Standard methods by name; anything else is one label, so a client
/// cannot grow the label set.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        Method::TRACE => "TRACE",
        Method::CONNECT => "CONNECT",
        _ => "other",
    }
}
