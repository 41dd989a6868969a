//! Artifact bytes on the wire: strict, canonical, padded standard base64.
//!
//! The `base64` crate's `STANDARD` engine already requires canonical padding,
//! rejects non-zero trailing bits, whitespace and the URL-safe alphabet; this
//! module adds the decoded-size ceiling, checked before any decoding work.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

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
    STANDARD.decode(text).map_err(|_| DecodeError::Malformed)
}

pub fn encode(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
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
        ] {
            assert_eq!(decode(bad, 100), Err(DecodeError::Malformed), "{bad:?}");
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
