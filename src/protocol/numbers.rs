//! The two query grammars of spec section 3.
//!
//! `since` and `rev` follow JavaScript `Number(raw)` accepted only when
//! `Number.isInteger` holds (so `0x10`, `1e1`, padded and empty values pass);
//! `wait` is strictly one or more ASCII digits. No crate implements JS's
//! `StringToNumber`, so it is written out here against ECMA-262 §7.1.4.1.1.

/// The largest integer every JavaScript client reads exactly
/// (`Number.MAX_SAFE_INTEGER`, 2^53 − 1): sequences, revisions and
/// durations a client may be given stay at or below it.
pub const MAX_SAFE_INTEGER: i64 = 9_007_199_254_740_991;

/// `Number(raw)` when the result is an integer, saturated into `i64`
/// (a huge integer such as `1e300` simply compares past every sequence).
/// `None` for NaN, infinities and fractions.
pub fn js_integer(raw: &str) -> Option<i64> {
    let value = js_number(raw)?;
    if !value.is_finite() || value.trunc() != value {
        return None;
    }
    // `as` saturates at the i64 bounds, which is the comparison we want.
    Some(value as i64)
}

/// JavaScript `Number(string)`; `None` stands for NaN.
pub fn js_number(raw: &str) -> Option<f64> {
    let text = raw.trim_matches(is_js_whitespace);
    if text.is_empty() {
        return Some(0.0);
    }
    for (prefix, radix) in [
        ("0x", 16),
        ("0X", 16),
        ("0o", 8),
        ("0O", 8),
        ("0b", 2),
        ("0B", 2),
    ] {
        if let Some(digits) = text.strip_prefix(prefix) {
            return radix_value(digits, radix);
        }
    }
    let unsigned = text.strip_prefix(['+', '-']).unwrap_or(text);
    if unsigned == "Infinity" {
        return Some(if text.starts_with('-') {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        });
    }
    if !is_decimal_literal(unsigned) {
        return None;
    }
    text.parse::<f64>().ok()
}

/// The `wait` grammar: one or more ASCII digits, nothing else. Large values
/// saturate; callers clamp to their ceiling anyway.
pub fn wait_seconds(raw: &str) -> Option<u64> {
    if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(raw.bytes().fold(0u64, |acc, b| {
        acc.saturating_mul(10).saturating_add(u64::from(b - b'0'))
    }))
}

fn radix_value(digits: &str, radix: u32) -> Option<f64> {
    if digits.is_empty() {
        return None;
    }
    digits.chars().try_fold(0.0f64, |acc, c| {
        Some(acc * f64::from(radix) + f64::from(c.to_digit(radix)?))
    })
}

/// StrUnsignedDecimalLiteral without `Infinity`: digits with an optional
/// fraction (`5.`, `.5`, `5.5`) and an optional signed exponent. Checked here
/// because Rust's float parser also accepts `inf`, `nan` and `infinity`.
fn is_decimal_literal(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    let int_digits = count_digits(&b[i..]);
    i += int_digits;
    let mut frac_digits = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        frac_digits = count_digits(&b[i..]);
        i += frac_digits;
    }
    if int_digits + frac_digits == 0 {
        return false;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let exp_digits = count_digits(&b[i..]);
        if exp_digits == 0 {
            return false;
        }
        i += exp_digits;
    }
    i == b.len()
}

fn count_digits(b: &[u8]) -> usize {
    b.iter().take_while(|c| c.is_ascii_digit()).count()
}

/// ECMAScript WhiteSpace and LineTerminator code points: what JavaScript's
/// `trim` and `Number()` skip.
pub(crate) fn is_js_whitespace(c: char) -> bool {
    matches!(
        c,
        '\u{9}' | '\u{a}' | '\u{b}' | '\u{c}' | '\u{d}' | ' ' | '\u{a0}' | '\u{1680}' | '\u{2000}'
            ..='\u{200a}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202f}'
                | '\u{205f}'
                | '\u{3000}'
                | '\u{feff}'
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_what_number_and_is_integer_accept() {
        let cases = [
            ("0", 0),
            ("17", 17),
            ("0x10", 16),
            ("0X1f", 31),
            ("0o17", 15),
            ("0b101", 5),
            ("1e1", 10),
            ("1E+2", 100),
            ("  3 ", 3),
            ("\t\n4\r", 4),
            ("", 0),
            ("   ", 0),
            ("+5", 5),
            ("-2", -2),
            ("-0", 0),
            ("5.", 5),
            ("5.0", 5),
            (".5e1", 5),
            ("007", 7),
            ("\u{feff}8\u{a0}", 8),
            ("1e300", i64::MAX),
            ("-1e300", i64::MIN),
        ];
        for (raw, want) in cases {
            assert_eq!(js_integer(raw), Some(want), "{raw:?}");
        }
    }

    #[test]
    fn rejects_nan_infinities_and_fractions() {
        for raw in [
            "abc",
            "NaN",
            "Infinity",
            "-Infinity",
            "+Infinity",
            "1.5",
            "0x",
            "0xg",
            "-0x10",
            "1_000",
            "1e",
            "e1",
            ".",
            "+",
            "1 2",
            "inf",
            "nan",
            "infinity",
            "1e-1",
            "0b2",
            "\u{85}1",
        ] {
            assert_eq!(js_integer(raw), None, "{raw:?}");
        }
    }

    #[test]
    fn wait_is_digits_only() {
        assert_eq!(wait_seconds("0"), Some(0));
        assert_eq!(wait_seconds("25"), Some(25));
        assert_eq!(wait_seconds("0030"), Some(30));
        assert_eq!(wait_seconds("99999999999999999999999"), Some(u64::MAX));
        for raw in ["", " 1", "1 ", "+1", "-1", "0x1", "1.5", "1e1", "one"] {
            assert_eq!(wait_seconds(raw), None, "{raw:?}");
        }
    }
}
