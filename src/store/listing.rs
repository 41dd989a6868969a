//! A streamed read on either backend: the one statement of each
//! [`Listing`], chosen from its family's statements, its rows rendered as
//! their wire JSON, and the one loop that runs it ([`stream_listing`]).

use bytes::BytesMut;

use super::artifacts::sql as artifacts;
use super::builds::sql as builds;
use super::error::{StoreError, StoreResult};
use super::events::sql as events;
use super::record_cache::{BuildRecordCache, render_build};
use super::resources::sql as resources;
use super::rows::{Listing, RowSink, write_json};
use super::sessions::sql as sessions;
use super::statement::{Arg, Columns, Dialect, EachRow, Fixed, Statement, Statements};
use super::streams::sql as streams;
use super::ticket_assets::sql as ticket_assets;
use crate::protocol::ResourceKind;

/// The one statement a streamed read runs.
pub(crate) fn statement_of(listing: &Listing, dialect: Dialect) -> Statement<Vec<Arg<'_>>> {
    match listing {
        Listing::Events {
            resource,
            since,
            until,
        } => any(events::events_between(
            resource,
            *since,
            until.unwrap_or(i64::MAX),
        )),
        Listing::StateEvents { repo, until } => any(events::state_events(
            repo,
            until.unwrap_or(i64::MAX),
            dialect,
        )),
        Listing::Chunks { id, since } => any(streams::chunks_after(id, *since)),
        Listing::Builds => any(builds::all_builds()),
        Listing::Sessions { repo } => any(sessions::repo_sessions(repo)),
        Listing::Artifacts {
            resource,
            kind: Some(kind),
        } => any(artifacts::resource_artifacts_of_kind(resource, kind)),
        Listing::Artifacts {
            resource,
            kind: None,
        } => any(artifacts::resource_artifacts(resource)),
        Listing::Streams { scope } => any(streams::scope_streams(scope)),
        Listing::TicketAssets {
            repo,
            ticket_id,
            revisions,
        } => any(ticket_assets::list_ticket_assets(
            repo, ticket_id, *revisions,
        )),
    }
}

/// A statement of any number of arguments, as a listing's.
fn any<const N: usize>(statement: Fixed<'_, N>) -> Statement<Vec<Arg<'_>>> {
    Statement {
        text: statement.text,
        args: statement.args.into(),
    }
}

/// One row of [`statement_of`]'s statement, as its wire JSON.
pub(crate) fn render(
    listing: &Listing,
    row: &(impl Columns + ?Sized),
    piece: &mut BytesMut,
) -> StoreResult<()> {
    match listing {
        Listing::Builds => render_build(row, piece),
        Listing::Events { .. } | Listing::StateEvents { .. } | Listing::Chunks { .. } => {
            // Stored as the served JSON text: copied as is.
            piece.extend_from_slice(row.str(0)?.as_bytes());
            Ok(())
        }
        Listing::Sessions { .. } => write_json(
            piece,
            &resources::resource_row(ResourceKind::Session, row)?
                .record
                .to_json(),
        ),
        Listing::Artifacts { resource, .. } => {
            write_json(piece, &artifacts::artifact_row(resource, row)?.to_json())
        }
        Listing::Streams { .. } => write_json(piece, &streams::stream_row(row)?.to_json()),
        Listing::TicketAssets { .. } => {
            // The statement selects no tombstone.
            let summary = ticket_assets::ticket_asset_summary_row(row)?
                .ok_or_else(|| StoreError::Corrupt("a tombstone in an asset list".into()))?;
            piece.extend_from_slice(summary.to_json_text().as_bytes());
            Ok(())
        }
    }
}

/// A streamed read's one loop, on either backend's read connection:
/// `listing`'s one statement (one snapshot), each row rendered as its wire
/// JSON into `sink` (a build's from `records` when it keeps the row's
/// rendering), a piece sent whenever one is full; an empty answer of
/// an owner that does not exist is `NotFound`. The backend ends `sink`
/// with the outcome. A statement stopped early because the client went
/// away (or too many long answers are sending) leaves its connection
/// abandoned ([`Statements::abandon`]).
pub(crate) async fn stream_listing<D: Statements>(
    db: &mut D,
    listing: &Listing,
    records: Option<&BuildRecordCache>,
    sink: &mut RowSink<()>,
) -> StoreResult<()> {
    let mut rows = Rendering {
        listing,
        records: records.filter(|_| matches!(listing, Listing::Builds)),
        kept: 0,
        sink: &mut *sink,
        stopped: false,
    };
    let stepped = db.each(statement_of(listing, D::DIALECT), &mut rows).await;
    if rows.stopped {
        db.abandon();
    }
    if rows.records.is_some() {
        let rendered = rows.sink.count().saturating_sub(rows.kept);
        metrics::counter!("abstore_build_records_total", "source" => "cache").increment(rows.kept);
        metrics::counter!("abstore_build_records_total", "source" => "rendered")
            .increment(rendered);
    }
    stepped?;
    if !sink.has_rows()
        && let Some(owner) = listing.owner()
        && !resources::exists(db, &owner).await?
    {
        return Err(StoreError::NotFound(owner));
    }
    Ok(())
}

/// Rows of a listing into the pieces of its answer.
struct Rendering<'a> {
    listing: &'a Listing,
    /// The kept build records, for a builds listing.
    records: Option<&'a BuildRecordCache>,
    /// Rows written from `records`.
    kept: u64,
    sink: &'a mut RowSink<()>,
    /// A piece could not be sent: the answer is cut or refused.
    stopped: bool,
}

impl EachRow for Rendering<'_> {
    /// Rendered; a full piece is sent before the next row.
    fn take(&mut self, row: &dyn Columns) -> StoreResult<bool> {
        match self.records {
            Some(records) => self.kept += u64::from(records.render(row, self.sink.row())?),
            None => render(self.listing, row, self.sink.row())?,
        }
        Ok(self.sink.is_full())
    }

    async fn pause(&mut self) -> StoreResult<()> {
        self.sink.send_piece().await.map_err(|stopped| {
            self.stopped = true;
            stopped.into()
        })
    }
}
