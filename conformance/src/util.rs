//! Small helpers with no I/O: ISO-8601 millisecond times, unique names,
//! path-segment percent-encoding, canonical base64 and SHA-256 hex.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine as _;
use sha2::Digest as _;

/// Parses `YYYY-MM-DDTHH:MM:SS.mmmZ` (JavaScript `Date.toISOString()` form)
/// into epoch milliseconds. Anything else is `None`.
pub fn parse_iso_ms(s: &str) -> Option<i64> {
    if !is_iso_ms(s) {
        return None;
    }
    let n = |r: std::ops::Range<usize>| s[r].parse::<i64>().ok();
    let (y, mo, d) = (n(0..4)?, n(5..7)?, n(8..10)?);
    let (h, mi, se, ms) = (n(11..13)?, n(14..16)?, n(17..19)?, n(20..23)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 59 {
        return None;
    }
    let days = days_from_civil(y, mo, d);
    Some(((days * 24 + h) * 60 + mi) * 60_000 + se * 1000 + ms)
}

/// Formats epoch milliseconds as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn format_iso_ms(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let rem = ms.rem_euclid(86_400_000);
    let (y, mo, d) = civil_from_days(days);
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000
    )
}

/// True when `s` has exactly the shape `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`.
pub fn is_iso_ms(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 24 {
        return false;
    }
    b.iter().enumerate().all(|(i, c)| match i {
        4 | 7 => *c == b'-',
        10 => *c == b'T',
        13 | 16 => *c == b':',
        19 => *c == b'.',
        23 => *c == b'Z',
        _ => c.is_ascii_digit(),
    })
}

// Proleptic Gregorian day counting relative to 1970-01-01 (era arithmetic).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// A lowercase hex token unique within this process and very likely unique
/// across processes (random per-process seed plus a counter).
pub fn random_hex() -> String {
    static SEED: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let seed = *SEED.get_or_init(|| {
        let mut h = RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0),
        );
        h.write_u32(std::process::id());
        h.finish()
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(seed);
    h.write_u64(n);
    format!("{:08x}{:04x}", h.finish() as u32, n & 0xffff)
}

/// `prefix-<random>`: a fresh resource name for one check.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", random_hex())
}

/// Percent-encodes one path segment: everything except RFC 3986 unreserved
/// characters, so `/` becomes `%2F`.
pub fn enc(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Canonical padded standard base64.
pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Decodes canonical padded standard base64 (used to read responses).
pub fn unb64(text: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Truncates long text for failure messages.
pub fn trunc(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &s[..end], s.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_round_trip() {
        let t = "2026-07-15T12:00:00.000Z";
        let ms = parse_iso_ms(t).expect("parses");
        assert_eq!(ms, 1_784_116_800_000);
        assert_eq!(format_iso_ms(ms), t);
        assert_eq!(
            format_iso_ms(ms + 86_400_000 * 200 + 1),
            "2027-01-31T12:00:00.001Z"
        );
        assert_eq!(
            parse_iso_ms("2024-02-29T23:59:59.999Z")
                .map(format_iso_ms)
                .as_deref(),
            Some("2024-02-29T23:59:59.999Z")
        );
        assert!(parse_iso_ms("2026-07-15T12:00:00Z").is_none());
        assert!(parse_iso_ms("2026-07-15 12:00:00.000Z").is_none());
    }

    #[test]
    fn encodes_segments() {
        assert_eq!(enc("acme/widgets"), "acme%2Fwidgets");
        assert_eq!(enc("a b~é"), "a%20b~%C3%A9");
    }

    #[test]
    fn unique_names_differ() {
        assert_ne!(unique("x"), unique("x"));
    }
}
