//! The `abstore` binary: parse the command line, set up logging, dispatch.

use std::io::{IsTerminal as _, Write as _};

use anyhow::Context as _;
use clap::Parser as _;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

use abstore::config::{CatalogCommand, Cli, Command, LogFormat, TokenCommand};

/// jemalloc, for two measured reasons (docs/benchmarks.md): it returns
/// freed memory to the system (glibc kept the memory of 10,000 finished held
/// reads), with purging on its own background thread configured in
/// `.cargo/config.toml`, and it keeps allocator metadata out of the blocks,
/// so the untouched parts of each connection's 8 KiB buffers stay
/// unresident.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // A bad value from an `ABSTORE_*` variable is blamed on the
            // variable, not on a flag the user never typed.
            match abstore::config::env_error(&err) {
                Some(text) => {
                    let _ = write!(std::io::stderr(), "{text}");
                }
                None => {
                    let _ = err.print();
                }
            }
            return std::process::ExitCode::from(u8::try_from(err.exit_code()).unwrap_or(2));
        }
    };
    init_logging(cli.log_format);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            // `writeln!`, not `eprintln!`: a closed stderr must not panic.
            let _ = writeln!(
                std::io::stderr(),
                "error: cannot start the async runtime: {err}"
            );
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            // One readable line with its causes, never a backtrace.
            let _ = writeln!(std::io::stderr(), "error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => {
            let shutdown = CancellationToken::new();
            // Before anything that can wait or fail: SIGTERM must always stop
            // the process, however far the start got.
            tokio::spawn(signal_shutdown(shutdown.clone()));
            let app = abstore::app::App::build(&args, shutdown).await?;
            let addr = app.local_addr()?;
            let metrics = app.metrics_addr().transpose()?;
            announce(addr, metrics);
            tracing::info!(%addr, database = %abstore::app::redact(&args.db.database), blobs = %abstore::app::redact(&args.blobs), "serving");
            if let Some(secret) = app.secret() {
                tokio::spawn(secret.clone().watch(SECRET_FILE_POLL));
            }
            app.serve().await
        }
        Command::Migrate(db) => {
            let options = abstore::store::StoreOptions {
                pool_size: 1,
                retention: abstore::store::retention::Retention::disabled(),
                ..Default::default()
            };
            let clock = std::sync::Arc::new(abstore::clock::SystemClock);
            let notifier = std::sync::Arc::new(abstore::notify::Notifier::new());
            abstore::store::open(&db.database, &options, clock, notifier)
                .await
                .with_context(|| format!("migrating {}", abstore::app::redact(&db.database)))?;
            tracing::info!("migrations applied");
            Ok(())
        }
        Command::Token(TokenCommand::Mint(args)) => {
            println!("{}", abstore::token_cli::mint(&args)?);
            Ok(())
        }
        Command::Token(TokenCommand::Inspect { token, secret }) => {
            print!("{}", abstore::token_cli::inspect(&token, &secret)?);
            Ok(())
        }
        Command::Healthcheck {
            listen,
            timeout_seconds,
        } => {
            abstore::healthcheck::probe(listen, std::time::Duration::from_secs(timeout_seconds))
                .await?;
            println!("ready");
            Ok(())
        }
        Command::Catalog(CatalogCommand::Check { dir }) => {
            let catalogs = abstore_catalog::Catalogs::from_dir(&dir)
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
        Command::Export(args) => abstore::archive::cli::export(args).await,
        Command::Verify(args) => abstore::archive::cli::verify(args),
        Command::Import(args) => abstore::archive::cli::import(args).await,
        Command::Backup(args) => abstore::archive::cli::backup(args).await,
        Command::Gc(args) => abstore::archive::cli::gc(args).await,
        Command::Completions { shell } => {
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
    }
}

/// Print the lines harnesses read to learn the bound ports (the metrics line
/// first, so it is known once the server is). Nobody may be reading: stdout
/// closed (`abstore serve | head -1`) or full is logged and the server goes
/// on serving, and stopping on a signal.
fn announce(addr: std::net::SocketAddr, metrics: Option<std::net::SocketAddr>) {
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

/// `RUST_LOG` filters; `--log-format json` (`ABSTORE_LOG_FORMAT=json`)
/// switches to JSON lines.
fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Colour codes only for a terminal: a log file or collector gets plain
    // text, and the request path skips the styling work.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

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
