//! The one entry for reads of whole answers that the caches serve: a
//! resource's events that do not wait ([`HistoryReader::whole_history`]), the
//! events a held read found to be many ([`HistoryReader::from_store`]) and a
//! repository's protocol-3 state events ([`HistoryReader::state_events`]). The
//! reader chooses the source (a short log kept whole, the history cache's
//! chunks, a state-events answer kept at its tail, or the store's rows) and
//! keeps the caches itself; the HTTP side only says how the client takes
//! the answer ([`Encoding`], from its `Accept-Encoding`) and sends the
//! [`Reply`].

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt as _;
use futures_util::stream::BoxStream;

pub use super::answer::Form;
use super::answer::answer;
use super::cache::HistoryCache;
use super::digests::{DigestsCache, RepoDigests};
use super::kept::{KeptAnswer, collect};
use super::short_logs::ShortLogCache;
use super::state_events::StateEventsCache;
use crate::protocol::ResourceRef;
use crate::store::rows::Next;
use crate::store::{Listing, Rows, Store, StoreError};

/// How the client takes an answer: the coding the compression layer would
/// pick for its `Accept-Encoding` (`crate::http`'s `accept` restates that
/// layer's rule).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// zstd, in as many frames as the answer has.
    Zstd,
    /// zstd, but one frame only: a client that cannot take several
    /// (`crate::http`'s `accept::takes_zstd_frames`).
    ZstdOneFrame,
    Gzip,
    Brotli,
    /// No coding: the text itself.
    Identity,
}

impl Encoding {
    /// The form a history-cache answer is written in for this client.
    fn form(self) -> Form {
        match self {
            Encoding::Zstd => Form::Zstd,
            // Text, which the compression layer sends as one frame.
            Encoding::ZstdOneFrame | Encoding::Identity => Form::Text,
            Encoding::Gzip => Form::Gzip,
            Encoding::Brotli => Form::Brotli,
        }
    }

    fn is_zstd(self) -> bool {
        matches!(self, Encoding::Zstd | Encoding::ZstdOneFrame)
    }
}

/// An answer as the HTTP side sends it, `200` in every case.
pub enum Reply {
    /// The whole JSON text, in memory (sent with its length; compressed by
    /// the compression layer as any answer).
    Text(Bytes),
    /// The whole answer as one zstd frame.
    Zstd(Bytes),
    /// Pieces as they are written, in `form` ([`Form::Text`]: JSON text the
    /// compression layer compresses). An error is a failure after the
    /// status was sent: the body is cut short.
    Streamed {
        pieces: BoxStream<'static, Result<Bytes, StoreError>>,
        form: Form,
    },
}

/// The answer caches, each `None` when off, and the store they keep.
pub struct HistoryReader {
    store: Arc<dyn Store>,
    /// Chunks of whole histories (`super::cache`); `None` when compression
    /// or the cache is off.
    chunks: Option<Arc<HistoryCache>>,
    /// Whole short logs until they are written (`super::short_logs`);
    /// SQLite files only.
    short_logs: Option<Arc<ShortLogCache>>,
    /// State-events answers at their journals' tails (`super::state_events`).
    state_events: Option<StateEventsCache>,
    /// Build digests at their builds' tails (`super::digests`).
    digests: Option<DigestsCache>,
    /// Kept answers of at least this many bytes are sent as zstd to a zstd
    /// client (the compression layer's own threshold); `None`: never.
    compress_min_bytes: Option<u16>,
}

impl HistoryReader {
    pub fn new(
        store: Arc<dyn Store>,
        chunks: Option<Arc<HistoryCache>>,
        short_logs: Option<Arc<ShortLogCache>>,
        state_events: Option<StateEventsCache>,
        digests: Option<DigestsCache>,
        compress_min_bytes: Option<u16>,
    ) -> Self {
        HistoryReader {
            store,
            chunks,
            short_logs,
            state_events,
            digests,
            compress_min_bytes,
        }
    }

    /// `seq > since` of `resource`'s log, now: a short whole log from
    /// memory where one is kept (or read and kept), an answer from the
    /// history cache where it has one (zstd frames or deflated chunks
    /// copied, or as text for any other client), else the store's rows.
    pub async fn whole_history(
        &self,
        resource: ResourceRef,
        since: i64,
        encoding: Encoding,
    ) -> Result<Reply, StoreError> {
        if since <= 0
            && let Some(logs) = &self.short_logs
            && !self
                .chunks
                .as_ref()
                .is_some_and(|h| h.known_long(&resource))
        {
            return self.short_log(logs, resource, since, encoding).await;
        }
        if let Some(chunks) = &self.chunks {
            let form = encoding.form();
            if let Some(answer) = answer(&self.store, chunks, &resource, since, form) {
                let pieces = answer.into_stream().boxed();
                return Ok(Reply::Streamed { pieces, form });
            }
        }
        self.from_store(resource, since).await
    }

