//! `abstore export | verify | import | backup | gc`: the archive commands'
//! flags, and their runners printing each command's report line.

use std::path::PathBuf;

use clap::Args;

use crate::store::DatabaseUrl;

#[derive(Debug, Args, Clone)]
pub struct ExportArgs {
    /// The store to read: `sqlite://PATH` or `postgres://…`.
    #[arg(long, env = "ABSTORE_DATABASE")]
    pub database: String,
    /// The store's blob location (as `serve --blobs`).
    #[arg(long, env = "ABSTORE_BLOBS")]
    pub blobs: String,
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
    /// The archive file to import.
    pub file: PathBuf,
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
    let options = crate::archive::export::ExportOptions {
        database: DatabaseUrl::parse(&args.database)?,
        blobs: args.blobs,
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
    let options = crate::archive::import::ImportOptions {
        file: args.file,
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
