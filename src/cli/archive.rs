//! `abstore export | verify | import | backup | gc`: the archive commands'
//! flags, and their runners printing each command's report line.

use std::path::PathBuf;

use clap::Args;

use crate::archive::autobuild::{self, SourceOptions};
use crate::archive::temp;
use crate::store::DatabaseUrl;

/// `--from KIND PATH`: read another server's store instead of abstore's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SourceKind {
    /// Autobuild's local store: its state directory (`autobuild.sqlite` and
    /// `blobs/`), or the database file (docs/operations.md, "Moving to
    /// abstore").
    AutobuildLocal,
    /// Autobuild's PostgreSQL store: its database URL, with
    /// `--source-blobs`.
    AutobuildPostgres,
}

/// The flags naming an Autobuild source (export and import).
#[derive(Debug, Args, Clone)]
pub struct SourceArgs {
    /// Read an Autobuild store instead: `--from autobuild-local PATH` (the
    /// state directory, e.g. `<checkout>/.autobuild`) or `--from
    /// autobuild-postgres URL` (with `--source-blobs`). Its rows become
    /// archive records; what cannot be carried is reported.
    #[arg(long, num_args = 2, value_names = ["KIND", "PATH"])]
    pub from: Option<Vec<String>>,
    /// With `--from autobuild-postgres`: where its blobs are, as the
    /// deployment's object store URL with its `AB_BLOB_PREFIX` as the path
    /// (e.g. `s3://bucket/prefix`), or a directory of `<sha256>` files (not
    /// read otherwise).
    #[arg(long, env = "ABSTORE_SOURCE_BLOBS")]
    pub source_blobs: Option<String>,
    /// With `--from`: judge the events by the catalogs of this client
    /// identity (`VERSION/PROTOCOL`, e.g. `0.8.0/2`) instead of those of any
    /// client abstore knows; a resource with an event they refuse is left
    /// out, reported (not read without `--from`).
    #[arg(long, env = "ABSTORE_CATALOG_FOR")]
    pub catalog_for: Option<String>,
    /// With `--from`: where the private temporary copies go (the store's
    /// database, the archive of it: room for its blobs in base64, plus the
    /// database), in a directory of mode 0700 removed however the command
    /// ends. Default: the system's temporary directory (`TMPDIR` if set);
    /// not read without `--from`.
    #[arg(long, env = "ABSTORE_TEMP_DIR", value_name = "DIR")]
    pub temp_dir: Option<PathBuf>,
}

impl SourceArgs {
    fn source(&self, quiet: bool) -> anyhow::Result<Option<SourceOptions>> {
        let Some(from) = &self.from else {
            return Ok(None);
        };
        let [kind, path] = from.as_slice() else {
            anyhow::bail!("--from takes a kind and a path");
        };
        let (kind, path) = match <SourceKind as clap::ValueEnum>::from_str(kind, false) {
            Ok(SourceKind::AutobuildLocal) => (autobuild::SourceKind::Local, PathBuf::from(path)),
            Ok(SourceKind::AutobuildPostgres) => {
                let Some(source_blobs) = self.source_blobs.clone() else {
                    anyhow::bail!(
                        "--from autobuild-postgres needs --source-blobs (its blob store: the \
                         deployment's object store URL with its prefix, or a directory)"
                    );
                };
                (
                    autobuild::SourceKind::Postgres {
                        url: path.clone(),
                        source_blobs,
                    },
                    PathBuf::new(),
                )
            }
            Err(_) => anyhow::bail!(
                "--from {kind}: the sources abstore reads are autobuild-local and autobuild-postgres"
            ),
        };
        Ok(Some(SourceOptions {
            kind,
            path,
            catalog_for: self.catalog_for.clone(),
            temp_dir: self.temp_dir.clone(),
            quiet,
        }))
    }
}

