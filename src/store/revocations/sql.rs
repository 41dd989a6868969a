//! Revoked tokens' statements and rows.

use crate::store::error::StoreResult;
use crate::store::records::Revocation;
use crate::store::statement::{Columns, Fixed, args, statement};

/// Every revoked token, by digest ([`revocation_row`] reads them).
pub(crate) fn select_revocations() -> Fixed<'static, 0> {
    const SQL: &str =
        "SELECT digest, expires_at, revoked_at, note FROM revoked_tokens ORDER BY digest";
    statement(SQL, [])
}

/// A row of [`select_revocations`].
pub(crate) fn revocation_row(row: &(impl Columns + ?Sized)) -> StoreResult<Revocation> {
    Ok(Revocation {
        digest: row.text(0)?,
        expires_at: row.optional_int(1)?,
        revoked_at: row.int(2)?,
        note: row.optional_text(3)?,
    })
}

/// A revoked token; nothing when its digest is already revoked (the first
/// revocation, its expiry and note, stand).
pub(crate) fn insert_revocation(revocation: &Revocation) -> Fixed<'_, 4> {
    const SQL: &str = "INSERT INTO revoked_tokens (digest, expires_at, revoked_at, note) \
         VALUES ($1, $2, $3, $4) ON CONFLICT (digest) DO NOTHING";
    statement(
        SQL,
        args![
            &revocation.digest,
            revocation.expires_at,
            revocation.revoked_at,
            revocation.note.as_deref()
        ],
    )
}

/// The revocations of tokens expired by `$1`.
pub(crate) fn prune_revocations(now: i64) -> Fixed<'static, 1> {
    const SQL: &str =
        "DELETE FROM revoked_tokens WHERE expires_at IS NOT NULL AND expires_at <= $1";
    statement(SQL, args![now])
}
