//! Streamed reads (issue 22; docs/decisions.md, 18): a whole-history answer
//! leaves the database in pieces of about [`PIECE_BYTES`], written by a task
//! of its own as the response body asks for them, instead of being built
//! whole in memory. A read's memory is then a few pieces, whatever the size
//! of the history.
//!
//! The producer (`RowSink`) runs one statement (one snapshot) and appends
//! each row's JSON text; full pieces go through a channel of one slot, so it
//! runs at most one piece ahead of the client. The consumer ([`Rows`]) first
//! waits for the producer's first message, which decides the status: the
//! first piece (rows follow, `200`), the end (a complete answer), or a
//! failure (an unknown resource is found before any byte is sent). A client
//! that goes away drops the consumer: the producer's next send fails and it
//! stops, ending its statement. A client that stops reading is given
//! `stall` to take each piece, then abandoned the same way.
//!
//! An answer that outgrows its first piece holds its database connection
//! (and, on SQLite, a read snapshot that keeps the WAL from being
//! checkpointed) while its client takes the rest, so such answers are
//! bounded twice over ([`StreamedReads`]): a whole answer has a deadline,
//! however steadily its client reads, and only so many may be sending at
//! once, fewer than the pool's connections, so that slow readers can never
//! take every connection from the writes and short reads (issue 33).

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::Instant;

use super::error::{StoreError, StoreResult};
use crate::protocol::{ResourceKind, ResourceRef};

/// What a streamed read selects. Each backend runs it as one statement
/// (one snapshot), rows in the protocol's order, each as its wire JSON.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listing {
    /// Envelopes of `resource` with `since < seq ≤ until` (no upper bound
    /// when `until` is `None`).
    Events {
        resource: ResourceRef,
        since: i64,
        until: Option<i64>,
    },
    /// A repository's state events (protocol 3): every event of a durable
    /// type, and every event from the latest `dispatcher.run-started` on,
    /// as the journal stood at `until` (its end when `None`).
    StateEvents { repo: String, until: Option<i64> },
    /// Chunks of stream `id` with `seq > since`.
    Chunks { id: String, since: i64 },
    /// Every build record (`listBuilds`).
    Builds,
    /// A repository's session records, in creation order.
    Sessions { repo: String },
    /// A resource's artifact metadata, by kind then revision (one kind or all).
    Artifacts {
        resource: ResourceRef,
        kind: Option<String>,
    },
    /// A scope's stream records, in creation order.
    Streams { scope: ResourceRef },
    /// A ticket's asset summaries (protocol 3) by kind, name, revision: the
    /// latest live revision of each asset, or (`revisions`) every revision
    /// that is no tombstone.
    TicketAssets {
        repo: String,
        ticket_id: String,
        revisions: bool,
    },
}

impl Listing {
    /// The resource that must exist when the answer has no rows (an empty
    /// answer of an unknown one is `NotFound`), if any.
    pub fn owner(&self) -> Option<ResourceRef> {
        match self {
            Listing::Events { resource, .. } | Listing::Artifacts { resource, .. } => {
                Some(resource.clone())
            }
            Listing::Sessions { repo } | Listing::StateEvents { repo, .. } => {
                Some(ResourceRef::new(ResourceKind::Repo, repo))
            }
            Listing::Streams { scope } => Some(scope.clone()),
            // The handler resolved the stream before reading its chunks;
            // ticket assets need no repository record.
            Listing::Chunks { .. } | Listing::Builds | Listing::TicketAssets { .. } => None,
        }
    }
}

/// The size a piece is sent at: large enough that per-piece costs vanish
/// beside copying, small enough that a read's memory stays a few of them.
pub const PIECE_BYTES: usize = 64 * 1024;

/// What the producer sends.
enum Message<E> {
    Piece(Bytes),
    /// The end value and how many rows the answer held.
    End(E, u64),
    /// The whole answer in one piece (nothing was sent before it): a short
    /// answer can then be sent whole, with its length.
    Whole(Bytes, E, u64),
    Failed(StoreError),
}

