//! `serve`'s flags on what one request and one connection may take: body
//! ceilings and budgets, the held-read ceiling, timeouts, connection caps
//! and deadlines, and compression with its history cache.

use std::time::Duration;

use clap::Args;

use super::bytes_in;
use crate::cli::boolish;
use crate::config::{AnswerCaches, ConnectionSettings, HistoryCacheSettings};
use crate::connections::Deadlines;

/// What one request may take, and how many are served at once.
#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Requests")]
pub struct RequestArgs {
    /// Largest decoded artifact in bytes; larger ones are 413.
    #[arg(long, env = "ABSTORE_MAX_ARTIFACT_BYTES", default_value_t = 1_048_576, value_parser = bytes_in(1, 1 << 30))]
    pub max_artifact_bytes: usize,

    /// Largest request body in bytes of the routes that carry artifacts
    /// (put, deposit) and of the ticket-asset routes; larger ones are 413.
    #[arg(long, env = "ABSTORE_MAX_BODY_BYTES", default_value_t = 16 * 1_048_576, value_parser = bytes_in(1, 1 << 32))]
    pub max_body_bytes: usize,

    /// Largest request body in bytes of every other route (events, stream
    /// batches, leases, sessions); larger ones are 413. Above
    /// `--max-stream-batch-bytes`, so a batch is judged by its own ceiling.
    /// The default is the request ceiling of Autobuild's hosted service.
    #[arg(long, env = "ABSTORE_MAX_JSON_BODY_BYTES", default_value_t = 4 * 1_048_576, value_parser = bytes_in(1024, 1 << 32))]
    pub max_json_body_bytes: usize,

    /// Memory all parsed request bodies may hold at once, in bytes (a JSON
    /// text's tree takes several times its size). A body that does not fit
    /// beside the others is answered `503` (retry), one that could never
    /// fit `413`.
    #[arg(long, env = "ABSTORE_MAX_JSON_MEMORY_BYTES", default_value_t = 512 * 1_048_576, value_parser = bytes_in(1 << 20, 1 << 40))]
    pub max_json_memory_bytes: usize,

    /// Largest serialised stream batch (`parts`) in bytes; larger ones are 413.
    #[arg(
        long,
        env = "ABSTORE_MAX_STREAM_BATCH_BYTES",
        default_value_t = 1_048_576
    )]
    pub max_stream_batch_bytes: usize,

    /// Ceiling for held reads (`wait=`), in seconds; larger waits are clamped.
    #[arg(long, env = "ABSTORE_MAX_WAIT_SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=30))]
    pub max_wait_seconds: u64,

    /// Held reads allowed at once in this process; beyond it reads answer immediately.
    #[arg(long, env = "ABSTORE_MAX_HELD_READS", default_value_t = 10_000, value_parser = bytes_in(0, 1_000_000))]
    pub max_held_reads: usize,

    /// Longest a request may run before it is answered `500 internal`; must
    /// exceed the held-read ceiling by at least 5 s so no held read is cut short.
    #[arg(long, env = "ABSTORE_REQUEST_TIMEOUT_SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub request_timeout_seconds: u64,

    /// Requests served at once (held reads included); more wait for a turn.
    #[arg(long, env = "ABSTORE_MAX_CONCURRENT_REQUESTS", default_value_t = 16_384, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_concurrent_requests: u64,

    /// Stream closes assembling their documents at once (each holds its
    /// stream's document in memory); more wait for a turn.
    #[arg(long, env = "ABSTORE_MAX_CONCURRENT_STREAM_CLOSES", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub max_concurrent_stream_closes: u32,
}

/// The connection-level caps and deadlines.
#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Connections")]
pub struct ConnectionArgs {
    /// Connections open at once (held reads each keep one); over it a new
    /// connection is answered `503` and closed. Lowered to what the open-file
    /// limit allows.
    #[arg(long, env = "ABSTORE_MAX_CONNECTIONS", default_value_t = 16_384, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,

    /// Connections open at once from one client address (IPv6 clients by
    /// their /64); over it a new connection is answered `503` and closed.
    /// Default: a quarter of `--max-connections`. Behind a reverse proxy
    /// every connection comes from the proxy: raise it to
    /// `--max-connections` there.
    #[arg(long, env = "ABSTORE_MAX_CONNECTIONS_PER_ADDRESS", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections_per_address: Option<u32>,

    /// Longest a client may take to send a request head, from its first byte
    /// (for a new connection, from the moment it opens); then the
    /// connection is closed.
    #[arg(long, env = "ABSTORE_HEADER_READ_TIMEOUT_SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub header_read_timeout_seconds: u64,

    /// Longest a connection may stay open with no request in progress and no
    /// bytes arriving (idle keep-alive, or never sending anything).
    #[arg(long, env = "ABSTORE_IDLE_TIMEOUT_SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub idle_timeout_seconds: u64,

    /// Longest a request body may go without data before the request is
    /// answered `400 validation`.
    #[arg(long, env = "ABSTORE_BODY_READ_TIMEOUT_SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub body_read_timeout_seconds: u64,

    /// Longest an answer waits for its client to take more of it (a
    /// streamed answer: its next piece; any answer: bytes the socket can
    /// send); then the answer is abandoned and the connection closed.
    #[arg(long, env = "ABSTORE_READ_STALL_TIMEOUT_SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub read_stall_timeout_seconds: u64,

