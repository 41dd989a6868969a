//! Bounds on the collections a client can grow (issue 33; docs/decisions.md,
//! 21): chunks per stream (by count and by bytes), events per log, revisions
//! per artifact kind, revisions per ticket asset and live assets per ticket.
//!
//! The store enforces them in the writing transaction (`super::ops`) and
//! in PostgreSQL's one-statement fast paths, which decline to the
//! transaction rather than decide at a bound: a write over a bound writes
//! nothing and consumes no sequence or revision. The refusal names the
//! collection, the bound and its flag; the HTTP layer answers it
//! `413 {"kind":"validation"}`, the protocol's status for a configured
//! ceiling (docs/configuration.md, "Collection bounds", says why).

use crate::protocol::ResourceRef;
use crate::protocol::ident::shown;

/// Chunks one stream may hold unless `--max-stream-chunks` says otherwise.
pub const DEFAULT_MAX_STREAM_CHUNKS: i64 = 100_000;
/// Bytes of stored chunks one stream may hold (64 MiB) unless
/// `--max-stream-bytes` says otherwise.
pub const DEFAULT_MAX_STREAM_BYTES: i64 = 64 * 1024 * 1024;
/// Events one log (build, repository or session) may hold unless
/// `--max-events-per-log` says otherwise.
pub const DEFAULT_MAX_EVENTS_PER_LOG: i64 = 100_000_000;
/// Revisions of one artifact kind of one resource, for kinds no retention
/// rule selects, unless `--max-artifact-revisions` says otherwise.
pub const DEFAULT_MAX_ARTIFACT_REVISIONS: i64 = 100_000;
/// Revisions (tombstones included) of one ticket asset unless
/// `--max-ticket-asset-revisions` says otherwise.
pub const DEFAULT_MAX_TICKET_ASSET_REVISIONS: i64 = 10_000;
/// Live assets of one ticket unless `--max-ticket-assets` says otherwise.
pub const DEFAULT_MAX_TICKET_ASSETS: i64 = 1_000;
/// The largest bound a flag takes: 2^53 − 1, the largest sequence or
/// revision a JavaScript client reads exactly (and far from overflowing
/// the sums the checks make).
pub const MAX_BOUND: i64 = (1 << 53) - 1;

/// The bounds in force; every one is at least 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    pub max_stream_chunks: i64,
    /// Counted as the stored chunks' UTF-8 bytes (each batch in its
    /// `{"stream","seq","ts","parts"}` envelope), the text a close reads.
    pub max_stream_bytes: i64,
    pub max_events_per_log: i64,
    pub max_artifact_revisions: i64,
    pub max_ticket_asset_revisions: i64,
    pub max_ticket_assets: i64,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            max_stream_chunks: DEFAULT_MAX_STREAM_CHUNKS,
            max_stream_bytes: DEFAULT_MAX_STREAM_BYTES,
            max_events_per_log: DEFAULT_MAX_EVENTS_PER_LOG,
            max_artifact_revisions: DEFAULT_MAX_ARTIFACT_REVISIONS,
            max_ticket_asset_revisions: DEFAULT_MAX_TICKET_ASSET_REVISIONS,
            max_ticket_assets: DEFAULT_MAX_TICKET_ASSETS,
        }
    }
}

/// Which bound refused a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    StreamChunks,
    StreamBytes,
    EventsPerLog,
    ArtifactRevisions,
    TicketAssetRevisions,
    TicketAssets,
}

impl Bound {
    /// The flag that sets it.
    pub fn flag(self) -> &'static str {
        match self {
            Bound::StreamChunks => "--max-stream-chunks",
            Bound::StreamBytes => "--max-stream-bytes",
            Bound::EventsPerLog => "--max-events-per-log",
            Bound::ArtifactRevisions => "--max-artifact-revisions",
            Bound::TicketAssetRevisions => "--max-ticket-asset-revisions",
            Bound::TicketAssets => "--max-ticket-assets",
        }
    }
}

