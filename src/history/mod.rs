//! The history cache (issue 22; docs/decisions.md, 21): Autobuild's
//! dashboards and dispatcher re-read whole event logs that only grow, so
//! most of every such answer is text the server already sent, compressed,
//! many times over. An event log is cut into chunks of `chunk_events`
//! sequence numbers (chunk `i` holds `i·n < seq ≤ (i+1)·n`); once a log's
//! last sequence reaches a chunk's end the chunk is *complete*: events are
//! never changed or deleted, and a log's committed sequences are always a
//! contiguous prefix (appends to one resource are serialised), so its text
//! can never change again. Its zstd frame is kept in a bounded LRU cache and
//! copied into every later answer that spans it.
//!
//! The same holds for the committed beginning of the log's last, unfinished
//! chunk (a finished build's whole log of ~100 events, most often): its
//! frame is kept as the chunk's *prefix* up to the sequence it reached, and
//! made again, longer, once the log has grown a quarter of a chunk past it.
//!
//! A `GET …/events?since=` whose client takes zstd, with no `wait`, and
//! whose range spans at least one complete chunk or a chunk's prefix is
//! answered as a sequence of zstd frames (one stream, RFC 8878 section
//! 3.1): `[`, the live head up to the first chunk boundary, the complete
//! chunks and the last chunk's prefix (from the cache, or read, compressed
//! and cached), the live tail read in one statement, `]`. Every other read
//! takes the ordinary path, compressed by the compression layer as before.
//!
//! Consistency: the answer is the log as of the tail's statement. What is
//! read before it was committed before (a known lower bound of the log), so
//! reading it earlier, in other statements, or from the cache gives exactly
//! the text that statement's snapshot holds.
//!
//! Which chunks are complete is learnt from the reads themselves, not asked of
//! the database on every read: a read of `seq > since` that returned `c`
//! rows proves the log reached `since + c` (sequences start at 1 and have no
//! gaps), and a log never shrinks, so that bound stays true on every
//! replica. A log is answered from chunks once a read has shown it holds an
//! event; a read that finds it grew further teaches the next one.

//!
//! The protocol-3 state events, a filtered view of a repository journal,
//! are kept whole per journal tail instead (`state_events`), and on a SQLite
//! file whole short logs are kept until they are written (`short_logs`).
//!
//! Here: the one entry for these reads (`reader`: [`reader::HistoryReader`]), which
//! chooses the source and keeps the caches; the plan of an answer (`plan`,
//! pure), the cache of frames and of what reads have taught (`cache`), the
//! zstd frames (`frames`), the writer of an answer as a stream of frames
//! (`answer`), where a zstd answer's HTTP chunks are cut (`seams`), answers
//! kept whole (`kept`), the build digests kept at their builds' tails
//! (`digests`); the byte-bounded LRU the caches share is `crate::bounded`.
//! The HTTP side (`crate::http`'s `event_reads` and `repos`) only says how
//! the client takes the answer and sends the [`reader::Reply`].

mod answer;
mod brotli;
mod cache;
mod digests;
mod frames;
mod gzip;
mod kept;
mod plan;
pub mod reader;
mod seams;
mod short_logs;
mod state_events;

pub use cache::HistoryCache;
pub use digests::DigestsCache;
pub use short_logs::ShortLogCache;
pub use state_events::StateEventsCache;