    /// Every event of `resource` past `since`, from the store's rows; how
    /// many there were teaches the history cache how far the log has grown
    /// (what lets the next read of it come from the cache).
    pub async fn from_store(&self, resource: ResourceRef, since: i64) -> Result<Reply, StoreError> {
        let rows = self.store.read(events_since(&resource, since)).await?;
        let learn = self.chunks.clone().map(|chunks| Learn {
            chunks,
            resource,
            since,
        });
        rows_reply(rows, learn).await
    }

    /// A whole-log read (`since` ≤ 0) with the short-log cache on: from the
    /// cache, or read and kept when its answer is complete in one piece; a
    /// longer log is streamed as ever.
    async fn short_log(
        &self,
        logs: &ShortLogCache,
        resource: ResourceRef,
        since: i64,
        encoding: Encoding,
    ) -> Result<Reply, StoreError> {
        if let Some(kept) = logs.get(&resource) {
            metrics::counter!("abstore_short_log_answers_total", "source" => "cache").increment(1);
            return self.kept(&kept, encoding, || logs.zstd(&resource, &kept).map(Some));
        }
        let ticket = logs.begin(&resource);
        let mut rows = match self.store.read(events_since(&resource, since)).await {
            Ok(rows) => rows,
            Err(err) => {
                logs.abandon(&resource, ticket);
                return Err(err);
            }
        };
        if rows.is_streamed() {
            // Longer than one piece: not kept, streamed as without the cache.
            logs.abandon(&resource, ticket);
            let learn = self.chunks.clone().map(|chunks| Learn {
                chunks,
                resource,
                since: 0,
            });
            return rows_reply(rows, learn).await;
        }
        let text = match collect(&mut rows, usize::MAX).await {
            Ok(text) => text.unwrap_or_default(),
            Err(err) => {
                logs.abandon(&resource, ticket);
                return Err(err);
            }
        };
        if let Some(chunks) = &self.chunks {
            chunks.learn(&resource, 0, rows.count().unwrap_or(0));
        }
        let kept = logs.finish(&resource, ticket, text);
        metrics::counter!("abstore_short_log_answers_total", "source" => "database").increment(1);
        self.kept(&kept, encoding, || logs.zstd(&resource, &kept).map(Some))
    }

    /// `getRepoStateEvents`: the durable events of `repo`'s journal and the
    /// tail from its latest `dispatcher.run-started`. With the state-events
    /// cache on, the journal's tail is read first and the answer as of that
    /// tail comes from the cache when it holds it. An unknown repository is
    /// [`StoreError::NotFound`].
    pub async fn state_events(
        &self,
        repo: ResourceRef,
        encoding: Encoding,
    ) -> Result<Reply, StoreError> {
        let Some(cache) = &self.state_events else {
            let listing = Listing::StateEvents {
                repo: repo.id,
                until: None,
            };
            return rows_reply(self.store.read(listing).await?, None).await;
        };
        let Some(&(_, tail)) = self.store.tails(std::slice::from_ref(&repo)).await?.first() else {
            return Err(StoreError::NotFound(repo));
        };
        let listing = Listing::StateEvents {
            repo: repo.id.clone(),
            until: Some(tail),
        };
        let (answer, source) = match cache.get(&repo.id, tail) {
            Some(answer) => (answer, "cache"),
            None => {
                let mut rows = self.store.read(listing.clone()).await?;
                let text = collect(&mut rows, cache.max_answer_bytes()).await?;
                (cache.insert(&repo.id, tail, text), "database")
            }
        };
        let Some(kept) = &answer.kept else {
            // Too large to keep: streamed as without the cache.
            metrics::counter!("abstore_state_events_answers_total", "source" => "streamed")
                .increment(1);
            return rows_reply(self.store.read(listing).await?, None).await;
        };
        metrics::counter!("abstore_state_events_answers_total", "source" => source).increment(1);
        self.kept(kept, encoding, || answer.zstd(cache, &repo.id))
    }

