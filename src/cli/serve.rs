//! `abstore serve` and `abstore migrate`: the server's flags, turned into
//! its settings ([`ServeConfig`]), and the two runners.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use tokio_util::sync::CancellationToken;

use super::boolish;
use crate::config::{ClientIdentity, DatabaseConfig, SecretConfig, ServeConfig};
use crate::store::DatabaseUrl;
use crate::store::bounds::{self, Bounds};

/// `Debug` by hand: the URL may carry a password ([`DatabaseUrl`]'s redaction).
#[derive(Args, Clone)]
pub struct DatabaseArgs {
    /// Database URL: `sqlite://PATH`, `sqlite::memory:` or `postgres://…`.
    #[arg(
        long,
        env = "ABSTORE_DATABASE",
        default_value = "sqlite://./abstore-data/abstore.db"
    )]
    pub database: String,

    /// Maximum database connections (PostgreSQL pool; SQLite readers).
    #[arg(long, env = "ABSTORE_DB_POOL_SIZE", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub db_pool_size: u32,

    /// PostgreSQL connections opened at start and kept open (at most
    /// `--db-pool-size`): requests up to this many at once never wait for a
    /// new connection. Set it to `--db-pool-size` for a fixed-size pool.
    #[arg(long, env = "ABSTORE_DB_MIN_CONNECTIONS", default_value_t = 4, value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub db_min_connections: u32,

    /// How long a request waits for a pooled PostgreSQL connection before
    /// it fails (`503`), in milliseconds.
    #[arg(long, env = "ABSTORE_DB_ACQUIRE_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub db_acquire_timeout_ms: u64,

    /// The same bound while PostgreSQL is known to be unreachable (after a
    /// failed connect), so requests answer `503` at once during an outage.
    #[arg(long, env = "ABSTORE_DB_UNAVAILABLE_ACQUIRE_TIMEOUT_MS", default_value_t = 250, value_parser = clap::value_parser!(u64).range(1..))]
    pub db_unavailable_acquire_timeout_ms: u64,
}

