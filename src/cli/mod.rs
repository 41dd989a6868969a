//! The command line, the one layer that knows clap: every command's flags
//! and the thin runners that turn them into calls below (`app`, `store`,
//! `archive`, `auth`), print the result, and return the error `main`
//! prints. Nothing below this module imports it.
//!
//! Every setting is a flag and an `ABSTORE_*` environment variable,
//! documented by `--help` (docs/configuration.md lists them too), except
//! the few flags that choose what one run does ([`FLAG_ONLY`]).
//!
//! - [`serve`]: `serve` and `migrate` (the server's and the database's flags).
//! - [`token`]: `token mint`, `inspect`, `revoke` and `revocations`.
//! - [`archive`]: `export`, `verify`, `import`, `backup`, `gc`.
//! - [`tickets`]: `tickets history`.

pub mod archive;
pub mod serve;
pub mod tickets;
pub mod token;

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};

use crate::clock::SystemClock;
use crate::store::{DatabaseUrl, Store, StoreOptions};

pub use self::serve::{DatabaseArgs, SecretArgs, ServeArgs};
pub use self::token::{MintArgs, TokenCommand};

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

impl From<LogFormat> for crate::logging::LineFormat {
    fn from(format: LogFormat) -> Self {
        match format {
            LogFormat::Text => crate::logging::LineFormat::Text,
            LogFormat::Json => crate::logging::LineFormat::Json,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the Remote BuildStore protocol.
    // Boxed: its flags outweigh every other command's many times over.
    Serve(Box<ServeArgs>),
    /// Apply database migrations and exit.
    Migrate(DatabaseArgs),
    /// Mint, inspect or revoke bearer tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Read the hosted tickets' records (docs/tickets.md).
    #[command(subcommand)]
    Tickets(tickets::TicketsCommand),
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
    Export(archive::ExportArgs),
    /// Check an archive completely; exit 0 and one verdict line if valid.
    Verify(archive::VerifyArgs),
    /// Import an archive into a store (a dry run unless `--apply`).
    Import(archive::ImportArgs),
    /// Copy the embedded SQLite store and its blobs while it serves.
    Backup(archive::BackupArgs),
    /// List (and with `--apply` delete) blobs no record references.
    Gc(archive::GcArgs),
    /// Print the route table: every route's method, path, the client
    /// protocols that reach it and whose token it needs.
    Routes,
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

/// On/off flags also read from the environment accept the usual spellings
/// there: `true/false`, `1/0`, `yes/no`, `on/off` (any case).
fn boolish() -> clap::builder::BoolishValueParser {
    clap::builder::BoolishValueParser::new()
}

/// Run one command; the error is printed by `main` (exit code 1).
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => serve::serve(*args).await,
        Command::Migrate(db) => serve::migrate(db).await,
        Command::Token(command) => token::run(command).await,
        Command::Tickets(command) => tickets::run(command).await,
        Command::Healthcheck {
            listen,
            timeout_seconds,
        } => {
            crate::healthcheck::probe(listen, std::time::Duration::from_secs(timeout_seconds))
                .await?;
            println!("ready");
            Ok(())
        }
        Command::Catalog(CatalogCommand::Check { dir }) => catalog_check(&dir),
        Command::Routes => {
            print_routes();
            Ok(())
        }
        Command::Export(args) => archive::export(args).await,
        Command::Verify(args) => archive::verify(args),
        Command::Import(args) => archive::import(args).await,
        Command::Backup(args) => archive::backup(args).await,
        Command::Gc(args) => archive::gc(args).await,
        Command::Completions { shell } => completions(shell),
    }
}

/// The store `--database` names, for an operator's command beside a
/// running server: migrated when `migrate` (a command that writes), and a
/// SQLite file opened without its one-process lock (`token revoke` writes
/// one row under SQLite's own locking; `tickets history` only reads).
pub(crate) async fn open_store(
    database: &str,
    migrate: bool,
) -> anyhow::Result<std::sync::Arc<dyn Store>> {
    let url = DatabaseUrl::parse(database)?;
    if matches!(
        url.location(),
        crate::store::url::Location::Sqlite(crate::store::url::SqliteLocation::Memory)
    ) {
        bail!(
            "an in-memory SQLite database lives only inside one process; name a file (sqlite://PATH)"
        );
    }
    let mut options = StoreOptions {
        pool_size: 1,
        min_connections: 1,
        write_connections: 0,
        migrate,
        exclusive: false,
        retention: crate::store::retention::Retention::disabled(),
        ..StoreOptions::default()
    };
    if !migrate {
        // A read beside the servers does not wait for a migration to be
        // applied: it says at once what is missing.
        options.migration.wait = std::time::Duration::ZERO;
    }
    url.open(
        &options,
        std::sync::Arc::new(SystemClock),
        std::sync::Arc::new(crate::notify::Notifier::new()),
        &crate::store::Progress::default(),
    )
    .await
    .with_context(|| format!("opening the database ({url})"))
}

/// `abstore catalog check DIR`.
fn catalog_check(dir: &std::path::Path) -> anyhow::Result<()> {
    let catalogs = abstore_catalog::Catalogs::from_dir(dir)
        .with_context(|| format!("catalog {} is not usable", dir.display()))?;
    for family in abstore_catalog::Family::ALL {
        println!(
            "{}: {} event types",
            family.file_name(),
            catalogs.event_types(family).len()
        );
    }
    println!("catalog {} is valid", dir.display());
    Ok(())
}

/// `abstore completions SHELL`.
fn completions(shell: clap_complete::Shell) -> anyhow::Result<()> {
    use clap::CommandFactory as _;
    // Into a buffer first: clap_complete panics on a failed write,
    // and a closed stdout must be an error line, not a panic.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "abstore", &mut script);
    let mut stdout = std::io::stdout();
    stdout
        .write_all(&script)
        .and_then(|()| stdout.flush())
        .context("writing the completion script to stdout")
}

/// Flags deliberately without an `ABSTORE_*` variable: each chooses what one
/// run does, and a variable left behind in an environment must never turn a
/// dry run into a write (`--apply`), allow an overwrite (`--force`),
/// widen or re-attribute a token (`token mint`'s scope and attribution
/// flags; `--now` exists for test clocks), or revoke or forget a token
/// (`token revoke --digest`, `--note`; `token revocations --prune`); or
/// name what one read prints (`tickets history --team`, `--json`).
pub const FLAG_ONLY: &[&str] = &[
    "apply",
    "force",
    "from",
    "admin",
    "build",
    "repo",
    "session",
    "deployment",
    "operator-user",
    "agent-session",
    "via-session",
    "via-mcp",
    "now",
    "digest",
    "note",
    "prune",
    "team",
    "json",
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

/// `abstore routes`: the route table of a server with every optional route.
fn print_routes() {
    let table = crate::http::route_table(crate::http::RouteOptions {
        test_clock: true,
        console: true,
    });
    let routes: Vec<_> = table.declared().collect();
    let width = routes.iter().map(|r| r.path.len()).max().unwrap_or(0);
    for route in routes {
        println!(
            "{:<4} {:<width$}  {:<14}  {}",
            route.method.as_str(),
            route.path,
            route.rule.reach.to_string(),
            route.rule.auth.describe(),
        );
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    #[test]
    fn command_line_is_well_formed() {
        super::Cli::command().debug_assert();
    }

    /// `Debug` of the parsed command line (what a panic or a `{:?}` would
    /// print) shows neither the secret nor a database password.
    #[test]
    fn debug_output_hides_secrets_and_passwords() {
        use clap::Parser as _;
        let cli = super::Cli::try_parse_from([
            "abstore",
            "serve",
            "--secret",
            "s3cr3t-0123456789abcdefghijklmnopqrstuv",
            "--database",
            "postgres://u:hunter2@h/db?password=hunter3",
        ])
        .unwrap();
        let text = format!("{cli:?}");
        for hidden in ["s3cr3t", "hunter2", "hunter3"] {
            assert!(!text.contains(hidden), "{hidden} in {text}");
        }
        assert!(text.contains("REDACTED"), "{text}");
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