/// How long an answer may take its client: each piece, and the whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnswerTimes {
    /// How long one piece waits for the client to take it.
    pub stall: Duration,
    /// How long the whole answer may take, from its start, however steadily
    /// the client reads.
    pub deadline: Duration,
}

impl AnswerTimes {
    /// How long the next piece may wait, or `None` once the deadline passed.
    pub fn next_wait(&self, started: Instant) -> Option<Duration> {
        let left = self.deadline.checked_sub(started.elapsed())?;
        (!left.is_zero()).then(|| left.min(self.stall))
    }
}

impl Default for AnswerTimes {
    fn default() -> Self {
        AnswerTimes {
            stall: DEFAULT_STALL,
            deadline: DEFAULT_DEADLINE,
        }
    }
}

/// The bounds of every streamed read of one store (configured with
/// `--read-stall-timeout-seconds`, `--answer-deadline-seconds` and
/// `--max-streamed-reads`).
#[derive(Clone, Debug)]
pub struct StreamedReads {
    times: AnswerTimes,
    /// Permits of the answers that outgrew their first piece: only these
    /// wait on their clients while holding a connection.
    sending: Arc<Semaphore>,
    /// How long an answer that outgrew its first piece waits for a permit
    /// before it is refused (`Busy`, nothing sent yet).
    permit_wait: Duration,
}

impl StreamedReads {
    /// At most `max_sending` answers wait on their clients at once; one
    /// that finds none free within `permit_wait` is refused.
    pub fn new(times: AnswerTimes, max_sending: u32, permit_wait: Duration) -> Self {
        StreamedReads {
            times,
            sending: Arc::new(Semaphore::new(max_sending.max(1) as usize)),
            permit_wait,
        }
    }

    /// A sink and its consumer's receiving end, under these bounds.
    pub(crate) fn sink<E>(&self) -> (RowSink<E>, Pending<E>) {
        let (tx, rx) = mpsc::channel(1);
        (
            RowSink {
                piece: BytesMut::with_capacity(PIECE_BYTES + PIECE_BYTES / 4),
                full_at: PIECE_BYTES,
                count: 0,
                sent: false,
                tx,
                reads: self.clone(),
                started: Instant::now(),
                permit: None,
            },
            Pending { rx },
        )
    }
}

impl Default for StreamedReads {
    fn default() -> Self {
        StreamedReads::new(AnswerTimes::default(), 8, Duration::from_secs(10))
    }
}

/// The producer's side: rows in, pieces out.
pub(crate) struct RowSink<E> {
    piece: BytesMut,
    /// A piece is sent once it holds this many bytes ([`PIECE_BYTES`]; never
    /// for a sink that gathers the whole answer).
    full_at: usize,
    /// Rows written (after the first, each needs a comma before it).
    count: u64,
    /// A piece went out.
    sent: bool,
    tx: mpsc::Sender<Message<E>>,
    reads: StreamedReads,
    started: Instant,
    /// Held from the first piece sent until the producer ends.
    permit: Option<OwnedSemaphorePermit>,
}

/// Why a producer must stop early.
#[derive(Debug)]
pub(crate) enum Stopped {
    /// The consumer went away, stopped reading for longer than the stall
    /// bound, or the answer reached its deadline: the answer is cut.
    Gone,
    /// Too many long answers are sending: refused before any byte (`503`).
    Busy,
}

impl From<Stopped> for StoreError {
    fn from(stopped: Stopped) -> Self {
        match stopped {
            Stopped::Gone => StoreError::Aborted("the client stopped reading".into()),
            Stopped::Busy => StoreError::Busy(
                "too many long reads are being sent; retry shortly (--max-streamed-reads)",
            ),
        }
    }
}

