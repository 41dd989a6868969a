//! Streamed PostgreSQL reads ([`crate::store::rows`]): one statement whose
//! rows sqlx hands over as they arrive from the socket, rendered into pieces
//! by a task of their own, so a whole history never sits in memory. When the
//! client goes away mid-answer, the connection is closed rather than
//! returned: the rest of the statement's rows would otherwise be read and
//! thrown away by the next user of the connection.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use futures_util::TryStreamExt as _;
use sqlx::Postgres;
use sqlx::Row as _;
use sqlx::postgres::PgRow;

use super::database::Database;
use super::prims::{
    LIST_ARTIFACTS, LIST_ARTIFACTS_OF_KIND, LIST_RESOURCES, LIST_SESSIONS, LIST_STREAMS, PgRead,
    SELECT_CHUNKS_SINCE, SELECT_EVENTS_SINCE, artifact_row, resource_row, stream_row,
};
use crate::protocol::ResourceKind;
use crate::store::ops::Reads as _;
use crate::store::rows::{RowSink, write_json};
use crate::store::{Listing, Rows, StoreError, StoreResult, counted};

/// Start `listing` in its own task; the answer begins with its first piece.
pub(super) async fn read(
    db: Arc<Database>,
    listing: Listing,
    stall: Duration,
) -> StoreResult<Rows> {
    let (mut sink, pending) = RowSink::new(stall);
    tokio::spawn(async move {
        let mut read = PgRead::new(&db);
        let outcome = produce(&mut read, &listing, &mut sink).await;
        drop(read);
        sink.finish(db.settle(outcome)).await;
    });
    pending.start().await
}

async fn produce(
    read: &mut PgRead<'_>,
    listing: &Listing,
    sink: &mut RowSink<()>,
) -> StoreResult<()> {
    let query = match listing {
        Listing::Events { resource, since } => counted::<Postgres>(SELECT_EVENTS_SINCE)
            .bind(resource.kind.tag())
            .bind(&resource.id)
            .bind(*since),
        Listing::Chunks { id, since } => counted::<Postgres>(SELECT_CHUNKS_SINCE)
            .bind(id)
            .bind(*since),
        Listing::Builds => counted::<Postgres>(LIST_RESOURCES).bind(ResourceKind::Build.tag()),
        Listing::Sessions { repo } => counted::<Postgres>(LIST_SESSIONS).bind(repo),
        Listing::Artifacts {
            resource,
            kind: Some(kind),
        } => counted::<Postgres>(LIST_ARTIFACTS_OF_KIND)
            .bind(resource.kind.tag())
            .bind(&resource.id)
            .bind(kind),
        Listing::Artifacts {
            resource,
            kind: None,
        } => counted::<Postgres>(LIST_ARTIFACTS)
            .bind(resource.kind.tag())
            .bind(&resource.id),
        Listing::Streams { scope } => counted::<Postgres>(LIST_STREAMS)
            .bind(scope.kind.tag())
            .bind(&scope.id),
    };
    let mut gone = false;
    {
        let mut rows = query.fetch(read.conn().await?);
        while let Some(row) = rows.try_next().await? {
            render(listing, &row, sink.row())?;
            if sink.is_full() && sink.send_piece().await.is_err() {
                gone = true;
                break;
            }
        }
    }
    if gone {
        read.discard();
        return Err(StoreError::Aborted("the client stopped reading".into()));
    }
    if !sink.has_rows()
        && let Some(owner) = listing.owner()
        && !read.exists(&owner).await?
    {
        return Err(StoreError::NotFound(owner));
    }
    Ok(())
}

/// One row's wire JSON.
fn render(listing: &Listing, row: &PgRow, piece: &mut BytesMut) -> StoreResult<()> {
    match listing {
        Listing::Events { .. } | Listing::Chunks { .. } => {
            piece.extend_from_slice(row.try_get::<&str, _>(0)?.as_bytes());
            Ok(())
        }
        Listing::Builds => write_json(
            piece,
            &resource_row(ResourceKind::Build, row)?.record.to_json(),
        ),
        Listing::Sessions { .. } => write_json(
            piece,
            &resource_row(ResourceKind::Session, row)?.record.to_json(),
        ),
        Listing::Artifacts { resource, .. } => {
            write_json(piece, &artifact_row(resource, row)?.to_json())
        }
        Listing::Streams { .. } => write_json(piece, &stream_row(row)?.to_json()),
    }
}
