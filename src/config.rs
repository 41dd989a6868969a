//! The settings `abstore serve` runs on, as
//! [`App::build`](crate::app::App::build) takes them: one typed value per
//! subsystem, the very struct that subsystem runs on wherever it has one
//! ([`StoreOptions`], [`Bounds`](crate::store::Bounds), [`Limits`], [`Deadlines`]), parsed and
//! checked once by the command line (`src/cli/serve/`), which documents
//! each flag's meaning, default and bounds (`abstore serve --help`,
//! docs/configuration.md). Nothing here knows clap, and nothing is kept as
//! text to be parsed again: durations are durations, the database URL is a
//! [`DatabaseUrl`], the test clock an instant.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::auth::MaxLifetime;
use crate::connections::Deadlines;
use crate::hosts::AllowedHost;
use crate::http::Limits;
use crate::protocol::ClientIdentity;
use crate::store::{DatabaseUrl, StoreOptions};

/// Everything `abstore serve` runs on.
#[derive(Debug)]
pub struct Settings {
    /// The protocol's address (port 0 picks a free port).
    pub listen: SocketAddr,
    /// Where Prometheus metrics are served; `None`: nowhere.
    pub metrics_listen: Option<SocketAddr>,
    /// How long in-flight requests may run after SIGTERM/SIGINT.
    pub shutdown_grace: Duration,
    /// The instant (ms since the epoch) a frozen test clock starts at;
    /// `None`: the system clock, and no `/_test/clock`.
    pub test_clock: Option<i64>,
    pub database: DatabaseUrl,
    /// The store's pool, migrations, retention, bounds and streamed reads.
    pub store: StoreOptions,
    /// The `--retention-policy` file (or `none`) `store.retention` was
    /// loaded from; `None`: the embedded policy. For the configuration line.
    pub retention_source: Option<PathBuf>,
    /// The blob location (a directory or a URL), opened by
    /// [`Blobs::open`](crate::blobs::Blobs::open).
    pub blobs: String,
    pub clients: ClientSettings,
    pub auth: AuthSettings,
    /// Body ceilings, the held-read ceiling, the request timeout and
    /// concurrency, compression.
    pub limits: Limits,
    /// The memory all parsed request bodies may hold at once, in bytes.
    pub json_memory_bytes: usize,
    /// Stream closes assembling their documents at once.
    pub max_concurrent_stream_closes: u32,
    /// Held reads allowed at once in this process.
    pub max_held_reads: usize,
    /// The history cache; `None` when it or compression is off.
    pub history_cache: Option<HistoryCacheSettings>,
    /// The state-events and short-log caches.
    pub answer_caches: AnswerCaches,
    pub connections: ConnectionSettings,
    /// The hosted tickets' lifecycle, bounds and answer ceiling.
    pub tickets: crate::tickets::TicketSettings,
    /// The web console; `None` with `--no-console`.
    pub console: Option<crate::http::console::ConsoleSettings>,
}

/// The client identities accepted and the catalogs that serve them,
/// resolved by [`Clients::resolve`](crate::protocol::Clients::resolve).
#[derive(Debug, Clone, Default)]
pub struct ClientSettings {
    /// The accepted identities, in order (the first is the one `/health`
    /// reports); empty: the default one.
    pub accept: Vec<ClientIdentity>,
    /// The one accepted version, with protocol 2 (the older form of one
    /// accepted identity; never together with `accept`).
    pub autobuild_version: Option<String>,
    /// A directory replacing the embedded catalogs.
    pub catalog: Option<PathBuf>,
}

/// Authentication and the guards of open mode.
#[derive(Debug, Clone)]
pub struct AuthSettings {
    pub secret: SecretSource,
    /// Open mode is allowed on a non-loopback address.
    pub open: bool,
    /// A missing secret file is created with a fresh secret.
    pub create_secret_file: bool,
    /// Names an open-mode loopback server answers besides the loopback ones.
    pub allow_hosts: Vec<AllowedHost>,
    pub max_token_lifetime: MaxLifetime,
    /// How often the revoked tokens are re-read (authenticated mode).
    pub revocation_refresh: Duration,
}

