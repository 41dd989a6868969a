//! The HTTP face: the route table (`routes`), each route behind its gate
//! (`gate`: identity, protocol, token) inside the process-wide middleware
//! (`middleware`: request id, log line, panic catch, concurrency and time
//! bounds, host check), compression outermost. While the server starts,
//! `starting` answers instead (`/readyz` says what the start waits for).
//! The web console (`console`, under `/console/`) is one more family of the
//! route table, for browsers: its pages use the same gate, state and store.
//!
//! Request order (spec sections 1, 7, 9): identity headers (409) → auth
//! (401/403) → resource lookup (404) → body (400/413) → catalog (422)
//! → one store transaction. Autobuild's hosted ticket operations
//! (`tickets`) follow the same order, their operation name standing for the
//! lookup.

mod accept;
mod artifacts;
mod auth;
mod builds;
mod compression;
pub mod console;
mod error;
mod event_reads;
mod events;
mod extract;
mod gate;
mod health;
mod identity;
mod leases;
mod lookup;
mod middleware;
mod path;
mod prepared;
mod readiness;
mod repos;
mod request_id;
mod resources;
mod response;
mod routes;
mod rows;
mod sessions;
mod starting;
mod state;
mod streams;
mod ticket_assets;
mod tickets;

use axum::Router;

pub use auth::{AuthRule, verify_token};
pub use error::{ApiError, ApiResult};
pub use extract::JsonBudget;
pub use gate::{Reach, Rule};
pub use response::{json, json_response, json_response_bytes};
pub use routes::{Declared, Options as RouteOptions, table as route_table};
pub use starting::{Starting, starting_router};
pub use state::{Access, AppState, Limits, SharedState};

/// The server's whole HTTP service over `state`.
pub fn router(state: SharedState) -> Router {
    let options = RouteOptions {
        test_clock: state.test_clock.is_some(),
        console: state.console.is_some(),
    };
    let routes = route_table(options).into_router(state.clone());
    let compress = state.limits.compress_min_bytes;
    let router = middleware::layer(routes, state);
    match compress {
        Some(min_bytes) => router.layer(compression::layer(min_bytes)),
        None => router,
    }
}
