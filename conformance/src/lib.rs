//! Black-box HTTP conformance checks for Autobuild's Remote BuildStore protocol
//! (`remote-store-protocol.md`, Autobuild 0.8.0, protocol `2`).
//!
//! Every check speaks only HTTP to a base URL, so the same suite runs against a
//! spawned `abstore`, a container or any other server of the protocol. Checks
//! are independent: each creates its own uniquely named builds and repositories,
//! so all of them can share one long-lived server and run concurrently. Checks
//! that move the server's test clock (`POST /_test/clock`; docs/decisions.md, 11)
//! are flagged, run one at a time after the others, only ever move the clock
//! forward, and are skipped when the server has no test clock.
//!
//! Checks named `s<section>.…` assert only what the spec (and the Autobuild
//! behaviour it names) requires. Checks named `abstore.…` assert abstore's
//! own choices — message details, limit defaults — and `--strict-spec` skips
//! them, so the pure protocol suite runs against any server. Checks named
//! `p3.…` cover what protocol 3 (Autobuild 0.9.0) adds; the runner runs them
//! only when it speaks protocol 3 ([`checks_for`]).
//!
//! Layout:
//! - [`client`]: [`Ctx`] (base URL, identity headers, request helpers) and
//!   response assertions that produce "sent / expected / got" failure messages.
//! - [`checks`]: the registry of checks, one module per spec section family.
//! - [`fixtures`]: sample event writes from `fixtures/conformance/`.
//! - [`runner`]: clock detection, filtering, bounded concurrency, reporting.
//! - [`token`]: section 7 bearer tokens (HMAC-SHA256), minted from the secret.
//! - [`util`]: time arithmetic, unique names, percent-encoding, base64, sha256.

pub mod checks;
pub mod client;
pub mod fixtures;
pub mod runner;
pub mod token;
pub mod util;

pub use checks::{
    Check, CheckResult, Failure, all_checks, checks_for, every_check, introduced_by,
    is_abstore_specific,
};
pub use client::{Ctx, PROTOCOL_VERSION, Res, Resp, Tls};
pub use runner::{Outcome, Report, authenticate, run_checks};
