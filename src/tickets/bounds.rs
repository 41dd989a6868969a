//! Bounds on what a team's backlog may hold (docs/configuration.md,
//! "Collection bounds"; docs/decisions.md, 21): tickets per team, labels and
//! blockers per ticket, comments per ticket, and the bytes of each text
//! (title, body, comment). Each is a flag; a write over one writes nothing
//! and is answered `413 validation` naming the bound and its flag.
//!
//! A list or dependency answer is bounded by the response ceiling
//! (`--max-body-bytes`), measured as it is built.

use super::outcome::Refusal;
use crate::protocol::ident::shown;

/// Tickets one team may hold unless `--max-team-tickets` says otherwise.
pub const DEFAULT_MAX_TEAM_TICKETS: i64 = 100_000;
/// Labels one ticket may carry unless `--max-ticket-labels` says otherwise.
pub const DEFAULT_MAX_TICKET_LABELS: i64 = 100;
/// Blockers one ticket may have unless `--max-ticket-blockers` says otherwise.
pub const DEFAULT_MAX_TICKET_BLOCKERS: i64 = 1_000;
/// Comments one ticket may have unless `--max-ticket-comments` says otherwise.
pub const DEFAULT_MAX_TICKET_COMMENTS: i64 = 10_000;
/// Bytes of UTF-8 in one title, body or comment (1 MiB) unless
/// `--max-ticket-text-bytes` says otherwise.
pub const DEFAULT_MAX_TICKET_TEXT_BYTES: i64 = 1024 * 1024;

/// The bounds in force; every one is at least 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TicketBounds {
    pub max_team_tickets: i64,
    pub max_ticket_labels: i64,
    pub max_ticket_blockers: i64,
    pub max_ticket_comments: i64,
    pub max_ticket_text_bytes: i64,
}

impl Default for TicketBounds {
    fn default() -> Self {
        TicketBounds {
            max_team_tickets: DEFAULT_MAX_TEAM_TICKETS,
            max_ticket_labels: DEFAULT_MAX_TICKET_LABELS,
            max_ticket_blockers: DEFAULT_MAX_TICKET_BLOCKERS,
            max_ticket_comments: DEFAULT_MAX_TICKET_COMMENTS,
            max_ticket_text_bytes: DEFAULT_MAX_TICKET_TEXT_BYTES,
        }
    }
}

/// `count` (a length) as the bounds' integer type.
fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl TicketBounds {
    /// A text of the request at `field` (`input.draft.body`) within the
    /// text bound.
    pub fn text(&self, field: &str, text: &str) -> Result<(), Refusal> {
        if count(text.len()) <= self.max_ticket_text_bytes {
            return Ok(());
        }
        Err(refused(format!(
            "\"{field}\" is {} bytes, over the {}-byte --max-ticket-text-bytes bound",
            text.len(),
            self.max_ticket_text_bytes
        )))
    }

    /// The labels of the request at `field` within the label bound.
    pub fn labels(&self, field: &str, labels: &[String]) -> Result<(), Refusal> {
        if count(labels.len()) <= self.max_ticket_labels {
            return Ok(());
        }
        Err(refused(format!(
            "\"{field}\" has {} labels, over the --max-ticket-labels bound of {}",
            labels.len(),
            self.max_ticket_labels
        )))
    }

    /// A new ticket's `distinct` blockers within the blocker bound.
    pub fn draft_blockers(&self, distinct: usize) -> Result<(), Refusal> {
        if count(distinct) <= self.max_ticket_blockers {
            return Ok(());
        }
        Err(refused(format!(
            "\"input.draft.blockedBy\" names {distinct} tickets, over the --max-ticket-blockers bound of {}",
            self.max_ticket_blockers
        )))
    }

    /// Ticket `id` holding `held` blockers may take one more.
    pub fn another_blocker(&self, id: &str, held: i64) -> Result<(), Refusal> {
        if held < self.max_ticket_blockers {
            return Ok(());
        }
        Err(refused(format!(
            "ticket \"{}\" has {held} blockers, the --max-ticket-blockers bound",
            shown(id)
        )))
    }

    /// Ticket `id` holding `held` comments may take one more.
    pub fn another_comment(&self, id: &str, held: i64) -> Result<(), Refusal> {
        if held < self.max_ticket_comments {
            return Ok(());
        }
        Err(refused(format!(
            "ticket \"{}\" has {held} comments, the --max-ticket-comments bound",
            shown(id)
        )))
    }

    /// Team `team`, whose next ticket would be its `seq`th, may take it.
    pub fn another_ticket(&self, team: &str, seq: i64) -> Result<(), Refusal> {
        if seq <= self.max_team_tickets {
            return Ok(());
        }
        Err(refused(format!(
            "team \"{}\" holds {} tickets, the --max-team-tickets bound",
            shown(team),
            seq - 1
        )))
    }
}

fn refused(what: String) -> Refusal {
    Refusal::TooLarge(format!("{what}; nothing was written"))
}

/// An answer over the response ceiling (`--max-body-bytes`); `what` names it.
pub fn answer_too_large(what: &str, max: usize) -> Refusal {
    Refusal::TooLarge(format!(
        "{what} exceeds the {max}-byte response ceiling (--max-body-bytes)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_inclusive_and_named() {
        let b = TicketBounds {
            max_team_tickets: 2,
            max_ticket_labels: 1,
            max_ticket_blockers: 1,
            max_ticket_comments: 1,
            max_ticket_text_bytes: 3,
        };
        assert!(b.text("input.body", "abc").is_ok());
        assert!(b.text("input.body", "é").is_ok());
        let refusal = b.text("input.body", "abcd").unwrap_err();
        assert!(refusal.message().contains("--max-ticket-text-bytes"));
        assert!(refusal.message().ends_with("nothing was written"));
        assert!(b.labels("input.patch.labels", &["a".into()]).is_ok());
        assert!(
            b.labels("input.patch.labels", &["a".into(), "a".into()])
                .unwrap_err()
                .message()
                .contains("--max-ticket-labels")
        );
        assert!(b.draft_blockers(1).is_ok() && b.draft_blockers(2).is_err());
        assert!(b.another_blocker("t", 0).is_ok() && b.another_blocker("t", 1).is_err());
        assert!(b.another_comment("t", 0).is_ok() && b.another_comment("t", 1).is_err());
        assert!(b.another_ticket("ENG", 2).is_ok());
        let refusal = b.another_ticket("ENG", 3).unwrap_err();
        assert!(refusal.message().contains("team \"ENG\" holds 2 tickets"));
    }
}
