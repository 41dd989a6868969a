//! `serve`'s flags on who may talk to the server: the client identities it
//! accepts and the token secret that authenticates them (the secret's flags
//! are shared with `token mint` and `token inspect`).

use std::path::PathBuf;

use clap::Args;

use crate::cli::boolish;
use crate::config::{AuthSettings, ClientSettings, SecretSource};
use crate::protocol::ClientIdentity;

/// The client identities accepted and their catalogs.
#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Client identities")]
pub struct ClientArgs {
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

    /// The one Autobuild package version clients must send, with protocol 2
    /// (the same as `--accept-client VERSION/2`; cannot be combined with it).
    /// Without either flag the server accepts 0.8.0/2.
    #[arg(long, env = "ABSTORE_AUTOBUILD_VERSION", value_name = "VERSION")]
    pub autobuild_version: Option<String>,

    /// Replace the embedded event catalogs with `build.json`, `repository.json`
    /// and `session.json` from this directory.
    #[arg(long, env = "ABSTORE_CATALOG")]
    pub catalog: Option<PathBuf>,
}

impl From<ClientArgs> for ClientSettings {
    fn from(args: ClientArgs) -> ClientSettings {
        let ClientArgs {
            accept_clients,
            autobuild_version,
            catalog,
        } = args;
        ClientSettings {
            accept: accept_clients,
            autobuild_version,
            catalog,
        }
    }
}

/// Where the token signing secret comes from; none means open mode.
/// `Debug` by hand: the secret itself is never printed.
// No heading of its own: `token mint` lists these among its other flags.
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

impl From<SecretArgs> for SecretSource {
    fn from(args: SecretArgs) -> SecretSource {
        let SecretArgs {
            secret,
            secret_file,
            allow_weak_secret,
            allow_insecure_secret_file,
        } = args;
        SecretSource {
            value: secret,
            file: secret_file,
            rules: crate::secret::Rules {
                allow_weak: allow_weak_secret,
                allow_insecure_file: allow_insecure_secret_file,
            },
        }
    }
}

impl std::fmt::Debug for SecretArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        SecretSource::from(self.clone()).fmt(f)
    }
}

impl SecretArgs {
    /// The secrets these flags name, read and checked; `None`: none given.
    pub fn resolve(&self) -> anyhow::Result<Option<crate::secret::Secret>> {
        SecretSource::from(self.clone()).resolve()
    }
}

/// Authentication, and the guards of open mode.
#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Authentication")]
pub struct AuthArgs {
    #[command(flatten)]
    pub secret: SecretArgs,

    /// When `--secret-file` does not exist, create it (mode 0600) holding a
    /// fresh random secret, and log the command that mints an admin token.
    #[arg(long, env = "ABSTORE_CREATE_SECRET_FILE", value_parser = boolish(), requires = "secret_file")]
    pub create_secret_file: bool,

    /// Serve without a secret on a non-loopback address (every route
    /// unauthenticated). Without it, a non-loopback `--listen` with no secret
    /// refuses to start.
    #[arg(long, env = "ABSTORE_OPEN", value_parser = boolish())]
    pub open: bool,

    /// Open mode on a loopback address answers only requests whose `Host` is
    /// a loopback name (DNS rebinding); also answer this name (repeat the
    /// flag for several; the variable is comma separated).
    #[arg(
        long = "allow-host",
        env = "ABSTORE_ALLOW_HOSTS",
        value_name = "NAME",
        value_delimiter = ','
    )]
    pub allow_hosts: Vec<crate::hosts::AllowedHost>,

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

impl From<AuthArgs> for AuthSettings {
    fn from(args: AuthArgs) -> AuthSettings {
        let AuthArgs {
            secret,
            create_secret_file,
            open,
            allow_hosts,
            max_token_lifetime,
            revocation_refresh_seconds,
        } = args;
        AuthSettings {
            secret: secret.into(),
            open,
            create_secret_file,
            allow_hosts,
            max_token_lifetime,
            revocation_refresh: std::time::Duration::from_secs(revocation_refresh_seconds),
        }
    }
}
