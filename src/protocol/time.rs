//! Store-assigned times: epoch milliseconds inside, JavaScript
//! `Date.prototype.toISOString()` text on the wire.
//!
//! The calendar arithmetic is the `time` crate's (with `large-dates`, so the
//! whole JavaScript range of ±275,760 years converts). The spelling is written
//! out here because JavaScript's is exact and not one of `time`'s well-known
//! formats: always three fraction digits, and six-digit signed years outside
//! 0000–9999.

use time::macros::format_description;
use time::{OffsetDateTime, PrimitiveDateTime};

/// The largest instant JavaScript can represent (±8.64e15 ms).
pub const MAX_JS_TIME_MS: i64 = 8_640_000_000_000_000;

/// Format epoch milliseconds exactly as `new Date(ms).toISOString()`.
///
/// The digits are pushed one by one rather than through `format!`: its
/// machinery was 15 % of a builds listing's server CPU (perf, issue 52),
/// where each record spells two to four times.
pub fn format_iso(ms: i64) -> String {
    let ms = ms.clamp(-MAX_JS_TIME_MS, MAX_JS_TIME_MS);
    // Within ±8.64e15 ms every instant is representable with `large-dates`;
    // the epoch is the unreachable fallback.
    let at = OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH);
    let mut out = String::with_capacity(27);
    let year = at.year();
    if (0..=9999).contains(&year) {
        push_digits(&mut out, year.unsigned_abs(), 4);
    } else {
        out.push(if year < 0 { '-' } else { '+' });
        push_digits(&mut out, year.unsigned_abs(), 6);
    }
    for (separator, value, width) in [
        ('-', u32::from(u8::from(at.month())), 2),
        ('-', u32::from(at.day()), 2),
        ('T', u32::from(at.hour()), 2),
        (':', u32::from(at.minute()), 2),
        (':', u32::from(at.second()), 2),
        ('.', u32::from(at.millisecond()), 3),
    ] {
        out.push(separator);
        push_digits(&mut out, value, width);
    }
    out.push('Z');
    out
}

/// `value`'s last `width` decimal digits, zero-padded.
fn push_digits(out: &mut String, value: u32, width: u32) {
    for place in (0..width).rev() {
        let digit = (value / 10u32.pow(place) % 10) as u8;
        out.push(char::from(b'0' + digit));
    }
}

/// Parse `YYYY-MM-DDTHH:MM:SS[.fff…]Z` (four-digit year, UTC only) into
/// epoch milliseconds; fraction digits past the third are truncated.
pub fn parse_iso(text: &str) -> Option<i64> {
    let (date_time, fraction) = (text.get(..19)?, text.get(19..)?.strip_suffix('Z')?);
    // `time` would also take a signed or longer year; the wire's is four digits.
    if !date_time.get(..4)?.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let at = PrimitiveDateTime::parse(
        date_time,
        format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]"),
    )
    .ok()?
    .assume_utc();
    let millis: i64 = match fraction {
        "" => 0,
        frac if frac.len() >= 2 && frac.starts_with('.') => {
            let digits = &frac[1..];
            if !digits.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            let first3: String = digits.chars().chain("000".chars()).take(3).collect();
            first3.parse().ok()?
        }
        _ => return None,
    };
    i64::try_from(at.unix_timestamp_nanos() / 1_000_000)
        .ok()?
        .checked_add(millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_to_iso_string() {
        assert_eq!(format_iso(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_iso(1_784_116_800_000), "2026-07-15T12:00:00.000Z");
        assert_eq!(format_iso(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(format_iso(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(format_iso(MAX_JS_TIME_MS), "+275760-09-13T00:00:00.000Z");
        assert_eq!(format_iso(-MAX_JS_TIME_MS), "-271821-04-20T00:00:00.000Z");
        assert_eq!(format_iso(i64::MAX), "+275760-09-13T00:00:00.000Z");
        assert_eq!(
            format_iso(253_402_300_800_000),
            "+010000-01-01T00:00:00.000Z"
        );
        assert_eq!(
            format_iso(-62_167_219_200_001),
            "-000001-12-31T23:59:59.999Z"
        );
    }

    /// The digits pushed one by one spell what `format!` did, over the
    /// whole JavaScript range.
    #[test]
    fn spells_what_format_did() {
        let by_format = |ms: i64| {
            let at = OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).unwrap();
            let y = at.year();
            let year = if (0..=9999).contains(&y) {
                format!("{y:04}")
            } else if y < 0 {
                format!("-{:06}", -y)
            } else {
                format!("+{y:06}")
            };
            format!(
                "{year}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
                u8::from(at.month()),
                at.day(),
                at.hour(),
                at.minute(),
                at.second(),
                at.millisecond()
            )
        };
        let mut ms: i64 = -MAX_JS_TIME_MS;
        while ms < MAX_JS_TIME_MS {
            assert_eq!(format_iso(ms), by_format(ms), "{ms}");
            // A stride coprime with every calendar unit, so each field
            // takes many values.
            ms = ms.saturating_add(86_400_000_123_457);
        }
        for ms in [-1, 0, 1, 999, 1_000, 1_784_116_800_999, MAX_JS_TIME_MS] {
            assert_eq!(format_iso(ms), by_format(ms), "{ms}");
        }
    }

    #[test]
    fn parses_what_it_formats() {
        for ms in [0, 1_784_116_800_000, 951_782_400_123, 4_102_444_799_999] {
            assert_eq!(parse_iso(&format_iso(ms)), Some(ms));
        }
        assert_eq!(parse_iso("2026-07-15T12:00:00Z"), Some(1_784_116_800_000));
        assert_eq!(parse_iso("2026-07-15T12:00:00.5Z"), Some(1_784_116_800_500));
    }

    #[test]
    fn rejects_malformed_times() {
        for bad in [
            "",
            "2026-07-15",
            "2026-07-15T12:00:00.000",
            "2026-02-30T00:00:00.000Z",
            "2026-07-15T24:00:00.000Z",
            "2026-07-15T12:00:00.Z",
            "2026-07-15 12:00:00.000Z",
            "2026-07-15T12:00:00+01:00",
            "2026-07-15T12:00:60.000Z",
            "+026-07-15T12:00:00.000Z",
            "2026-7-15T12:00:00.000Z",
            "2026-07-15T12:00:00.0a0Z",
            "2026-07-15T12:00:00.000ZZ",
        ] {
            assert_eq!(parse_iso(bad), None, "{bad}");
        }
    }
}
