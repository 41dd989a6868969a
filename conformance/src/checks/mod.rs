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
//!
//! Checks of what abstore serves beyond the store protocol, or of its own
//! choices, are named `abstore.…` (`--strict-spec` skips them): the hosted
//! ticket checks are `abstore.tickets.…` ([`tickets`]).

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
pub mod tickets;
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
    /// The catalog set whose fixtures the catalog checks send: the one the
    /// server serves the run's client identity.
    catalog_set: String,
}

impl Registry {
    fn for_set(catalog_set: &str) -> Registry {
        Registry {
            checks: Vec::new(),
            protocol: SHIPPED_PROTOCOL,
            catalog_set: catalog_set.to_owned(),
        }
    }
}

impl Default for Registry {
    fn default() -> Self {
        Registry::for_set(&crate::fixtures::catalog_set(SHIPPED_VERSION, "2"))
    }
}

/// The protocol the released client (Autobuild 0.8.0) speaks.
pub const SHIPPED_PROTOCOL: u8 = 2;
/// The released client's Autobuild version.
pub const SHIPPED_VERSION: &str = "0.8.0";

impl Registry {
    /// The catalog set whose fixtures the catalog checks send.
    pub fn catalog_set(&self) -> &str {
        &self.catalog_set
    }

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
    checks_for(SHIPPED_VERSION, &SHIPPED_PROTOCOL.to_string())
}

/// The checks a client sending `X-Autobuild-Version: version` and
/// `X-Autobuild-Protocol-Version: protocol` runs: those of every protocol up
/// to its own (an unparsable protocol: the shipped protocol's), with the
/// catalog fixtures of the catalog set the server serves that identity
/// ([`crate::fixtures::catalog_set`]), so a `0.9.0/3` or `0.8.0/3` run sends
/// the 0.9.0 catalogs' fixtures.
pub fn checks_for(version: &str, protocol: &str) -> Vec<Check> {
    let number = protocol.parse::<u8>().unwrap_or(SHIPPED_PROTOCOL);
    registered(&crate::fixtures::catalog_set(version, protocol))
        .into_iter()
        .filter(|c| c.min_protocol <= number)
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
/// then protocol), with the default catalog set's fixtures.
pub fn every_check() -> Vec<Check> {
    let mut r = Registry::default();
    register_all(&mut r);
    r.checks
}

/// Every check of every protocol for catalog set `set`.
fn registered(set: &str) -> Vec<Check> {
    let mut r = Registry::for_set(set);
    register_all(&mut r);
    r.checks
}

fn register_all(r: &mut Registry) {
    transport::register(r);
    builds::register(r);
    repos::register(r);
    artifacts::register(r);
    leases::register(r);
    deposits::register(r);
    sessions::register(r);
    streams::register(r);
    errors::register(r);
    health::register(r);
    concurrency::register(r);
    catalog::register(r);
    auth::register(r);
    auth_sessions::register(r);
    clock::register(r);
    // Hosted tickets: every accepted identity reaches them, protocol 2 too.
    tickets::register(r);
    r.since_protocol(3);
    protocol3::register(r);
    ticket_assets::register(r);
}
