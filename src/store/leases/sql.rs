//! Leases' statements: a lease set, extended or cleared on its resource's
//! row (the row itself is `resources::sql`'s).

use crate::protocol::ResourceRef;
use crate::store::statement::{Fixed, args, statement};

pub(crate) fn set_lease<'a>(
    r: &'a ResourceRef,
    holder: &'a str,
    expires_at: i64,
    ttl_ms: i64,
    now: i64,
) -> Fixed<'a, 6> {
    const SQL: &str = "UPDATE resources SET lease_holder = $3, lease_expires_at = $4, \
         lease_ttl_ms = $5, updated_at = $6 WHERE kind = $1 AND id = $2";
    statement(
        SQL,
        args![r.kind.tag(), &r.id, holder, expires_at, ttl_ms, now],
    )
}

pub(crate) fn extend_lease(
    r: &ResourceRef,
    expires_at: i64,
    heartbeat: i64,
    now: i64,
) -> Fixed<'_, 5> {
    const SQL: &str = "UPDATE resources SET lease_expires_at = $3, heartbeat_at = $4, \
         updated_at = $5 WHERE kind = $1 AND id = $2";
    statement(SQL, args![r.kind.tag(), &r.id, expires_at, heartbeat, now])
}

pub(crate) fn clear_lease(r: &ResourceRef, now: i64) -> Fixed<'_, 3> {
    const SQL: &str = "UPDATE resources SET lease_holder = NULL, lease_expires_at = NULL, \
         lease_ttl_ms = NULL, updated_at = $3 WHERE kind = $1 AND id = $2";
    statement(SQL, args![r.kind.tag(), &r.id, now])
}