#[derive(Debug, Args, Clone)]
pub struct ServeArgs {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, env = "ABSTORE_LISTEN", default_value = "127.0.0.1:8787")]
    pub listen: SocketAddr,

    #[command(flatten)]
    pub db: DatabaseArgs,

    /// Blob location: a directory, `file:///abs/dir`, `memory://`, or an object-store URL.
    #[arg(long, env = "ABSTORE_BLOBS", default_value = "./abstore-data/blobs")]
    pub blobs: String,

    /// Do not apply migrations at start (run `abstore migrate` separately).
    #[arg(long, env = "ABSTORE_NO_MIGRATE", value_parser = boolish())]
    pub no_migrate: bool,

    /// The one Autobuild package version clients must send, with protocol 2
    /// (the same as `--accept-client VERSION/2`; cannot be combined with it).
    /// Without either flag the server accepts 0.8.0/2.
    #[arg(long, env = "ABSTORE_AUTOBUILD_VERSION", value_name = "VERSION")]
    pub autobuild_version: Option<String>,

    /// Accept clients of this Autobuild version and protocol, e.g. `0.9.0/3`;
    /// repeat for several (the variable is comma separated). Each is served
    /// its own event catalogs and protocol; the first is what `/health`
    /// reports. The embedded catalogs serve 0.8.0/2, 0.8.0/3 (a client built
    /// from Autobuild's main branch) and 0.9.0/3. Default: 0.8.0/2.
    #[arg(
        long = "accept-client",
        env = "ABSTORE_ACCEPT_CLIENTS",
        value_name = "VERSION/PROTOCOL",
        value_delimiter = ','
    )]
    pub accept_clients: Vec<ClientIdentity>,

    /// Largest decoded artifact in bytes; larger ones are 413.
    #[arg(long, env = "ABSTORE_MAX_ARTIFACT_BYTES", default_value_t = 1_048_576, value_parser = bytes_in(1, 1 << 30))]
    pub max_artifact_bytes: usize,

    /// Largest request body in bytes of the routes that carry artifacts
    /// (put, deposit) and of the ticket-asset routes; larger ones are 413.
    #[arg(long, env = "ABSTORE_MAX_BODY_BYTES", default_value_t = 16 * 1_048_576, value_parser = bytes_in(1, 1 << 32))]
    pub max_body_bytes: usize,

    /// Largest request body in bytes of every other route (events, stream
    /// batches, leases, sessions); larger ones are 413. Above
    /// `--max-stream-batch-bytes`, so a batch is judged by its own ceiling.
    /// The default is the request ceiling of Autobuild's hosted service.
    #[arg(long, env = "ABSTORE_MAX_JSON_BODY_BYTES", default_value_t = 4 * 1_048_576, value_parser = bytes_in(1024, 1 << 32))]
    pub max_json_body_bytes: usize,

    /// Memory all parsed request bodies may hold at once, in bytes (a JSON
    /// text's tree takes several times its size). A body that does not fit
    /// beside the others is answered `503` (retry), one that could never
    /// fit `413`.
    #[arg(long, env = "ABSTORE_MAX_JSON_MEMORY_BYTES", default_value_t = 512 * 1_048_576, value_parser = bytes_in(1 << 20, 1 << 40))]
    pub max_json_memory_bytes: usize,

    /// Largest serialised stream batch (`parts`) in bytes; larger ones are 413.
    #[arg(
        long,
        env = "ABSTORE_MAX_STREAM_BATCH_BYTES",
        default_value_t = 1_048_576
    )]
    pub max_stream_batch_bytes: usize,

    /// Ceiling for held reads (`wait=`), in seconds; larger waits are clamped.
    #[arg(long, env = "ABSTORE_MAX_WAIT_SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=30))]
    pub max_wait_seconds: u64,

    /// Serve Prometheus metrics at `GET /metrics` on this separate address
    /// (off when unset; keep it private).
    #[arg(long, env = "ABSTORE_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,

    /// Longest a request may run before it is answered `500 internal`; must
    /// exceed the held-read ceiling by at least 5 s so no held read is cut short.
    #[arg(long, env = "ABSTORE_REQUEST_TIMEOUT_SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub request_timeout_seconds: u64,

    /// Requests served at once (held reads included); more wait for a turn.
    #[arg(long, env = "ABSTORE_MAX_CONCURRENT_REQUESTS", default_value_t = 16_384, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_concurrent_requests: u64,

    /// After SIGTERM/SIGINT, how long in-flight requests may take to finish
    /// before the process exits anyway (held reads answer at once).
    #[arg(long, env = "ABSTORE_SHUTDOWN_GRACE_SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub shutdown_grace_seconds: u64,

    /// Connections open at once (held reads each keep one); over it a new
    /// connection is answered `503` and closed. Lowered to what the open-file
    /// limit allows.
    #[arg(long, env = "ABSTORE_MAX_CONNECTIONS", default_value_t = 16_384, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,

    /// Connections open at once from one client address (IPv6 clients by
    /// their /64); over it a new connection is answered `503` and closed.
    /// Default: a quarter of `--max-connections`. Behind a reverse proxy
    /// every connection comes from the proxy: raise it to
    /// `--max-connections` there.
    #[arg(long, env = "ABSTORE_MAX_CONNECTIONS_PER_ADDRESS", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections_per_address: Option<u32>,

    /// Longest a client may take to send a request head, from its first byte
    /// (for a new connection, from the moment it opens); then the
    /// connection is closed.
    #[arg(long, env = "ABSTORE_HEADER_READ_TIMEOUT_SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub header_read_timeout_seconds: u64,

    /// Longest a connection may stay open with no request in progress and no
    /// bytes arriving (idle keep-alive, or never sending anything).
    #[arg(long, env = "ABSTORE_IDLE_TIMEOUT_SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub idle_timeout_seconds: u64,

    /// Longest a request body may go without data before the request is
    /// answered `400 validation`.
    #[arg(long, env = "ABSTORE_BODY_READ_TIMEOUT_SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub body_read_timeout_seconds: u64,

    /// Longest an answer waits for its client to take more of it (a
    /// streamed answer: its next piece; any answer: bytes the socket can
    /// send); then the answer is abandoned and the connection closed.
    #[arg(long, env = "ABSTORE_READ_STALL_TIMEOUT_SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub read_stall_timeout_seconds: u64,

    /// Longest a request may take from the first byte of its head to the
    /// last byte of its answer, however steadily its client reads; then the
    /// answer is cut short and the connection closed (a streamed answer
    /// holds a database connection and, on SQLite, a read snapshot until it
    /// ends). Above `--request-timeout-seconds`.
    #[arg(long, env = "ABSTORE_ANSWER_DEADLINE_SECONDS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub answer_deadline_seconds: u64,

    /// Streamed answers longer than one 64 KiB piece that may be sending at
    /// once (each holds a database connection while its client reads);
    /// another waits up to `--db-acquire-timeout-ms`, then is answered
    /// `503`. Below `--db-pool-size`, so slow readers never take every
    /// connection. Default: half the pool, rounded up.
    #[arg(long, env = "ABSTORE_MAX_STREAMED_READS", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_streamed_reads: Option<u32>,

    /// Stream closes assembling their documents at once (each holds its
    /// stream's document in memory); more wait for a turn.
    #[arg(long, env = "ABSTORE_MAX_CONCURRENT_STREAM_CLOSES", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub max_concurrent_stream_closes: u32,

    /// Compress answers of at least this many bytes (zstd, brotli or gzip,
    /// as the client's `Accept-Encoding` allows).
    #[arg(long, env = "ABSTORE_COMPRESS_MIN_BYTES", default_value_t = 1024)]
    pub compress_min_bytes: u16,

    /// Never compress answers, whatever the client accepts.
    #[arg(long, env = "ABSTORE_NO_COMPRESSION", value_parser = boolish())]
    pub no_compression: bool,

    /// Bytes of compressed sealed history chunks kept in memory to answer
    /// whole-history reads in zstd; 0 turns the cache off.
    #[arg(long, env = "ABSTORE_HISTORY_CACHE_BYTES", default_value_t = 64 * 1024 * 1024, value_parser = bytes_in(0, 1 << 40))]
    pub history_cache_bytes: usize,

    /// Events per history chunk: a log's chunk is sealed (kept compressed)
    /// once the log holds every one of its sequence numbers.
    #[arg(long, env = "ABSTORE_HISTORY_CHUNK_EVENTS", default_value_t = 256, value_parser = clap::value_parser!(u32).range(8..=65_536))]
    pub history_chunk_events: u32,

    /// Held reads allowed at once in this process; beyond it reads answer immediately.
    #[arg(long, env = "ABSTORE_MAX_HELD_READS", default_value_t = 10_000, value_parser = bytes_in(0, 1_000_000))]
    pub max_held_reads: usize,

    /// Replace the embedded event catalogs with `build.json`, `repository.json`
    /// and `session.json` from this directory.
    #[arg(long, env = "ABSTORE_CATALOG")]
    pub catalog: Option<PathBuf>,

    /// Artifact retention: a JSON policy file replacing the embedded one
    /// (which keeps the latest 100 revisions of the dispatcher and
    /// build-runner configuration kinds), or `none` to prune nothing.
    #[arg(long, env = "ABSTORE_RETENTION_POLICY", value_name = "FILE|none")]
    pub retention_policy: Option<PathBuf>,

    /// At most this many artifact revisions pruned by one put or deposit
    /// (a larger backlog drains over later writes).
    #[arg(long, env = "ABSTORE_RETENTION_PRUNE_LIMIT", default_value_t = crate::store::retention::DEFAULT_PRUNE_LIMIT, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub retention_prune_limit: u32,

    #[command(flatten)]
    pub bounds: BoundsArgs,

    #[command(flatten)]
    pub tickets: super::tickets::TicketArgs,

    #[command(flatten)]
    pub secret: SecretArgs,

    /// Serve without a secret on a non-loopback address (every route
    /// unauthenticated). Without it, a non-loopback `--listen` with no secret
    /// refuses to start.
    #[arg(long, env = "ABSTORE_OPEN", value_parser = boolish())]
    pub open: bool,

    /// When `--secret-file` does not exist, create it (mode 0600) holding a
    /// fresh random secret, and log the command that mints an admin token.
    #[arg(long, env = "ABSTORE_CREATE_SECRET_FILE", value_parser = boolish(), requires = "secret_file")]
    pub create_secret_file: bool,

    /// Freeze the clock at this ISO time and enable `POST /_test/clock`
    /// (which needs an admin or deployment token when a secret is set). Tests only.
    #[arg(long, env = "ABSTORE_TEST_CLOCK")]
    pub test_clock: Option<String>,

    /// Open mode on a loopback address answers only requests whose `Host` is
    /// a loopback name (DNS rebinding); also answer this name (repeat the
    /// flag for several; the variable is comma separated).
    #[arg(
        long = "allow-host",
        env = "ABSTORE_ALLOW_HOSTS",
        value_name = "NAME",
        value_delimiter = ','
    )]
    pub allow_hosts: Vec<crate::http::AllowedHost>,

    /// Refuse a token whose `exp` lies further than this beyond now, whatever
    /// it says (e.g. `90d`, `12h`; `none` or `0`: no bound).
    #[arg(
        long,
        env = "ABSTORE_MAX_TOKEN_LIFETIME",
        default_value = "90d",
        value_name = "DURATION|none"
    )]
    pub max_token_lifetime: crate::auth::MaxLifetime,

    /// How often the revoked tokens are re-read from the database: a token
    /// revoked with `abstore token revoke` is refused by every replica within
    /// this many seconds.
    #[arg(long, env = "ABSTORE_REVOCATION_REFRESH_SECONDS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub revocation_refresh_seconds: u64,
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