/// A write refused at a bound; nothing of it was written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct OverBound {
    pub bound: Bound,
    /// The answer's text: the collection, the bound and its flag.
    pub message: String,
}

impl OverBound {
    fn new(bound: Bound, what: String) -> Self {
        OverBound {
            bound,
            message: format!("{what}; nothing was written"),
        }
    }

    /// A stream holding `max` chunks.
    pub(crate) fn stream_chunks(id: &str, max: i64) -> Self {
        OverBound::new(
            Bound::StreamChunks,
            format!(
                "stream \"{}\" holds {max} chunks, the {} bound; close it and append to a new stream",
                shown(id),
                Bound::StreamChunks.flag()
            ),
        )
    }

    /// A stream holding `held` bytes of chunks, to which a chunk of
    /// `chunk` bytes (as stored) would not fit under `max`.
    pub(crate) fn stream_bytes(id: &str, held: i64, chunk: i64, max: i64) -> Self {
        OverBound::new(
            Bound::StreamBytes,
            format!(
                "stream \"{}\" holds {held} bytes of chunks; this batch ({chunk} bytes as stored) \
                 would pass the {max}-byte {} bound; close it and append to a new stream",
                shown(id),
                Bound::StreamBytes.flag()
            ),
        )
    }

    /// A log holding `max` events.
    pub(crate) fn events(r: &ResourceRef, max: i64) -> Self {
        OverBound::new(
            Bound::EventsPerLog,
            format!(
                "{} \"{}\" holds {max} events, the {} bound",
                r.kind.noun(),
                shown(&r.id),
                Bound::EventsPerLog.flag()
            ),
        )
    }

    /// An artifact kind of `r` holding `max` revisions.
    pub(crate) fn artifact_revisions(r: &ResourceRef, kind: &str, max: i64) -> Self {
        OverBound::new(
            Bound::ArtifactRevisions,
            format!(
                "artifact kind \"{}\" of {} \"{}\" has {max} revisions, the {} bound",
                shown(kind),
                r.kind.noun(),
                shown(&r.id),
                Bound::ArtifactRevisions.flag()
            ),
        )
    }

    /// A ticket asset with `max` revisions, tombstones included.
    pub(crate) fn ticket_asset_revisions(kind: &str, name: &str, max: i64) -> Self {
        OverBound::new(
            Bound::TicketAssetRevisions,
            format!(
                "ticket asset {kind}/{name} has {max} revisions (removals included), the {} bound",
                Bound::TicketAssetRevisions.flag()
            ),
        )
    }

    /// A ticket with `live` live assets, at least `max`.
    pub(crate) fn ticket_assets(ticket_id: &str, live: i64, max: i64) -> Self {
        OverBound::new(
            Bound::TicketAssets,
            format!(
                "ticket \"{}\" has {live} assets, and the {} bound is {max}; remove one first",
                shown(ticket_id),
                Bound::TicketAssets.flag()
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ResourceKind;

    #[test]
    fn every_message_names_its_bound_and_flag() {
        let b = ResourceRef::new(ResourceKind::Build, "b-1");
        let cases = [
            (OverBound::stream_chunks("st_1", 3), "3 chunks"),
            (OverBound::stream_bytes("st_1", 90, 20, 100), "100-byte"),
            (OverBound::events(&b, 7), "build \"b-1\" holds 7 events"),
            (
                OverBound::artifact_revisions(&b, "plan", 4),
                "\"plan\" of build \"b-1\" has 4 revisions",
            ),
            (
                OverBound::ticket_asset_revisions("design", "home", 5),
                "design/home has 5 revisions",
            ),
            (
                OverBound::ticket_assets("AUT-1", 2, 2),
                "\"AUT-1\" has 2 assets",
            ),
        ];
        for (refusal, part) in cases {
            let message = refusal.to_string();
            assert!(message.contains(refusal.bound.flag()), "{message}");
            assert!(message.contains(part), "{message}");
            assert!(message.ends_with("nothing was written"), "{message}");
        }
    }
}