impl<E> RowSink<E> {
    /// The buffer to write the next row's JSON text into (the separator is
    /// already there).
    pub(crate) fn row(&mut self) -> &mut BytesMut {
        if self.count > 0 {
            self.piece.extend_from_slice(b",");
        }
        self.count += 1;
        &mut self.piece
    }

    /// A sink that is never full: it gathers the whole answer, for
    /// [`RowSink::into_complete`] (the in-memory database answers whole:
    /// its rows are in memory anyway).
    pub(crate) fn gathering() -> Self {
        let (sink, _no_consumer) = StreamedReads::default().sink();
        RowSink {
            full_at: usize::MAX,
            ..sink
        }
    }

    /// Everything written, for a producer that never sent a piece.
    pub(crate) fn into_complete(self, end: E) -> Rows<E> {
        Rows {
            first: (!self.piece.is_empty()).then(|| self.piece.freeze()),
            rx: None,
            end: Some(end),
            count: Some(self.count),
        }
    }

    /// The rows written so far.
    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    /// Whether any row was written.
    pub(crate) fn has_rows(&self) -> bool {
        self.count > 0
    }

    /// Whether the current piece should be sent before the next row.
    pub(crate) fn is_full(&self) -> bool {
        self.piece.len() >= self.full_at
    }

    /// Send the current piece, waiting at most the stall bound (and what is
    /// left of the deadline) for room. The first piece takes a permit of
    /// [`StreamedReads`]: from then on the answer waits on its client.
    pub(crate) async fn send_piece(&mut self) -> Result<(), Stopped> {
        if self.piece.is_empty() {
            return Ok(());
        }
        if self.permit.is_none() {
            let permit = self.reads.sending.clone().acquire_owned();
            match tokio::time::timeout(self.reads.permit_wait, permit).await {
                Ok(Ok(permit)) => self.permit = Some(permit),
                Ok(Err(_)) | Err(_) => {
                    metrics::counter!("abstore_streamed_reads_cut_total", "reason" => "busy")
                        .increment(1);
                    return Err(Stopped::Busy);
                }
            }
        }
        let piece = self.piece.split().freeze();
        self.piece.reserve(PIECE_BYTES + PIECE_BYTES / 4);
        self.sent = true;
        self.deliver(Message::Piece(piece)).await
    }

    /// Hand `message` to the consumer within the answer's times.
    async fn deliver(&self, message: Message<E>) -> Result<(), Stopped> {
        let Some(wait) = self.reads.times.next_wait(self.started) else {
            metrics::counter!("abstore_streamed_reads_cut_total", "reason" => "deadline")
                .increment(1);
            return Err(Stopped::Gone);
        };
        match tokio::time::timeout(wait, self.tx.send(message)).await {
            Ok(Ok(())) => Ok(()),
            // The consumer went away: routine, not counted.
            Ok(Err(_)) => Err(Stopped::Gone),
            Err(_) => {
                let reason = if self.reads.times.next_wait(self.started).is_some() {
                    "stall"
                } else {
                    "deadline"
                };
                metrics::counter!("abstore_streamed_reads_cut_total", "reason" => reason)
                    .increment(1);
                Err(Stopped::Gone)
            }
        }
    }

    /// End the answer: the last piece and then `end`, or the failure. A
    /// failure after pieces were sent can only cut the body short.
    pub(crate) async fn finish(mut self, end: StoreResult<E>) {
        let last = match end {
            Ok(end) if !self.sent => Message::Whole(self.piece.split().freeze(), end, self.count),
            Ok(end) => {
                if self.send_piece().await.is_err() {
                    return;
                }
                Message::End(end, self.count)
            }
            Err(err) => Message::Failed(err),
        };
        let _ = self.deliver(last).await;
    }
}

/// The consumer before the first message.
pub struct Pending<E> {
    rx: mpsc::Receiver<Message<E>>,
}