/// The bounds on the collections clients grow (docs/configuration.md,
/// "Collection bounds"). A write over one writes nothing and is answered
/// `413 validation` naming the bound and its flag. Each is at most 2^53 − 1,
/// the largest count a JavaScript client reads exactly.
#[derive(Debug, Args, Clone)]
pub struct BoundsArgs {
    /// Chunks one stream may hold; an append beyond them is refused (close
    /// the stream and start another).
    #[arg(long, env = "ABSTORE_MAX_STREAM_CHUNKS", default_value_t = bounds::DEFAULT_MAX_STREAM_CHUNKS, value_parser = bound())]
    pub max_stream_chunks: i64,

    /// Bytes of chunks one stream may hold, as stored (each batch plus
    /// about 100 bytes of envelope): a close assembles them all in memory,
    /// so this bounds a close's memory.
    #[arg(long, env = "ABSTORE_MAX_STREAM_BYTES", default_value_t = bounds::DEFAULT_MAX_STREAM_BYTES, value_parser = bound())]
    pub max_stream_bytes: i64,

    /// Events one build, repository or session log may hold; appends and
    /// deposits beyond them are refused.
    #[arg(long, env = "ABSTORE_MAX_EVENTS_PER_LOG", default_value_t = bounds::DEFAULT_MAX_EVENTS_PER_LOG, value_parser = bound())]
    pub max_events_per_log: i64,

