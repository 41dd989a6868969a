//! Ticket text as the hosted protocol treats it: opaque strings, kept byte
//! for byte (never trimmed or normalised), judged blank the way Autobuild's
//! JavaScript judges it, and stored as the JSON string literal that is served.

use crate::protocol::numbers::is_js_whitespace;

/// Whether `text` is empty once JavaScript's `String.prototype.trim` has run:
/// every character is ECMAScript white space or a line terminator. This is
/// not Rust's `char::is_whitespace`: JavaScript counts U+FEFF and not U+0085.
pub fn is_blank(text: &str) -> bool {
    text.chars().all(is_js_whitespace)
}

/// `text` as a JSON string literal, quotes included: the form titles, bodies
/// and comments are stored in. JSON escapes a NUL (`\u0000`), which
/// PostgreSQL's `text` could not hold raw, and the literal is pasted into
/// answers as it is.
pub fn json_string(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

/// `items` as a JSON array of strings: the stored form of labels.
pub fn json_strings(items: &[String]) -> String {
    serde_json::Value::from(items.to_vec()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_is_javascript_trim_empty() {
        for blank in ["", " ", "\n\t", "\u{feff}", "\u{3000}\u{2028}\r\u{b}\u{c}"] {
            assert!(is_blank(blank), "{blank:?}");
        }
        // NEL is Rust white space but not JavaScript's; NUL is neither.
        for text in ["a", " a ", "\u{85}", "\0", "\u{200b}"] {
            assert!(!is_blank(text), "{text:?}");
        }
    }

    #[test]
    fn stored_text_round_trips_every_character() {
        for text in ["", "  body \n\n", "\0nul\0", "é ✓ 𝄞", "\"quoted\" \\ back"] {
            let stored = json_string(text);
            assert!(!stored.contains('\0'));
            assert_eq!(serde_json::from_str::<String>(&stored).unwrap(), text);
        }
        let labels = vec!["a".to_owned(), "b\"".to_owned()];
        assert_eq!(json_strings(&labels), r#"["a","b\""]"#);
    }
}
