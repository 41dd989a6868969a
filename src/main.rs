//! The `abstore` binary: parse the command line, set up logging, run the
//! command (`abstore::cli`), turn its outcome into an exit code.

use std::io::Write as _;

use abstore::cli::Cli;
use clap::Parser as _;

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
    abstore::logging::init(cli.log_format.into());
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
