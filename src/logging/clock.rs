//! A log line's timestamp: RFC 3339 in UTC with microseconds,
//! `2026-12-04T23:51:39.123456Z`, as tracing-subscriber's default timer
//! writes it.
//!
//! The calendar part changes once a second, so each thread keeps the last
//! second it wrote and its text, and a line costs only the six digits of
//! its microseconds.

use std::cell::Cell;
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

/// `YYYY-MM-DDTHH:MM:SS`.
const SECOND_LEN: usize = 19;

thread_local! {
    /// The last second (since the epoch) this thread wrote, and its text.
    static LAST_SECOND: Cell<(u64, [u8; SECOND_LEN])> =
        const { Cell::new((u64::MAX, [0; SECOND_LEN])) };
}

/// Writes `now` as the line's timestamp. A clock before 1970 or past 9999
/// writes `<unknown time>`, as tracing-subscriber does for a time it cannot
/// show.
pub(super) fn write(out: &mut impl fmt::Write, now: SystemTime) -> fmt::Result {
    let Ok(since_epoch) = now.duration_since(UNIX_EPOCH) else {
        return out.write_str("<unknown time>");
    };
    let seconds = since_epoch.as_secs();
    let Some(second) = second_text(seconds) else {
        return out.write_str("<unknown time>");
    };
    // The calendar text is ASCII digits and separators.
    out.write_str(std::str::from_utf8(&second).map_err(|_| fmt::Error)?)?;
    out.write_char('.')?;
    let mut micros = [b'0'; 6];
    digits(&mut micros, since_epoch.subsec_micros());
    out.write_str(std::str::from_utf8(&micros).map_err(|_| fmt::Error)?)?;
    out.write_char('Z')
}

/// The calendar text of `seconds` since the epoch, from this thread's last
/// one when it is the same second.
fn second_text(seconds: u64) -> Option<[u8; SECOND_LEN]> {
    let (last, text) = LAST_SECOND.get();
    if last == seconds {
        return Some(text);
    }
    let at = time::OffsetDateTime::from_unix_timestamp(i64::try_from(seconds).ok()?).ok()?;
    let year = u32::try_from(at.year()).ok().filter(|y| *y <= 9999)?;
    let mut text = *b"0000-00-00T00:00:00";
    digits(&mut text[0..4], year);
    digits(&mut text[5..7], u32::from(u8::from(at.month())));
    digits(&mut text[8..10], u32::from(at.day()));
    digits(&mut text[11..13], u32::from(at.hour()));
    digits(&mut text[14..16], u32::from(at.minute()));
    digits(&mut text[17..19], u32::from(at.second()));
    LAST_SECOND.set((seconds, text));
    Some(text)
}

/// `value`'s last `out.len()` decimal digits into `out`, zero-padded.
fn digits(out: &mut [u8], mut value: u32) {
    for place in out.iter_mut().rev() {
        // A digit is below 10: the cast cannot truncate.
        *place = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn shown(now: SystemTime) -> String {
        let mut out = String::new();
        write(&mut out, now).unwrap();
        out
    }

    /// The same instant's text from `time`'s calendar fields.
    fn expected(now: SystemTime) -> String {
        let at = time::OffsetDateTime::from(now);
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
            at.year(),
            u8::from(at.month()),
            at.day(),
            at.hour(),
            at.minute(),
            at.second(),
            at.microsecond()
        )
    }

    #[test]
    fn instants_are_written_as_rfc_3339_with_microseconds() {
        for since_epoch in [
            Duration::ZERO,
            Duration::from_micros(1),
            Duration::new(951_782_400, 999_999_999), // 2000-02-29, the last ns
            Duration::new(1_796_428_799, 123_456_000), // 2026-12-04T23:59:59
            Duration::new(1_796_428_800, 0),
            Duration::new(253_402_300_799, 999_999_000), // 9999-12-31T23:59:59
        ] {
            let now = UNIX_EPOCH + since_epoch;
            assert_eq!(shown(now), expected(now), "{since_epoch:?}");
        }
    }

    #[test]
    fn the_kept_second_is_replaced_when_the_second_changes() {
        let first = UNIX_EPOCH + Duration::new(1_796_428_799, 5_000);
        let next = first + Duration::from_secs(1);
        assert_eq!(shown(first), "2026-12-04T23:59:59.000005Z");
        assert_eq!(shown(first), "2026-12-04T23:59:59.000005Z");
        assert_eq!(shown(next), "2026-12-05T00:00:00.000005Z");
        assert_eq!(shown(first), "2026-12-04T23:59:59.000005Z");
    }

    #[test]
    fn times_a_line_cannot_show_are_unknown() {
        assert_eq!(shown(UNIX_EPOCH - Duration::from_secs(1)), "<unknown time>");
        assert_eq!(
            shown(UNIX_EPOCH + Duration::from_secs(253_402_300_800)),
            "<unknown time>"
        );
    }
}
