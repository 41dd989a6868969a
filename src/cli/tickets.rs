//! `abstore tickets history`: who changed a hosted ticket, when, and what
//! (docs/tickets.md, "History"), read from the store beside a running
//! server.

use std::io::Write as _;

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};

use crate::protocol::ident::shown;

/// Entries read per statement: the history of a busy ticket is printed as
/// it is read, never held whole.
const PAGE: i64 = 500;

/// `abstore tickets …`
#[derive(Debug, Subcommand)]
pub enum TicketsCommand {
    /// Print a ticket's history, oldest first: one line per change (its
    /// number, time, who, and what), or one JSON object a line with `--json`.
    History(HistoryArgs),
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// The ticket's id (`ticket-…`, as `ref.id` shows it).
    pub ticket: String,
    /// The team it belongs to (the `teamKey` of `[tickets]`).
    #[arg(long)]
    pub team: String,
    /// The store: `sqlite://PATH` or `postgres://…`.
    #[arg(long, env = "ABSTORE_DATABASE")]
    pub database: String,
    /// One JSON object a line: `seq`, `at` (ISO time), `actor`,
    /// `tokenDigest` (null in open mode) and `change`, as stored.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(command: TicketsCommand) -> anyhow::Result<()> {
    match command {
        TicketsCommand::History(args) => history(&args).await,
    }
}

async fn history(args: &HistoryArgs) -> anyhow::Result<()> {
    let store = super::open_store(&args.database, false).await?;
    let mut stdout = std::io::stdout().lock();
    let mut after = 0;
    let mut printed = 0u64;
    loop {
        let page = store
            .ticket_history(&args.team, &args.ticket, after, PAGE)
            .await
            .with_context(|| {
                format!(
                    "reading the history (a store older than migration 0010 has none: \
                     run `abstore migrate --database {}`)",
                    args.database
                )
            })?;
        let Some(entries) = page else {
            bail!(
                "team \"{}\" has no ticket \"{}\"",
                shown(&args.team),
                shown(&args.ticket)
            );
        };
        let full = entries.len() == PAGE as usize;
        for entry in entries {
            after = entry.seq;
            printed += 1;
            let line = if args.json {
                let change: serde_json::Value = serde_json::from_str(&entry.change_json)
                    .unwrap_or(serde_json::Value::String(entry.change_json.clone()));
                serde_json::json!({
                    "seq": entry.seq,
                    "at": crate::protocol::time::format_iso(entry.at),
                    "actor": entry.actor,
                    "tokenDigest": entry.token_digest,
                    "change": change,
                })
                .to_string()
            } else {
                entry.describe()
            };
            writeln!(stdout, "{line}").context("writing to stdout")?;
        }
        if !full {
            break;
        }
    }
    if !args.json {
        writeln!(stdout, "{printed} changes").context("writing to stdout")?;
    }
    Ok(())
}
