//! The backend contract suite: every case runs against SQLite in memory,
//! SQLite on disk and, when `ABSTORE_TEST_POSTGRES_URL` names a server, a
//! fresh PostgreSQL database. Protocol behaviour is also checked over HTTP
//! by the conformance suite; these cases pin the store's own guarantees,
//! concurrency above all.
//!
//! One file per family of cases; what they share (the stores, their
//! options and clock, the builders and readers) is `harness.rs`. This file
//! binds each case to each backend.

mod artifacts;
mod bounds;
mod concurrency;
mod derived;
mod events;
mod harness;
mod leases;
mod records;
mod replicas;
mod revocations;
mod sessions;
mod streams;
mod ticket_assets;

/// One test per case and backend, in modules named for the backend (a
/// case `family::case` is `<backend>::case`); the `@` form names the
/// modules and the options (the bounds' cases run with small bounds).
macro_rules! contract {
    ($($family:ident::$case:ident),* $(,)?) => {
        contract!(@ sqlite_memory, sqlite_file, postgres, super::harness::options(); $($family::$case),*);
    };
    (@ $memory:ident, $file:ident, $postgres:ident, $options:expr; $($family:ident::$case:ident),* $(,)?) => {
        mod $memory { $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)] async fn $case() { let h = super::harness::Harness::sqlite_memory($options).await; super::$family::$case(&h).await; h.finish().await; } )* }
        mod $file { $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)] async fn $case() { let h = super::harness::Harness::sqlite_file($options).await; super::$family::$case(&h).await; h.finish().await; } )* }
        mod $postgres { $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)] async fn $case() { if let Some(h) = super::harness::Harness::postgres($options).await { super::$family::$case(&h).await; h.finish().await; } } )* }
    };
}

contract!(
    records::records_and_sequences,
    events::conditional_append,
    events::session_conditional_append,
    derived::build_digests,
    derived::state_events,
    artifacts::artifacts_and_deposits,
    leases::leases,
    concurrency::concurrency,
    records::tails,
    streams::streams,
    streams::concurrent_chunks,
    sessions::sessions,
    sessions::session_creation_is_announced,
    concurrency::mixed_batches,
    leases::leases_by_the_clock,
    artifacts::retention,
    artifacts::retention_under_concurrent_reads,
    events::appends_behind_the_clock,
    ticket_assets::ticket_asset_revisions,
    ticket_assets::ticket_asset_tombstones,
    ticket_assets::ticket_asset_refused_answers,
    ticket_assets::ticket_asset_concurrency,
    revocations::revocations
);

contract!(@ bounds_sqlite_memory, bounds_sqlite_file, bounds_postgres, super::bounds::options();
    bounds::stream_chunk_bound,
    bounds::stream_byte_bound,
    bounds::event_bound,
    bounds::event_bound_under_concurrent_writers,
    bounds::artifact_revision_bound,
    bounds::artifact_revision_bound_under_concurrent_deposits,
    bounds::ticket_asset_revision_bound,
    bounds::ticket_asset_live_bound,
    bounds::ticket_asset_live_bound_under_concurrent_puts,
    bounds::stream_bounds_under_concurrent_appends,
    events::fast_append_agrees_with_the_rule
);

mod tickets;

contract!(@ tickets_sqlite_memory, tickets_sqlite_file, tickets_postgres, super::harness::options();
    tickets::ticket_create_get_round_trip,
    tickets::ticket_new_labels_on_create_and_update,
    tickets::ticket_concurrent_writes_share_a_new_label,
    tickets::ticket_get_unknown_is_null,
    tickets::ticket_claim_once_then_again_after_ready,
    tickets::ticket_transition_shows_in_get_and_listing,
    tickets::ticket_dependency_states_in_order,
    tickets::ticket_partial_updates,
    tickets::ticket_update_refuses_empty_and_state_patches,
    tickets::ticket_update_failures_name_and_change_nothing,
    tickets::ticket_blockers_round_trip_and_retries,
    tickets::ticket_add_blocker_refuses_self_and_unknown,
    tickets::ticket_blocker_writes_name_an_unknown_target,
    tickets::ticket_idempotent_create_adopts_the_original,
    tickets::ticket_teams_are_apart,
    tickets::ticket_lifecycle_and_context_states,
    tickets::ticket_create_refusals_write_nothing,
    tickets::ticket_listing_filters_and_order,
    tickets::ticket_text_is_kept_byte_for_byte,
    tickets::ticket_concurrent_claims_one_wins,
    tickets::ticket_bounds_at_their_edges,
    tickets::ticket_answers_within_the_response_ceiling,
    tickets::ticket_history_names_who_when_and_what
);