    /// Longest a request may take from the first byte of its head to the
    /// last byte of its answer, however steadily its client reads; then the
    /// answer is cut short and the connection closed (a streamed answer
    /// holds a database connection and, on SQLite, a read snapshot until it
    /// ends). Above `--request-timeout-seconds`.
    #[arg(long, env = "ABSTORE_ANSWER_DEADLINE_SECONDS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub answer_deadline_seconds: u64,
}

impl From<ConnectionArgs> for ConnectionSettings {
    fn from(args: ConnectionArgs) -> ConnectionSettings {
        let ConnectionArgs {
            max_connections,
            max_connections_per_address,
            header_read_timeout_seconds,
            idle_timeout_seconds,
            body_read_timeout_seconds,
            read_stall_timeout_seconds,
            answer_deadline_seconds,
        } = args;
        ConnectionSettings {
            deadlines: Deadlines {
                header_read: Duration::from_secs(header_read_timeout_seconds),
                idle: Duration::from_secs(idle_timeout_seconds),
                answer_stall: Duration::from_secs(read_stall_timeout_seconds),
                answer_deadline: Duration::from_secs(answer_deadline_seconds),
            },
            body_read: Duration::from_secs(body_read_timeout_seconds),
            max_connections,
            max_per_address: max_connections_per_address,
        }
    }
}

/// Compression of answers, and the history cache that keeps compressed
/// history chunks.
#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Compression")]
pub struct CompressionArgs {
    /// Compress answers of at least this many bytes (zstd, brotli or gzip,
    /// as the client's `Accept-Encoding` allows).
    #[arg(long, env = "ABSTORE_COMPRESS_MIN_BYTES", default_value_t = 1024)]
    pub compress_min_bytes: u16,

    /// Never compress answers, whatever the client accepts.
    #[arg(long, env = "ABSTORE_NO_COMPRESSION", value_parser = boolish())]
    pub no_compression: bool,

    /// Bytes of zstd frames of history chunks kept in memory (the history
    /// cache) to answer whole-history reads in zstd; 0 turns the cache off.
    #[arg(long, env = "ABSTORE_HISTORY_CACHE_BYTES", default_value_t = 64 * 1024 * 1024, value_parser = bytes_in(0, 1 << 40))]
    pub history_cache_bytes: usize,

    /// Events per history chunk: a log's chunk is complete (kept compressed
    /// for good) once the log holds every one of its sequence numbers.
    #[arg(long, env = "ABSTORE_HISTORY_CHUNK_EVENTS", default_value_t = 256, value_parser = clap::value_parser!(u32).range(8..=65_536))]
    pub history_chunk_events: u32,

    /// Bytes of protocol-3 state-events answers kept in memory, identity
    /// and zstd, each repository's at its journal's last tail (an answer
    /// over a quarter of this is read afresh every time); 0 turns the
    /// cache off. Works with compression off too.
    #[arg(long, env = "ABSTORE_STATE_EVENTS_CACHE_BYTES", default_value_t = 64 * 1024 * 1024, value_parser = bytes_in(0, 1 << 40))]
    pub state_events_cache_bytes: usize,

    /// Bytes of protocol-3 build digests kept in memory, each build's at
    /// its log's tail, with each repository's whole answer (identity and
    /// zstd); a repository's over a quarter of this is derived afresh
    /// every time. 0 turns the cache off. Works with compression off too.
    #[arg(long, env = "ABSTORE_BUILD_DIGESTS_CACHE_BYTES", default_value_t = 64 * 1024 * 1024, value_parser = bytes_in(0, 1 << 40))]
    pub build_digests_cache_bytes: usize,

    /// Bytes of whole short event logs kept in memory (identity and zstd),
    /// each until its log is next written; SQLite files only (on PostgreSQL
    /// another replica's write is heard only after it was acknowledged).
    /// 0 turns the cache off.
    #[arg(long, env = "ABSTORE_SHORT_LOG_CACHE_BYTES", default_value_t = 32 * 1024 * 1024, value_parser = bytes_in(0, 1 << 40))]
    pub short_log_cache_bytes: usize,
}

impl CompressionArgs {
    /// The smallest answer compressed (`None`: compression is off), the
    /// history cache (`None`: off, as it is without compression) and the
    /// answer caches' bytes.
    pub fn into_settings(self) -> (Option<u16>, Option<HistoryCacheSettings>, AnswerCaches) {
        let CompressionArgs {
            compress_min_bytes,
            no_compression,
            history_cache_bytes,
            history_chunk_events,
            state_events_cache_bytes,
            build_digests_cache_bytes,
            short_log_cache_bytes,
        } = self;
        let history_cache =
            (!no_compression && history_cache_bytes > 0).then_some(HistoryCacheSettings {
                chunk_events: history_chunk_events,
                bytes: history_cache_bytes,
            });
        (
            (!no_compression).then_some(compress_min_bytes),
            history_cache,
            AnswerCaches {
                state_events: (state_events_cache_bytes > 0).then_some(state_events_cache_bytes),
                build_digests: (build_digests_cache_bytes > 0).then_some(build_digests_cache_bytes),
                short_logs: (short_log_cache_bytes > 0).then_some(short_log_cache_bytes),
            },
        )
    }
}
