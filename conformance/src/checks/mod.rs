//! The registry of checks. Each check has a stable id (`s<section>.<area>.<rule>`),
//! the spec section it covers, and whether it moves the server's test clock.
//!
//! Modules group checks by spec section family; each exposes `register(&mut Vec<Check>)`.

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
pub mod repos;
pub mod sessions;
pub mod streams;
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
    pub run: Arc<RunFn>,
}

impl std::fmt::Debug for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Check")
            .field("id", &self.id)
            .field("section", &self.section)
            .field("clock", &self.clock)
            .finish()
    }
}

/// Collects checks while modules register them.
#[derive(Default)]
pub struct Registry {
    pub checks: Vec<Check>,
}

impl Registry {
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
            run: Arc::new(move |ctx| Box::pin(f(ctx))),
        });
    }
}

/// Every check, in a stable order (by section family).
pub fn all_checks() -> Vec<Check> {
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
    r.checks
}
