//! Request parsing with the protocol's own rejections: strictly
//! percent-decoded path segments (read by [`ResourcePath`](super::path::ResourcePath)), size-bounded JSON bodies, and the raw query
//! values the `since`/`rev`/`wait`/`kind` grammars read.

use std::time::Duration;

use axum::body::Body;
use axum::http::Uri;
use serde_json::Value;

use super::error::{ApiError, ApiResult};
use crate::protocol::ident;
use crate::protocol::numbers::{js_integer, wait_seconds};

/// Decode one path segment as JavaScript `decodeURIComponent` would: every
/// `%` must start a two-hex-digit escape and the bytes must be UTF-8.
/// (The `percent-encoding` crate passes malformed escapes through unchanged,
/// which the spec makes a 400, hence the explicit check.)
pub fn decode_segment(raw: &str) -> Result<String, ApiError> {
    let bytes = raw.as_bytes();
    let malformed = bytes.iter().enumerate().any(|(i, &b)| {
        b == b'%'
            && !(bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
    });
    if malformed {
        return Err(ApiError::BadRequest(format!(
            "malformed path segment encoding: {}",
            ident::shown(raw)
        )));
    }
    percent_encoding::percent_decode_str(raw)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| {
            ApiError::BadRequest(format!(
                "malformed path segment encoding: {}",
                ident::shown(raw)
            ))
        })
}

/// A decoded path id about to be looked up: one the identifier rule
/// ([`ident`]) would have refused at creation cannot exist, so it answers
/// `unknown(id)` (a 404) without reaching the store, whose text columns
/// would refuse it on PostgreSQL.
pub fn lookup_id(id: String, unknown: impl FnOnce(&str) -> ApiError) -> Result<String, ApiError> {
    if ident::fits(&id) {
        Ok(id)
    } else {
        Err(unknown(&id))
    }
}

/// The first value of query parameter `name`, decoded as `URLSearchParams` does.
pub fn query_param(uri: &Uri, name: &str) -> Option<String> {
    let query = uri.query()?;
    url::form_urlencoded::parse(query.as_bytes())
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
}

/// Parse `since` (lenient) and `wait` (digits only, clamped to `ceiling`).
pub fn read_params(uri: &Uri, ceiling: Duration) -> ApiResult<(i64, Duration)> {
    let since = lenient_int(uri, "since")?.unwrap_or(0);
    let wait = match query_param(uri, "wait") {
        None => Duration::ZERO,
        Some(raw) => match wait_seconds(&raw) {
            Some(secs) => Duration::from_secs(secs).min(ceiling),
            None => {
                return Err(ApiError::BadRequest(format!(
                    "query parameter \"wait\" must be one or more ASCII digits, got \"{}\"",
                    ident::shown(&raw)
                )));
            }
        },
    };
    Ok((since, wait))
}

/// `since`/`rev`: JavaScript `Number()` accepted when an integer (section 3).
pub fn lenient_int(uri: &Uri, name: &str) -> ApiResult<Option<i64>> {
    match query_param(uri, name) {
        None => Ok(None),
        Some(raw) => js_integer(&raw).map(Some).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "query parameter \"{name}\" must be an integer, got \"{}\"",
                ident::shown(&raw)
            ))
        }),
    }
}

/// Read a JSON body of at most `limit` bytes, its parsed tree charged to
/// `budget` for as long as the answer is kept.
pub async fn json_body(
    body: Body,
    limit: usize,
    budget: &JsonBudget,
) -> Result<ParsedJson, ApiError> {
    let bytes = axum::body::to_bytes(body, limit).await.map_err(|err| {
        if std::error::Error::source(&err)
            .is_some_and(|s| s.is::<http_body_util::LengthLimitError>())
        {
            ApiError::TooLarge(format!("request body exceeds the {limit}-byte limit"))
        } else {
            ApiError::BadRequest("request body could not be read".into())
        }
    })?;
    budget.parse(&bytes)
}

