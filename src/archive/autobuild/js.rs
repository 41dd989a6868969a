//! JSON as JavaScript's `JSON.stringify` writes a value that `JSON.parse`
//! read (docs/autobuild-stores.md §3.5, §4.2): what Autobuild's server,
//! running on Bun, served for JSON its PostgreSQL store keeps as `jsonb`.
//! jsonb keeps no text, so this is the closest abstore can come to the
//! bytes Autobuild served: compact; object members in jsonb's order but
//! integer-like keys first, ascending (JS property order); every number a
//! double printed by `Number.prototype.toString`.

use serde_json::Value;

/// `JSON.stringify(JSON.parse(text))` for the value `value` holds.
pub fn stringify(value: &Value) -> String {
    let mut out = String::new();
    write(value, &mut out);
    out
}

fn write(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&number(n.as_f64().unwrap_or(f64::NAN))),
        Value::String(s) => out.push_str(&Value::String(s.clone()).to_string()),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(item, out);
            }
            out.push(']');
        }
        Value::Object(members) => {
            let mut indexed: Vec<(u32, &String, &Value)> = Vec::new();
            let mut named: Vec<(&String, &Value)> = Vec::new();
            for (key, value) in members {
                match array_index(key) {
                    Some(i) => indexed.push((i, key, value)),
                    None => named.push((key, value)),
                }
            }
            indexed.sort_by_key(|(i, ..)| *i);
            out.push('{');
            let all = indexed.into_iter().map(|(_, k, v)| (k, v)).chain(named);
            for (i, (key, value)) in all.enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write(value, out);
            }
            out.push('}');
        }
    }
}

/// A key JavaScript orders first: the canonical decimal form of an integer
/// from 0 to 2^32 − 2.
fn array_index(key: &str) -> Option<u32> {
    if key.is_empty() || (key.len() > 1 && key.starts_with('0')) {
        return None;
    }
    if !key.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    key.parse::<u32>().ok().filter(|i| *i != u32::MAX)
}

/// `Number.prototype.toString()` of a finite double (ECMAScript
/// Number::toString, radix 10); JSON has no NaN or infinities (`null`).
pub fn number(x: f64) -> String {
    if !x.is_finite() {
        return "null".to_owned();
    }
    if x == 0.0 {
        return "0".to_owned();
    }
    if x < 0.0 {
        return format!("-{}", number(-x));
    }
    // Rust's `{:e}` prints the shortest digits that round-trip, as JS does.
    let exp = format!("{x:e}");
    let (mantissa, e) = exp.split_once('e').unwrap_or((&exp, "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let e: i32 = e.parse().unwrap_or(0);
    let k = digits.len() as i32;
    let n = e + 1;
    if k <= n && n <= 21 {
        format!("{digits}{}", "0".repeat((n - k) as usize))
    } else if 0 < n && n <= 21 {
        format!("{}.{}", &digits[..n as usize], &digits[n as usize..])
    } else if -6 < n && n <= 0 {
        format!("0.{}{digits}", "0".repeat((-n) as usize))
    } else {
        let sign = if n - 1 < 0 { '-' } else { '+' };
        let rest = if k == 1 {
            String::new()
        } else {
            format!(".{}", &digits[1..])
        };
        format!("{}{rest}e{sign}{}", &digits[..1], (n - 1).abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_as_javascript_does() {
        for (x, js) in [
            (1.0, "1"),
            (1.5, "1.5"),
            (-0.0, "0"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (123456789012345680000.0, "123456789012345680000"),
            (0.000001, "0.000001"),
            (0.0000001, "1e-7"),
            (1.5e-7, "1.5e-7"),
            (2.5e300, "2.5e+300"),
            (-42.0, "-42"),
            (0.1, "0.1"),
            (9007199254740993.0, "9007199254740992"),
        ] {
            assert_eq!(number(x), js, "{x}");
        }
    }

    #[test]
    fn objects_put_integer_keys_first() {
        let value: Value = serde_json::from_str(
            r#"{"b": 1.50, "10": [1, {"x": null}], "2": "é\n", "01": true, "a": -0}"#,
        )
        .unwrap();
        assert_eq!(
            stringify(&value),
            r#"{"2":"é\n","10":[1,{"x":null}],"b":1.5,"01":true,"a":0}"#
        );
    }
}
