//! The store's operations, written once for both backends
//! (docs/decisions.md, 16): one file per family, each implementing its
//! family's trait of [`Store`](super::api::Store) for the
//! [`Engine`](super::engine::Engine). An operation is its rule and its
//! statements: its body runs inside one write transaction
//! ([`Engine::write_op`](super::engine::Engine::write_op)) or one read,
//! reads and writes through the shared statements (`sql.rs`), and asks
//! the backend only for what its dialect does its own way
//! ([`WriteTx`]: row locks, fused statements, fast
//! paths).
//!
//! Every rule lives here and nowhere else: the conditional append, the
//! deposit composition, the lease truth table, stream close checks, chunk
//! pruning, artifact retention and the collection bounds
//! ([`Bounds`](super::bounds::Bounds)). A bound is checked where the
//! transaction holds the row that counts the collection; a refusal is an
//! error, which rolls the whole write back. An operation answers with its
//! outcome ([`Written`](super::engine::Written)): whether to keep its
//! changes, which resource's held reads to wake, what it pruned.
//!
//! The write operations run on the SQLite writer thread (synchronously:
//! rusqlite never pends) or in a PostgreSQL task of their own; what they
//! take is owned (`'static`), as they may outlive the request
//! (docs/decisions.md, 14).

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

use super::engine::WriteTx;
use super::error::{StoreError, StoreResult};
use super::sql::{self, ResourceRow};
use crate::protocol::ResourceRef;

/// The resource row, held until the transaction ends; `NotFound` without it.
async fn locked(tx: &mut impl WriteTx, r: &ResourceRef) -> StoreResult<ResourceRow> {
    tx.lock_resource(r)
        .await?
        .ok_or_else(|| StoreError::NotFound(r.clone()))
}

/// A time for a write that never precedes the resource's last write, so
/// `ts` and `updatedAt` are nondecreasing along a resource's sequence even
/// if the clock steps back. Lease decisions use the clock itself.
fn write_time(tx: &impl WriteTx, row: &ResourceRow) -> i64 {
    tx.now().max(row.record.updated_at)
}

/// The next value of a resource's child counter, which orders the sessions
/// and streams it creates (and stream closes) within a millisecond.
async fn next_child_order(tx: &mut impl WriteTx, parent: &ResourceRef) -> StoreResult<i64> {
    tx.first(sql::next_child_order(parent), |row| row.int(0))
        .await?
        .ok_or_else(|| StoreError::Corrupt("no child order assigned".into()))
}
