//! The `abstore` binary: parse the command line, set up logging, dispatch.

use std::io::{IsTerminal as _, Write as _};

use anyhow::Context as _;
use clap::Parser as _;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

use abstore::config::{CatalogCommand, Cli, Command, TokenCommand};

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
            let _ = err.print();
            match abstore::config::blamed_variable(&err) {
                Some((variable, true)) => eprintln!(
                    "note: the value came from the environment variable {variable}, which takes true/false, 1/0, yes/no or on/off"
                ),
                Some((variable, false)) => {
                    eprintln!("note: the value came from the environment variable {variable}")
                }
                None => {}
            }
            return std::process::ExitCode::from(u8::try_from(err.exit_code()).unwrap_or(2));
        }
    };
    init_logging();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            // One readable line with its causes, never a backtrace.
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => {
            let shutdown = CancellationToken::new();
            let app = abstore::app::App::build(&args, shutdown.clone()).await?;
            let addr = app.local_addr()?;
            // Harnesses read these exact lines to learn the bound ports; the
            // metrics line comes first so it is known once the server is.
            let mut stdout = std::io::stdout();
            if let Some(metrics) = app.metrics_addr() {
                writeln!(stdout, "abstore metrics on http://{}/metrics", metrics?)?;
            }
            writeln!(stdout, "abstore listening on http://{addr}")?;
            stdout.flush()?;
            tracing::info!(%addr, database = %abstore::app::redact(&args.db.database), blobs = %abstore::app::redact(&args.blobs), "serving");
            if let Some(secret) = app.secret() {
                tokio::spawn(secret.clone().watch(SECRET_FILE_POLL));
            }
            tokio::spawn(signal_shutdown(shutdown));
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
    }
}

/// How often a `--secret-file` is re-read for changes (`SIGHUP` reloads at
/// once): a mounted secret that changes takes effect within this.
const SECRET_FILE_POLL: std::time::Duration = std::time::Duration::from_secs(10);

/// `RUST_LOG` filters; `ABSTORE_LOG_FORMAT=json` switches to JSON lines.
fn init_logging() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Colour codes only for a terminal: a log file or collector gets plain
    // text, and the request path skips the styling work.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    if std::env::var("ABSTORE_LOG_FORMAT").is_ok_and(|f| f == "json") {
        builder.json().init();
    } else {
        builder.init();
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
