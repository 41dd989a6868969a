//! What migrating a store means to its callers, whichever the backend (the
//! how is each backend's: `sqlite/migrate.rs`, `postgres/migrate/`):
//!
//! - [`MigrationSettings`]: the bounds a migration runs within (rows per
//!   backfill transaction, how long to wait for another process's
//!   migration, how long a statement may queue for a table lock);
//! - [`MigrationReport`]: what was done and how long each step took, which
//!   `abstore migrate` prints and `serve` logs;
//! - [`Progress`] and [`Phase`]: how far a start has got, which `/readyz`
//!   answers while the server starts (a replica waiting for another's
//!   migration is not ready, and says why).

use std::fmt;
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// The bounds of a migration (`--migrate-batch-rows`,
/// `--migration-wait-seconds`, `--migration-lock-timeout-ms`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MigrationSettings {
    /// Rows a backfill converts per transaction (migration 0011 fills the
    /// `type` of older events this many at a time).
    pub batch_rows: u32,
    /// How long a start (or `abstore migrate`) waits for another process's
    /// migration to finish, and for a migration's table locks, before it
    /// gives up naming what it waited for.
    pub wait: Duration,
    /// PostgreSQL: how long one migration statement may queue for a table
    /// lock (`lock_timeout`) before the migration is rolled back and tried
    /// again. Writers queue behind a statement waiting for a lock, so this
    /// is the longest a migration makes an append wait for its turn.
    pub lock_timeout: Duration,
}

impl Default for MigrationSettings {
    fn default() -> Self {
        MigrationSettings {
            batch_rows: 10_000,
            wait: Duration::from_secs(600),
            lock_timeout: Duration::from_millis(50),
        }
    }
}

/// One migration applied by this process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    pub version: i64,
    pub description: String,
    /// From its first statement to its commit (the last attempt's, when a
    /// table lock was not granted in time and it was tried again).
    pub took: Duration,
    /// Attempts rolled back because a table lock was not granted within
    /// `lock_timeout`.
    pub retries: u32,
}

/// What one migration run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MigrationReport {
    /// Migrations applied now, in order.
    pub applied: Vec<Applied>,
    /// Migrations found already applied.
    pub already_applied: usize,
    /// Applied migrations this version does not know: a newer version
    /// migrated the store (expand first: this version keeps working on it).
    pub unknown: Vec<i64>,
    /// Events whose type the backfill of migration 0011 filled, and how
    /// long it took; `None` when there was nothing left to fill.
    pub filled: Option<(u64, Duration)>,
    /// The backfill ran after the applied migrations up to this version,
    /// before the later ones; `None`: after all of them.
    pub filled_after: Option<i64>,
    /// How long this process waited for another's migration (PostgreSQL).
    pub waited: Duration,
}

impl MigrationReport {
    /// The lines `abstore migrate` prints: one per migration applied, the
    /// backfill, then a summary.
    pub fn lines(&self) -> Vec<String> {
        let applied = |m: &Applied| {
            let retries = match m.retries {
                0 => String::new(),
                1 => " (after 1 retry for a table lock)".to_owned(),
                n => format!(" (after {n} retries for a table lock)"),
            };
            format!(
                "applied {:04} {} in {}{retries}",
                m.version,
                m.description,
                took(m.took)
            )
        };
        // In the order they ran.
        let split = self
            .applied
            .partition_point(|m| self.filled_after.is_none_or(|after| m.version <= after));
        let mut lines: Vec<String> = self.applied[..split].iter().map(applied).collect();
        if let Some((events, duration)) = self.filled {
            lines.push(format!(
                "filled the type of {events} events (migration 0011) in {}",
                took(duration)
            ));
        }
        lines.extend(self.applied[split..].iter().map(applied));
        let mut summary = format!(
            "migrations: {} applied now, {} already applied",
            self.applied.len(),
            self.already_applied
        );
        if !self.unknown.is_empty() {
            let versions: Vec<String> = self.unknown.iter().map(|v| format!("{v:04}")).collect();
            summary.push_str(&format!(
                ", {} from a newer version ({})",
                self.unknown.len(),
                versions.join(", ")
            ));
        }
        if !self.waited.is_zero() {
            summary.push_str(&format!(
                "; waited {} for another process's migration",
                took(self.waited)
            ));
        }
        lines.push(summary);
        lines
    }

