//! Where a zstd answer from the history cache is cut into HTTP chunks: never
//! where one of its frames ends, except at the answer's own end (issue 49).
//!
//! A zstd answer is several frames (RFC 8878, section 3.1, allows any
//! number), and every piece the writer hands over used to leave as one HTTP
//! chunk, so every chunk but a live segment's first ended exactly at a frame's
//! end. A client that decodes each read of the body apart and cannot start a
//! new frame in a later call than the one that finished the last then fails
//! on the next chunk: Python's httpx (0.29 and before) and urllib3 2.0–2.5
//! (requests') with python-zstandard, whose `decompressobj` refuses any input
//! once its frame is done (`cannot use a decompressobj multiple times`).
//! Here every chunk ends before the last byte of the piece it carries, which
//! goes out with the next one, and short pieces (the JSON framing's frames, a
//! small log's prefix) are gathered into one chunk instead of one each, so a
//! short answer is one chunk. docs/operations.md says what is left to chance
//! (a network read that ends exactly at a frame's end) and who is answered
//! in one frame instead (`crate::http::accept`).
//!
//! Each piece handed to [`Seams::push`] holds at most one frame's end, at
//! its own end: the writer sends each frame, or a live frame's output as the
//! encoder makes it, as one piece.

use bytes::{Bytes, BytesMut};

/// Pieces are gathered while they total at most this much: a chunk per
/// piece costs hyper a chunk header and the body a poll each, while a
/// short answer's pieces (a few frames of JSON framing and a prefix) are
/// worth one chunk; a longer piece (a complete chunk's frame) leaves at
/// once, not copied.
const GATHER: usize = 16 * 1024;

/// A zstd answer's bytes not yet sent, and the rule that cuts them.
#[derive(Default)]
pub(super) struct Seams {
    /// Bytes held back: gathered short pieces, or the last byte of the
    /// last long one.
    held: BytesMut,
}

/// What [`Seams::push`] makes ready to send: up to two chunks, in order.
pub(super) type Ready = [Option<Bytes>; 2];

impl Seams {
    /// Take the answer's next `piece`; the chunks ready to send, none of
    /// which ends where `piece`, or any piece before it, ends.
    pub(super) fn push(&mut self, piece: Bytes) -> Ready {
        let n = piece.len();
        // A one-byte piece is held too: sending what came before it would
        // end a chunk where the piece before it ended.
        if n < 2 || self.held.len() + n <= GATHER {
            self.held.extend_from_slice(&piece);
            return [None, None];
        }
        // What was held, with the piece's first byte (never a frame's end:
        // the piece is longer than one byte), then the piece up to its last
        // byte, which is held for the next chunk.
        let first = (!self.held.is_empty()).then(|| {
            self.held.extend_from_slice(&piece[..1]);
            self.held.split().freeze()
        });
        let from = usize::from(first.is_some());
        let rest = (n - 1 > from).then(|| piece.slice(from..n - 1));
        self.held.extend_from_slice(&piece[n - 1..]);
        [first, rest]
    }

    /// The answer's last chunk: everything still held (it ends where the
    /// answer does).
    pub(super) fn finish(&mut self) -> Bytes {
        self.held.split().freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chunks `pieces` leave as, and the ends of the pieces (offsets in
    /// the whole answer).
    fn cut(pieces: &[Vec<u8>]) -> (Vec<Bytes>, Vec<usize>) {
        let mut seams = Seams::default();
        let mut chunks = Vec::new();
        let mut ends = Vec::new();
        let mut at = 0;
        for piece in pieces {
            at += piece.len();
            if !piece.is_empty() {
                ends.push(at);
            }
            chunks.extend(seams.push(Bytes::from(piece.clone())).into_iter().flatten());
        }
        chunks.push(seams.finish());
        (chunks, ends)
    }

    /// Whatever the pieces' sizes, the chunks are the answer's bytes in
    /// order, and no chunk but the last ends where a piece ended.
    #[test]
    fn no_chunk_ends_where_a_piece_ends() {
        let sizes: &[&[usize]] = &[
            &[12],
            &[12, 2_000, 12],
            &[12, 100_000, 12, 100_000, 1, 12],
            &[12, 100_000, 1, 1, 1, 70_000, 2, 30_000, 12],
            &[12, 16_000, 16_000, 16_000, 16_385, 12],
            &[1, 1, 2, 20_000, 2, 20_000, 0, 12],
            &[100_000],
            &[2, 100_000],
        ];
        for (case, sizes) in sizes.iter().enumerate() {
            let mut n = 0u8;
            let pieces: Vec<Vec<u8>> = sizes
                .iter()
                .map(|&size| {
                    (0..size)
                        .map(|_| {
                            n = n.wrapping_add(1);
                            n
                        })
                        .collect()
                })
                .collect();
            let (chunks, ends) = cut(&pieces);
            let whole: Vec<u8> = pieces.concat();
            assert_eq!(chunks.concat(), whole, "case {case}: the bytes, in order");
            let mut at = 0;
            for chunk in &chunks[..chunks.len() - 1] {
                assert!(!chunk.is_empty(), "case {case}: an empty chunk");
                at += chunk.len();
                assert!(
                    !ends.contains(&at),
                    "case {case}: a chunk ends where a piece ends, at {at}"
                );
            }
            assert_eq!(at + chunks[chunks.len() - 1].len(), whole.len());
        }
    }

    /// A short answer is one chunk; a long piece is not copied.
    #[test]
    fn short_pieces_are_gathered_and_long_ones_sent_in_place() {
        let (chunks, _) = cut(&[vec![1; 12], vec![2; 3_000], vec![3; 12]]);
        assert_eq!(chunks.len(), 1);
        let long = Bytes::from(vec![7u8; 100_000]);
        let mut seams = Seams::default();
        assert_eq!(seams.push(Bytes::from(vec![1u8; 12])), [None, None]);
        let [first, rest] = seams.push(long.clone());
        assert_eq!(first.unwrap().len(), 13);
        let rest = rest.unwrap();
        assert_eq!(rest.len(), 100_000 - 2);
        assert_eq!(rest.as_ptr(), long[1..].as_ptr(), "sent from where it is");
        assert_eq!(seams.finish().len(), 1);
    }
}
