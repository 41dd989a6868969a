//! The command line: every setting is a flag and an `ABSTORE_*` environment
//! variable, documented by `--help` (docs/configuration.md lists them too),
//! except the few flags that choose what one run does ([`FLAG_ONLY`]).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "abstore",
    version,
    about = "A server for Autobuild's Remote BuildStore protocol"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,

    /// Log line format on stderr: `text`, or `json` (one JSON object a line,
    /// for log collectors).
    #[arg(
        long,
        global = true,
        env = "ABSTORE_LOG_FORMAT",
        value_enum,
        default_value_t = LogFormat::Text
    )]
    pub log_format: LogFormat,
}

/// `--log-format` / `ABSTORE_LOG_FORMAT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the Remote BuildStore protocol.
    Serve(ServeArgs),
    /// Apply database migrations and exit.
    Migrate(DatabaseArgs),
    /// Mint or inspect bearer tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Exit 0 only if the server at `--listen` answers `/readyz` with 200
    /// (for container health checks).
    Healthcheck {
        /// The address the server listens on (a wildcard is probed on loopback).
        #[arg(long, env = "ABSTORE_LISTEN", default_value = "127.0.0.1:8787")]
        listen: SocketAddr,
        /// Give up after this many seconds.
        #[arg(long, env = "ABSTORE_HEALTHCHECK_TIMEOUT_SECONDS", default_value_t = 5)]
        timeout_seconds: u64,
    },
    /// Event catalog tools.
    #[command(subcommand)]
    Catalog(CatalogCommand),
    /// Write one consistent snapshot of a store (records and blobs) to a
    /// portable archive file.
    Export(crate::archive::cli::ExportArgs),
    /// Check an archive completely; exit 0 and one verdict line if valid.
    Verify(crate::archive::cli::VerifyArgs),
    /// Import an archive into a store (a dry run unless `--apply`).
    Import(crate::archive::cli::ImportArgs),
    /// Copy the embedded SQLite store and its blobs while it serves.
    Backup(crate::archive::cli::BackupArgs),
    /// List (and with `--apply` delete) blobs no record references.
    Gc(crate::archive::cli::GcArgs),
    /// Print a shell completion script for `abstore` (e.g.
    /// `abstore completions bash > /etc/bash_completion.d/abstore`).
    Completions {
        /// The shell to complete in.
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Subcommand)]
pub enum CatalogCommand {
    /// Check a catalog directory (`build.json`, `repository.json`,
    /// `session.json`): documents parse, schemas compile, rule names and actor
    /// kinds are known. Exits non-zero with the reason otherwise.
    Check {
        /// The directory `--catalog` would be given.
        dir: PathBuf,
    },
}

#[derive(Debug, Args, Clone)]
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

    /// The Autobuild package version clients must send.
    #[arg(long, env = "ABSTORE_AUTOBUILD_VERSION", default_value = "0.8.0")]
    pub autobuild_version: String,

    /// Largest decoded artifact in bytes; larger ones are 413.
    #[arg(long, env = "ABSTORE_MAX_ARTIFACT_BYTES", default_value_t = 1_048_576)]
    pub max_artifact_bytes: usize,

    /// Largest request body in bytes, any route; larger ones are 413.
    #[arg(long, env = "ABSTORE_MAX_BODY_BYTES", default_value_t = 16 * 1_048_576)]
    pub max_body_bytes: usize,

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
    #[arg(long, env = "ABSTORE_REQUEST_TIMEOUT_SECONDS", default_value_t = 60)]
    pub request_timeout_seconds: u64,

    /// Requests served at once (held reads included); more wait for a turn.
    #[arg(long, env = "ABSTORE_MAX_CONCURRENT_REQUESTS", default_value_t = 16_384, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_concurrent_requests: u64,

    /// After SIGTERM/SIGINT, how long in-flight requests may take to finish
    /// before the process exits anyway (held reads answer at once).
    #[arg(long, env = "ABSTORE_SHUTDOWN_GRACE_SECONDS", default_value_t = 10)]
    pub shutdown_grace_seconds: u64,

    /// Connections open at once (held reads each keep one); over it a new
    /// connection is answered `503` and closed. Lowered to what the open-file
    /// limit allows.
    #[arg(long, env = "ABSTORE_MAX_CONNECTIONS", default_value_t = 16_384, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,

    /// Longest a client may take to send a request head, from its first byte;
    /// then the connection is closed.
    #[arg(long, env = "ABSTORE_HEADER_READ_TIMEOUT_SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub header_read_timeout_seconds: u64,

    /// Longest a connection may stay open with no request in progress and no
    /// bytes arriving (idle keep-alive, or never sending anything).
    #[arg(long, env = "ABSTORE_IDLE_TIMEOUT_SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout_seconds: u64,

    /// Longest a request body may go without data before the request is
    /// answered `400 validation`.
    #[arg(long, env = "ABSTORE_BODY_READ_TIMEOUT_SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub body_read_timeout_seconds: u64,

    /// Longest a streamed answer (a whole history, written as the database
    /// produces it) waits for its client to take the next piece; then the
    /// read is abandoned and the connection closed.
    #[arg(long, env = "ABSTORE_READ_STALL_TIMEOUT_SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub read_stall_timeout_seconds: u64,

    /// Compress answers of at least this many bytes (zstd, brotli or gzip,
    /// as the client's `Accept-Encoding` allows).
    #[arg(long, env = "ABSTORE_COMPRESS_MIN_BYTES", default_value_t = 1024)]
    pub compress_min_bytes: u16,

    /// Never compress answers, whatever the client accepts.
    #[arg(long, env = "ABSTORE_NO_COMPRESSION", value_parser = boolish())]
    pub no_compression: bool,

    /// Held reads allowed at once in this process; beyond it reads answer immediately.
    #[arg(long, env = "ABSTORE_MAX_HELD_READS", default_value_t = 10_000)]
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

    /// Freeze the clock at this ISO time and enable `POST /_test/clock`. Tests only.
    #[arg(long, env = "ABSTORE_TEST_CLOCK")]
    pub test_clock: Option<String>,
}

