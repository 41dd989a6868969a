//! What the database's schema has of what this version embeds: read from
//! sqlx's `_sqlx_migrations` table (and migration 0011's backfill marker)
//! without taking any lock, so a process can tell "nothing to do" without
//! queueing behind another's migration.

use std::collections::HashMap;

use anyhow::bail;
use sqlx::PgConnection;
use sqlx::migrate::{Migration, Migrator};

use super::TABLE;
use crate::store::postgres::fill_types;

/// sqlx's records of applied migrations (the table is [`TABLE`]).
const RECORDED: &str = "SELECT version, success, checksum FROM _sqlx_migrations ORDER BY version";

/// The schema compared with the embedded migrations.
pub(super) struct Schema<'m> {
    /// Embedded migrations not applied yet, in order.
    pub pending: Vec<&'m Migration>,
    /// Embedded migrations applied (with the same checksum).
    pub applied: usize,
    /// Applied migrations this version does not embed (a newer version's).
    pub unknown: Vec<i64>,
    /// Whether migration 0011's backfill has finished (false while 0011 is
    /// pending).
    pub filled: bool,
}

impl Schema<'_> {
    /// Everything this version needs is there.
    pub fn complete(&self) -> bool {
        self.pending.is_empty() && self.filled
    }

    /// What is missing, in words: `migrations 0011, 0012 and the event
    /// type backfill`.
    pub fn missing(&self) -> String {
        let mut parts = Vec::new();
        match self.pending.as_slice() {
            [] => {}
            [one] => parts.push(format!("migration {:04}", one.version)),
            many => parts.push(format!(
                "migrations {}",
                many.iter()
                    .map(|m| format!("{:04}", m.version))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
        if !self.filled {
            parts.push("the event type backfill (migration 0011)".to_owned());
        }
        parts.join(" and ")
    }
}

/// Read the schema's state. A migration recorded as failed (dirty) or
/// applied with other SQL than this version embeds is an error: never
/// edit an applied migration (sqlx checksums them).
pub(super) async fn read<'m>(
    conn: &mut PgConnection,
    migrator: &'m Migrator,
) -> anyhow::Result<Schema<'m>> {
    let exists: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
        .fetch_one(&mut *conn)
        .await?;
    let recorded: Vec<(i64, bool, Vec<u8>)> = if exists {
        sqlx::query_as(RECORDED).fetch_all(&mut *conn).await?
    } else {
        Vec::new()
    };
    if let Some((version, ..)) = recorded.iter().find(|(_, success, _)| !success) {
        bail!(
            "migration {version:04} is recorded as failed half-way (dirty) in {TABLE}; repair the database by hand"
        );
    }
    let recorded: HashMap<i64, Vec<u8>> = recorded
        .into_iter()
        .map(|(version, _, checksum)| (version, checksum))
        .collect();
    let embedded: Vec<&Migration> = migrator
        .iter()
        .filter(|m| !m.migration_type.is_down_migration())
        .collect();
    let mut pending = Vec::new();
    let mut applied = 0;
    for migration in &embedded {
        match recorded.get(&migration.version) {
            Some(checksum) if *checksum != *migration.checksum => bail!(
                "migration {:04} was applied with other SQL than this version embeds (its checksum differs)",
                migration.version
            ),
            Some(_) => applied += 1,
            None => pending.push(*migration),
        }
    }
    let mut unknown: Vec<i64> = recorded
        .keys()
        .copied()
        .filter(|version| !embedded.iter().any(|m| m.version == *version))
        .collect();
    unknown.sort_unstable();
    let filled = fill_types::filled(conn).await?;
    Ok(Schema {
        pending,
        applied,
        unknown,
        filled,
    })
}
