//! Scratch PostgreSQL databases for tests ([`scratch_pg::ScratchDb`]) on the
//! server `ABSTORE_TEST_POSTGRES_URL` names, with the skip policy of
//! [`crate::skip`].

pub use scratch_pg::ScratchDb;

/// The variable naming the PostgreSQL server tests create databases on.
pub const TEST_URL_VAR: &str = "ABSTORE_TEST_POSTGRES_URL";

/// A fresh database for the test `what`; `None` after recording the skip
/// when `ABSTORE_TEST_POSTGRES_URL` is unset (a panic under `CI=true`).
pub async fn for_test(what: &str, prefix: &str) -> Option<ScratchDb> {
    let Ok(admin_url) = std::env::var(TEST_URL_VAR) else {
        crate::skip::skipped(what, &format!("set {TEST_URL_VAR}"));
        return None;
    };
    Some(
        ScratchDb::create(&admin_url, prefix)
            .await
            .unwrap_or_else(|e| panic!("{e}")),
    )
}
