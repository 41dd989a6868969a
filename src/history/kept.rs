//! An answer kept whole in memory: its JSON text, and its zstd form made
//! the first time a client asks for it, at the compression layer's level
//! (so a miss never costs more than the uncached answer did). Shared by the
//! state-events and short-log caches, which account its bytes.

use std::sync::OnceLock;

use bytes::{Bytes, BytesMut};

use super::frames;
use crate::store::rows::Next;
use crate::store::{Rows, StoreError};

pub struct KeptAnswer {
    text: Bytes,
    zstd: OnceLock<Bytes>,
}

impl KeptAnswer {
    pub fn new(text: Bytes) -> Self {
        KeptAnswer {
            text,
            zstd: OnceLock::new(),
        }
    }

    /// The JSON text.
    pub fn text(&self) -> &Bytes {
        &self.text
    }

    /// The text and its zstd form, when made.
    pub fn held_bytes(&self) -> usize {
        self.text.len() + self.zstd.get().map_or(0, Bytes::len)
    }

    /// The answer as one zstd frame, and whether this call made it (for the
    /// cache to count it again; two racing callers may both compress, only
    /// the frame kept is counted).
    pub fn zstd(&self) -> Result<(Bytes, bool), StoreError> {
        if let Some(done) = self.zstd.get() {
            return Ok((done.clone(), false));
        }
        let mut encoder = frames::encoder(frames::LIVE_LEVEL);
        frames::compress(&mut encoder, &self.text)?;
        let frame = frames::finish(encoder)?;
        let made = self.zstd.set(frame.clone()).is_ok();
        Ok((self.zstd.get().cloned().unwrap_or(frame), made))
    }
}

/// A read's whole answer, `[`…`]`, or `None` once it grows past `max`
/// bytes (the caller then drops the rest of the read, which stops it).
/// `rows.count()` tells how many rows it held.
pub async fn collect(rows: &mut Rows, max: usize) -> Result<Option<Bytes>, StoreError> {
    let mut text = BytesMut::from(&b"["[..]);
    while let Some(step) = rows.next().await {
        match step? {
            Next::Piece(piece) => {
                if text.len() + piece.len() + 1 > max {
                    return Ok(None);
                }
                text.extend_from_slice(&piece);
            }
            Next::End(()) => break,
        }
    }
    text.extend_from_slice(b"]");
    Ok(Some(text.freeze()))
}
