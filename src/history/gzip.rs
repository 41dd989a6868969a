//! gzip answers from the history cache: one gzip member (RFC 1952) whose
//! deflate stream (RFC 1951) is put together from pieces compressed apart.
//!
//! A raw deflate stream ended by a sync flush stops on a byte boundary after
//! an empty stored block, with no block marked final; another such stream,
//! compressed afresh (it refers to nothing before its start), may follow it
//! directly, and one empty final block (`03 00`) ends the whole. So each
//! cached chunk's text is deflated once, kept beside its zstd frame, and
//! copied into every gzip answer that spans it, between the live pieces
//! deflated now; the member's CRC-32 is combined from the pieces' own
//! (`crc32fast::Hasher::combine`). pigz assembles its parallel output the
//! same way. No crate offers this assembly; flate2 and crc32fast do the
//! compressing and the checksums.

use bytes::Bytes;
use flate2::{Compress, Compression, FlushCompress};

use super::frames::text_pieces;
use crate::store::StoreError;

/// The member's header: deflate, no name or time, unknown OS.
const HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];

/// An empty final block with fixed codes: the deflate stream's end.
const FINAL_BLOCK: [u8; 2] = [0x03, 0x00];

/// The compression layer's gzip level (`CompressionLevel::Fastest`), for
/// the live pieces and the cached chunks alike.
fn level() -> Compression {
    Compression::fast()
}

/// A chunk's text as a deflate stream ended by a sync flush, with the
/// text's CRC-32 and length.
#[derive(Clone)]
pub(super) struct Deflated {
    pub(super) bytes: Bytes,
    crc: u32,
    len: u64,
}

/// Deflate the text of a zstd `frame` (one the cache made), piece by piece.
pub(super) fn deflate_frame(frame: &[u8]) -> Result<Deflated, StoreError> {
    let mut deflate = Compress::new(level(), false);
    let mut crc = crc32fast::Hasher::new();
    let mut out = Vec::with_capacity(frame.len());
    for piece in text_pieces(frame)? {
        let piece = piece?;
        crc.update(&piece);
        compress(&mut deflate, &piece, &mut out, FlushCompress::None)?;
    }
    compress(&mut deflate, &[], &mut out, FlushCompress::Sync)?;
    let len = crc.total_len();
    Ok(Deflated {
        bytes: Bytes::from(out),
        crc: crc.finalize(),
        len,
    })
}

/// One gzip answer being written: the live pieces' compressor and the
/// CRC-32 of the text so far.
pub(super) struct Member {
    deflate: Compress,
    crc: crc32fast::Hasher,
}

impl Member {
    /// A member, and the header its answer starts with.
    pub(super) fn start() -> (Member, Bytes) {
        let member = Member {
            deflate: Compress::new(level(), false),
            crc: crc32fast::Hasher::new(),
        };
        (member, Bytes::from_static(&HEADER))
    }

    /// `text`, deflated and flushed to a byte boundary.
    pub(super) fn text(&mut self, text: &[u8]) -> Result<Bytes, StoreError> {
        self.crc.update(text);
        let mut out = Vec::with_capacity(text.len() / 2 + 64);
        compress(&mut self.deflate, text, &mut out, FlushCompress::Sync)?;
        Ok(Bytes::from(out))
    }

    /// A cached chunk's stream follows: its checksum joins the member's,
    /// and the live compressor starts afresh after it (its window must not
    /// reach back past text it did not see).
    pub(super) fn chunk(&mut self, chunk: &Deflated) {
        self.crc.combine(&crc32fast::Hasher::new_with_initial_len(
            chunk.crc, chunk.len,
        ));
        self.deflate.reset();
    }

    /// The end of the deflate stream and the member's trailer.
    pub(super) fn finish(self) -> Bytes {
        let len = self.crc.total_len();
        let mut out = Vec::with_capacity(10);
        out.extend_from_slice(&FINAL_BLOCK);
        out.extend_from_slice(&self.crc.finalize().to_le_bytes());
        // ISIZE: the text's length modulo 2^32 (RFC 1952, 2.3.1).
        out.extend_from_slice(&(len as u32).to_le_bytes());
        Bytes::from(out)
    }
}

/// Compress all of `input` into `out` with `flush`, growing `out` as needed.
fn compress(
    deflate: &mut Compress,
    mut input: &[u8],
    out: &mut Vec<u8>,
    flush: FlushCompress,
) -> Result<(), StoreError> {
    loop {
        if out.capacity() - out.len() < 64 {
            out.reserve(out.capacity().max(1024));
        }
        let before = deflate.total_in();
        deflate
            .compress_vec(input, out, flush)
            .map_err(|err| StoreError::Corrupt(format!("deflate: {err}")))?;
        let taken = usize::try_from(deflate.total_in() - before).unwrap_or(input.len());
        input = &input[taken.min(input.len())..];
        // Done once the input is taken and the flush left room to spare
        // (zlib's rule: a full output buffer may hold more to come).
        if input.is_empty() && out.capacity() - out.len() >= 64 {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    use super::*;
    use crate::history::frames::chunk_frame as frame;

    /// Live pieces and cached chunks in any order make one member that
    /// decodes to their text, with the right checksum and length.
    #[test]
    fn pieces_and_chunks_make_one_member() {
        let big: Vec<u8> = (0..200_000u32)
            .flat_map(|i| format!("{{\"seq\":{i}}},").into_bytes())
            .collect();
        let chunks = [
            deflate_frame(&frame(br#"{"seq":1},{"seq":2}"#)).unwrap(),
            deflate_frame(&frame(&big)).unwrap(),
            deflate_frame(&frame(b"")).unwrap(),
        ];
        let (mut member, header) = Member::start();
        let mut body = header.to_vec();
        let mut expected = Vec::new();
        for (text, chunk) in [
            (&b"["[..], Some(0)),
            (b",", Some(1)),
            (b"", Some(2)),
            (b"x]", None),
        ] {
            body.extend_from_slice(&member.text(text).unwrap());
            expected.extend_from_slice(text);
            if let Some(i) = chunk {
                member.chunk(&chunks[i]);
                body.extend_from_slice(&chunks[i].bytes);
                expected.extend_from_slice(match i {
                    0 => br#"{"seq":1},{"seq":2}"#,
                    1 => &big,
                    _ => b"",
                });
            }
        }
        body.extend_from_slice(&member.finish());
        // A single-member decoder: what HTTP clients use.
        let mut text = Vec::new();
        flate2::read::GzDecoder::new(&body[..])
            .read_to_end(&mut text)
            .unwrap();
        assert!(text == expected, "the member decodes to its pieces' text");
        // The decoder checks CRC-32 and ISIZE; check them by hand too.
        let trailer = &body[body.len() - 8..];
        assert_eq!(trailer[..4], crc32fast::hash(&expected).to_le_bytes());
        assert_eq!(trailer[4..], (expected.len() as u32).to_le_bytes());
    }
}