    /// Log what was done (`serve`'s start).
    pub fn log(&self) {
        for m in &self.applied {
            tracing::info!(
                version = m.version,
                description = %m.description,
                took_ms = m.took.as_millis(),
                retries = m.retries,
                "migration applied"
            );
        }
        if let Some((events, duration)) = self.filled {
            tracing::info!(
                events,
                took_ms = duration.as_millis(),
                "event types filled (migration 0011)"
            );
        }
        if !self.unknown.is_empty() {
            tracing::warn!(
                versions = ?self.unknown,
                "the database has migrations this version does not know (a newer version applied them); serving on it, as the expand-then-contract rule allows (docs/decisions.md)"
            );
        }
    }
}

/// A duration as people read it: `850 ms`, `12.4 s`.
fn took(duration: Duration) -> String {
    if duration < Duration::from_secs(1) {
        format!("{} ms", duration.as_millis())
    } else {
        format!("{:.1} s", duration.as_secs_f64())
    }
}

/// Who holds PostgreSQL's migration lock, as `pg_locks` and
/// `pg_stat_activity` tell it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockHolder {
    /// The holder's PostgreSQL backend process id.
    pub pid: i32,
    /// Its `application_name` (abstore names its migration connection
    /// after the host and process: `abstore migrations (host H, pid P)`).
    pub application: String,
    /// How long ago its connection was opened (a migration's connection is
    /// opened for it, so this is about how long it has been migrating).
    pub connected_for: Option<Duration>,
}

impl fmt::Display for LockHolder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "PostgreSQL backend {} (application_name {:?}",
            self.pid, self.application
        )?;
        if let Some(age) = self.connected_for {
            write!(f, ", connected {} ago", took(age))?;
        }
        write!(f, ")")
    }
}

/// Where a start is. Each waiting phase keeps when it began, so its text
/// says for how long.
#[derive(Clone, Debug)]
pub enum Phase {
    /// Connecting to the database.
    Connecting,
    /// Another process holds PostgreSQL's migration lock: it is migrating,
    /// and this one waits for it to finish.
    WaitingForLock {
        holder: Option<LockHolder>,
        since: Instant,
    },
    /// `--no-migrate`: waiting for another process (`abstore migrate`, a
    /// replica that migrates) to apply what this version needs.
    WaitingForMigrations {
        /// What is missing, in words (`migrations 0011, 0012`, `the event
        /// type backfill`).
        missing: String,
        holder: Option<LockHolder>,
        since: Instant,
    },
    /// Applying a migration.
    Applying {
        version: i64,
        description: String,
        since: Instant,
    },
    /// A migration's statement was not granted a table lock in time and
    /// rolled back; it is tried again.
    RetryingForTableLock {
        version: i64,
        retries: u32,
        since: Instant,
    },
    /// Filling the type of older events (migration 0011's backfill).
    Filling { events: u64, since: Instant },
    /// The store is open; the rest of the start (revoked tokens, blobs).
    Finishing,
}