/// A parsed request body and the share of the [`JsonBudget`] it holds
/// until it is dropped.
#[derive(Debug)]
pub struct ParsedJson {
    value: Value,
    _charge: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl ParsedJson {
    /// The value, without its charge: for a caller that keeps a part of it
    /// past the request's parsing (the part is then bounded by the route).
    pub fn into_value(self) -> Value {
        self.value
    }

    /// The value and its charge apart: for a caller that moves the tree's
    /// contents elsewhere (a stream's parts into the document a close
    /// assembles) and keeps the charge for as long as they live there.
    pub fn into_parts(self) -> (Value, JsonCharge) {
        (
            self.value,
            JsonCharge {
                _permit: self._charge,
            },
        )
    }
}

/// A share of the [`JsonBudget`], given back when dropped.
#[derive(Debug)]
pub struct JsonCharge {
    _permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl std::ops::Deref for ParsedJson {
    type Target = Value;

    fn deref(&self) -> &Value {
        &self.value
    }
}

impl std::ops::DerefMut for ParsedJson {
    fn deref_mut(&mut self) -> &mut Value {
        &mut self.value
    }
}

/// The memory every parsed request body holds at once, across the process
/// (`--max-json-memory-bytes`). A JSON text's tree takes many times its
/// bytes (`[0,0,…]`: two bytes each become a 32-byte `Value` plus the
/// array's slot), so body size limits alone do not bound it: each body's
/// tree is measured as it is built and charged here, a unit at a time. A
/// body that would take more than what is free is refused: `503` while
/// other bodies hold the budget, `413` when it could never fit.
///
/// Hand-rolled because serde_json builds a `Value` with no way to observe
/// or bound its size; the measure is the nodes' and strings' sizes as
/// built, close to what the allocator hands out.
#[derive(Debug, Clone)]
pub struct JsonBudget {
    units: std::sync::Arc<tokio::sync::Semaphore>,
    total_units: u32,
}

/// The budget's unit of account: one permit per 64 KiB.
const UNIT: usize = 64 * 1024;

impl JsonBudget {
    /// A budget of `bytes` (at least one unit).
    pub fn new(bytes: usize) -> JsonBudget {
        let total_units = u32::try_from((bytes / UNIT).max(1)).unwrap_or(u32::MAX >> 3);
        JsonBudget {
            units: std::sync::Arc::new(tokio::sync::Semaphore::new(total_units as usize)),
            total_units,
        }
    }

    /// Parse `bytes` into a tree charged to this budget.
    pub fn parse(&self, bytes: &[u8]) -> Result<ParsedJson, ApiError> {
        use serde::de::DeserializeSeed as _;
        let mut meter = Meter {
            budget: self,
            used: 0,
            charge: None,
            held_units: 0,
            refused: None,
        };
        let mut deserializer = serde_json::Deserializer::from_slice(bytes);
        let parsed = Measured { meter: &mut meter }
            .deserialize(&mut deserializer)
            .and_then(|value| deserializer.end().map(|()| value));
        match (parsed, meter.refused) {
            (Ok(value), _) => Ok(ParsedJson {
                value,
                _charge: meter.charge,
            }),
            (Err(_), Some(refusal)) => Err(refusal),
            (Err(_), None) => Err(ApiError::BadRequest(
                "request body is not valid JSON".into(),
            )),
        }
    }

    /// Bytes of the budget not held by a parsed body now.
    pub fn available_bytes(&self) -> usize {
        self.units.available_permits() * UNIT
    }
}

/// What one parse has charged.
struct Meter<'b> {
    budget: &'b JsonBudget,
    used: usize,
    charge: Option<tokio::sync::OwnedSemaphorePermit>,
    held_units: u32,
    /// Why the parse was stopped, when the budget stopped it.
    refused: Option<ApiError>,
}

impl Meter<'_> {
    /// Account for `bytes` more of tree; `false` (and `refused` set) when
    /// the budget cannot hold them.
    fn charge(&mut self, bytes: usize) -> bool {
        self.used = self.used.saturating_add(bytes);
        let needed = self.used.div_ceil(UNIT);
        let Some(more) = needed
            .checked_sub(self.held_units as usize)
            .filter(|&n| n > 0)
        else {
            return true;
        };
        let total = self.budget.total_units as usize;
        if needed > total {
            self.refused = Some(ApiError::TooLarge(format!(
                "the request body's JSON needs more than the server's {}-byte parsing budget (--max-json-memory-bytes)",
                total * UNIT
            )));
            return false;
        }
        // Take what is missing in one go, plus headroom, so a large body
        // touches the semaphore a few times, not once per unit.
        let want = more
            .max(self.held_units as usize / 2)
            .min(total - self.held_units as usize);
        let units = self.budget.units.clone();
        let taken = u32::try_from(want)
            .ok()
            .and_then(|n| units.clone().try_acquire_many_owned(n).ok())
            .or_else(|| {
                u32::try_from(more)
                    .ok()
                    .and_then(|n| units.try_acquire_many_owned(n).ok())
            });
        match taken {
            Some(permit) => {
                self.held_units += permit.num_permits() as u32;
                match &mut self.charge {
                    Some(charge) => charge.merge(permit),
                    None => self.charge = Some(permit),
                }
                true
            }
            None => {
                metrics::counter!("abstore_json_budget_refusals_total").increment(1);
                self.refused = Some(ApiError::Busy(
                    "the server is parsing too many large request bodies; retry shortly (--max-json-memory-bytes)",
                ));
                false
            }
        }
    }
}

/// A node's own size in the tree, beside the text it holds.
const NODE: usize = std::mem::size_of::<Value>();
/// A map entry's share besides its key text and value: the index map's
/// hash, key `String` header and slot.
const ENTRY: usize = 48;

/// A `Value` whose every node is charged to a [`Meter`] as it is built.
struct Measured<'m, 'b> {
    meter: &'m mut Meter<'b>,
}

