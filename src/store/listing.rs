//! The one statement of each streamed read ([`Listing`]), chosen from its
//! family's statements, and its rows rendered as their wire JSON.

use bytes::BytesMut;

use super::error::{StoreError, StoreResult};
use super::rows::{Listing, write_json};
use super::statement::{Arg, Columns, Dialect, Fixed, Statement};
use super::{artifacts, builds, events, resources, sessions, streams, ticket_assets};
use crate::protocol::ResourceKind;

/// The one statement a streamed read runs.
pub(crate) fn listing(listing: &Listing, dialect: Dialect) -> Statement<Vec<Arg<'_>>> {
    match listing {
        Listing::Events {
            resource,
            since,
            until,
        } => any(events::sql::events_between(
            resource,
            *since,
            until.unwrap_or(i64::MAX),
        )),
        Listing::StateEvents { repo, until } => any(events::sql::state_events(
            repo,
            until.unwrap_or(i64::MAX),
            dialect,
        )),
        Listing::Chunks { id, since } => any(streams::sql::chunks_after(id, *since)),
        Listing::Builds => any(builds::sql::all_builds()),
        Listing::Sessions { repo } => any(sessions::sql::repo_sessions(repo)),
        Listing::Artifacts {
            resource,
            kind: Some(kind),
        } => any(artifacts::sql::resource_artifacts_of_kind(resource, kind)),
        Listing::Artifacts {
            resource,
            kind: None,
        } => any(artifacts::sql::resource_artifacts(resource)),
        Listing::Streams { scope } => any(streams::sql::scope_streams(scope)),
        Listing::TicketAssets {
            repo,
            ticket_id,
            revisions,
        } => any(ticket_assets::sql::list_ticket_assets(
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

/// One row of [`listing`]'s statement, as its wire JSON.

pub(crate) fn render(
    listing: &Listing,
    row: &(impl Columns + ?Sized),
    piece: &mut BytesMut,
) -> StoreResult<()> {
    match listing {
        Listing::Events { .. } | Listing::StateEvents { .. } | Listing::Chunks { .. } => {
            // Stored as the served JSON text: copied as is.
            piece.extend_from_slice(row.str(0)?.as_bytes());
            Ok(())
        }
        Listing::Builds => write_json(
            piece,
            &resources::sql::resource_row(ResourceKind::Build, row)?.record.to_json(),
        ),
        Listing::Sessions { .. } => write_json(
            piece,
            &resources::sql::resource_row(ResourceKind::Session, row)?.record.to_json(),
        ),
        Listing::Artifacts { resource, .. } => {
            write_json(piece, &artifacts::sql::artifact_row(resource, row)?.to_json())
        }
        Listing::Streams { .. } => write_json(piece, &streams::sql::stream_row(row)?.to_json()),
        Listing::TicketAssets { .. } => {
            // The statement selects no tombstone.
            let summary = ticket_assets::sql::ticket_asset_summary_row(row)?
                .ok_or_else(|| StoreError::Corrupt("a tombstone in an asset list".into()))?;
            piece.extend_from_slice(summary.to_json_text().as_bytes());
            Ok(())
        }
    }
}
