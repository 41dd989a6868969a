//! Moving whole stores: portable archives (`export`, `verify`, `import`),
//! online SQLite backups (`backup`) and blob garbage collection (`gc`).
//! docs/operations.md describes the commands and the archive format; their
//! flags live with the rest of the command line (`src/cli/archive.rs`).
//!
//! - [`format`](mod@format): the archive's records, their order and canonical form.
//! - [`reader`]: strict line framing and record parsing.
//! - [`export`], [`verify`], [`import`], [`backup`], [`gc`]: one command each.
//! - [`autobuild`]: Autobuild's own stores as a source of archive records
//!   (`export|import --from autobuild-local|autobuild-postgres`).
//! - [`db`]: direct schema access (rusqlite / sqlx) to the store a
//!   [`DatabaseUrl`](crate::store::DatabaseUrl) names.
//! - [`output`]: write-to-temporary, fsync, rename.
//! - [`progress`]: progress lines on stderr.
//! - [`checks`]: the write routes' checks on every row an import carries.
//! - [`source_files`]: reading a source store's files (regular files only,
//!   bounded reads); [`temp`]: private temporary files, removed however the
//!   command ends.

pub mod autobuild;
pub mod backup;
pub mod checks;
pub mod db;
pub mod export;
pub mod format;
pub mod gc;
pub mod import;
pub mod output;
pub mod progress;
pub mod reader;
pub mod source_files;
pub mod temp;
pub mod verify;

#[cfg(test)]
mod schema_tests;