impl Phase {
    /// A stable name for the phase (`/readyz`'s `starting.phase`).
    pub fn code(&self) -> &'static str {
        match self {
            Phase::Connecting => "connecting",
            Phase::WaitingForLock { .. } => "waiting-for-migration",
            Phase::WaitingForMigrations { .. } => "waiting-for-migrations",
            Phase::Applying { .. } | Phase::RetryingForTableLock { .. } => "migrating",
            Phase::Filling { .. } => "backfilling",
            Phase::Finishing => "finishing",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let holder = |holder: &Option<LockHolder>| match holder {
            Some(holder) => format!("the migration lock is held by {holder}"),
            None => "the migration lock is free".to_owned(),
        };
        match self {
            Phase::Connecting => write!(f, "connecting to the database"),
            Phase::WaitingForLock { holder: h, since } => write!(
                f,
                "waiting {} for another process's migration to finish ({})",
                took(since.elapsed()),
                holder(h)
            ),
            Phase::WaitingForMigrations {
                missing,
                holder: h,
                since,
            } => write!(
                f,
                "waiting {} for {missing} to be applied by another process (started with --no-migrate; {})",
                took(since.elapsed()),
                holder(h)
            ),
            Phase::Applying {
                version,
                description,
                since,
            } => write!(
                f,
                "applying migration {version:04} {description} (for {})",
                took(since.elapsed())
            ),
            Phase::RetryingForTableLock {
                version,
                retries,
                since,
            } => write!(
                f,
                "applying migration {version:04}: its table locks were not granted within --migration-lock-timeout-ms; {retries} attempts rolled back in {}, trying again",
                took(since.elapsed())
            ),
            Phase::Filling { events, since } => write!(
                f,
                "filling the type of older events (migration 0011): {events} so far, for {}",
                took(since.elapsed())
            ),
            Phase::Finishing => write!(f, "finishing the start (revoked tokens, blob store)"),
        }
    }
}

/// The start's [`Phase`], set by whoever is at work and read by `/readyz`
/// while the server starts. Cloning shares it.
#[derive(Clone, Debug)]
pub struct Progress(watch::Sender<Phase>);

impl Default for Progress {
    fn default() -> Self {
        Progress(watch::Sender::new(Phase::Connecting))
    }
}

impl Progress {
    pub fn set(&self, phase: Phase) {
        self.0.send_replace(phase);
    }

    /// The phase now.
    pub fn phase(&self) -> Phase {
        self.0.borrow().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `abstore migrate`'s output: one line per migration, the backfill,
    /// and the summary naming what was waited for.
    #[test]
    fn the_report_names_every_step_and_its_time() {
        let report = MigrationReport {
            applied: vec![
                Applied {
                    version: 11,
                    description: "event type column".into(),
                    took: Duration::from_millis(35),
                    retries: 2,
                },
                Applied {
                    version: 12,
                    description: "event type index".into(),
                    took: Duration::from_millis(1250),
                    retries: 0,
                },
            ],
            already_applied: 10,
            unknown: vec![13],
            filled: Some((1_000_000, Duration::from_secs(41))),
            filled_after: Some(11),
            waited: Duration::from_millis(300),
        };
        assert_eq!(
            report.lines(),
            [
                "applied 0011 event type column in 35 ms (after 2 retries for a table lock)",
                "filled the type of 1000000 events (migration 0011) in 41.0 s",
                "applied 0012 event type index in 1.2 s",
                "migrations: 2 applied now, 10 already applied, 1 from a newer version (0013); waited 300 ms for another process's migration",
            ]
        );
        let nothing = MigrationReport {
            already_applied: 12,
            ..MigrationReport::default()
        };
        assert_eq!(
            nothing.lines(),
            ["migrations: 0 applied now, 12 already applied"]
        );
    }

    /// The text `/readyz` gives names the lock's holder.
    #[test]
    fn a_waiting_phase_names_the_holder() {
        let phase = Phase::WaitingForLock {
            holder: Some(LockHolder {
                pid: 4242,
                application: "abstore migrations (host a, pid 7)".into(),
                connected_for: Some(Duration::from_secs(3)),
            }),
            since: Instant::now(),
        };
        let text = phase.to_string();
        assert!(
            text.starts_with("waiting 0 ms for another process's migration"),
            "{text}"
        );
        assert!(
            text.contains("held by PostgreSQL backend 4242 (application_name \"abstore migrations (host a, pid 7)\", connected 3.0 s ago)"),
            "{text}"
        );
        assert_eq!(phase.code(), "waiting-for-migration");
    }
}
