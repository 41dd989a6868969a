//! How a request's `Accept-Encoding` takes an answer ([`encoding`]), for
//! the reads `crate::history` answers.
//!
//! The history cache's read (`crate::history`) compresses its answers itself,
//! and must pick exactly the encoding the compression layer would have
//! picked for the same request. tower-http's negotiation cannot be called:
//! in tower-http 0.6.11 `Encoding`, `Encoding::from_headers` and
//! `encodings` (src/content_encoding.rs) are all `pub(crate)`, and the
//! compression layer exposes only its choice of predicate, not its choice of
//! coding. So its rule is restated here, and tests/it/history_cache.rs checks
//! the two agree through the binary: entries of every `Accept-Encoding` header,
//! unknown codings and malformed q-values ignored, `q=0` refused, and the
//! highest q-value wins, ties going to zstd, then brotli, then gzip, then
//! identity. zstd is answered from the history cache's frames as they are:
//! it is what Autobuild's client (Bun's `fetch`) gets, and its frames
//! concatenate into one valid stream (RFC 8878, section 3.1). gzip is one
//! member put together from deflated chunks (`crate::history`'s `gzip`).
//! Any other client gets their text, which the compression layer
//! compresses as it would any answer.
//!
//! A few clients take zstd but not several frames whatever the reads that
//! bring them ([`takes_zstd_frames`]): they are answered by the compression
//! layer, in one frame.

use axum::http::{HeaderMap, header};

use crate::history::reader::Encoding;

/// The codings the compression layer knows, least preferred first (the
/// order breaks ties).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Coding {
    Identity,
    Gzip,
    Brotli,
    Zstd,
}

/// How the client takes an answer, as `crate::history` reads it: the
/// coding the compression layer would pick, and for zstd whether the client
/// takes several frames.
pub fn encoding(headers: &HeaderMap) -> Encoding {
    match chosen(headers) {
        Some(Coding::Zstd) if takes_zstd_frames(headers) => Encoding::Zstd,
        Some(Coding::Zstd) => Encoding::ZstdOneFrame,
        Some(Coding::Gzip) => Encoding::Gzip,
        Some(Coding::Brotli) => Encoding::Brotli,
        Some(Coding::Identity) | None => Encoding::Identity,
    }
}

/// The coding the compression layer would pick; `None` when nothing
/// acceptable is named (it then answers identity).
fn chosen(headers: &HeaderMap) -> Option<Coding> {
    let accepted = headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(entry);
    accepted
        .filter(|(_, q)| *q > 0)
        .max_by_key(|&(coding, q)| (q, coding))
        .map(|(coding, _)| coding)
}

/// Whether the client decodes a zstd answer of several frames however its
/// reads of the body fall (RFC 8878, section 3.1, allows any number; the
/// history cache's zstd answers are several). Python's clients built on
/// python-zstandard's `decompressobj`, httpx (0.29 and before) and urllib3
/// 2.0–2.5 (requests' transport, whose version its User-Agent does not
/// tell), start a new frame only within the call that finished the last:
/// a read of the body that ends exactly at a frame's end fails the next one
/// (`cannot use a decompressobj multiple times`). The history cache's zstd
/// answers never end an HTTP chunk there (`crate::history`'s `seams`), but
/// a network read may still, so these clients, known by their default
/// User-Agent, get one frame from the compression layer instead
/// (docs/operations.md, "HTTP clients").
fn takes_zstd_frames(headers: &HeaderMap) -> bool {
    /// The User-Agent products of the clients above, as they send them.
    const ONE_FRAME_ONLY: [&[u8]; 3] = [b"python-httpx/", b"python-requests/", b"python-urllib3/"];
    let Some(agent) = headers.get(header::USER_AGENT) else {
        return true;
    };
    let agent = agent.as_bytes();
    !ONE_FRAME_ONLY.iter().any(|product| {
        agent.len() >= product.len() && agent[..product.len()].eq_ignore_ascii_case(product)
    })
}

/// One `coding[;q=…]` entry; `None` for an unknown coding or a bad q-value.
fn entry(text: &str) -> Option<(Coding, u16)> {
    let mut parts = text.splitn(2, ';');
    let name = parts.next()?.trim();
    let coding = if name.eq_ignore_ascii_case("zstd") {
        Coding::Zstd
    } else if name.eq_ignore_ascii_case("br") {
        Coding::Brotli
    } else if name.eq_ignore_ascii_case("gzip") || name.eq_ignore_ascii_case("x-gzip") {
        Coding::Gzip
    } else if name.eq_ignore_ascii_case("identity") {
        Coding::Identity
    } else {
        return None;
    };
    let q = match parts.next() {
        None => 1000,
        Some(q) => q_value(q.trim())?,
    };
    Some((coding, q))
}

