//! abstore: a server for Autobuild's Remote BuildStore protocol
//! (Autobuild 0.8.0's protocol 2, and protocol 3).
//!
//! # Layout
//! - [`auth`]: bearer tokens, scopes, the authorization matrix, event attribution.
//! - [`secret`]: the token signing secret.
//! - [`revocation`]: the revoked tokens every server refuses, re-read every few seconds.
//! - [`cli`]: the command line (every flag and `ABSTORE_*` variable) and the
//!   thin runner of each command; the only module that knows clap, and none
//!   below it imports it.
//! - [`config`]: the server's settings, as the command line gives them.
//! - [`app`]: builds the server from its settings and serves it.
//! - [`connections`]: accepting and serving connections under their bounds.
//! - [`http`]: the route table, each route's gate (identity, protocol, token), request
//!   parsing, the error shape; and the web console under `/console/`
//!   ([`http::console`]), one more family of the route table.
//! - [`protocol`]: pure protocol vocabulary (protocol versions and client identities,
//!   times, grammars, base64, placeholders,
//!   the identifier bound, ticket-asset limits and validation).
//! - [`store`]: the `Store` trait and its SQLite and PostgreSQL backends;
//!   `DatabaseUrl`, the one parser of `--database`, opens and migrates them.
//! - [`streams`]: UI Message Stream assembly for closing streams.
//! - [`tickets`]: Autobuild's hosted ticket source: its operations, rules
//!   and answers (the store runs them, `http` serves them).
//! - [`blobs`]: content-addressed artifact bytes over `object_store`.
//! - [`storage_full`]: a full disk as the OS reports it (each database backend recognises
//!   its own driver's); counting and logging the writes it refuses.
//! - [`metrics`]: Prometheus metrics on their own listener.
//! - [`held`]: held reads (`wait=`): the hold loop, shared queries, the cap, the sweep.
//! - [`notify`]: wake-ups keyed by resource: writers notify, held reads wait.
//! - [`history`]: the history cache: whole-history reads in zstd from cached chunk frames.
//! - [`clock`]: the one injectable clock.
//! - `bounded`: the one byte-bounded LRU, under the history caches and the
//!   store's build records.
//! - [`logging`]: log lines on stderr, as text or JSON.
//! - [`archive`]: portable archives, online SQLite backups, blob garbage collection.
//! - [`healthcheck`]: the `abstore healthcheck` probe of `/readyz`.

pub mod app;
pub mod archive;
pub mod auth;
pub mod blobs;
pub(crate) mod bounded;
pub mod cli;
pub mod clock;
pub mod config;
pub mod connections;
pub mod healthcheck;
pub mod held;
pub mod history;
pub mod hosts;
pub mod http;
pub mod logging;
pub mod metrics;
pub mod notify;
pub mod protocol;
pub mod revocation;
pub mod secret;
pub mod storage_full;
pub mod store;
pub mod streams;
pub mod tickets;