impl<E> Pending<E> {
    /// Wait for the producer's first message: the answer has begun, or it
    /// failed before any byte (an unknown resource, a database error).
    pub async fn start(mut self) -> StoreResult<Rows<E>> {
        match self.rx.recv().await {
            Some(Message::Piece(first)) => Ok(Rows {
                first: Some(first),
                rx: Some(self.rx),
                end: None,
                count: None,
            }),
            Some(Message::End(end, count)) => Ok(Rows {
                first: None,
                rx: None,
                end: Some(end),
                count: Some(count),
            }),
            Some(Message::Whole(piece, end, count)) => Ok(Rows {
                first: (!piece.is_empty()).then_some(piece),
                rx: None,
                end: Some(end),
                count: Some(count),
            }),
            Some(Message::Failed(err)) => Err(err),
            None => Err(StoreError::Aborted(
                "the read stopped before answering".into(),
            )),
        }
    }
}

/// A read answer: rows' JSON texts joined by commas, in pieces, then an end
/// value (`()`, or what a chunk read reports after its chunks).
pub struct Rows<E = ()> {
    first: Option<Bytes>,
    rx: Option<mpsc::Receiver<Message<E>>>,
    end: Option<E>,
    /// How many rows the answer held, once the producer has ended.
    count: Option<u64>,
}

/// One step of an answer.
pub enum Next<E> {
    Piece(Bytes),
    End(E),
}

impl<E> Rows<E> {
    /// A complete answer held in memory (`rows` are JSON texts).
    pub fn complete<S: AsRef<str>>(rows: &[S], end: E) -> Self {
        let mut joined = Vec::with_capacity(rows.iter().map(|r| r.as_ref().len() + 1).sum());
        for (i, row) in rows.iter().enumerate() {
            if i > 0 {
                joined.push(b',');
            }
            joined.extend_from_slice(row.as_ref().as_bytes());
        }
        Rows {
            first: (!joined.is_empty()).then(|| Bytes::from(joined)),
            rx: None,
            end: Some(end),
            count: Some(rows.len() as u64),
        }
    }

    /// Whether pieces are still to come from a producer (the answer did
    /// not fit its first piece).
    pub fn is_streamed(&self) -> bool {
        self.rx.is_some()
    }

    /// Whether the answer has no rows. Only exact for a complete answer or
    /// before [`Rows::next`] was called: a streamed answer's first piece is
    /// never empty.
    pub fn is_empty(&self) -> bool {
        self.first.is_none() && self.rx.is_none()
    }

    /// How many rows the answer held; known once the producer has ended
    /// (always by the time [`Rows::next`] gave [`Next::End`]).
    pub fn count(&self) -> Option<u64> {
        self.count
    }

    /// The next piece, then the end value; `None` after that. An error after
    /// the first piece means the producer failed mid-way.
    pub async fn next(&mut self) -> Option<StoreResult<Next<E>>> {
        if let Some(first) = self.first.take() {
            return Some(Ok(Next::Piece(first)));
        }
        if let Some(end) = self.end.take() {
            return Some(Ok(Next::End(end)));
        }
        let rx = self.rx.as_mut()?;
        let message = rx.recv().await;
        match message {
            Some(Message::Piece(piece)) => Some(Ok(Next::Piece(piece))),
            Some(Message::End(end, count)) => {
                self.rx = None;
                self.count = Some(count);
                Some(Ok(Next::End(end)))
            }
            Some(Message::Whole(piece, end, count)) => {
                // Only ever a first message; taken as a piece and the end.
                self.rx = None;
                self.end = Some(end);
                self.count = Some(count);
                Some(Ok(Next::Piece(piece)))
            }
            Some(Message::Failed(err)) => {
                self.rx = None;
                Some(Err(err))
            }
            None => {
                self.rx = None;
                Some(Err(StoreError::Aborted(
                    "the read stopped before its end".into(),
                )))
            }
        }
    }

