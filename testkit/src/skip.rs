//! Tests that cannot run say so instead of passing silently.
//!
//! A test that needs a service (PostgreSQL, S3, nginx, …) says so in its
//! name (`…_postgres`, `…_s3…`, `…nginx…`; docs/conformance.md lists the
//! tokens), and `scripts/test` leaves the tests whose service is absent out
//! of the run with a nextest filter, so nextest's own summary counts them as
//! skipped and the script names each group and why.
//!
//! Inside such a test, [`skipped`] is the guard for every other way of
//! running it. Under `CI=true` it fails the test, since CI provides every
//! service. Under `scripts/test` (which sets `ABSTORE_TEST_SKIPS`) it fails
//! the test too: the script's filter should have left it out, so its name
//! lacks its service's token, and a test that did not run must never be
//! counted as passed. Run any other way (`cargo nextest run` directly) it
//! prints `SKIPPED` on the process's stderr and returns, and the runner
//! counts the test as passed: run `scripts/test` for an honest count.

use std::io::Write as _;

/// The directory `scripts/test` collects `not run` and `known defect`
/// records in; set only under `scripts/test`.
pub const SKIPS_DIR_VAR: &str = "ABSTORE_TEST_SKIPS";

/// The check `name` cannot run because of `why`: a failure under `CI=true`
/// and under `scripts/test`, a loud `SKIPPED` line otherwise.
pub fn skipped(name: &str, why: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true requires this check to run: {name} ({why})"
    );
    assert!(
        std::env::var_os(SKIPS_DIR_VAR).is_none(),
        "{name} cannot run here ({why}), and scripts/test did not leave it out: a test that \
         needs a service must carry the service's token in its name (docs/conformance.md, \
         \"Services\") so that it is counted as skipped, never as passed"
    );
    // Straight to the process's stderr: `eprintln!` is captured by the test
    // harness, and a skip must be visible even when the test "passes".
    let _ = writeln!(std::io::stderr(), "*** SKIPPED: {name} ({why}) ***");
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