impl<'de> serde::de::DeserializeSeed<'de> for Measured<'_, '_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Measured<'_, '_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        self.leaf(NODE, Value::Bool(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        self.leaf(NODE, Value::from(v))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        self.leaf(NODE, Value::from(v))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        // Like serde_json's own: a non-finite number cannot be JSON.
        let value = serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number);
        self.leaf(NODE, value)
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        self.leaf(NODE + v.len(), Value::String(v.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Value, E> {
        self.leaf(NODE + v.len(), Value::String(v))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        self.leaf(NODE, Value::Null)
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Value, E> {
        self.leaf(NODE, Value::Null)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        if !self.meter.charge(NODE) {
            return Err(serde::de::Error::custom("over the JSON budget"));
        }
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Measured {
            meter: &mut *self.meter,
        })? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        if !self.meter.charge(NODE) {
            return Err(serde::de::Error::custom("over the JSON budget"));
        }
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if !self.meter.charge(ENTRY + key.len()) {
                return Err(serde::de::Error::custom("over the JSON budget"));
            }
            let value = map.next_value_seed(Measured {
                meter: &mut *self.meter,
            })?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

impl Measured<'_, '_> {
    fn leaf<E: serde::de::Error>(self, bytes: usize, value: Value) -> Result<Value, E> {
        if self.meter.charge(bytes) {
            Ok(value)
        } else {
            Err(E::custom("over the JSON budget"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parsed_body_is_the_value_serde_json_parses() {
        let budget = JsonBudget::new(1 << 20);
        for text in [
            r#"{"a":[1,-2,3.5,true,null,"x",{"b":{}}],"c":"\u00e9\n"}"#,
            "[]",
            "0",
            r#"{"dup":1,"dup":2}"#,
            "1e400",
        ] {
            let ours = budget.parse(text.as_bytes()).map(ParsedJson::into_value);
            let theirs = serde_json::from_str::<Value>(text);
            match (ours, theirs) {
                (Ok(ours), Ok(theirs)) => assert_eq!(ours, theirs, "{text}"),
                (Err(ApiError::BadRequest(_)), Err(_)) => {}
                (ours, theirs) => panic!("{text}: {ours:?} against {theirs:?}"),
            }
        }
        for bad in ["", "{", "[1,]", "{\"a\":1} x", "nul"] {
            assert!(
                matches!(budget.parse(bad.as_bytes()), Err(ApiError::BadRequest(_))),
                "{bad}"
            );
        }
        assert_eq!(budget.available_bytes(), 1 << 20, "charges are returned");
    }

    #[test]
    fn dense_json_is_charged_for_its_tree_not_its_text() {
        // 1 MiB of `0,`: half a million nodes, 16 to 36 MiB of tree (a
        // `Value` is 32 bytes, 72 with `preserve_order`'s map inline).
        let text = format!("[{}0]", "0,".repeat(512 * 1024));
        let budget = JsonBudget::new(64 << 20);
        let parsed = budget.parse(text.as_bytes()).unwrap();
        let held = (64 << 20) - budget.available_bytes();
        assert!(
            held >= 8 * text.len(),
            "held {held} for {} bytes",
            text.len()
        );
        // While it is kept, a second such body does not fit beside it…
        let small = JsonBudget::new(held + held / 2);
        let first = small.parse(text.as_bytes()).unwrap();
        assert!(matches!(
            small.parse(text.as_bytes()),
            Err(ApiError::Busy(_))
        ));
        // …and once it is dropped, it does.
        drop(first);
        assert!(small.parse(text.as_bytes()).is_ok());
        // One that could never fit is too large, not busy.
        let tiny = JsonBudget::new(1 << 20);
        assert!(matches!(
            tiny.parse(text.as_bytes()),
            Err(ApiError::TooLarge(_))
        ));
        drop(parsed);
        assert_eq!(budget.available_bytes(), 64 << 20);
    }

    #[test]
    fn decodes_single_segments_strictly() {
        assert_eq!(decode_segment("acme%2Fwidgets").unwrap(), "acme/widgets");
        assert_eq!(decode_segment("plain-slug").unwrap(), "plain-slug");
        assert_eq!(decode_segment("caf%C3%A9").unwrap(), "café");
        for bad in ["%", "%2", "%ZZ", "a%2", "%C3", "%FF"] {
            assert!(decode_segment(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn query_values_decode_like_url_search_params() {
        let uri: Uri = "/x?since=%201%20&kind=a+b&kind=second&rev="
            .parse()
            .unwrap();
        assert_eq!(query_param(&uri, "since").as_deref(), Some(" 1 "));
        assert_eq!(query_param(&uri, "kind").as_deref(), Some("a b"));
        assert_eq!(query_param(&uri, "rev").as_deref(), Some(""));
        assert_eq!(query_param(&uri, "wait"), None);
    }
}
