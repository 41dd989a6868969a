//! brotli answers from the history cache: one brotli stream (RFC 7932) put
//! together from pieces compressed apart, as the gzip member is (`super::gzip`).
//!
//! A brotli stream is a window size, then meta-blocks, the last marked
//! ISLAST. Pieces compressed apart cannot simply follow each other: a
//! meta-block may refer to the last distances used and to literals' context
//! (the two bytes before), both carried over from whatever came before it,
//! and to the static dictionary at distances past everything written so
//! far. dropbox's `brotli` encoder has a mode made for this ("catable"):
//! it starts each stream so that none of that reaches back past its own
//! start, uses no dictionary, and ends on a byte boundary without ISLAST; a
//! "bare" stream also leaves out the window size. So an answer is the
//! opening `[` as a stream with the window size (`appendable`), then bare
//! catable streams (each cached chunk's text compressed once and kept
//! beside its zstd frame, the live pieces compressed now), then the one
//! byte `0x03`, an empty ISLAST meta-block. Every stream uses the same
//! window size, so nothing refers further back than the decoder keeps.
//! The crate's README documents this assembly ("Simple Concatenation").

use std::io::Write as _;
use std::sync::OnceLock;

use brotli::enc::BrotliEncoderParams;
use bytes::Bytes;

use super::frames::text_pieces;
use crate::store::StoreError;

/// The window of every stream (lgwin, 4 MiB): the encoder's default and
/// the compression layer's.
const WINDOW: i32 = 22;

/// Every stream's quality. The compression layer's is 0, but at 0 and 1
/// the encoder (brotli 9.1.1) ends every stream with the last-block mark,
/// catable or not, and a decoder stops there: 2 is the lowest that leaves
/// a stream open (`tests` below catch the other). A chunk's stream is made
/// once and copied into every later answer, so its first answer pays for
/// it: quality 4 made it 5 % smaller and the first four answers 30–40 %
/// dearer (docs/benchmarks.md, "Issue 36, sixth pass").
const QUALITY: i32 = 2;

/// The stream's end: an empty meta-block with ISLAST and ISLASTEMPTY set.
pub(super) const END: &[u8] = &[0x03];

/// The encoder's settings for a piece that follows others (`catable`), or
/// for the one that starts the stream.
fn params(first: bool) -> BrotliEncoderParams {
    BrotliEncoderParams {
        quality: QUALITY,
        lgwin: WINDOW,
        bare_stream: true,
        appendable: true,
        catable: !first,
        use_dictionary: first,
        ..BrotliEncoderParams::default()
    }
}

/// One bare stream being compressed. Boxed: the encoder's state is
/// kilobytes, and a chunk's stream lives across the awaits of the task
/// writing the answer, whose future tokio copies when it spawns it (every
/// answer's, zstd ones too: unboxed, a 50-event zstd read cost 5,000
/// instructions more).
pub(super) struct Stream(Box<brotli::CompressorWriter<Vec<u8>>>);

impl Stream {
    fn with(first: bool) -> Stream {
        Stream(Box::new(brotli::CompressorWriter::with_params(
            Vec::new(),
            16 * 1024,
            &params(first),
        )))
    }

    /// A stream that follows others: a chunk's, or a live piece's.
    pub(super) fn catable() -> Stream {
        Stream::with(false)
    }

    pub(super) fn write(&mut self, text: &[u8]) -> Result<(), StoreError> {
        self.0
            .write_all(text)
            .map_err(|err| StoreError::Corrupt(format!("brotli: {err}")))
    }

    /// The stream, ended on a byte boundary (bare: no ISLAST meta-block;
    /// `into_inner` finishes it).
    pub(super) fn finish(self) -> Bytes {
        Bytes::from((*self.0).into_inner())
    }
}

/// The text of a zstd `frame` (one the cache made), as a cached chunk's
/// stream.
pub(super) fn compress_frame(frame: &[u8]) -> Result<Bytes, StoreError> {
    let mut stream = Stream::catable();
    for piece in text_pieces(frame)? {
        stream.write(&piece?)?;
    }
    Ok(stream.finish())
}

/// `text` read now, as a bare catable stream; nothing for no text.
pub(super) fn text(text: &[u8]) -> Result<Bytes, StoreError> {
    if text.is_empty() {
        return Ok(Bytes::new());
    }
    let mut stream = Stream::catable();
    stream.write(text)?;
    Ok(stream.finish())
}

/// A fixed piece of JSON framing (`[`, `,`, `]`) as a stream, made once;
/// `[` starts the answer, so its stream carries the window size.
pub(super) fn constant(text: &'static [u8]) -> Bytes {
    static OPEN: OnceLock<Bytes> = OnceLock::new();
    static COMMA: OnceLock<Bytes> = OnceLock::new();
    static CLOSE: OnceLock<Bytes> = OnceLock::new();
    let (cell, first) = match text {
        b"[" => (&OPEN, true),
        b"," => (&COMMA, false),
        b"]" => (&CLOSE, false),
        // Not framing this module knows: made afresh (it cannot fail in
        // memory).
        _ => return self::text(text).unwrap_or_default(),
    };
    cell.get_or_init(|| {
        let mut stream = Stream::with(first);
        stream
            .write(text)
            .expect("compressing a constant in memory");
        stream.finish()
    })
    .clone()
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    use super::*;
    use crate::history::frames::chunk_frame as frame;

    fn decode(body: &[u8]) -> Vec<u8> {
        let mut text = Vec::new();
        brotli::Decompressor::new(body, 4096)
            .read_to_end(&mut text)
            .unwrap();
        text
    }

    /// Live pieces and cached chunks in any order, repeated, make one
    /// stream that decodes to their text: nothing in a piece refers to what
    /// came before it, however alike the pieces are.
    #[test]
    fn pieces_and_chunks_make_one_stream() {
        let event = |i: u32| format!(r#"{{"seq":{i},"type":"build.step","payload":{{"n":{i}}}}}"#);
        let big: Vec<u8> = (0..60_000u32)
            .map(event)
            .collect::<Vec<_>>()
            .join(",")
            .into_bytes();
        let small = event(7).into_bytes();
        let chunks = [
            compress_frame(&frame(&small)).unwrap(),
            compress_frame(&frame(&big)).unwrap(),
            compress_frame(&frame(b"")).unwrap(),
        ];
        let mut body = constant(b"[").to_vec();
        let mut expected = b"[".to_vec();
        for (i, chunk) in [0, 1, 0, 2, 1, 1, 0].into_iter().enumerate() {
            if i > 0 {
                body.extend_from_slice(&constant(b","));
                expected.push(b',');
            }
            body.extend_from_slice(&chunks[chunk]);
            expected.extend_from_slice([&small[..], &big[..], b""][chunk]);
            // A live piece like its neighbours, compressed now.
            let live = event(i as u32).into_bytes();
            body.extend_from_slice(&text(&live).unwrap());
            expected.extend_from_slice(&live);
        }
        body.extend_from_slice(&text(b"]").unwrap());
        body.extend_from_slice(END);
        expected.push(b']');
        assert!(
            decode(&body) == expected,
            "the stream decodes to its pieces' text"
        );
        // The large chunk is compressed, not stored.
        assert!(
            chunks[1].len() * 10 < big.len(),
            "{} bytes",
            chunks[1].len()
        );
    }

    /// The shortest answer: `[`, `]` and the end.
    #[test]
    fn an_empty_answer_is_a_valid_stream() {
        let mut body = constant(b"[").to_vec();
        body.extend_from_slice(&constant(b"]"));
        body.extend_from_slice(END);
        assert_eq!(decode(&body), b"[]");
    }
}