    /// Revisions one artifact kind of one resource may have, for kinds no
    /// retention rule selects (retention bounds the others); puts and
    /// deposits beyond them are refused.
    #[arg(long, env = "ABSTORE_MAX_ARTIFACT_REVISIONS", default_value_t = bounds::DEFAULT_MAX_ARTIFACT_REVISIONS, value_parser = bound())]
    pub max_artifact_revisions: i64,

    /// Revisions one ticket asset may have, removals included; puts and
    /// removals beyond them are refused.
    #[arg(long, env = "ABSTORE_MAX_TICKET_ASSET_REVISIONS", default_value_t = bounds::DEFAULT_MAX_TICKET_ASSET_REVISIONS, value_parser = bound())]
    pub max_ticket_asset_revisions: i64,

    /// Live assets one ticket may have; a put adding another is refused.
    #[arg(long, env = "ABSTORE_MAX_TICKET_ASSETS", default_value_t = bounds::DEFAULT_MAX_TICKET_ASSETS, value_parser = bound())]
    pub max_ticket_assets: i64,
}

/// A collection bound: a whole number from 1 to 2^53 − 1.
fn bound() -> clap::builder::RangedI64ValueParser<i64> {
    clap::value_parser!(i64).range(1..=bounds::MAX_BOUND)
}

