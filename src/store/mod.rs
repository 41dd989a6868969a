//! Persistence: the [`Store`] trait (the BuildStore operations in domain
//! types) and its two backends, SQLite and PostgreSQL. This file is the
//! folder's face: it names the parts and hands on what the rest of the
//! crate uses; nothing in the folder imports it.
//!
//! Invariants every backend keeps (docs/decisions.md, 1–4):
//! - each operation is one transaction; a failed one consumes no sequence
//!   and no revision;
//! - counters live on rows (`resources.last_seq`, `artifact_heads`), bumped
//!   inside the writing transaction while the resource row is held;
//! - every stored time comes from the injected clock, read inside the
//!   transaction so times never run backwards along a resource's sequence;
//! - event envelopes are stored as the JSON text that is later served
//!   (`envelope.rs`);
//! - artifact retention ([`retention`]) prunes inside the put or deposit
//!   transaction that exceeds a bound, never elsewhere;
//! - ticket-asset revisions ([`assets`]) are counted on `ticket_asset_heads`
//!   rows, bumped inside the writing transaction like artifact heads;
//! - every collection a client grows has a bound ([`bounds`]; the hosted
//!   tickets' in [`crate::tickets::bounds`]), checked in the writing
//!   transaction: a write over it writes nothing.
//!
//! The parts, from the interface down:
//! - `api.rs`: the `Store` trait and what its operations take and answer;
//!   `error.rs`: why one did not happen;
//! - `open.rs`: opening the backend a [`DatabaseUrl`] names, with
//!   [`StoreOptions`] (`options.rs`); [`migration`]: what migrating means
//!   to the callers (settings, report, a start's progress);
//! - `engine.rs`: the one `Store` implementation, over a backend; what
//!   every operation shares (the commit's aftermath, a streamed read's
//!   loop);
//! - one folder per family, each its rule (`mod.rs`: the family's trait of
//!   `Store` for the engine) beside its statements and the decoding of its
//!   rows (`sql.rs`): `resources/` (what builds, repositories and sessions
//!   share: the row, its lock, tails, health), `events/` (the append rule,
//!   and beside it PostgreSQL's one-statement append, `fast_append.rs`),
//!   `builds/`, `repos/`, `sessions/`, `leases/`, `artifacts/` (with
//!   retention's pruning), `streams/`, `revocations/`, `ticket_assets/`,
//!   `tickets/` (Autobuild's hosted tickets; their rules are
//!   `crate::tickets`'), `console/` (the web console's bounded
//!   listings); `listing.rs` picks a streamed read's statement
//!   from its family; `statement.rs`: how a statement reaches a driver;
//! - [`sqlite`], [`postgres`]: how each database runs the statements, and
//!   what only its dialect does (row locks, fused statements, fast paths);
//! - `records.rs`, [`assets`], [`rows`] (streamed reads), [`bounds`],
//!   [`retention`], `envelope.rs`: the values the operations deal in.

mod api;
pub mod assets;
pub mod bounds;
mod engine;
mod envelope;
mod error;
mod fill_types;
mod listing;
pub mod migration;
mod open;
mod options;
pub mod postgres;
mod record_cache;
mod records;
pub mod retention;
pub mod rows;
pub mod sqlite;
mod statement;
pub mod url;

// The families: each one's rule, statements and rows.
mod artifacts;
mod builds;
mod console;
mod events;
mod leases;
mod repos;
mod resources;
mod revocations;
mod sessions;
mod streams;
mod ticket_assets;
mod tickets;

#[cfg(test)]
mod contract;

pub use api::{
    Artifacts, Builds, CloseOutcome, ConsoleReads, Events, Leases, MakeEvent, MakeFirstEvent,
    NewArtifact, NewEvent, PoolStats, Repos, Revocations, Sessions, Store, Streams, TicketAssets,
    Tickets,
};
pub use assets::{
    AnswerCheck, AssetEntry, AssetKey, NewTicketAsset, TicketAssetMeta, TicketAssetSummary,
};
pub use bounds::{Bound, Bounds, OverBound};
pub use builds::{DigestEvent, LogSpan};
pub use error::{DatabaseError, DatabaseFailure, StoreError, StoreResult};
pub use migration::{MigrationReport, MigrationSettings, Phase, Progress};
pub use options::{DEFAULT_BUILD_RECORDS_CACHE_BYTES, StoreOptions};
pub use record_cache::BuildRecordCache;
pub use records::{
    ArtifactMeta, BuildDigest, DIGEST_TYPES, Lease, Observation, Record, ResourceSummary,
    Revocation, STREAM_FORMAT, StoredArtifact, StreamArtifact, StreamRecord, Terminal,
    TicketComment,
};
pub use rows::{Listing, Rows};
pub use url::DatabaseUrl;