/// Where the token signing secret comes from; none means open mode.
#[derive(Debug, Args, Clone, Default)]
pub struct SecretArgs {
    /// Token signing secret (enables authenticated mode). Prefer the file or the variable.
    #[arg(long, env = "ABSTORE_SECRET", hide_env_values = true)]
    pub secret: Option<String>,

    /// Read the token signing secrets from this file, one per line: the first
    /// signs, every one verifies. SIGHUP or a change of the file reloads it.
    #[arg(long, env = "ABSTORE_SECRET_FILE")]
    pub secret_file: Option<PathBuf>,

    /// Accept a secret shorter than 32 bytes (tests only).
    #[arg(long, env = "ABSTORE_ALLOW_WEAK_SECRET", value_parser = boolish())]
    pub allow_weak_secret: bool,
}

impl SecretArgs {
    pub fn resolve(&self) -> anyhow::Result<Option<crate::secret::Secret>> {
        crate::secret::Secret::resolve(
            self.secret.as_deref(),
            self.secret_file.as_deref(),
            self.allow_weak_secret,
        )
    }
}

/// On/off flags also read from the environment accept the usual spellings
/// there: `true/false`, `1/0`, `yes/no`, `on/off` (any case).
pub(crate) fn boolish() -> clap::builder::BoolishValueParser {
    clap::builder::BoolishValueParser::new()
}

/// `abstore token …`
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Print a signed token for one scope.
    Mint(MintArgs),
    /// Print a token's scope and expiry; with a secret, whether it verifies.
    Inspect {
        token: String,
        #[command(flatten)]
        secret: SecretArgs,
    },
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("scope").required(true).args(["admin", "build", "repo", "session", "deployment"])))]
pub struct MintArgs {
    #[command(flatten)]
    pub secret: SecretArgs,
    /// Admin: every resource (legacy `build: "*"` scope).
    #[arg(long)]
    pub admin: bool,
    /// Exactly this build.
    #[arg(long, value_name = "SLUG")]
    pub build: Option<String>,
    /// Exactly this repository (and its session collection).
    #[arg(long, value_name = "ID")]
    pub repo: Option<String>,
    /// Exactly this operator session.
    #[arg(long, value_name = "OS_ID")]
    pub session: Option<String>,
    /// A deployment scope: raw store routes, like admin.
    #[arg(long)]
    pub deployment: bool,
    /// Agent session the token's event writes must be attributed to (`*` = any actor).
    #[arg(
        long,
        value_name = "S",
        default_value = "*",
        conflicts_with = "deployment"
    )]
    pub agent_session: String,
    /// Stamp `via: {kind: session, id}` onto human actors of writes.
    #[arg(long, value_name = "ID", conflicts_with_all = ["via_mcp", "admin"])]
    pub via_session: Option<String>,
    /// Stamp `via: {kind: mcp, client}` onto human actors of writes.
    #[arg(long, value_name = "CLIENT", conflicts_with = "admin")]
    pub via_mcp: Option<String>,
    /// Lifetime: a number with a unit, `ms`, `s`, `m`, `h` or `d` (e.g. `1h`).
    #[arg(long, env = "ABSTORE_TOKEN_TTL", default_value = "1h")]
    pub ttl: String,
    /// Count the lifetime from this ISO time instead of now (for test clocks).
    #[arg(long, value_name = "ISO")]
    pub now: Option<String>,
}