/// An RFC 9110 q-value (`q=0`, `q=0.5`, `q=1.000`) in thousandths.
fn q_value(text: &str) -> Option<u16> {
    let value = text
        .strip_prefix("q=")
        .or_else(|| text.strip_prefix("Q="))?;
    let (whole, fraction) = value.split_once('.').unwrap_or((value, ""));
    let whole: u16 = match whole {
        "0" => 0,
        "1" => 1000,
        _ => return None,
    };
    if fraction.len() > 3 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut thousandths = 0u16;
    for (i, digit) in fraction.bytes().enumerate() {
        thousandths += u16::from(digit - b'0') * [100, 10, 1][i];
    }
    let q = whole + thousandths;
    (q <= 1000).then_some(q)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn zstd_for(values: &[&str]) -> bool {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(
                header::ACCEPT_ENCODING,
                HeaderValue::from_str(value).unwrap(),
            );
        }
        chosen(&headers) == Some(Coding::Zstd)
    }

    #[test]
    fn zstd_wins_ties_and_loses_to_a_higher_q_value() {
        // What Bun's fetch sends.
        assert!(zstd_for(&["gzip, deflate, br, zstd"]));
        assert!(zstd_for(&["zstd"]));
        assert!(zstd_for(&["identity, zstd"]));
        assert!(zstd_for(&["gzip;q=0.5", "zstd;q=0.6"]));
        assert!(!zstd_for(&["gzip;q=1, zstd;q=0.999"]));
        assert!(!zstd_for(&["br, zstd;q=0.5"]));
        assert!(!zstd_for(&["identity;q=1, zstd;q=0.9"]));
    }

    #[test]
    fn gzip_is_chosen_where_it_wins() {
        let gzip_for = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(
                header::ACCEPT_ENCODING,
                HeaderValue::from_str(value).unwrap(),
            );
            chosen(&headers) == Some(Coding::Gzip)
        };
        assert!(gzip_for("gzip, deflate"));
        assert!(gzip_for("x-gzip"));
        assert!(gzip_for("gzip;q=1, zstd;q=0.999"));
        assert!(!gzip_for("gzip, deflate, br, zstd"));
        assert!(!gzip_for("gzip, br"));
        assert!(!gzip_for("gzip;q=0"));
        assert!(!gzip_for("identity"));
    }

    #[test]
    fn pythons_clients_are_known_by_their_user_agent() {
        let takes = |agent: Option<&str>| {
            let mut headers = HeaderMap::new();
            if let Some(agent) = agent {
                headers.insert(header::USER_AGENT, HeaderValue::from_str(agent).unwrap());
            }
            takes_zstd_frames(&headers)
        };
        for one_frame in [
            "python-httpx/0.29.0",
            "python-requests/2.32.3",
            "python-urllib3/2.5.0",
            "Python-HTTPX/0.27.2",
        ] {
            assert!(!takes(Some(one_frame)), "{one_frame}");
        }
        for frames in [
            None,
            Some("Bun/1.4.4"),
            Some("node"),
            Some("curl/7.88.1"),
            Some("Go-http-client/1.1"),
            Some("python-http"),
            Some("my-tool python-httpx/0.29.0"),
        ] {
            assert!(takes(frames), "{frames:?}");
        }
    }

    #[test]
    fn absent_refused_or_malformed_zstd_is_not_chosen() {
        assert!(!zstd_for(&[]));
        assert!(!zstd_for(&["gzip, br"]));
        assert!(!zstd_for(&["zstd;q=0"]));
        assert!(!zstd_for(&["zstd;q=0.000"]));
        assert!(!zstd_for(&["zstd;q=2", "gzip"]));
        assert!(!zstd_for(&["zstd;q=0.1234, gzip;q=0.1"]));
        assert!(!zstd_for(&["zstd;q=, *"]));
        assert!(zstd_for(&["zstd;Q=0.5"]));
        assert!(zstd_for(&["ZSTD ; q=1.000"]));
    }
}