impl From<BoundsArgs> for Bounds {
    fn from(args: BoundsArgs) -> Bounds {
        let BoundsArgs {
            max_stream_chunks,
            max_stream_bytes,
            max_events_per_log,
            max_artifact_revisions,
            max_ticket_asset_revisions,
            max_ticket_assets,
        } = args;
        Bounds {
            max_stream_chunks,
            max_stream_bytes,
            max_events_per_log,
            max_artifact_revisions,
            max_ticket_asset_revisions,
            max_ticket_assets,
        }
    }
}

/// Where the token signing secret comes from; none means open mode.
/// `Debug` by hand: the secret itself is never printed.
#[derive(Args, Clone, Default)]
pub struct SecretArgs {
    /// Token signing secret (enables authenticated mode). Prefer the file or the variable.
    #[arg(long, env = "ABSTORE_SECRET", hide_env_values = true)]
    pub secret: Option<String>,

    /// Read the token signing secrets from this file, one per line: the first
    /// signs, every one verifies. SIGHUP or a change of the file reloads it.
    /// It must be private to its owner (mode 0600 or stricter).
    #[arg(long, env = "ABSTORE_SECRET_FILE")]
    pub secret_file: Option<PathBuf>,

    /// Accept a secret shorter than 32 bytes or with little entropy (a
    /// repeated character or word). Tests only.
    #[arg(long, env = "ABSTORE_ALLOW_WEAK_SECRET", value_parser = boolish())]
    pub allow_weak_secret: bool,

    /// Accept a `--secret-file` that its group or others may read or write
    /// (refused otherwise: whoever reads it can mint any token).
    #[arg(long, env = "ABSTORE_ALLOW_INSECURE_SECRET_FILE", value_parser = boolish())]
    pub allow_insecure_secret_file: bool,
}

impl std::fmt::Debug for SecretArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        SecretConfig::from(self.clone()).fmt(f)
    }
}

impl std::fmt::Debug for DatabaseArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseArgs")
            .field("database", &crate::store::url::redact(&self.database))
            .field("db_pool_size", &self.db_pool_size)
            .field("db_min_connections", &self.db_min_connections)
            .field("db_acquire_timeout_ms", &self.db_acquire_timeout_ms)
            .field(
                "db_unavailable_acquire_timeout_ms",
                &self.db_unavailable_acquire_timeout_ms,
            )
            .finish()
    }
}