    /// The whole answer as one JSON array text and the end value (tests,
    /// and reads that need every row at once).
    pub async fn collect(mut self) -> StoreResult<(String, E)> {
        let mut text = Vec::new();
        loop {
            match self.next().await {
                Some(Ok(Next::Piece(piece))) => text.extend_from_slice(&piece),
                Some(Ok(Next::End(end))) => {
                    let joined = String::from_utf8(text)
                        .map_err(|_| StoreError::Corrupt("a stored row is not UTF-8".into()))?;
                    return Ok((format!("[{joined}]"), end));
                }
                Some(Err(err)) => return Err(err),
                None => return Err(StoreError::Aborted("the read ended twice".into())),
            }
        }
    }
}

/// A value's JSON text, written straight into a piece (records, metadata).
pub(crate) fn write_json(piece: &mut BytesMut, value: &serde_json::Value) -> StoreResult<()> {
    use bytes::BufMut as _;
    serde_json::to_writer(piece.writer(), value)
        .map_err(|err| StoreError::Corrupt(format!("serialising a row: {err}")))
}

/// The default bound a producer waits for its consumer to take a piece.
pub const DEFAULT_STALL: Duration = Duration::from_secs(30);

/// The default bound on a whole streamed answer.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(300);

#[cfg(test)]
mod tests {
    use super::*;

    fn bounded(stall: Duration, deadline: Duration, sending: u32) -> (RowSink<()>, Pending<()>) {
        let times = AnswerTimes { stall, deadline };
        StreamedReads::new(times, sending, Duration::from_millis(100)).sink()
    }

    /// A producer that writes 1,000-byte rows until it is stopped.
    fn endless(mut sink: RowSink<()>) -> tokio::task::JoinHandle<Stopped> {
        tokio::spawn(async move {
            loop {
                sink.row().extend_from_slice(&[b'1'; 1000]);
                if sink.is_full()
                    && let Err(stopped) = sink.send_piece().await
                {
                    return stopped;
                }
            }
        })
    }

    #[tokio::test]
    async fn a_steady_reader_is_cut_at_the_answers_deadline() {
        let (sink, pending) = bounded(Duration::from_secs(60), Duration::from_millis(300), 8);
        let producer = endless(sink);
        let mut rows = pending.start().await.unwrap();
        let started = std::time::Instant::now();
        // Read every piece as it comes: only the deadline can end it.
        let cut = loop {
            match rows.next().await {
                Some(Ok(Next::Piece(_))) => continue,
                Some(Err(_)) | None => break true,
                Some(Ok(Next::End(()))) => break false,
            }
        };
        assert!(cut, "an endless answer cannot end whole");
        assert!(matches!(producer.await.unwrap(), Stopped::Gone));
        assert!(started.elapsed() < Duration::from_secs(30));
    }

    #[tokio::test]
    async fn long_answers_beyond_the_permits_are_refused_before_any_byte() {
        let reads = StreamedReads::new(
            AnswerTimes {
                stall: Duration::from_secs(60),
                deadline: Duration::from_secs(60),
            },
            1,
            Duration::from_millis(100),
        );
        // The first long answer takes the one permit and its client waits.
        let (sink, pending) = reads.sink::<()>();
        let first = endless(sink);
        let held = pending.start().await.unwrap();
        // A second long answer is refused: `Busy`, before its status.
        let (sink, pending) = reads.sink::<()>();
        let second = endless(sink);
        assert!(matches!(second.await.unwrap(), Stopped::Busy));
        drop(pending);
        // A short answer needs no permit.
        let (mut sink, pending) = reads.sink::<()>();
        sink.row().extend_from_slice(b"1");
        sink.finish(Ok(())).await;
        assert_eq!(
            pending.start().await.unwrap().collect().await.unwrap().0,
            "[1]"
        );
        // Once the first is gone, its permit is free again.
        drop(held);
        assert!(matches!(first.await.unwrap(), Stopped::Gone));
        let (sink, pending) = reads.sink::<()>();
        let third = endless(sink);
        let rows = pending.start().await.unwrap();
        drop(rows);
        assert!(matches!(third.await.unwrap(), Stopped::Gone));
    }

