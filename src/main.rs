//! The `abstore` binary: parse the command line, set up logging, run the
//! command (`abstore::cli`), turn its outcome into an exit code.

use std::io::{IsTerminal as _, Write as _};

use clap::Parser as _;
use tracing_subscriber::EnvFilter;

use abstore::cli::{Cli, LogFormat};

/// jemalloc, for two measured reasons (docs/benchmarks/per-request.md,
/// "Held-read and connection memory"): it returns freed memory to the
/// system (glibc kept the memory of 10,000 finished held reads), with
/// purging on its own background thread configured in
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
            match abstore::cli::env_error(&err) {
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
    match runtime.block_on(abstore::cli::run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            // One readable line with its causes, never a backtrace.
            let _ = writeln!(std::io::stderr(), "error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

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
