//! Where a streamed SQLite read writes its rows ([`Out`]): pieces sent to the
//! response as they fill, from the blocking thread that steps the statement
//! (a file database), or the whole answer gathered on the writer thread
//! (`sqlite::memory:`, whose rows are in memory anyway and whose one
//! connection must not wait for a client).

use bytes::BytesMut;
use tokio::runtime::Handle;

use crate::store::error::StoreResult;
use crate::store::rows::{RowSink, Rows, StreamedReads};

pub(super) struct Out {
    sink: RowSink<()>,
    /// `None`: gather the whole answer, never send.
    handle: Option<Handle>,
}

impl Out {
    /// Pieces go out through `sink` as they fill (on a blocking thread).
    pub(super) fn streaming(sink: RowSink<()>, handle: Handle) -> Self {
        Out {
            sink,
            handle: Some(handle),
        }
    }

    /// The whole answer stays here until [`Out::into_rows`].
    pub(super) fn gathering() -> Self {
        let (sink, _unused) = StreamedReads::default().sink();
        Out { sink, handle: None }
    }

    pub(super) fn row(&mut self) -> &mut BytesMut {
        self.sink.row()
    }

    pub(super) fn has_rows(&self) -> bool {
        self.sink.has_rows()
    }

    /// Send the piece once it is full; `Aborted` once the client is gone
    /// (the statement then stops where it is).
    pub(super) fn flush_if_full(&mut self) -> StoreResult<()> {
        if let Some(handle) = &self.handle
            && self.sink.is_full()
        {
            handle.block_on(self.sink.send_piece())?;
        }
        Ok(())
    }

    /// End a streaming answer with `outcome`.
    pub(super) fn finish(self, outcome: StoreResult<()>) {
        if let Some(handle) = self.handle {
            handle.block_on(self.sink.finish(outcome));
        }
    }

    /// A gathered answer.
    pub(super) fn into_rows(self) -> Rows {
        self.sink.into_complete(())
    }
}