/// The history cache that answers whole-history reads in zstd.
#[derive(Debug, Clone, Copy)]
pub struct HistoryCacheSettings {
    /// Sequence numbers per history chunk.
    pub chunk_events: u32,
    /// Bytes of compressed frames kept (at least 1).
    pub bytes: usize,
}

/// The connection-level bounds as asked for. The caps in force are
/// [`ConnectionLimits`](crate::connections::ConnectionLimits), which the
/// open-file limit may lower at start.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionSettings {
    pub deadlines: Deadlines,
    /// Longest a request body may go without data.
    pub body_read: Duration,
    /// Connections open at once.
    pub max_connections: u32,
    /// Connections open at once from one client address; `None`: a quarter
    /// of the cap in force.
    pub max_per_address: Option<u32>,
}

/// Where the token signing secret comes from; neither a value nor a file
/// means open mode. `Debug` by hand: the secret itself is never printed.
#[derive(Clone, Default)]
pub struct SecretSource {
    /// The secrets themselves (`--secret` or `ABSTORE_SECRET`).
    pub value: Option<String>,
    /// A file holding them, reloadable.
    pub file: Option<PathBuf>,
    pub rules: crate::secret::Rules,
}

impl std::fmt::Debug for SecretSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretSource")
            .field("value", &self.value.as_ref().map(|_| "REDACTED"))
            .field("file", &self.file)
            .field("rules", &self.rules)
            .finish()
    }
}

impl SecretSource {
    /// Whether a secret is given at all (authenticated mode).
    pub fn is_given(&self) -> bool {
        self.value.is_some() || self.file.is_some()
    }

    /// Read and check the secrets; `None`: open mode.
    pub fn resolve(&self) -> anyhow::Result<Option<crate::secret::Secret>> {
        crate::secret::Secret::resolve(self.value.as_deref(), self.file.as_deref(), self.rules)
    }
}

/// The bytes of the caches of whole answers (`crate::history`); `None`: off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AnswerCaches {
    /// Protocol-3 state events, per journal tail.
    pub state_events: Option<usize>,
    /// Protocol-3 build digests, each at its build's tail.
    pub build_digests: Option<usize>,
    /// Whole short logs, until written (used on SQLite files only).
    pub short_logs: Option<usize>,
}

impl Settings {
    /// The console's settings (`None` with `--no-console`), its operator
    /// page told the settings in force.
    pub fn console(&self) -> Option<crate::http::console::ConsoleSettings> {
        let mut console = self.console.clone()?;
        console.facts = console_facts(self);
        Some(console)
    }
}

/// The retention and collection settings the operator page lists.
fn console_facts(settings: &Settings) -> Vec<(String, String)> {
    let store = &settings.store;
    let rules = store.retention.policy.rules();
    let policy = if rules.is_empty() {
        "none: every revision is kept".to_owned()
    } else {
        rules
            .iter()
            .map(|rule| format!("{} keeps {}", rule.pattern, rule.keep))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let source = settings.retention_source.as_ref().map_or_else(
        || "embedded default".to_owned(),
        |p| p.display().to_string(),
    );
    let bounds = &store.bounds;
    vec![
        ("Retention policy".into(), format!("{policy} ({source})")),
        (
            "Revisions pruned per write at most".into(),
            store.retention.prune_limit.to_string(),
        ),
        (
            "Events per log at most".into(),
            bounds.max_events_per_log.to_string(),
        ),
        (
            "Artifact revisions per kind at most".into(),
            bounds.max_artifact_revisions.to_string(),
        ),
        (
            "Stream chunks at most".into(),
            bounds.max_stream_chunks.to_string(),
        ),
        ("Database".into(), settings.database.backend().to_owned()),
    ]
}
