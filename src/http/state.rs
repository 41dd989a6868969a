//! [`AppState`]: everything a request handler reads, built once by
//! [`App::build`](crate::app::App::build) and shared by every route.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::error::ApiResult;
use super::extract::{self, JsonBudget, ParsedJson};
use crate::blobs::Blobs;
use crate::clock::TestClock;
use crate::held::HeldReads;
use crate::hosts::HostCheck;
use crate::protocol::Clients;
use crate::store::Store;

/// Configured bounds (docs/decisions.md, 10); each is a flag.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest decoded artifact, per artifact (413 above).
    pub max_artifact_bytes: usize,
    /// Largest request body of the routes that carry artifacts (put,
    /// deposit) and of the ticket-asset routes (413 above).
    pub max_body_bytes: usize,
    /// Largest request body of every other route (413 above).
    pub max_json_body_bytes: usize,
    /// Largest serialised stream batch (413 above).
    pub max_stream_batch_bytes: usize,
    /// Ceiling a `wait` is clamped to.
    pub max_wait: Duration,
    /// Longest a request may run (always above `max_wait`).
    pub request_timeout: Duration,
    /// Requests served at once; more wait for a permit.
    pub max_concurrent_requests: usize,
    /// Answers of at least this many bytes are compressed when the client
    /// accepts it; `None`: never.
    pub compress_min_bytes: Option<u16>,
}

impl Limits {
    /// The ticket-asset limits this server advertises and enforces: the
    /// request-body limit is the deployment ceiling (`maxRequestBytes`) on
    /// every ticket-asset request and answer, which lowers `maxBytes` by the
    /// protocol's formula (docs/protocol-versions.md, "Ticket assets").
    pub fn ticket_assets(&self) -> crate::protocol::ticket_assets::Limits {
        crate::protocol::ticket_assets::Limits::effective(Some(self.max_body_bytes as u64))
    }
}

/// Who may call: the identity check's accepted identities and the token check.
pub struct Access {
    /// The accepted client identities, each with its catalogs.
    pub clients: Clients,
    /// The token secret; `None` is open mode.
    pub secret: Option<crate::secret::Secret>,
    /// The one clock: token expiry is judged by it too.
    pub clock: Arc<dyn crate::clock::Clock>,
    /// `--max-token-lifetime`: how far beyond now a token's `exp` may lie.
    pub max_token_lifetime: crate::auth::MaxLifetime,
    /// The revoked tokens (authenticated mode; `None` in open mode).
    pub revocations: Option<Arc<crate::revocation::Revocations>>,
    /// Open mode on a loopback address: the `Host` names it answers
    /// (DNS rebinding, `host`); `None`: any.
    pub hosts: Option<HostCheck>,
}

/// Everything a request handler reads, shared by all of them; built once,
/// by [`App::build`](crate::app::App::build).
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub blobs: Blobs,
    pub access: Access,
    pub limits: Limits,
    pub held: Arc<HeldReads>,
    /// Whole-history and state-events reads, and the caches that serve
    /// them.
    pub history: crate::history::reader::HistoryReader,
    /// Turns for closing streams (`--max-concurrent-stream-closes`): each
    /// close holds the document it assembles in memory.
    pub stream_closes: tokio::sync::Semaphore,
    /// The memory all parsed request bodies may hold at once.
    pub json_budget: JsonBudget,
    /// The settable clock behind `/_test/clock`; only with `--test-clock`.
    pub test_clock: Option<Arc<TestClock>>,
    /// The hosted tickets' lifecycle, bounds and answer ceiling.
    pub tickets: Arc<crate::tickets::TicketSettings>,
    /// The web console (`crate::http::console`); `None` with `--no-console`.
    pub console: Option<Arc<crate::http::console::Console>>,
    /// The server's one shutdown token: cancelled, held reads answer at once
    /// and background tasks stop.
    pub shutdown: CancellationToken,
}

pub type SharedState = Arc<AppState>;

impl AppState {
    /// The JSON body of a route without artifacts (`--max-json-body-bytes`).
    pub async fn json_body(&self, body: axum::body::Body) -> ApiResult<ParsedJson> {
        extract::json_body(body, self.limits.max_json_body_bytes, &self.json_budget).await
    }

    /// The JSON body of a route carrying artifacts (`--max-body-bytes`).
    pub async fn artifact_body(&self, body: axum::body::Body) -> ApiResult<ParsedJson> {
        extract::json_body(body, self.limits.max_body_bytes, &self.json_budget).await
    }
}
