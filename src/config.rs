//! The server's settings, as [`App::build`](crate::app::App::build) takes
//! them. The command line (`src/cli/`) fills them from flags and `ABSTORE_*`
//! variables, where each one's meaning, default and bounds are documented
//! (`abstore serve --help`, docs/configuration.md); the names here are the
//! flags' names. The database URL arrives parsed: one parser for every
//! command ([`DatabaseUrl`]).

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::store::{Bounds, DatabaseUrl};

/// `abstore serve`.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub listen: SocketAddr,
    pub db: DatabaseConfig,
    pub blobs: String,
    pub no_migrate: bool,
    /// `--autobuild-version`: the one accepted version, protocol 2 (the
    /// older form of `--accept-client VERSION/2`).
    pub autobuild_version: Option<String>,
    /// `--accept-client`: the accepted client identities, in order.
    pub accept_clients: Vec<ClientIdentity>,
    pub max_artifact_bytes: usize,
    pub max_body_bytes: usize,
    pub max_json_body_bytes: usize,
    pub max_json_memory_bytes: usize,
    pub max_stream_batch_bytes: usize,
    pub max_wait_seconds: u64,
    pub metrics_listen: Option<SocketAddr>,
    pub request_timeout_seconds: u64,
    pub max_concurrent_requests: u64,
    pub shutdown_grace_seconds: u64,
    pub max_connections: u32,
    pub max_connections_per_address: Option<u32>,
    pub header_read_timeout_seconds: u64,
    pub idle_timeout_seconds: u64,
    pub body_read_timeout_seconds: u64,
    pub read_stall_timeout_seconds: u64,
    pub answer_deadline_seconds: u64,
    pub max_streamed_reads: Option<u32>,
    pub max_concurrent_stream_closes: u32,
    pub compress_min_bytes: u16,
    pub no_compression: bool,
    pub history_cache_bytes: usize,
    pub history_chunk_events: u32,
    pub max_held_reads: usize,
    pub catalog: Option<PathBuf>,
    pub retention_policy: Option<PathBuf>,
    pub retention_prune_limit: u32,
    /// `--max-stream-chunks`, `--max-events-per-log`, … (the collection bounds).
    pub bounds: Bounds,
    /// `--ticket-triage-state` … `--ticket-done-state`: the hosted tickets' states.
    pub ticket_lifecycle: crate::tickets::Lifecycle,
    /// `--max-team-tickets`, `--max-ticket-labels`, … (the hosted tickets' bounds).
    pub ticket_bounds: crate::tickets::TicketBounds,
    pub secret: SecretConfig,
    pub open: bool,
    pub create_secret_file: bool,
    pub test_clock: Option<String>,
    /// `--allow-host`: names an open-mode loopback server answers besides
    /// the loopback ones.
    pub allow_hosts: Vec<crate::http::AllowedHost>,
    pub max_token_lifetime: crate::auth::MaxLifetime,
    pub revocation_refresh_seconds: u64,
}

/// One client identity a server accepts (`--accept-client VERSION/PROTOCOL`):
/// the exact `X-Autobuild-Version` and `X-Autobuild-Protocol-Version` its
/// clients send. Parsing checks the form and that the protocol is one the
/// server can answer; `crate::http` finds its catalogs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    pub version: String,
    pub protocol: String,
}

impl ClientIdentity {
    /// The protocol as a number (parsing guaranteed it is a supported one).
    pub fn protocol_number(&self) -> u8 {
        self.protocol.parse().unwrap_or(0)
    }
}

impl std::fmt::Display for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.version, self.protocol)
    }
}

impl std::str::FromStr for ClientIdentity {
    type Err = String;

    fn from_str(text: &str) -> Result<ClientIdentity, String> {
        let Some((version, protocol)) = text.trim().rsplit_once('/') else {
            return Err(format!(
                "expected VERSION/PROTOCOL, e.g. 0.8.0/2, not {text:?}"
            ));
        };
        if version.is_empty() || version.contains(char::is_whitespace) || version.contains('/') {
            return Err(format!(
                "{text:?}: the Autobuild version must be one nonempty word, e.g. 0.8.0"
            ));
        }
        let supported = crate::http::SUPPORTED_PROTOCOLS;
        match protocol.parse::<u8>() {
            Ok(n) if supported.contains(&n) && protocol == n.to_string() => {}
            _ => {
                return Err(format!(
                    "{text:?}: unknown protocol {protocol:?} (this server answers protocols {})",
                    supported
                        .iter()
                        .map(u8::to_string)
                        .collect::<Vec<_>>()
                        .join(" and ")
                ));
            }
        }
        Ok(ClientIdentity {
            version: version.to_owned(),
            protocol: protocol.to_owned(),
        })
    }
}

/// The database and its connection pool.
#[derive(Debug, Clone)]
pub struct DatabaseConfig {
    pub database: DatabaseUrl,
    pub db_pool_size: u32,
    pub db_min_connections: u32,
    pub db_acquire_timeout_ms: u64,
    pub db_unavailable_acquire_timeout_ms: u64,
}

/// Where the token signing secret comes from; none means open mode.
#[derive(Clone, Default)]
pub struct SecretConfig {
    pub secret: Option<String>,
    pub secret_file: Option<PathBuf>,
    pub allow_weak_secret: bool,
    pub allow_insecure_secret_file: bool,
}

impl std::fmt::Debug for SecretConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretConfig")
            .field("secret", &self.secret.as_ref().map(|_| "REDACTED"))
            .field("secret_file", &self.secret_file)
            .field("allow_weak_secret", &self.allow_weak_secret)
            .field(
                "allow_insecure_secret_file",
                &self.allow_insecure_secret_file,
            )
            .finish()
    }
}

impl SecretConfig {
    pub fn resolve(&self) -> anyhow::Result<Option<crate::secret::Secret>> {
        crate::secret::Secret::resolve(
            self.secret.as_deref(),
            self.secret_file.as_deref(),
            crate::secret::Rules {
                allow_weak: self.allow_weak_secret,
                allow_insecure_file: self.allow_insecure_secret_file,
            },
        )
    }
}