impl ServeArgs {
    /// The settings these flags give, with the database URL parsed.
    pub fn into_config(self) -> anyhow::Result<ServeConfig> {
        // Destructured, so a flag added here and not carried over is a
        // compile error.
        let ServeArgs {
            listen,
            db,
            blobs,
            no_migrate,
            autobuild_version,
            accept_clients,
            max_artifact_bytes,
            max_body_bytes,
            max_json_body_bytes,
            max_json_memory_bytes,
            max_stream_batch_bytes,
            max_wait_seconds,
            metrics_listen,
            request_timeout_seconds,
            max_concurrent_requests,
            shutdown_grace_seconds,
            max_connections,
            max_connections_per_address,
            header_read_timeout_seconds,
            idle_timeout_seconds,
            body_read_timeout_seconds,
            read_stall_timeout_seconds,
            answer_deadline_seconds,
            max_streamed_reads,
            max_concurrent_stream_closes,
            compress_min_bytes,
            no_compression,
            history_cache_bytes,
            history_chunk_events,
            max_held_reads,
            catalog,
            retention_policy,
            retention_prune_limit,
            bounds,
            tickets,
            secret,
            open,
            create_secret_file,
            test_clock,
            allow_hosts,
            max_token_lifetime,
            revocation_refresh_seconds,
        } = self;
        let (ticket_lifecycle, ticket_bounds) = tickets.into_config()?;
        Ok(ServeConfig {
            listen,
            db: db.into_config()?,
            blobs,
            no_migrate,
            autobuild_version,
            accept_clients,
            max_artifact_bytes,
            max_body_bytes,
            max_json_body_bytes,
            max_json_memory_bytes,
            max_stream_batch_bytes,
            max_wait_seconds,
            metrics_listen,
            request_timeout_seconds,
            max_concurrent_requests,
            shutdown_grace_seconds,
            max_connections,
            max_connections_per_address,
            header_read_timeout_seconds,
            idle_timeout_seconds,
            body_read_timeout_seconds,
            read_stall_timeout_seconds,
            answer_deadline_seconds,
            max_streamed_reads,
            max_concurrent_stream_closes,
            compress_min_bytes,
            no_compression,
            history_cache_bytes,
            history_chunk_events,
            max_held_reads,
            catalog,
            retention_policy,
            retention_prune_limit,
            bounds: bounds.into(),
            ticket_lifecycle,
            ticket_bounds,
            secret: secret.into(),
            open,
            create_secret_file,
            test_clock,
            allow_hosts,
            max_token_lifetime,
            revocation_refresh_seconds,
        })
    }
}

impl DatabaseArgs {
    pub fn into_config(self) -> anyhow::Result<DatabaseConfig> {
        let DatabaseArgs {
            database,
            db_pool_size,
            db_min_connections,
            db_acquire_timeout_ms,
            db_unavailable_acquire_timeout_ms,
        } = self;
        Ok(DatabaseConfig {
            database: DatabaseUrl::parse(&database)?,
            db_pool_size,
            db_min_connections,
            db_acquire_timeout_ms,
            db_unavailable_acquire_timeout_ms,
        })
    }
}

impl From<SecretArgs> for SecretConfig {
    fn from(args: SecretArgs) -> SecretConfig {
        let SecretArgs {
            secret,
            secret_file,
            allow_weak_secret,
            allow_insecure_secret_file,
        } = args;
        SecretConfig {
            secret,
            secret_file,
            allow_weak_secret,
            allow_insecure_secret_file,
        }
    }
}

impl SecretArgs {
    pub fn resolve(&self) -> anyhow::Result<Option<crate::secret::Secret>> {
        SecretConfig::from(self.clone()).resolve()
    }
}

/// `abstore serve`: build, announce the ports, serve until SIGINT/SIGTERM.
pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    // Before anything that can wait or fail: SIGTERM must always stop
    // the process, however far the start got.
    tokio::spawn(signal_shutdown(shutdown.clone()));
    let config = args.into_config()?;
    let app = crate::app::App::build(&config, shutdown).await?;
    let addr = app.local_addr()?;
    let metrics = app.metrics_addr().transpose()?;
    announce(addr, metrics);
    tracing::info!(%addr, database = %config.db.database, blobs = %crate::store::url::redact(&config.blobs), "serving");
    if let Some(secret) = app.secret() {
        tokio::spawn(secret.clone().watch(SECRET_FILE_POLL));
    }
    app.serve().await
}

/// `abstore migrate`.
pub async fn migrate(db: DatabaseArgs) -> anyhow::Result<()> {
    DatabaseUrl::parse(&db.database)?.migrate().await?;
    tracing::info!("migrations applied");
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
