//! abstore's integration tests: one test binary, a module per area, each
//! driving the real `abstore` binary (or its library) over HTTP, files and
//! PostgreSQL. One binary links the server, reqwest and the conformance crate
//! once, where twenty binaries linked them twenty times.
//!
//! A test that needs a service says so by a token in its name (`postgres`,
//! `s3`, `nginx`, `node`, `bun`, `curl`, `python`, `go`, `chromium`, `autobuild_reference`,
//! `autobuild_ticket_contract`)
//! or by its module
//! (`pg_outage`, `storage_full`); scripts/test leaves out what the machine
//! cannot run and counts it as skipped (docs/conformance.md, "Services").

// Test set-up: a failure should panic where it happened.
#![allow(clippy::unwrap_used)]

mod support;

mod adversarial;
mod archive;
mod autobuild_import;
mod bounds;
mod cli;
mod clients;
mod compose;
mod conformance_suite;
mod connections;
mod console;
mod console_browser;
mod crash;
mod cut_answers;
mod digests_cache;
mod frame_caches;
mod fuzz;
mod held_reads;
mod history_cache;
mod hostile_imports;
mod http_clients;
mod migrations;
mod operations;
mod pg_latency;
mod pg_outage;
mod pg_round_trips;
mod pg_write_connections;
mod proxy;
mod replicas;
mod retention;
mod robustness;
mod routes;
mod s3;
mod security;
mod short_log_cache;
mod state_events_cache;
mod storage_full;
mod store_durability;
mod streamed_reads;
mod ticket_assets;
mod tickets;
