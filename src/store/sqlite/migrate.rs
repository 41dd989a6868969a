//! Embedded migrations applied with rusqlite, recorded exactly as sqlx's
//! migrator records them (`_sqlx_migrations`: version, description,
//! installed_on, success, checksum = SHA-384 of the SQL, execution_time), so
//! a store migrated by earlier (sqlx-based) versions opens without
//! re-running anything and tools using sqlx accept ours.
//! `sqlx::migrate!` embeds the files and computes the checksums; only the
//! applying is done here, since sqlx's SQLite driver is no longer linked.

use std::time::Instant;

use anyhow::{Context as _, bail};
use rusqlite::{Connection, OptionalExtension as _, params};

/// The same DDL sqlx's SQLite migrator uses.
const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS _sqlx_migrations (
    version BIGINT PRIMARY KEY,
    description TEXT NOT NULL,
    installed_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
    success BOOLEAN NOT NULL,
    checksum BLOB NOT NULL,
    execution_time BIGINT NOT NULL
)";

pub(super) fn run(conn: &mut Connection) -> anyhow::Result<()> {
    let migrator = sqlx::migrate!("migrations/sqlite");
    conn.execute_batch(CREATE_TABLE)?;
    for migration in migrator.iter() {
        if migration.migration_type.is_down_migration() {
            continue;
        }
        let applied: Option<(bool, Vec<u8>)> = conn
            .query_row(
                "SELECT success, checksum FROM _sqlx_migrations WHERE version = ?1",
                params![migration.version],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()?;
        match applied {
            Some((false, _)) => bail!(
                "migration {} was left half-applied (dirty); repair the database",
                migration.version
            ),
            Some((true, checksum)) if checksum != *migration.checksum => bail!(
                "migration {} was applied with different SQL than this version embeds",
                migration.version
            ),
            Some(_) => continue,
            None => {}
        }
        let started = Instant::now();
        let tx = conn.transaction()?;
        tx.execute_batch(migration.sql.as_str())
            .with_context(|| format!("applying migration {}", migration.version))?;
        let elapsed = i64::try_from(started.elapsed().as_nanos()).unwrap_or(i64::MAX);
        tx.execute(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES (?1, ?2, TRUE, ?3, ?4)",
            params![
                migration.version,
                migration.description.as_ref(),
                migration.checksum.as_ref(),
                elapsed
            ],
        )?;
        tx.commit()?;
    }
    Ok(())
}