#[derive(Debug, Args, Clone)]
pub struct ExportArgs {
    /// The store to read: `sqlite://PATH` or `postgres://…` (not read with
    /// `--from`).
    #[arg(long, env = "ABSTORE_DATABASE", required_unless_present = "from")]
    pub database: Option<String>,
    /// The store's blob location (as `serve --blobs`), not read with `--from`.
    #[arg(long, env = "ABSTORE_BLOBS", required_unless_present = "from")]
    pub blobs: Option<String>,
    #[command(flatten)]
    pub source: SourceArgs,
    /// The archive file to write.
    #[arg(long, env = "ABSTORE_EXPORT_OUT")]
    pub out: PathBuf,
    /// Replace `--out` if it exists (a flag only: no variable may allow an
    /// overwrite).
    #[arg(long)]
    pub force: bool,
    /// No progress lines on stderr.
    #[arg(long, env = "ABSTORE_QUIET", value_parser = super::boolish())]
    pub quiet: bool,
}

#[derive(Debug, Args, Clone)]
pub struct VerifyArgs {
    /// The archive file to check.
    pub file: PathBuf,
    /// No progress lines on stderr.
    #[arg(long, env = "ABSTORE_QUIET", value_parser = super::boolish())]
    pub quiet: bool,
}

#[derive(Debug, Args, Clone)]
pub struct ImportArgs {
    /// The archive file to import (none with `--from`).
    #[arg(required_unless_present = "from", conflicts_with = "from")]
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub source: SourceArgs,
    /// The destination store: `sqlite://PATH` or `postgres://…`.
    #[arg(long, env = "ABSTORE_DATABASE")]
    pub database: String,
    /// The destination's blob location.
    #[arg(long, env = "ABSTORE_BLOBS")]
    pub blobs: String,
    /// Write (without it, a dry run reports what would be written). A flag
    /// only: no variable may turn a dry run into a write.
    #[arg(long)]
    pub apply: bool,
    /// No progress lines on stderr.
    #[arg(long, env = "ABSTORE_QUIET", value_parser = super::boolish())]
    pub quiet: bool,
}

#[derive(Debug, Args, Clone)]
pub struct BackupArgs {
    /// The SQLite store to copy: `sqlite://PATH`.
    #[arg(long, env = "ABSTORE_DATABASE")]
    pub database: String,
    /// The store's blob location.
    #[arg(long, env = "ABSTORE_BLOBS")]
    pub blobs: String,
    /// The database copy to write.
    #[arg(long, env = "ABSTORE_BACKUP_OUT")]
    pub out: PathBuf,
    /// Where to copy the referenced blobs (default: `<out>.blobs`).
    #[arg(long, env = "ABSTORE_BACKUP_BLOBS_OUT")]
    pub blobs_out: Option<String>,
    /// Replace `--out` if it exists (a flag only: no variable may allow an
    /// overwrite).
    #[arg(long)]
    pub force: bool,
    /// No progress lines on stderr.
    #[arg(long, env = "ABSTORE_QUIET", value_parser = super::boolish())]
    pub quiet: bool,
}

#[derive(Debug, Args, Clone)]
pub struct GcArgs {
    /// The store whose references count: `sqlite://PATH` or `postgres://…`.
    #[arg(long, env = "ABSTORE_DATABASE")]
    pub database: String,
    /// The blob location to collect.
    #[arg(long, env = "ABSTORE_BLOBS")]
    pub blobs: String,
    /// Never collect a blob written less than this many seconds ago.
    #[arg(long, env = "ABSTORE_GC_GRACE_SECONDS", default_value_t = 3600)]
    pub grace_seconds: u64,
    /// Delete (without it, only list). A flag only: no variable may turn a
    /// listing into deletions.
    #[arg(long)]
    pub apply: bool,
    /// No progress lines on stderr.
    #[arg(long, env = "ABSTORE_QUIET", value_parser = super::boolish())]
    pub quiet: bool,
}