/// Flags deliberately without an `ABSTORE_*` variable: each chooses what one
/// run does, and a variable left behind in an environment must never turn a
/// dry run into a write (`--apply`), allow an overwrite (`--force`), or
/// widen or re-attribute a token (`token mint`'s scope and attribution
/// flags; `--now` exists for test clocks).
pub const FLAG_ONLY: &[&str] = &[
    "apply",
    "force",
    "admin",
    "build",
    "repo",
    "session",
    "deployment",
    "agent-session",
    "via-session",
    "via-mcp",
    "now",
];

/// When `err` rejects a value that came from an `ABSTORE_*` variable rather
/// than the command line, the error as the user should read it: the
/// variable named where clap names the flag (which the user may never have
/// typed), plus the accepted spellings for an on/off setting.
pub fn env_error(err: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    let (variable, on_off) = blamed_variable(err)?;
    let Some(ContextValue::String(arg)) = err.get(ContextKind::InvalidArg) else {
        return None;
    };
    let flag = arg.split_whitespace().next().unwrap_or(arg);
    let mut text = err.render().to_string().replacen(
        &format!("'{arg}'"),
        &format!("the environment variable {variable} ({flag})"),
        1,
    );
    if on_off {
        text.push_str(&format!(
            "note: {variable} takes true/false, 1/0, yes/no or on/off\n"
        ));
    }
    Some(text)
}

/// The variable a rejected value came from (see [`env_error`]) and whether
/// it is an on/off setting.
fn blamed_variable(err: &clap::Error) -> Option<(String, bool)> {
    use clap::CommandFactory as _;
    use clap::error::ErrorKind;
    use clap::error::{ContextKind, ContextValue};
    if !matches!(
        err.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) {
        return None;
    }
    let Some(ContextValue::String(arg)) = err.get(ContextKind::InvalidArg) else {
        return None;
    };
    let long = arg.split_whitespace().next()?.strip_prefix("--")?;
    let typed =
        std::env::args().any(|a| a == format!("--{long}") || a.starts_with(&format!("--{long}=")));
    if typed {
        return None;
    }
    let command = Cli::command();
    let mut commands = vec![&command];
    while let Some(command) = commands.pop() {
        commands.extend(command.get_subcommands());
        for candidate in command.get_arguments() {
            if candidate.get_long() == Some(long)
                && let Some(env) = candidate.get_env()
                && std::env::var_os(env).is_some()
            {
                let on_off = !candidate.get_action().takes_values();
                return Some((env.to_string_lossy().into_owned(), on_off));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    #[test]
    fn command_line_is_well_formed() {
        super::Cli::command().debug_assert();
    }

    /// README.md and docs/configuration.md promise a variable for every
    /// flag outside [`super::FLAG_ONLY`]; each variable names one setting.
    #[test]
    fn every_flag_has_a_variable_unless_deliberately_flag_only() {
        let mut command = super::Cli::command();
        command.build();
        let mut commands = vec![&command];
        let mut missing = Vec::new();
        let mut variables = std::collections::BTreeMap::new();
        while let Some(command) = commands.pop() {
            commands.extend(command.get_subcommands());
            for arg in command.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                if matches!(long, "help" | "version") {
                    continue;
                }
                match arg.get_env() {
                    Some(env) => {
                        let env = env.to_string_lossy().into_owned();
                        assert!(env.starts_with("ABSTORE_"), "--{long}: {env}");
                        let previous = variables.insert(env.clone(), long);
                        assert!(
                            previous.is_none_or(|p| p == long),
                            "{env} serves both --{long} and --{}",
                            previous.unwrap_or_default()
                        );
                    }
                    None if super::FLAG_ONLY.contains(&long) => {}
                    None => missing.push(format!("{} --{long}", command.get_name())),
                }
            }
        }
        assert!(missing.is_empty(), "flags without a variable: {missing:?}");
    }
}
