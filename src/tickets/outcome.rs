//! What a ticket operation answers: its result, or the refusal the hosted
//! protocol gives for it. A refusal writes nothing.

use crate::protocol::ident::shown;

/// A successful operation's answer, its JSON already built where it carries
/// tickets (from the stored JSON text, [`super::answer`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TicketAnswer {
    /// `list-ready`: `{"tickets": [...], "diagnostics": []}`.
    Listing(String),
    /// `get`: the ticket, or `None` (JSON `null`).
    Ticket(Option<String>),
    /// `claim`: whether this call claimed it.
    Claimed(bool),
    /// `comment`, `transition`, `update`, `add-blocker`, `remove-blocker`:
    /// `{"ok": true}`.
    Done,
    /// `create` (`201`): the created ticket, or the one an idempotency key
    /// adopted.
    Created(String),
    /// `dependency-states`: the array, in the order asked.
    DependencyStates(String),
}

/// Why an operation was refused; the message is the answer's `error`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `400 validation`: a rule of the operation (a blank title, a state
    /// the lifecycle lacks, a self-block, an invalid update). Autobuild's
    /// hosted service answers these `500`; the message is the same.
    Invalid(String),
    /// `404 not-found`: the ticket the operation needs does not exist in
    /// the team; the message names its id.
    Unknown(String),
    /// `413 validation`: a collection bound (docs/configuration.md) or the
    /// response ceiling; the message names it and its flag.
    TooLarge(String),
}

impl Refusal {
    /// The hosted database source's message for an operation (`update`,
    /// `addBlocker`, `create blocker`, …) on an id the team lacks.
    pub fn unknown_ticket(operation: &str, id: &str) -> Refusal {
        Refusal::Unknown(format!(
            "database ticket source: {operation} on unknown ticket \"{}\"",
            shown(id)
        ))
    }

    pub fn message(&self) -> &str {
        match self {
            Refusal::Invalid(m) | Refusal::Unknown(m) | Refusal::TooLarge(m) => m,
        }
    }
}

/// An operation's outcome inside a store result: the store's own failures
/// are the outer `StoreError`, the protocol's refusals this inner one.
pub type TicketOutcome = Result<TicketAnswer, Refusal>;
