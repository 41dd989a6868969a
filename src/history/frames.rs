//! zstd frames: each complete chunk, prefix and live segment is one frame,
//! and frames concatenate into one valid stream (RFC 8878, section 3.1).

use std::io::{Read as _, Write as _};
use std::sync::OnceLock;

use bytes::Bytes;

use crate::store::StoreError;

/// The zstd level chunk frames are compressed at: each is compressed once
/// and sent many times, so a better ratio than the live level is worth it.
pub(super) const CHUNK_LEVEL: i32 = 3;
/// The level of the live head and tail: as the compression layer's fastest.
pub(super) const LIVE_LEVEL: i32 = 1;

pub(super) type Encoder = zstd::stream::write::Encoder<'static, Vec<u8>>;

pub(super) fn encoder(level: i32) -> Encoder {
    // Only fails for an out-of-range level or without memory.
    Encoder::new(Vec::new(), level).expect("a zstd encoder at a valid level")
}

pub(super) fn compress(encoder: &mut Encoder, text: &[u8]) -> Result<(), StoreError> {
    encoder
        .write_all(text)
        .map_err(|err| StoreError::Corrupt(format!("zstd: {err}")))
}

pub(super) fn finish(encoder: Encoder) -> Result<Bytes, StoreError> {
    encoder
        .finish()
        .map(Bytes::from)
        .map_err(|err| StoreError::Corrupt(format!("zstd: {err}")))
}

/// The most of a frame's text decoded at a time: a chunk's text is bounded
/// only by its events' sizes.
pub(super) const TEXT_PIECE: usize = 64 * 1024;

/// The text of a frame the cache made, in pieces of at most [`TEXT_PIECE`]
/// bytes.
pub(super) struct TextPieces<'a> {
    decoder: zstd::stream::read::Decoder<'static, &'a [u8]>,
}

pub(super) fn text_pieces(frame: &[u8]) -> Result<TextPieces<'_>, StoreError> {
    let decoder = zstd::stream::read::Decoder::with_buffer(frame).map_err(corrupt)?;
    Ok(TextPieces { decoder })
}

impl Iterator for TextPieces<'_> {
    type Item = Result<Vec<u8>, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut piece = Vec::with_capacity(TEXT_PIECE);
        match (&mut self.decoder)
            .take(TEXT_PIECE as u64)
            .read_to_end(&mut piece)
        {
            Ok(0) => None,
            Ok(_) => Some(Ok(piece)),
            Err(err) => Some(Err(corrupt(err))),
        }
    }
}

/// A cached frame that does not decompress: the cache holds only frames it
/// made, so this is memory gone bad; the answer is cut short.
fn corrupt(err: std::io::Error) -> StoreError {
    StoreError::Corrupt(format!("a cached history frame: {err}"))
}

pub(super) static OPEN: OnceLock<Bytes> = OnceLock::new();
pub(super) static COMMA: OnceLock<Bytes> = OnceLock::new();
pub(super) static CLOSE: OnceLock<Bytes> = OnceLock::new();

/// The one-frame encoding of a fixed piece of JSON framing, made once.
pub(super) fn constant_frame(cell: &'static OnceLock<Bytes>, text: &'static [u8]) -> Bytes {
    cell.get_or_init(|| {
        let mut encoder = encoder(LIVE_LEVEL);
        compress(&mut encoder, text)
            .and_then(|()| finish(encoder))
            .expect("compressing a constant in memory")
    })
    .clone()
}

/// A chunk's frame of `text`, as the cache makes one (for other modules'
/// tests).
#[cfg(test)]
pub(super) fn chunk_frame(text: &[u8]) -> Bytes {
    let mut encoder = encoder(CHUNK_LEVEL);
    compress(&mut encoder, text).unwrap();
    finish(encoder).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_concatenate_into_one_json_text() {
        let mut body = Vec::new();
        body.extend_from_slice(&constant_frame(&OPEN, b"["));
        let mut complete = encoder(CHUNK_LEVEL);
        compress(&mut complete, br#"{"seq":1},{"seq":2}"#).unwrap();
        body.extend_from_slice(&finish(complete).unwrap());
        body.extend_from_slice(&constant_frame(&COMMA, b","));
        let mut live = encoder(LIVE_LEVEL);
        compress(&mut live, br#"{"seq":3}"#).unwrap();
        body.extend_from_slice(&finish(live).unwrap());
        body.extend_from_slice(&constant_frame(&CLOSE, b"]"));
        let text = zstd::decode_all(&body[..]).unwrap();
        assert_eq!(text, br#"[{"seq":1},{"seq":2},{"seq":3}]"#);
    }
}
