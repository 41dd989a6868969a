//! Autobuild's reference server in the same run: finding Bun and the
//! launcher, starting the reference on the counterpart of an abstore backend,
//! running one scenario body against both servers, and the side-by-side cells.
//!
//! Nothing of Autobuild is part of this crate: `bench/reference/serve.ts`
//! imports the checkout the user names with `--reference` at run time.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, bail};

use crate::harness::{Backend, Ctx, Db, LoadResult, Server, ServerOpts, opt, rate};

/// One load phase's outcome: the load result and server CPU µs per request.
pub type Measured = (LoadResult, Option<f64>);

/// How to start the reference server.
pub struct Reference {
    pub bun: PathBuf,
    pub launcher: PathBuf,
    pub checkout: PathBuf,
    /// `bun --version`, for the run summary.
    pub bun_version: String,
}

impl Reference {
    /// Check the checkout, Bun and the launcher before any scenario runs.
    pub fn new(checkout: &Path, bun: Option<PathBuf>) -> Result<Reference> {
        let server_ts = checkout.join("src/store/remote/server.ts");
        if !server_ts.is_file() {
            bail!(
                "{} is not an Autobuild checkout (no src/store/remote/server.ts)",
                checkout.display()
            );
        }
        if !checkout.join("node_modules/zod").is_dir() {
            bail!(
                "{} has no installed dependencies: run `bun install` (or `npm install --ignore-scripts`) in it",
                checkout.display()
            );
        }
        let bun = bun.unwrap_or_else(|| PathBuf::from("bun"));
        let output = Command::new(&bun)
            .arg("--version")
            .output()
            .with_context(|| format!("running `{} --version` (pass --bun PATH)", bun.display()))?;
        if !output.status.success() {
            bail!("`{} --version` failed", bun.display());
        }
        // The launcher ships with this crate's source, next to src/.
        let launcher = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("reference/serve.ts");
        if !launcher.is_file() {
            bail!("the launcher {} is missing", launcher.display());
        }
        Ok(Reference {
            bun,
            launcher,
            checkout: checkout.canonicalize()?,
            bun_version: String::from_utf8_lossy(&output.stdout).trim().to_owned(),
        })
    }

    /// The reference's store for a database abstore uses, or `None` when the
    /// reference has no counterpart (it has no PostgreSQL backing).
    fn store_for(db: &Db) -> Option<String> {
        match db.backend {
            Backend::Memory => Some("sqlite-memory".into()),
            // Its own file next to abstore's, removed with the database's directory.
            Backend::SqliteFile => db
                .path
                .as_ref()
                .and_then(|path| path.parent())
                .map(|dir| format!("sqlite-file:{}", dir.join("reference.sqlite").display())),
            Backend::Postgres => None,
        }
    }

    /// Start the reference with the launcher's arguments after the
    /// checkout: the store, and optionally a blob directory.
    pub async fn start(&self, ctx: &Ctx, args: &[String], name: &str) -> Result<Server> {
        let mut cmd = Command::new(&self.bun);
        cmd.arg(&self.launcher).arg(&self.checkout).args(args);
        Server::spawn(ctx, cmd, name, "reference listening on ").await
    }
}

/// What one scenario body measured against each server.
pub struct SideBySide {
    pub abstore: Vec<Measured>,
    /// `None` without `--reference` or when the backend has no counterpart.
    pub reference: Option<Vec<Measured>>,
}

impl SideBySide {
    pub fn reference_at(&self, phase: usize) -> Option<&Measured> {
        self.reference.as_ref().and_then(|r| r.get(phase))
    }
}

/// Run `body` (set-up and load phases over HTTP) against a fresh abstore on
/// `db`, then against a fresh reference server on its counterpart store: the
/// same client code and payloads, one server after the other. Each server is
/// stopped before the next starts so they never compete for the cores.
pub async fn side_by_side<B>(ctx: &Ctx, db: &Db, name: &str, body: B) -> Result<SideBySide>
where
    B: AsyncFn(&Server) -> Result<Vec<Measured>>,
{
    let label = format!("{name}-{:?}", db.backend);
    let server = Server::start(ctx, ServerOpts::new(db, label.clone())).await?;
    let abstore = body(&server).await;
    server.stop().await?;
    let abstore = abstore?;
    let reference = match (&ctx.reference, Reference::store_for(db)) {
        (Some(reference), Some(store)) => {
            eprintln!("{name}: reference on {store}");
            let server = reference
                .start(ctx, &[store], &format!("{label}-reference"))
                .await?;
            let measured = body(&server).await;
            server.stop().await?;
            Some(measured.context("against the reference server")?)
        }
        _ => None,
    };
    Ok(SideBySide { abstore, reference })
}

/// The columns every throughput table adds after abstore's own.
pub const COLUMNS: [&str; 4] = [
    "reference req/s",
    "reference CPU µs/req",
    "CPU/req abstore÷reference",
    "req/s abstore÷reference",
];

/// The reference's cells for one phase (dashes when it did not run).
pub fn cells(abstore: &Measured, reference: Option<&Measured>) -> Vec<String> {
    let Some((theirs, their_cpu)) = reference else {
        return blank();
    };
    let (ours, our_cpu) = abstore;
    let cpu_ratio = match (our_cpu, their_cpu) {
        (Some(ours), Some(theirs)) if *theirs > 0.0 => Some(ours / theirs),
        _ => None,
    };
    let rate_ratio = (theirs.rate() > 0.0).then(|| ours.rate() / theirs.rate());
    vec![
        rate(theirs.rate()),
        opt(*their_cpu, 0),
        opt(cpu_ratio, 2),
        opt(rate_ratio, 2),
    ]
}

pub fn blank() -> Vec<String> {
    vec!["–".into(); COLUMNS.len()]
}

/// The reference's errors, if any, for the notes column.
pub fn note(reference: Option<&Measured>) -> String {
    match reference {
        Some((result, _)) if result.errors > 0 => format!("reference: {}", result.note()),
        _ => String::new(),
    }
}

/// A table header: `before`, the reference columns, then `after`.
pub fn header<'a>(before: &[&'a str], after: &[&'a str]) -> Vec<&'a str> {
    let mut all = before.to_vec();
    all.extend(COLUMNS);
    all.extend_from_slice(after);
    all
}

/// Join the non-empty notes with "; ".
pub fn notes(parts: &[String]) -> String {
    parts
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}
