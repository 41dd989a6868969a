//! Autobuild's hosted ticket source (issue 35; docs/tickets.md): a team's
//! backlog kept in the store and served as `POST /tickets/{operation}`, so a
//! repository configured with `[tickets] source = "hosted"` needs nothing
//! but abstore. The semantics are those of Autobuild's database ticket
//! source (`packages/postgres-store/src/tickets.ts`), with its refusals
//! answered `4xx` where the hosted service answers `500`.
//!
//! This module is the vocabulary and the rules, with no I/O; the store runs
//! the operations (`store::tickets`, one transaction each) and `http::tickets`
//! serves them.
//!
//! - [`operation`]: the ten operations and their parsed inputs.
//! - [`wire`]: the strict request schemas.
//! - [`lifecycle`]: the four configured states and a request's team.
//! - [`rules`]: what an operation checks before its transaction.
//! - [`bounds`]: the collection bounds and their refusals.
//! - [`answer`]: the JSON answers, from stored JSON text.
//! - [`outcome`]: answers and refusals.
//! - [`text`]: blankness as Autobuild judges it, and stored text.
//! - [`history`]: who changed a ticket, when, and what.

pub mod answer;
pub mod bounds;
pub mod history;
pub mod lifecycle;
pub mod operation;
pub mod outcome;
pub mod rules;
pub mod text;
pub mod wire;

use std::sync::Arc;

pub use bounds::TicketBounds;
pub use history::{Actor, Change};
pub use lifecycle::{Context, Lifecycle, Team};
pub use operation::{Draft, Operation, Patch, TicketOp};
pub use outcome::{Refusal, TicketAnswer, TicketOutcome};

/// A server's ticket settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TicketSettings {
    pub lifecycle: Lifecycle,
    pub bounds: TicketBounds,
    /// The response ceiling every answer is held to (`--max-body-bytes`).
    pub max_answer_bytes: usize,
}

impl Default for TicketSettings {
    fn default() -> Self {
        TicketSettings {
            lifecycle: Lifecycle::default(),
            bounds: TicketBounds::default(),
            max_answer_bytes: 16 * 1024 * 1024,
        }
    }
}

/// One operation for the store to run: the server's settings, the
/// request's context (checked by the store first), the operation, and who
/// asks (written into the ticket's history by a write that changes it).
#[derive(Clone, Debug)]
pub struct TicketCall {
    pub settings: Arc<TicketSettings>,
    pub context: Context,
    pub op: TicketOp,
    pub actor: Actor,
}
