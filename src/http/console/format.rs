//! Times, sizes and payloads as a page shows them.

use serde_json::Value;

/// Epoch milliseconds as the protocol's ISO time.
pub fn time(ms: i64) -> String {
    crate::protocol::time::format_iso(ms)
}

/// A byte count for people: `812 B`, `4.2 KiB`, `1.3 MiB`.
pub fn size(bytes: i64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Text shown at most `max` characters long, with how much was left out.
pub fn clipped(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((at, _)) => format!("{}… ({} more bytes)", &text[..at], text.len() - at),
    }
}

/// A payload pretty-printed, clipped to `max` characters: the page stays
/// small whatever a payload holds.
pub fn payload(value: &Value, max: usize) -> String {
    let pretty = serde_json::to_string_pretty(value).unwrap_or_default();
    clipped(&pretty, max)
}

/// A value shown as text: strings as they are, anything else as JSON.
pub fn text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_clipping() {
        assert_eq!(size(812), "812 B");
        assert_eq!(size(4300), "4.2 KiB");
        assert_eq!(size(3 * 1024 * 1024), "3.0 MiB");
        assert_eq!(clipped("héllo", 10), "héllo");
        assert_eq!(clipped("héllo", 2), "hé… (3 more bytes)");
        assert_eq!(
            payload(&serde_json::json!({"a": 1}), 100),
            "{\n  \"a\": 1\n}"
        );
    }
}
