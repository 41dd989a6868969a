//! Autobuild's hosted tickets: each operation one read or one write
//! transaction, as `store/tickets/` writes them.

use async_trait::async_trait;

use crate::store::api::Tickets;
use crate::store::engine::{Backend, Engine};
use crate::store::error::StoreResult;
use crate::tickets::history::Entry;
use crate::tickets::{TicketCall, TicketOutcome};

#[async_trait]
impl<B: Backend> Tickets for Engine<B> {
    async fn tickets(&self, call: TicketCall) -> StoreResult<TicketOutcome> {
        crate::store::tickets::run(self, call).await
    }

    async fn ticket_history(
        &self,
        team: &str,
        id: &str,
        after: i64,
        limit: i64,
    ) -> StoreResult<Option<Vec<Entry>>> {
        crate::store::tickets::history(self, team, id, after, limit).await
    }
}
