//! Response compression (issue 22, item 4). Autobuild's client (Bun's
//! `fetch`) sends `Accept-Encoding: gzip, deflate, br, zstd` and decodes
//! what comes back, and whole-history reads are repetitive JSON that shrinks
//! several-fold. tower-http negotiates (q-values, `identity`, preferring
//! zstd, then brotli, then gzip on equal weight), adds `Vary:
//! Accept-Encoding`, and compresses any body as it streams, the streamed
//! reads included.
//!
//! Only answers of at least `min_bytes` are compressed: a held read's `[]`,
//! a lease answer or an error stays as it is. A streamed answer has no
//! length and is always larger than one piece (64 KiB), so it is compressed
//! whenever the client asks.

use tower_http::compression::predicate::SizeAbove;
use tower_http::compression::{CompressionLayer, CompressionLevel};

/// Each codec's fastest level: a compressed whole read must cost at most
/// twice an identity one (docs/benchmarks/whole-history-reads.md,
/// "Compression").
const LEVEL: CompressionLevel = CompressionLevel::Fastest;

/// The layer compressing answers of at least `min_bytes`.
pub fn layer(min_bytes: u16) -> CompressionLayer<SizeAbove> {
    CompressionLayer::new()
        .quality(LEVEL)
        .compress_when(SizeAbove::new(min_bytes))
}
