//! Scratch PostgreSQL databases: the one place that creates and drops them,
//! shared by the store contract suite, the integration tests and
//! `abstore-load`; tests get theirs from [`for_test`], which keeps the skip
//! rule of [`crate::skip`].

use std::hash::{BuildHasher as _, Hasher as _};
use std::sync::atomic::{AtomicU64, Ordering};

use sqlx::{AssertSqlSafe, Connection as _, PgConnection};

/// A database created for one test or run; [`ScratchDb::drop_db`] removes it.
#[derive(Clone, Debug)]
pub struct ScratchDb {
    /// The URL of the server's database this one was created from, used to
    /// drop it.
    pub admin_url: String,
    /// The database's name: `<prefix>_<16 hex digits>`.
    pub name: String,
    /// The URL of the new database.
    pub url: String,
}

impl ScratchDb {
    /// Create a fresh `<prefix>_<random>` database on the server of
    /// `admin_url` (a URL naming an existing database, e.g. `…/postgres`).
    pub async fn create(admin_url: &str, prefix: &str) -> Result<ScratchDb, String> {
        let name = format!("{prefix}_{:016x}", random());
        let mut url = url::Url::parse(admin_url).map_err(|e| format!("{admin_url}: {e}"))?;
        url.set_path(&format!("/{name}"));
        let mut conn = PgConnection::connect(admin_url)
            .await
            .map_err(|e| format!("connecting to {admin_url}: {e}"))?;
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .map_err(|e| format!("CREATE DATABASE {name}: {e}"))?;
        conn.close().await.ok();
        Ok(ScratchDb {
            admin_url: admin_url.to_owned(),
            name,
            url: url.to_string(),
        })
    }

    /// Drop the database, forcing out connections still open on it.
    pub async fn drop_db(self) -> Result<(), String> {
        let mut conn = PgConnection::connect(&self.admin_url)
            .await
            .map_err(|e| format!("connecting to {}: {e}", self.admin_url))?;
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        sqlx::raw_sql(AssertSqlSafe(sql))
            .execute(&mut conn)
            .await
            .map_err(|e| format!("dropping {}: {e}", self.name))?;
        conn.close().await.ok();
        Ok(())
    }
}

/// 64 bits unique within the process and unlikely to repeat across
/// processes: a per-process random seed, the time and a counter, hashed.
fn random() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hasher.write_u128(nanos);
    hasher.write_u32(std::process::id());
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.finish()
}

/// The variable naming the PostgreSQL server tests create databases on.
pub const TEST_URL_VAR: &str = "ABSTORE_TEST_POSTGRES_URL";

/// A fresh database for the test `what`; `None` after recording the skip
/// when `ABSTORE_TEST_POSTGRES_URL` is unset (a failure under `CI=true` and
/// under scripts/test).
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
