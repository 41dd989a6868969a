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
//! - `engine.rs` and `ops/`: the one `Store` implementation, every rule
//!   written once; `sql.rs`: the statements both backends run,
//!   `statement.rs`: how a statement reaches a driver;
//! - [`sqlite`], [`postgres`]: how each database runs them;
//! - `tickets/`: Autobuild's hosted tickets' transactions and statements
//!   (their rules are `crate::tickets`'), run by `ops/tickets.rs`;
//! - `records.rs`, [`assets`], [`rows`] (streamed reads), [`bounds`],
//!   [`retention`], `envelope.rs`: the values the operations deal in.

mod api;
pub mod assets;
pub mod bounds;
mod engine;
mod envelope;
mod error;
mod fill_types;
pub mod migration;
mod open;
mod ops;
mod options;
pub mod postgres;
mod records;
pub mod retention;
pub mod rows;
mod sql;
pub mod sqlite;
mod statement;
mod tickets;
pub mod url;

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
pub use error::{DatabaseError, DatabaseFailure, StoreError, StoreResult};
pub use migration::{MigrationReport, MigrationSettings, Phase, Progress};
pub use options::StoreOptions;
pub use records::{
    ArtifactMeta, BuildDigest, DIGEST_TYPES, Lease, Observation, Record, ResourceSummary,
    Revocation, STREAM_FORMAT, StoredArtifact, StreamArtifact, StreamRecord, Terminal,
    TicketComment,
};
pub use rows::{Listing, Rows};
pub use url::DatabaseUrl;
