//! The JSON answers, assembled from the stored JSON text (titles, bodies and
//! labels are stored as the literals served; docs/decisions.md, 4) and held
//! to the response ceiling as they grow.
//!
//! A ticket is `{"ref": {"source", "id", "title"}, "creationKey"?, "title",
//! "body", "state", "labels", "blockedBy"?}`, members in that order, as the
//! hosted database source answers it: `source` is `"database"` (Autobuild's
//! client shows every ref as `hosted` anyway), there is no `url`,
//! `creationKey` is absent without an idempotency key, and `blockedBy` (its
//! ids in bytewise order) is absent when empty.

use serde_json::Value;

use super::outcome::Refusal;

/// `ref.source` of every ticket, as the hosted database source names itself.
pub const SOURCE: &str = "database";

/// The start and end of a `list-ready` answer: the tickets go between.
pub const LISTING_HEAD: &str = "{\"tickets\":[";
pub const LISTING_TAIL: &str = "],\"diagnostics\":[]}";

/// A stored ticket as the answers read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredTicket {
    pub id: String,
    pub creation_key: Option<String>,
    /// The title's JSON string literal, as stored.
    pub title_json: String,
    /// The body's JSON string literal, as stored.
    pub body_json: String,
    pub state: String,
    /// The labels' JSON array, as stored.
    pub labels_json: String,
    /// Blocker ids, in bytewise order.
    pub blocked_by: Vec<String>,
}

impl StoredTicket {
    /// Append the ticket's JSON to `out`.
    pub fn write_json(&self, out: &mut String) {
        let text = |s: &str| Value::String(s.to_owned()).to_string();
        out.push_str("{\"ref\":{\"source\":\"");
        out.push_str(SOURCE);
        out.push_str("\",\"id\":");
        out.push_str(&text(&self.id));
        out.push_str(",\"title\":");
        out.push_str(&self.title_json);
        out.push('}');
        if let Some(key) = &self.creation_key {
            out.push_str(",\"creationKey\":");
            out.push_str(&text(key));
        }
        out.push_str(",\"title\":");
        out.push_str(&self.title_json);
        out.push_str(",\"body\":");
        out.push_str(&self.body_json);
        out.push_str(",\"state\":");
        out.push_str(&text(&self.state));
        out.push_str(",\"labels\":");
        out.push_str(&self.labels_json);
        if !self.blocked_by.is_empty() {
            out.push_str(",\"blockedBy\":");
            out.push_str(&Value::from(self.blocked_by.clone()).to_string());
        }
        out.push('}');
    }

    pub fn to_json(&self) -> String {
        let mut out = String::new();
        self.write_json(&mut out);
        out
    }

    /// The labels, parsed from their stored text.
    pub fn labels(&self) -> Result<Vec<String>, serde_json::Error> {
        serde_json::from_str(&self.labels_json)
    }
}

/// One `DependencyState`: `{"id", "exists", "resolved", "blockedBy"}`.
/// `found` is the ticket's state and blockers when it exists.
pub fn write_dependency_state(out: &mut String, id: &str, found: Option<(bool, &[String])>) {
    let (exists, resolved, blocked_by) = match found {
        Some((resolved, blocked_by)) => (true, resolved, blocked_by),
        None => (false, false, &[][..]),
    };
    out.push_str("{\"id\":");
    out.push_str(&Value::String(id.to_owned()).to_string());
    out.push_str(&format!(
        ",\"exists\":{exists},\"resolved\":{resolved},\"blockedBy\":"
    ));
    out.push_str(&Value::from(blocked_by.to_vec()).to_string());
    out.push('}');
}

/// An answer being built, never longer than the response ceiling: past it,
/// building stops with the refusal naming `what`.
pub struct Bounded {
    out: String,
    max: usize,
    what: String,
}

impl Bounded {
    pub fn new(start: &str, max: usize, what: impl Into<String>) -> Bounded {
        Bounded {
            out: start.to_owned(),
            max,
            what: what.into(),
        }
    }

    /// Append with `write`, then check the length.
    pub fn push(&mut self, write: impl FnOnce(&mut String)) -> Result<(), Refusal> {
        write(&mut self.out);
        self.check()
    }

    fn check(&self) -> Result<(), Refusal> {
        if self.out.len() <= self.max {
            Ok(())
        } else {
            Err(super::bounds::answer_too_large(&self.what, self.max))
        }
    }

    /// Bytes so far.
    pub fn len(&self) -> usize {
        self.out.len()
    }

    pub fn is_empty(&self) -> bool {
        self.out.is_empty()
    }

    /// The answer, with `end` appended, if it still fits.
    pub fn finish(mut self, end: &str) -> Result<String, Refusal> {
        self.out.push_str(end);
        self.check()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tickets::text::{json_string, json_strings};

    fn ticket() -> StoredTicket {
        StoredTicket {
            id: "ticket-1".into(),
            creation_key: Some("k".into()),
            title_json: json_string("T \"1\""),
            body_json: json_string("body\0\n"),
            state: "Ready".into(),
            labels_json: json_strings(&["a".into()]),
            blocked_by: vec!["b".into()],
        }
    }

    #[test]
    fn tickets_answer_in_the_hosted_shape() {
        let json: Value = serde_json::from_str(&ticket().to_json()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "ref": {"source": "database", "id": "ticket-1", "title": "T \"1\""},
                "creationKey": "k", "title": "T \"1\"", "body": "body\0\n", "state": "Ready",
                "labels": ["a"], "blockedBy": ["b"]
            })
        );
        let plain = StoredTicket {
            creation_key: None,
            blocked_by: vec![],
            ..ticket()
        };
        let json: Value = serde_json::from_str(&plain.to_json()).unwrap();
        assert!(json.get("creationKey").is_none() && json.get("blockedBy").is_none());
        assert_eq!(ticket().labels().unwrap(), ["a"]);
    }

    #[test]
    fn dependency_states_and_the_ceiling() {
        let mut out = String::new();
        write_dependency_state(&mut out, "x", None);
        assert_eq!(
            out,
            r#"{"id":"x","exists":false,"resolved":false,"blockedBy":[]}"#
        );
        let mut answer = Bounded::new("[", 10, "the answer");
        assert!(answer.push(|o| o.push_str("12345678")).is_ok());
        assert_eq!(answer.len(), 9);
        assert!(answer.push(|o| o.push_str("xx")).is_err());
        let answer = Bounded::new("[", 2, "the answer");
        assert_eq!(answer.finish("]"), Ok("[]".into()));
        let refusal = Bounded::new("[", 1, "the answer").finish("]").unwrap_err();
        assert!(
            refusal
                .message()
                .contains("1-byte response ceiling (--max-body-bytes)")
        );
    }
}
