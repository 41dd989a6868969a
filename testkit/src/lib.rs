//! What abstore's tests share across the workspace's crates (the server's
//! unit and integration tests, the conformance crate's tests, `abstore-load`):
//!
//! - [`scratch_pg`]: scratch PostgreSQL databases, created and dropped in one
//!   place, and [`scratch_pg::for_test`] with the skip rule below.
//! - [`skip`]: a test that cannot run says so instead of passing silently.

pub mod scratch_pg;
pub mod skip;
