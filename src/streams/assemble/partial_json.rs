//! Partial-JSON repair for streamed tool input, ported from `ai@7.0.173`
//! (`src/util/parse-partial-json.ts`, `src/util/fix-json.ts`, and
//! `secureJsonParse` from `@ai-sdk/provider-utils`).
//!
//! `parse_partial_json` first parses the text as is, then the text repaired by
//! `fix_json`; either parse fails when the value holds a `__proto__` key or a
//! `constructor` object with a `prototype` key, as the SDK's secure parse does.
//! `fix_json` is a single linear scan whose states map one-to-one to the SDK's;
//! the SDK walks UTF-16 code units, so a character outside the BMP is fed to the
//! state machine twice (as two non-special units), which keeps the repair
//! identical for such text.
//!
//! Known differences from `JSON.parse`: `serde_json` rejects escapes that decode
//! to a lone surrogate (`"\ud83d"`) and values nested deeper than 128 levels;
//! for such text the input stays undefined where the SDK yields a value.

use serde_json::Value;

/// The SDK's `parsePartialJson(text).value`: `None` means `undefined`.
pub(super) fn parse_partial_json(text: &str) -> Option<Value> {
    secure_parse(text).or_else(|| secure_parse(&fix_json(text)))
}

fn secure_parse(text: &str) -> Option<Value> {
    let value: Value = serde_json::from_str(text).ok()?;
    if has_forbidden_key(&value) {
        return None;
    }
    Some(value)
}

/// `secure-json-parse`'s `filter`: an own `__proto__` key anywhere, or a
/// `constructor` key whose value is an object with an own `prototype` key.
fn has_forbidden_key(root: &Value) -> bool {
    let mut pending = vec![root];
    while let Some(node) = pending.pop() {
        match node {
            Value::Object(map) => {
                if map.contains_key("__proto__") {
                    return true;
                }
                if let Some(Value::Object(ctor)) = map.get("constructor")
                    && ctor.contains_key("prototype")
                {
                    return true;
                }
                pending.extend(map.values());
            }
            Value::Array(items) => pending.extend(items.iter()),
            _ => {}
        }
    }
    false
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    Root,
    Finish,
    InsideString,
    InsideStringEscape,
    InsideStringUnicodeEscape,
    InsideLiteral,
    InsideNumber,
    InsideObjectStart,
    InsideObjectKey,
    InsideObjectAfterKey,
    InsideObjectBeforeValue,
    InsideObjectAfterValue,
    InsideObjectAfterComma,
    InsideArrayStart,
    InsideArrayAfterValue,
    InsideArrayAfterComma,
}

struct Fixer<'a> {
    input: &'a str,
    stack: Vec<State>,
    /// Byte offset just past the last valid unit (`lastValidIndex + 1`).
    valid_end: usize,
    literal_start: usize,
    unicode_escape_digits: u8,
}

impl Fixer<'_> {
    fn top(&self) -> State {
        self.stack.last().copied().unwrap_or(State::Root)
    }

    fn swap_top(&mut self, next: State) {
        self.stack.pop();
        self.stack.push(next);
    }

    fn value_start(&mut self, c: char, at: usize, end: usize, swap: State) {
        let push = match c {
            '"' => {
                self.valid_end = end;
                State::InsideString
            }
            'f' | 't' | 'n' => {
                self.valid_end = end;
                self.literal_start = at;
                State::InsideLiteral
            }
            '-' => State::InsideNumber,
            '0'..='9' => {
                self.valid_end = end;
                State::InsideNumber
            }
            '{' => {
                self.valid_end = end;
                State::InsideObjectStart
            }
            '[' => {
                self.valid_end = end;
                State::InsideArrayStart
            }
            _ => return,
        };
        self.swap_top(swap);
        self.stack.push(push);
    }

    fn after_object_value(&mut self, c: char, end: usize) {
        match c {
            ',' => self.swap_top(State::InsideObjectAfterComma),
            '}' => {
                self.valid_end = end;
                self.stack.pop();
            }
            _ => {}
        }
    }

    fn after_array_value(&mut self, c: char, end: usize) {
        match c {
            ',' => self.swap_top(State::InsideArrayAfterComma),
            ']' => {
                self.valid_end = end;
                self.stack.pop();
            }
            _ => {}
        }
    }

    /// One UTF-16 unit. Non-ASCII units are never special, so `c` is passed as
    /// is for them; `at..end` is the byte range of the whole character.
    fn unit(&mut self, c: char, at: usize, end: usize) {
        match self.top() {
            State::Root => self.value_start(c, at, end, State::Finish),
            State::Finish => {}
            State::InsideObjectStart => match c {
                '"' => self.swap_top(State::InsideObjectKey),
                '}' => {
                    self.valid_end = end;
                    self.stack.pop();
                }
                _ => {}
            },
            State::InsideObjectAfterComma => {
                if c == '"' {
                    self.swap_top(State::InsideObjectKey);
                }
            }
            State::InsideObjectKey => {
                if c == '"' {
                    self.swap_top(State::InsideObjectAfterKey);
                }
            }
            State::InsideObjectAfterKey => {
                if c == ':' {
                    self.swap_top(State::InsideObjectBeforeValue);
                }
            }
            State::InsideObjectBeforeValue => {
                self.value_start(c, at, end, State::InsideObjectAfterValue)
            }
            State::InsideObjectAfterValue => self.after_object_value(c, end),
            State::InsideString => match c {
                '"' => {
                    self.stack.pop();
                    self.valid_end = end;
                }
                '\\' => self.stack.push(State::InsideStringEscape),
                _ => self.valid_end = end,
            },
            State::InsideArrayStart => match c {
                ']' => {
                    self.valid_end = end;
                    self.stack.pop();
                }
                _ => self.value_start(c, at, end, State::InsideArrayAfterValue),
            },
            State::InsideArrayAfterValue => match c {
                ',' => self.swap_top(State::InsideArrayAfterComma),
                ']' => {
                    self.valid_end = end;
                    self.stack.pop();
                }
                _ => self.valid_end = end,
            },
            State::InsideArrayAfterComma => {
                self.value_start(c, at, end, State::InsideArrayAfterValue)
            }
            State::InsideStringEscape => {
                self.stack.pop();
                if c == 'u' {
                    self.unicode_escape_digits = 0;
                    self.stack.push(State::InsideStringUnicodeEscape);
                } else {
                    self.valid_end = end;
                }
            }
            State::InsideStringUnicodeEscape => {
                if c.is_ascii_hexdigit() {
                    self.unicode_escape_digits += 1;
                    if self.unicode_escape_digits == 4 {
                        self.stack.pop();
                        self.valid_end = end;
                    }
                }
            }
            State::InsideNumber => match c {
                '0'..='9' => self.valid_end = end,
                'e' | 'E' | '-' | '.' => {}
                ',' => {
                    self.stack.pop();
                    if self.top() == State::InsideArrayAfterValue {
                        self.after_array_value(c, end);
                    }
                    if self.top() == State::InsideObjectAfterValue {
                        self.after_object_value(c, end);
                    }
                }
                '}' => {
                    self.stack.pop();
                    if self.top() == State::InsideObjectAfterValue {
                        self.after_object_value(c, end);
                    }
                }
                ']' => {
                    self.stack.pop();
                    if self.top() == State::InsideArrayAfterValue {
                        self.after_array_value(c, end);
                    }
                }
                _ => {
                    self.stack.pop();
                }
            },
            State::InsideLiteral => {
                let partial = if c.is_ascii() {
                    &self.input[self.literal_start..end]
                } else {
                    ""
                };
                let is_prefix = !partial.is_empty()
                    && ["false", "true", "null"]
                        .iter()
                        .any(|literal| literal.starts_with(partial));
                if is_prefix {
                    self.valid_end = end;
                } else {
                    self.stack.pop();
                    match self.top() {
                        State::InsideObjectAfterValue => self.after_object_value(c, end),
                        State::InsideArrayAfterValue => self.after_array_value(c, end),
                        _ => {}
                    }
                }
            }
        }
    }
}

