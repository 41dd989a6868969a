//! Embedded migrations applied with rusqlite, recorded exactly as sqlx's
//! migrator records them (`_sqlx_migrations`: version, description,
//! installed_on, success, checksum = SHA-384 of the SQL, execution_time), so
//! a store migrated by earlier (sqlx-based) versions opens without
//! re-running anything and tools using sqlx accept ours.
//! `sqlx::migrate!` embeds the files and computes the checksums; only the
//! applying is done here, since sqlx's SQLite driver is no longer linked.
//!
//! No lock is needed between processes: a SQLite file is opened by one
//! process at a time (`PATH.lock`), `abstore migrate` included.

use std::time::Instant;

use anyhow::{Context as _, bail};
use rusqlite::{Connection, OptionalExtension as _, params};

use crate::store::migration::{Applied, MigrationReport};

/// The same DDL sqlx's SQLite migrator uses.
const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS _sqlx_migrations (
    version BIGINT PRIMARY KEY,
    description TEXT NOT NULL,
    installed_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
    success BOOLEAN NOT NULL,
    checksum BLOB NOT NULL,
    execution_time BIGINT NOT NULL
)";

/// Apply what is pending; the report's migrations (the backfill is the
/// caller's).
pub(super) fn run(conn: &mut Connection) -> anyhow::Result<MigrationReport> {
    let migrator = sqlx::migrate!("migrations/sqlite");
    conn.execute_batch(CREATE_TABLE)?;
    let mut report = MigrationReport::default();
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
            Some(_) => {
                report.already_applied += 1;
                continue;
            }
            None => {}
        }
        let started = Instant::now();
        let tx = conn.transaction()?;
        tx.execute_batch(migration.sql.as_str())
            .with_context(|| format!("applying migration {}", migration.version))?;
        let took = started.elapsed();
        let elapsed = i64::try_from(took.as_nanos()).unwrap_or(i64::MAX);
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
        report.applied.push(Applied {
            version: migration.version,
            description: migration.description.to_string(),
            took: started.elapsed().max(took),
            retries: 0,
        });
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    /// The rows sqlx 0.9's SQLite migrator wrote for these files (read back
    /// from a database the sqlx-based server migrated; later migrations: the
    /// SHA-384 of the file, which is what sqlx records).
    const SQLX_CHECKSUMS: [(i64, &str, &str); 12] = [
        (
            1,
            "initial",
            "49FAB207C5C9C776B7325DD150A2F30C30D8CDFC2678890FE63D86D034A703763EC3ED7FF8B976C6B0649D9063E4AFB0",
        ),
        (
            2,
            "streams",
            "BFFC6667389704D11376D7A781845C82BEAF4A1A67CD78C45A051B19A065CAB50ABFEE0A2CB53A4CB04FD1463AD2DE11",
        ),
        (
            3,
            "sessions",
            "2A97F08AB73D81BAD4CB787132A9010E853F3E5DA48F0F60572BD1DF8F2E5332FFF84DD34A1B74A9A8DB3466B438895C",
        ),
        (
            4,
            "builds by creation",
            "D17419F0CB30680F8940DF911F129E096994346DF4841E08D0820D3AFE3531C364BD6895F7A8D892EDD8A3E6B60B470E",
        ),
        (
            5,
            "event types",
            "3AEC6BC5004DB88BE79E1F34F2E6361179064D1376C7D27375B6F14F021FEA9474EE3DA3BE2E5368B7D4C78495E6D56A",
        ),
        (
            6,
            "ticket assets",
            "A3BE1B2B174AD48138B3D92CA48E9477FEB224C41D78FF95B27A48C82E18C176C51BD5C16589A5F3017023D705490C99",
        ),
        (
            7,
            "revoked tokens",
            "5DA5E76CC43BAA0C8E898063ED0902F7BF2C5790B2D70DC7CDE7DC06E410D70F78B965C47257CF57A8C7A9D923F8464C",
        ),
        (
            8,
            "stream bytes",
            "63F4B44D069908B9ECCE19C9319F068CA7F029283141C8DA84B41F4C0A70BF35E40EEBE01640A527920F5918120BD895",
        ),
        (
            9,
            "tickets",
            "9FA7BC2AA349D5883E85DA07511830A61589EFF23C888AB89DB2474DCC75DE5BA3F8D3981FF930BC65501E00AF229A57",
        ),
        (
            10,
            "ticket history",
            "072B194148D9F053AF446079661816779091DD1AC351E15EABB172A9FA0F8BD357F87C32E5181F0E6C47FF6E3E090714",
        ),
        (
            11,
            "event type column",
            "B11789C56A78676811F0E976C6A70E4E6C1D0D74020A51582D3A3864F85AEEB9AE047948FEFDBDBA7F3D8766540FF516",
        ),
        (
            12,
            "event type index",
            "4BDA2BD36FBE6F43752C73E07083EB75E347A3E17FC2A61E239C2A9ED3EDECCE57F72E56B4AAC72918922AE82EF3CE17",
        ),
    ];

    fn recorded(conn: &Connection) -> Vec<(i64, String, String, bool)> {
        let mut statement = conn
            .prepare(
                "SELECT version, description, hex(checksum), success FROM _sqlx_migrations ORDER BY version",
            )
            .unwrap();
        statement
            .query_map([], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    #[test]
    fn records_what_sqlx_records_and_never_reruns() {
        let mut conn = Connection::open_in_memory().unwrap();
        super::run(&mut conn).unwrap();
        let expected: Vec<(i64, String, String, bool)> = SQLX_CHECKSUMS
            .iter()
            .map(|(v, d, c)| (*v, (*d).to_owned(), (*c).to_owned(), true))
            .collect();
        assert_eq!(recorded(&conn), expected);
        // A second open (as over a database sqlx migrated) runs nothing:
        // re-running 0001 would fail on the existing tables.
        super::run(&mut conn).unwrap();
        assert_eq!(recorded(&conn), expected);
    }

    #[test]
    fn refuses_a_database_migrated_with_other_sql_or_left_dirty() {
        let mut conn = Connection::open_in_memory().unwrap();
        super::run(&mut conn).unwrap();
        conn.execute(
            "UPDATE _sqlx_migrations SET checksum = x'00' WHERE version = 2",
            [],
        )
        .unwrap();
        let err = super::run(&mut conn).unwrap_err().to_string();
        assert!(
            err.contains("migration 2 was applied with different SQL"),
            "{err}"
        );
        conn.execute(
            "UPDATE _sqlx_migrations SET success = FALSE WHERE version = 2",
            [],
        )
        .unwrap();
        let err = super::run(&mut conn).unwrap_err().to_string();
        assert!(err.contains("dirty"), "{err}");
    }
}
