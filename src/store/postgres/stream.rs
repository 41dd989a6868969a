//! Streamed PostgreSQL reads ([`crate::store::rows`]): one statement whose
//! rows sqlx hands over as they arrive from the socket, rendered into pieces
//! by a task of their own, so a whole history never sits in memory. When the
//! client goes away mid-answer, the connection is closed rather than
//! returned: the rest of the statement's rows would otherwise be read and
//! thrown away by the next user of the connection.

use std::sync::Arc;

use futures_util::TryStreamExt as _;

use super::connections::Connections;
use super::primitives::PgRead;
use crate::store::error::{StoreError, StoreResult};
use crate::store::ops::Reads as _;
use crate::store::rows::{Listing, Rows};
use crate::store::rows::{RowSink, StreamedReads};
use crate::store::sql;

/// Start `listing` in its own task; the answer begins with its first piece.
pub(super) async fn read(
    connections: Arc<Connections>,
    listing: Listing,
    reads: &StreamedReads,
) -> StoreResult<Rows> {
    let (mut sink, pending) = reads.sink();
    tokio::spawn(async move {
        let mut read = PgRead::new(&connections);
        let outcome = produce(&mut read, &listing, &mut sink).await;
        drop(read);
        sink.finish(connections.record_outcome(outcome)).await;
    });
    pending.start().await
}

async fn produce(
    read: &mut PgRead<'_>,
    listing: &Listing,
    sink: &mut RowSink<()>,
) -> StoreResult<()> {
    let query = super::primitives::query(&sql::listing(listing, sql::Dialect::Postgres));
    let mut stopped = None;
    {
        let mut rows = query.fetch(read.conn().await?);
        while let Some(row) = rows.try_next().await? {
            sql::render(listing, &row, sink.row())?;
            if sink.is_full()
                && let Err(stop) = sink.send_piece().await
            {
                stopped = Some(stop);
                break;
            }
        }
    }
    if let Some(stop) = stopped {
        read.discard();
        return Err(stop.into());
    }
    if !sink.has_rows()
        && let Some(owner) = listing.owner()
        && !read.exists(&owner).await?
    {
        return Err(StoreError::NotFound(owner));
    }
    Ok(())
}
