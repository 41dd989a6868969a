//! The registry of checks. Each check has a stable id (`s<section>.<area>.<rule>`),
//! the spec section it covers, and whether it moves the server's test clock.
//!
//! Modules group checks by spec section family; each exposes `register(&mut Vec<Check>)`.
//!
//! Every check also names the protocol version that introduced what it
//! checks (`min_protocol`: 2 for the shipped protocol, 3 for the routes
//! Autobuild 0.9.0 adds; those checks' ids start with `p3.`). A client of
//! protocol N runs the checks of protocols up to N ([`checks_for`]); the
//! runner selects them by the protocol version it sends.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::client::Ctx;

pub mod artifacts;
pub mod auth;
pub mod auth_sessions;
pub mod builds;
pub mod catalog;
pub mod clock;
pub mod concurrency;
pub mod deposits;
pub mod errors;
pub mod health;
pub mod leases;
pub mod protocol3;
pub mod repos;
pub mod sessions;
pub mod streams;
pub mod ticket_assets;
pub mod transport;

/// Skip reason of checks that mint tokens: the runner has no `--secret`.
pub const NEEDS_SECRET: &str = "authenticated mode only: give the runner the server's --secret";
/// Skip reason of checks that need an authenticated server (`--secret` or `--token`).
pub const NEEDS_AUTH: &str =
    "authenticated mode only: give the runner the server's --secret (or a --token)";
/// Skip reason of open-mode checks when the runner was given a secret or token.
pub const NEEDS_OPEN: &str = "open mode only: the runner was given a --secret or --token";

/// True when a skip reason is one of the mode skips above (the other mode's
/// checks), as opposed to a missing capability such as the test clock.
pub fn is_mode_skip(reason: &str) -> bool {
    [NEEDS_SECRET, NEEDS_AUTH, NEEDS_OPEN].contains(&reason)
}

/// Whether a check asserts an abstore choice rather than the spec: its id
/// starts with `abstore.` (skipped by `--strict-spec`).
pub fn is_abstore_specific(id: &str) -> bool {
    id.starts_with("abstore.")
}

/// Why a check did not pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    Fail(String),
    Skip(String),
}

impl From<String> for Failure {
    fn from(s: String) -> Self {
        Failure::Fail(s)
    }
}

impl From<&str> for Failure {
    fn from(s: &str) -> Self {
        Failure::Fail(s.to_string())
    }
}

pub type CheckResult = Result<(), Failure>;

type RunFn = dyn Fn(Ctx) -> Pin<Box<dyn Future<Output = CheckResult> + Send>> + Send + Sync;

/// One registered check.
#[derive(Clone)]
pub struct Check {
    pub id: String,
    /// Spec section number, e.g. `"3"`.
    pub section: String,
    /// Moves the test clock: runs serially, skipped without a clock route.
    pub clock: bool,
    /// The protocol version that introduced what the check asserts: a
    /// client of an older protocol does not run it.
    pub min_protocol: u8,
    pub run: Arc<RunFn>,
}

impl std::fmt::Debug for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Check")
            .field("id", &self.id)
            .field("section", &self.section)
            .field("clock", &self.clock)
            .field("min_protocol", &self.min_protocol)
            .finish()
    }
}

/// Collects checks while modules register them.
pub struct Registry {
    pub checks: Vec<Check>,
    /// The `min_protocol` of the checks registered from now on.
    protocol: u8,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            checks: Vec::new(),
            protocol: SHIPPED_PROTOCOL,
        }
    }
}

/// The protocol the released client (Autobuild 0.8.0) speaks.
pub const SHIPPED_PROTOCOL: u8 = 2;

impl Registry {
    /// Checks registered after this call belong to `protocol`.
    pub fn since_protocol(&mut self, protocol: u8) {
        self.protocol = protocol;
    }

    /// Registers a check that does not touch the clock.
    pub fn add<F, Fut>(&mut self, id: impl Into<String>, section: &str, f: F)
    where
        F: Fn(Ctx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = CheckResult> + Send + 'static,
    {
        self.push(id.into(), section, false, f);
    }

    /// Registers a check that moves the test clock.
    pub fn add_clock<F, Fut>(&mut self, id: impl Into<String>, section: &str, f: F)
    where
        F: Fn(Ctx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = CheckResult> + Send + 'static,
    {
        self.push(id.into(), section, true, f);
    }

    /// Registers one check per table row: `(name, row)` becomes the check
    /// `{prefix}{name}` running `f(ctx, row)`.
    pub fn rows<N, T, F, Fut>(
        &mut self,
        prefix: &str,
        section: &str,
        rows: impl IntoIterator<Item = (N, T)>,
        f: F,
    ) where
        N: std::fmt::Display,
        T: Clone + Send + Sync + 'static,
        F: Fn(Ctx, T) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = CheckResult> + Send + 'static,
    {
        for (name, row) in rows {
            let f = f.clone();
            self.add(format!("{prefix}{name}"), section, move |c| {
                f(c, row.clone())
            });
        }
    }

    fn push<F, Fut>(&mut self, id: String, section: &str, clock: bool, f: F)
    where
        F: Fn(Ctx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = CheckResult> + Send + 'static,
    {
        assert!(
            !self.checks.iter().any(|c| c.id == id),
            "duplicate check id {id}"
        );
        self.checks.push(Check {
            id,
            section: section.to_string(),
            clock,
            min_protocol: self.protocol,
            run: Arc::new(move |ctx| Box::pin(f(ctx))),
        });
    }
}

/// The checks of the shipped protocol (2), in a stable order: what every
/// client of Autobuild 0.8.0 relies on.
pub fn all_checks() -> Vec<Check> {
    checks_for(&SHIPPED_PROTOCOL.to_string())
}

/// The checks a client sending `X-Autobuild-Protocol-Version: protocol`
/// runs: those of every protocol up to it (an unparsable version: the
/// shipped protocol's).
pub fn checks_for(protocol: &str) -> Vec<Check> {
    let protocol = protocol.parse::<u8>().unwrap_or(SHIPPED_PROTOCOL);
    every_check()
        .into_iter()
        .filter(|c| c.min_protocol <= protocol)
        .collect()
}

/// Only the checks protocol `protocol` introduced.
pub fn introduced_by(protocol: u8) -> Vec<Check> {
    every_check()
        .into_iter()
        .filter(|c| c.min_protocol == protocol)
        .collect()
}

/// Every check of every protocol, in a stable order (by section family,
/// then protocol).
pub fn every_check() -> Vec<Check> {
    let mut r = Registry::default();
    transport::register(&mut r);
    builds::register(&mut r);
    repos::register(&mut r);
    artifacts::register(&mut r);
    leases::register(&mut r);
    deposits::register(&mut r);
    sessions::register(&mut r);
    streams::register(&mut r);
    errors::register(&mut r);
    health::register(&mut r);
    concurrency::register(&mut r);
    catalog::register(&mut r);
    auth::register(&mut r);
    auth_sessions::register(&mut r);
    clock::register(&mut r);
    r.since_protocol(3);
    protocol3::register(&mut r);
    ticket_assets::register(&mut r);
    r.checks
}