pub async fn export(args: ExportArgs) -> anyhow::Result<()> {
    let _interrupt = temp::exit_on_signal(
        "export",
        "its temporary files were removed and the archive was not written",
    );
    if let Some(source) = args.source.source(args.quiet)? {
        let (counts, report) =
            crate::archive::autobuild::export(&source, &args.out, args.force).await?;
        println!("{report}");
        println!("exported {}: {counts}", args.out.display());
        return Ok(());
    }
    let (Some(database), Some(blobs)) = (args.database, args.blobs) else {
        anyhow::bail!("export needs --database and --blobs (or --from)");
    };
    let options = crate::archive::export::ExportOptions {
        database: DatabaseUrl::parse(&database)?,
        blobs,
        out: args.out,
        force: args.force,
        quiet: args.quiet,
    };
    let counts = crate::archive::export::export(&options).await?;
    println!("exported {}: {counts}", options.out.display());
    Ok(())
}

/// One verdict line; the error (and exit code 1) comes from `main`.
pub fn verify(args: VerifyArgs) -> anyhow::Result<()> {
    let summary = crate::archive::verify::verify(&args.file, args.quiet)
        .map_err(|err| err.context(format!("{}: INVALID", args.file.display())))?;
    println!(
        "{}: OK: {} archive of {}: {}; sha256 {}",
        args.file.display(),
        summary.source,
        summary.created_at,
        summary.counts,
        summary.sha256
    );
    Ok(())
}

pub async fn import(args: ImportArgs) -> anyhow::Result<()> {
    // Its records go in one transaction, which an exit rolls back unless it
    // had committed; blobs it wrote are left for `abstore gc`.
    let _interrupt = temp::exit_on_signal(
        "import",
        "its temporary files were removed, and the destination holds all of its records \
         (if it had committed) or none",
    );
    if let Some(source) = args.source.source(args.quiet)? {
        let database = DatabaseUrl::parse(&args.database)?;
        let (imported, report) =
            crate::archive::autobuild::import(&source, database, args.blobs, args.apply).await?;
        println!("{report}");
        let what = source.describe();
        if args.apply {
            println!("imported {what}: {imported}");
        } else {
            println!("dry run (nothing written; --apply writes): {what}: {imported}");
        }
        return Ok(());
    }
    let Some(file) = args.file else {
        anyhow::bail!("import needs an archive file (or --from)");
    };
    let options = crate::archive::import::ImportOptions {
        file,
        database: DatabaseUrl::parse(&args.database)?,
        blobs: args.blobs,
        apply: args.apply,
        quiet: args.quiet,
    };
    let report = crate::archive::import::import(&options).await?;
    if options.apply {
        println!("imported {}: {report}", options.file.display());
    } else {
        println!(
            "dry run (nothing written; --apply writes): {}: {report}",
            options.file.display()
        );
    }
    Ok(())
}

pub async fn backup(args: BackupArgs) -> anyhow::Result<()> {
    let options = crate::archive::backup::BackupOptions {
        database: DatabaseUrl::parse(&args.database)?,
        blobs: args.blobs,
        out: args.out,
        blobs_out: args.blobs_out,
        force: args.force,
        quiet: args.quiet,
    };
    let report = crate::archive::backup::backup(&options).await?;
    println!(
        "backed up to {} with {} blobs in {} ({} copied, {} bytes)",
        options.out.display(),
        report.blobs,
        report.blobs_out,
        report.copied,
        report.copied_bytes
    );
    Ok(())
}

pub async fn gc(args: GcArgs) -> anyhow::Result<()> {
    let options = crate::archive::gc::GcOptions {
        database: DatabaseUrl::parse(&args.database)?,
        blobs: args.blobs,
        grace: std::time::Duration::from_secs(args.grace_seconds),
        apply: args.apply,
        quiet: args.quiet,
    };
    let report = crate::archive::gc::gc(&options).await?;
    for blob in &report.unreferenced {
        println!(
            "unreferenced {} {} bytes written {}",
            blob.blob_ref,
            blob.size,
            crate::protocol::time::format_iso(blob.modified_ms)
        );
    }
    let mode = if options.apply {
        "gc"
    } else {
        "gc dry run (nothing deleted; --apply deletes)"
    };
    println!("{mode}: {report}");
    Ok(())
}