    #[tokio::test]
    async fn pieces_join_into_one_array_with_the_end_value() {
        let (mut sink, pending) = StreamedReads::default().sink::<u8>();
        let producer = tokio::spawn(async move {
            for i in 0..20_000 {
                sink.row()
                    .extend_from_slice(format!("{{\"n\":{i}}}").as_bytes());
                if sink.is_full() {
                    sink.send_piece().await.unwrap();
                }
            }
            sink.finish(Ok(7)).await;
        });
        let mut rows = pending.start().await.unwrap();
        assert_eq!(rows.count(), None, "not known before the end");
        let mut text = String::new();
        let end = loop {
            match rows.next().await.unwrap().unwrap() {
                Next::Piece(piece) => text.push_str(std::str::from_utf8(&piece).unwrap()),
                Next::End(end) => break end,
            }
        };
        assert_eq!(rows.count(), Some(20_000));
        let text = format!("[{text}]");
        producer.await.unwrap();
        let parsed: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed.len(), 20_000);
        assert_eq!(parsed[19_999]["n"], 19_999);
        assert_eq!(end, 7);
    }

    #[tokio::test]
    async fn a_short_answer_arrives_whole() {
        let (mut sink, pending) = StreamedReads::default().sink::<()>();
        sink.row().extend_from_slice(b"1");
        sink.row().extend_from_slice(b"2");
        sink.finish(Ok(())).await;
        let rows = pending.start().await.unwrap();
        assert!(!rows.is_streamed() && !rows.is_empty());
        assert_eq!(rows.count(), Some(2));
        assert_eq!(rows.collect().await.unwrap().0, "[1,2]");
        assert_eq!(Rows::complete(&["1", "2", "3"], ()).count(), Some(3));
    }

    #[tokio::test]
    async fn an_empty_answer_and_a_failure_are_known_before_any_piece() {
        let (sink, pending) = StreamedReads::default().sink::<()>();
        sink.finish(Ok(())).await;
        let rows = pending.start().await.unwrap();
        assert!(rows.is_empty());
        assert_eq!(rows.count(), Some(0));
        assert_eq!(rows.collect().await.unwrap().0, "[]");

        let (sink, pending) = StreamedReads::default().sink::<()>();
        sink.finish(Err(StoreError::Aborted("no".into()))).await;
        assert!(pending.start().await.is_err());
    }

    #[tokio::test]
    async fn a_consumer_that_leaves_stops_the_producer() {
        let (mut sink, pending) = StreamedReads::default().sink::<()>();
        let producer = tokio::spawn(async move {
            let mut sent = 0;
            loop {
                sink.row().extend_from_slice(&[b'1'; 1000]);
                if sink.is_full() {
                    if sink.send_piece().await.is_err() {
                        return sent;
                    }
                    sent += 1;
                }
            }
        });
        let mut rows = pending.start().await.unwrap();
        assert!(matches!(rows.next().await, Some(Ok(Next::Piece(_)))));
        drop(rows);
        let sent = producer.await.unwrap();
        assert!(sent <= 3, "the producer ran {sent} pieces ahead");
    }

    #[tokio::test]
    async fn a_consumer_that_stops_reading_is_abandoned_after_the_stall_bound() {
        let (mut sink, pending) = bounded(Duration::from_millis(100), DEFAULT_DEADLINE, 8);
        let producer = tokio::spawn(async move {
            loop {
                sink.row().extend_from_slice(&[b'1'; 1000]);
                if sink.is_full() && sink.send_piece().await.is_err() {
                    return;
                }
            }
        });
        let rows = pending.start().await.unwrap();
        // Never read again: the producer gives up by itself.
        tokio::time::timeout(Duration::from_secs(60), producer)
            .await
            .expect("the producer gave up")
            .unwrap();
        drop(rows);
    }
}
