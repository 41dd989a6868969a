//! Store-assigned times: epoch milliseconds inside, JavaScript
//! `Date.prototype.toISOString()` text on the wire.
//!
//! Hand-rolled (days-from-civil arithmetic) because the exact JS spelling
//! matters, including the six-digit signed years JS uses outside 0000–9999,
//! and the conversion is a few lines.

/// The largest instant JavaScript can represent (±8.64e15 ms).
pub const MAX_JS_TIME_MS: i64 = 8_640_000_000_000_000;

/// Format epoch milliseconds exactly as `new Date(ms).toISOString()`.
pub fn format_iso(ms: i64) -> String {
    let ms = ms.clamp(-MAX_JS_TIME_MS, MAX_JS_TIME_MS);
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    let (hh, mm, ss, mmm) = (
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000,
    );
    let year = if (0..=9999).contains(&y) {
        format!("{y:04}")
    } else if y < 0 {
        format!("-{:06}", -y)
    } else {
        format!("+{y:06}")
    };
    format!("{year}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}.{mmm:03}Z")
}

/// Parse `YYYY-MM-DDTHH:MM:SS[.fff]Z` (UTC only) into epoch milliseconds.
pub fn parse_iso(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() < 20 || *b.last()? != b'Z' {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let s = text.get(range)?;
        if s.bytes().all(|c| c.is_ascii_digit()) {
            s.parse().ok()
        } else {
            None
        }
    };
    if b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let millis = match &text[19..text.len() - 1] {
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
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || s > 59 {
        return None;
    }
    Some(days_from_civil(y, mo, d) * 86_400_000 + h * 3_600_000 + mi * 60_000 + s * 1000 + millis)
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

// Howard Hinnant's civil-calendar algorithms (public domain), proleptic Gregorian.
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
    (yoe + era * 400 + i64::from(m <= 2), m, d)
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
        ] {
            assert_eq!(parse_iso(bad), None, "{bad}");
        }
    }
}