/// The SDK's `fixJson`: cut an incomplete tail and close what is still open.
pub(super) fn fix_json(input: &str) -> String {
    let mut fixer = Fixer {
        input,
        stack: vec![State::Root],
        valid_end: 0,
        literal_start: 0,
        unicode_escape_digits: 0,
    };
    for (at, c) in input.char_indices() {
        let end = at + c.len_utf8();
        for _ in 0..c.len_utf16() {
            fixer.unit(c, at, end);
        }
    }

    let mut result = String::with_capacity(fixer.valid_end + fixer.stack.len());
    result.push_str(&input[..fixer.valid_end]);
    for state in fixer.stack.iter().rev() {
        match state {
            State::InsideString => result.push('"'),
            State::InsideObjectKey
            | State::InsideObjectAfterKey
            | State::InsideObjectAfterComma
            | State::InsideObjectStart
            | State::InsideObjectBeforeValue
            | State::InsideObjectAfterValue => result.push('}'),
            State::InsideArrayStart
            | State::InsideArrayAfterComma
            | State::InsideArrayAfterValue => result.push(']'),
            State::InsideLiteral => {
                let partial = &input[fixer.literal_start..];
                if let Some(rest) = ["true", "false", "null"]
                    .iter()
                    .find_map(|literal| literal.strip_prefix(partial))
                {
                    result.push_str(rest);
                }
            }
            _ => {}
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn repairs_like_the_sdk() {
        // The table observed from ai@7.0.173 (reference doc, section 6).
        let cases: &[(&str, Option<Value>)] = &[
            ("", None),
            ("{", Some(json!({}))),
            ("{\"a", Some(json!({}))),
            ("{\"a\":", Some(json!({}))),
            ("{\"a\":1.", Some(json!({"a": 1}))),
            ("{\"a\":-", Some(json!({}))),
            ("{\"a\":tr", Some(json!({"a": true}))),
            ("{\"a\":nul", Some(json!({"a": null}))),
            ("{\"a\":\"x\\", Some(json!({"a": "x"}))),
            ("{\"a\":\"\\u00", Some(json!({"a": ""}))),
            ("[1,2,", Some(json!([1, 2]))),
            ("[1,{\"b\":[", Some(json!([1, {"b": []}]))),
            ("\"abc", Some(json!("abc"))),
            ("1e", Some(json!(1))),
            ("{\"a\":1}x", Some(json!({"a": 1}))),
            ("{\"a\":1,}", Some(json!({"a": 1}))),
            ("{\"__proto__\":{\"x\":1}}", None),
            ("{\"a\":{\"constructor\":{\"prototype\":1}}}", None),
            ("{\"constructor\":1}", Some(json!({"constructor": 1}))),
            (
                "{\"a\":\"h\u{e9}llo \u{1f600}",
                Some(json!({"a": "h\u{e9}llo \u{1f600}"})),
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(&parse_partial_json(text), expected, "input {text:?}");
        }
    }

    #[test]
    fn fix_json_keeps_complete_text() {
        assert_eq!(
            fix_json("{\"a\":[1,2],\"b\":\"c\"}"),
            "{\"a\":[1,2],\"b\":\"c\"}"
        );
        assert_eq!(fix_json("[tru"), "[true]");
        assert_eq!(fix_json("{\"a\":fals"), "{\"a\":false}");
    }
}
