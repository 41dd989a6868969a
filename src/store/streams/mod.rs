//! Streams (spec section 6): creation (pruning the scope's old closed
//! streams' chunks), chunk appends under the stream's bounds, reads of a
//! page of chunks, and the close that finalizes a stream into an artifact.

pub(crate) mod sql;

use async_trait::async_trait;

use crate::protocol::{ResourceKind, ResourceRef};
use crate::store::api::{CloseOutcome, NewArtifact, Streams};
use crate::store::artifacts::insert_artifacts;
use crate::store::bounds::OverBound;
use crate::store::engine::{Backend, Engine, WriteTx, Written};
use crate::store::envelope::chunk_json;
use crate::store::error::{StoreError, StoreResult};
use crate::store::records::{StreamArtifact, StreamRecord};
use crate::store::resources::sql::touch;
use crate::store::resources::{locked_tail, next_child_order, write_time};
use crate::store::statement::Statements;

#[async_trait]
impl<B: Backend> Streams for Engine<B> {
    /// A new open stream; the scope's old closed streams lose their chunks
    /// (spec section 6 retention) in the same transaction.
    async fn create_stream(
        &self,
        scope: &ResourceRef,
        id: &str,
        label: &str,
    ) -> StoreResult<StreamRecord> {
        let (scope, id, label) = (scope.clone(), id.to_owned(), label.to_owned());
        self.write_op(move |tx| {
            Box::pin(async move {
                locked_tail(tx, &scope).await?;
                let now = tx.now();
                let order = next_child_order(tx, &scope).await?;
                tx.run(sql::prune_closed_chunks(&scope)).await?;
                tx.run(sql::insert_stream(&id, &scope, &label, now, order))
                    .await?;
                Ok(Written::kept(StreamRecord {
                    id,
                    scope,
                    label,
                    closed: false,
                    created_at: now,
                    closed_at: None,
                    outcome: None,
                    artifact: None,
                    last_seq: 0,
                    bytes: 0,
                }))
            })
        })
        .await
    }

    async fn get_stream(&self, id: &str) -> StoreResult<Option<StreamRecord>> {
        let id = id.to_owned();
        self.read_op(move |db| Box::pin(async move { sql::stream(db, &id).await }))
            .await
    }

    /// The backend's one-statement append first, if it has one; else the
    /// stream row, locked. After the closed check (spec section 6's order
    /// ends there), the stream's bounds: its chunk count, then its bytes
    /// with this chunk as stored.
    async fn append_chunk(&self, id: &str, parts_json: &str) -> StoreResult<String> {
        let (id, parts_json, bounds) = (id.to_owned(), parts_json.to_owned(), self.bounds);
        self.write_op(move |tx| {
            Box::pin(async move {
                let wake = ResourceRef::new(ResourceKind::Stream, &id);
                if let Some(chunk) = tx.try_append_chunk(&id, &parts_json, &bounds).await? {
                    return Ok(Written::waking(chunk, wake));
                }
                let stream = tx
                    .lock_stream(&id)
                    .await?
                    .ok_or_else(|| unknown_stream(&id))?;
                if stream.closed {
                    return Err(StoreError::Closed(id));
                }
                if stream.last_seq >= bounds.max_stream_chunks {
                    return Err(OverBound::stream_chunks(&id, bounds.max_stream_chunks).into());
                }
                let seq = stream.last_seq + 1;
                let ts = tx.now().max(stream.created_at);
                let chunk = chunk_json(&id, seq, ts, &parts_json);
                let size = i64::try_from(chunk.len()).unwrap_or(i64::MAX);
                if size > bounds.max_stream_bytes.saturating_sub(stream.bytes) {
                    let max = bounds.max_stream_bytes;
                    return Err(OverBound::stream_bytes(&id, stream.bytes, size, max).into());
                }
                tx.append_chunk(&id, seq, &chunk).await?;
                Ok(Written::waking(chunk, wake))
            })
        })
        .await
    }

    /// Chunks first, then the record: a close landing between the two reads
    /// is seen as closed with every chunk already read.
    async fn chunks_page(
        &self,
        id: &str,
        since: i64,
        limit: Option<i64>,
    ) -> StoreResult<(StreamRecord, Vec<String>)> {
        let id = id.to_owned();
        self.read_op(move |db| {
            Box::pin(async move {
                let page = sql::chunks_page(&id, since, limit);
                let chunks = db.all(page, |row| row.text(0)).await?;
                let stream = sql::stream(db, &id)
                    .await?
                    .ok_or_else(|| unknown_stream(&id))?;
                Ok((stream, chunks))
            })
        })
        .await
    }

    /// The finalized artifact and the closed mark together, only if the
    /// stream still has `expected_last_seq` chunks.
    async fn close_stream(
        &self,
        id: &str,
        outcome: &str,
        expected_last_seq: i64,
        artifact: NewArtifact,
    ) -> StoreResult<CloseOutcome> {
        let (id, outcome) = (id.to_owned(), outcome.to_owned());
        self.write_op(move |tx| {
            Box::pin(async move {
                let scope = sql::stream(tx, &id)
                    .await?
                    .ok_or_else(|| unknown_stream(&id))?
                    .scope;
                // Resource row before stream row: the order every writer
                // locks in.
                let tail = locked_tail(tx, &scope).await?;
                let stream = tx
                    .lock_stream(&id)
                    .await?
                    .ok_or_else(|| unknown_stream(&id))?;
                if stream.closed {
                    return Ok(Written::unchanged(CloseOutcome::AlreadyClosed(stream)));
                }
                if stream.last_seq != expected_last_seq {
                    return Ok(Written::unchanged(CloseOutcome::Moved));
                }
                let now = write_time(tx, tail);
                let meta = insert_artifacts(tx, &scope, vec![artifact], now)
                    .await?
                    .pop()
                    .ok_or_else(|| StoreError::Corrupt("no artifact inserted".into()))?;
                let stream_artifact = StreamArtifact {
                    kind: meta.kind,
                    revision: meta.revision,
                    blob_ref: meta.blob_ref,
                };
                let order = next_child_order(tx, &scope).await?;
                let close = sql::close_stream(&id, now, order, &outcome, &stream_artifact);
                tx.run(close).await?;
                tx.run(touch(&scope, now)).await?;
                let wake = ResourceRef::new(ResourceKind::Stream, &id);
                Ok(Written::waking(
                    CloseOutcome::Closed(StreamRecord {
                        closed: true,
                        closed_at: Some(now),
                        outcome: Some(outcome),
                        artifact: Some(stream_artifact),
                        ..stream
                    }),
                    wake,
                ))
            })
        })
        .await
    }
}

fn unknown_stream(id: &str) -> StoreError {
    StoreError::NotFound(ResourceRef::new(ResourceKind::Stream, id))
}
