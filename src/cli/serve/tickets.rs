//! `abstore serve`'s flags for Autobuild's hosted tickets (docs/tickets.md):
//! the four lifecycle states and the bounds on a team's backlog.

use clap::Args;

use crate::store::bounds::MAX_BOUND;
use crate::tickets::bounds::{self, TicketBounds};
use crate::tickets::lifecycle::{DEFAULT_STATES, Lifecycle};

/// The hosted tickets' lifecycle and bounds. A write over a bound writes
/// nothing and is answered `413 validation` naming the bound and its flag.
#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Hosted tickets")]
pub struct TicketArgs {
    /// The ticket state harvest and creates file into by default (a
    /// request's `createState` may pick another configured state).
    #[arg(long, env = "ABSTORE_TICKET_TRIAGE_STATE", default_value = DEFAULT_STATES[0])]
    pub ticket_triage_state: String,

    /// The ticket state ready for the dispatcher.
    #[arg(long, env = "ABSTORE_TICKET_READY_STATE", default_value = DEFAULT_STATES[1])]
    pub ticket_ready_state: String,

    /// The ticket state a claim moves a ticket to by default (a request's
    /// `claimedState` may pick another configured state).
    #[arg(long, env = "ABSTORE_TICKET_DOING_STATE", default_value = DEFAULT_STATES[2])]
    pub ticket_doing_state: String,

    /// The one resolved ticket state: a ticket there no longer blocks and
    /// can no longer be claimed.
    #[arg(long, env = "ABSTORE_TICKET_DONE_STATE", default_value = DEFAULT_STATES[3])]
    pub ticket_done_state: String,

    /// Tickets one team may hold; a create beyond them is refused.
    #[arg(long, env = "ABSTORE_MAX_TEAM_TICKETS", default_value_t = bounds::DEFAULT_MAX_TEAM_TICKETS, value_parser = bound())]
    pub max_team_tickets: i64,

    /// Labels one ticket may carry.
    #[arg(long, env = "ABSTORE_MAX_TICKET_LABELS", default_value_t = bounds::DEFAULT_MAX_TICKET_LABELS, value_parser = bound())]
    pub max_ticket_labels: i64,

    /// Blockers one ticket may have.
    #[arg(long, env = "ABSTORE_MAX_TICKET_BLOCKERS", default_value_t = bounds::DEFAULT_MAX_TICKET_BLOCKERS, value_parser = bound())]
    pub max_ticket_blockers: i64,

    /// Comments one ticket may have.
    #[arg(long, env = "ABSTORE_MAX_TICKET_COMMENTS", default_value_t = bounds::DEFAULT_MAX_TICKET_COMMENTS, value_parser = bound())]
    pub max_ticket_comments: i64,

    /// Bytes of UTF-8 in one ticket title, body or comment.
    #[arg(long, env = "ABSTORE_MAX_TICKET_TEXT_BYTES", default_value_t = bounds::DEFAULT_MAX_TICKET_TEXT_BYTES, value_parser = bound())]
    pub max_ticket_text_bytes: i64,
}

/// A bound: a whole number from 1 to 2^53 − 1.
fn bound() -> clap::builder::RangedI64ValueParser<i64> {
    clap::value_parser!(i64).range(1..=MAX_BOUND)
}

impl TicketArgs {
    /// The lifecycle and bounds these flags give, or why the four states
    /// cannot be a lifecycle (naming the flags).
    pub fn into_config(self) -> anyhow::Result<(Lifecycle, TicketBounds)> {
        let TicketArgs {
            ticket_triage_state,
            ticket_ready_state,
            ticket_doing_state,
            ticket_done_state,
            max_team_tickets,
            max_ticket_labels,
            max_ticket_blockers,
            max_ticket_comments,
            max_ticket_text_bytes,
        } = self;
        let lifecycle = Lifecycle::new(
            &ticket_triage_state,
            &ticket_ready_state,
            &ticket_doing_state,
            &ticket_done_state,
        )
        .map_err(|why| {
            anyhow::anyhow!(
                "--ticket-triage-state, --ticket-ready-state, --ticket-doing-state and \
                 --ticket-done-state: {why}"
            )
        })?;
        Ok((
            lifecycle,
            TicketBounds {
                max_team_tickets,
                max_ticket_labels,
                max_ticket_blockers,
                max_ticket_comments,
                max_ticket_text_bytes,
            },
        ))
    }
}