    /// `listBuildDigests`: the digest of every build of `repo`, by slug
    /// (`[]` for a repository without builds, known or not). With the
    /// digests cache on, the builds' tails are read first and only the
    /// events past the kept digests' tails are read and folded.
    pub async fn build_digests(&self, repo: &str, encoding: Encoding) -> Result<Reply, StoreError> {
        let Some(cache) = &self.digests else {
            let digests = self.store.build_digests(repo).await?;
            let text = serde_json::to_vec(&digests)
                .map_err(|err| StoreError::Corrupt(format!("build digests as JSON: {err}")))?;
            return Ok(Reply::Text(Bytes::from(text)));
        };
        let tails = self.store.build_tails(repo).await?;
        let kept = cache.get(repo);
        let (digests, source) = match kept {
            Some(kept) if kept.is_at(&tails) => (kept, "cache"),
            kept => {
                let spans = RepoDigests::spans(kept.as_deref(), &tails);
                let source = if kept.is_some() {
                    "advanced"
                } else {
                    "database"
                };
                let events = self.store.digest_events(spans).await?;
                let digests = Arc::new(RepoDigests::advance(kept.as_deref(), &tails, events)?);
                cache.insert(repo, digests.clone());
                (digests, source)
            }
        };
        metrics::counter!("abstore_build_digests_answers_total", "source" => source).increment(1);
        self.kept(&digests.kept, encoding, || digests.zstd(cache, repo))
    }

    /// A kept answer: its zstd form when the client takes zstd and the
    /// answer is as large as the compression layer would compress; its
    /// text otherwise (which the layer compresses for a gzip or brotli
    /// client, as any answer).
    fn kept(
        &self,
        kept: &KeptAnswer,
        encoding: Encoding,
        zstd: impl FnOnce() -> Result<Option<Bytes>, StoreError>,
    ) -> Result<Reply, StoreError> {
        let text = kept.text();
        let compress = self
            .compress_min_bytes
            .is_some_and(|min| text.len() >= usize::from(min));
        if compress
            && encoding.is_zstd()
            && let Some(frame) = zstd()?
        {
            return Ok(Reply::Zstd(frame));
        }
        Ok(Reply::Text(text.clone()))
    }
}

/// What a read of the store's rows teaches the history cache once it has
/// them all: `resource`'s log reached `since` plus their count.
struct Learn {
    chunks: Arc<HistoryCache>,
    resource: ResourceRef,
    since: i64,
}

impl Learn {
    fn rows(self, count: u64) {
        self.chunks.learn(&self.resource, self.since, count);
    }
}

/// `[`, the rows, `]`: whole, with its length, when everything arrived with
/// the first message; else streamed a piece at a time, so that its memory
/// stays a few pieces whatever the history's size. `learn` hears the count
/// once the store has produced every row (not when the read fails or its
/// client leaves first).
async fn rows_reply(mut rows: Rows, learn: Option<Learn>) -> Result<Reply, StoreError> {
    if !rows.is_streamed() {
        let mut body = BytesMut::from(&b"["[..]);
        while let Some(step) = rows.next().await {
            match step? {
                Next::Piece(piece) => body.extend_from_slice(&piece),
                Next::End(()) => break,
            }
        }
        body.extend_from_slice(b"]");
        if let Some(learn) = learn {
            learn.rows(rows.count().unwrap_or(0));
        }
        return Ok(Reply::Text(body.freeze()));
    }
    let pieces = futures_util::stream::unfold(Stage::Open(rows, learn), |stage| async move {
        match stage {
            Stage::Open(rows, learn) => {
                Some((Ok(Bytes::from_static(b"[")), Stage::Rows(rows, learn)))
            }
            Stage::Rows(mut rows, learn) => match rows.next().await {
                Some(Ok(Next::Piece(piece))) => Some((Ok(piece), Stage::Rows(rows, learn))),
                Some(Ok(Next::End(()))) | None => {
                    if let (Some(learn), Some(count)) = (learn, rows.count()) {
                        learn.rows(count);
                    }
                    Some((Ok(Bytes::from_static(b"]")), Stage::Done))
                }
                Some(Err(err)) => Some((Err(err), Stage::Done)),
            },
            Stage::Done => None,
        }
    });
    Ok(Reply::Streamed {
        pieces: pieces.boxed(),
        form: Form::Text,
    })
}

enum Stage {
    Open(Rows, Option<Learn>),
    Rows(Rows, Option<Learn>),
    Done,
}

/// Every event of `resource` past `since`.
fn events_since(resource: &ResourceRef, since: i64) -> Listing {
    Listing::Events {
        resource: resource.clone(),
        since,
        until: None,
    }
}
