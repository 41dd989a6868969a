//! Tests that cannot run say so instead of passing silently.
//!
//! A test whose service is absent (PostgreSQL, S3, nginx) calls [`skipped`]
//! and returns. Under `CI=true` that is a failure, since CI provides every
//! service. Elsewhere it prints `SKIPPED` on the process's stderr and, when
//! `scripts/test` set `ABSTORE_TEST_SKIPS` to a directory, records the skip
//! there, so the run ends with a `skipped: NAME (why)` line for it after
//! nextest's own summary (which can only count the test as passed).

use std::io::Write as _;

/// The directory `scripts/test` collects skips in.
pub const SKIPS_DIR_VAR: &str = "ABSTORE_TEST_SKIPS";

/// Record that the check `name` did not run because of `why`; panics in CI.
pub fn skipped(name: &str, why: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true requires this check to run: {name} ({why})"
    );
    // Straight to the process's stderr: `eprintln!` is captured by the test
    // harness, and a skip must be visible even when the test "passes".
    let _ = writeln!(std::io::stderr(), "*** SKIPPED: {name} ({why}) ***");
    if let Some(dir) = std::env::var_os(SKIPS_DIR_VAR) {
        // One file per check name: several tests skipping for the same
        // reason are one line in the summary.
        let file: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let path = std::path::Path::new(&dir).join(file);
        if let Err(err) = std::fs::write(&path, format!("{name} ({why})\n")) {
            let _ = writeln!(
                std::io::stderr(),
                "cannot record the skip in {}: {err}",
                path.display()
            );
        }
    }
}

/// Record that the check `name` did not run because it needs something only
/// the user can supply (an Autobuild checkout: nothing of Autobuild may be
/// downloaded by this project, so CI never has one). Reported in the
/// summary as `not run: NAME (why)` in CI too, but never a CI failure.
pub fn needs_user_supplied(name: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "*** NOT RUN: {name} ({why}) ***");
    if let Some(dir) = std::env::var_os(SKIPS_DIR_VAR) {
        let file: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let path = std::path::Path::new(&dir).join(format!("user-supplied-{file}"));
        let _ = std::fs::write(path, format!("{name} ({why})\n"));
    }
}

/// Record a check that ran and failed for a known, documented defect that
/// is being worked on: listed as `known defect: NAME (why)` at the end of
/// every run (CI included) so it cannot be mistaken for a pass.
pub fn known_defect(name: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "*** KNOWN DEFECT: {name} ({why}) ***");
    if let Some(dir) = std::env::var_os(SKIPS_DIR_VAR) {
        let file: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let path = std::path::Path::new(&dir).join(format!("known-defect-{file}"));
        let _ = std::fs::write(path, format!("{name} ({why})\n"));
    }
}
