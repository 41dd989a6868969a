//! Artifact bytes on the wire: strict, canonical, padded standard base64.
//!
//! Artifacts are the largest thing the server decodes (a 64 KiB put is 87 KB
//! of base64), so this uses `base64-simd` (the SIMD codec the AWS SDK uses)
//! rather than the `base64` crate's scalar engine: decoding 64 KiB took 37 µs
//! with `base64` and 6 µs with `base64-simd` on the benchmark machine (AVX2;
//! docs/benchmarks/per-request.md, "What explains the misses"). Its
//! `STANDARD` codec is as strict as `base64`'s: canonical padding required,
//! non-zero trailing bits, whitespace and the URL-safe alphabet refused (the
//! tests below pin that). This module adds the decoded-size ceiling, checked
//! before any decoding work. Tokens, which are short, keep the `base64`
//! crate's engines.

use base64_simd::STANDARD;

#[derive(Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Not strict canonical padded standard base64.
    Malformed,
    /// Decodes to more than the ceiling; carries the ceiling.
    TooLarge { ceiling: usize },
}

/// Decode `text`, refusing anything that would decode past `ceiling` bytes.
pub fn decode(text: &str, ceiling: usize) -> Result<Vec<u8>, DecodeError> {
    if !text.len().is_multiple_of(4) {
        return Err(DecodeError::Malformed);
    }
    let padding = text.bytes().rev().take_while(|&b| b == b'=').count();
    let decoded_len = (text.len() / 4 * 3).saturating_sub(padding.min(2));
    if decoded_len > ceiling {
        return Err(DecodeError::TooLarge { ceiling });
    }
    STANDARD
        .decode_to_vec(text)
        .map_err(|_| DecodeError::Malformed)
}

pub fn encode(bytes: &[u8]) -> String {
    STANDARD.encode_to_string(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_canonical_base64() {
        assert_eq!(decode("", 10), Ok(vec![]));
        assert_eq!(decode("YQ==", 10), Ok(b"a".to_vec()));
        assert_eq!(decode("IyBQbGFuCg==", 10), Ok(b"# Plan\n".to_vec()));
        assert_eq!(decode("+/+/", 10), Ok(vec![0xfb, 0xff, 0xbf]));
    }

    #[test]
    fn rejects_non_canonical_forms() {
        for bad in [
            "YQ", "YQ=", "YR==", "Y Q==", "YQ==\n", "-_-_", "YQ===", "====", "Y===", "@@@@",
            "YQ==YQ==", "Y=Q=", "YWJj\r\n", "YWJ=", "YWI=YWI=",
        ] {
            assert_eq!(decode(bad, 100), Err(DecodeError::Malformed), "{bad:?}");
        }
    }

    #[test]
    fn agrees_with_the_scalar_codec_at_every_length() {
        use base64::Engine as _;
        let scalar = base64::engine::general_purpose::STANDARD;
        // Lengths across the SIMD block sizes and their tails.
        for len in (0..200).chain([1023, 1024, 1025, 65536]) {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 151 % 256) as u8).collect();
            let text = scalar.encode(&bytes);
            assert_eq!(encode(&bytes), text, "encode, length {len}");
            assert_eq!(decode(&text, len), Ok(bytes), "decode, length {len}");
        }
    }

    #[test]
    fn ceiling_is_inclusive_and_checked_before_decoding() {
        let exact = encode(&[7u8; 1024]);
        assert_eq!(decode(&exact, 1024).map(|b| b.len()), Ok(1024));
        let over = encode(&[7u8; 1025]);
        assert_eq!(
            decode(&over, 1024),
            Err(DecodeError::TooLarge { ceiling: 1024 })
        );
        // Garbage of a large size is reported as too large without being decoded.
        assert_eq!(
            decode(&"!".repeat(4000), 1024),
            Err(DecodeError::TooLarge { ceiling: 1024 })
        );
    }
}
