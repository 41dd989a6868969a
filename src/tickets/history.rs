//! A ticket's history (docs/tickets.md, "History"): who changed it, when,
//! and what, one entry per change a write kept, written in the write's own
//! transaction (migration 0010). The protocol never reads it; operators do,
//! with `abstore tickets history`.

use serde_json::{Value, json};

use crate::auth::{Scope, Via};

/// Who made a change: what the request's token was, and its digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Actor {
    /// `deployment`, `deployment via session:<id>`, `deployment via
    /// mcp:<client>`; `open` on a server without a secret.
    pub label: String,
    /// The token's SHA-256 in hex, as `abstore token inspect` prints it and
    /// `abstore token revoke --digest` takes it; `None` in open mode.
    pub token_digest: Option<String>,
}

impl Actor {
    /// A request on a server without a secret: no token to name.
    pub fn open() -> Actor {
        Actor {
            label: "open".to_owned(),
            token_digest: None,
        }
    }

    /// The caller of a verified `token` of `scope`.
    pub fn of_token(scope: &Scope, token: &str) -> Actor {
        let via = match scope {
            Scope::Resource { via, .. }
            | Scope::Deployment { via, .. }
            | Scope::Operator { via, .. } => via.as_ref(),
            Scope::Legacy { .. } => None,
        };
        let mut label = scope.log_label();
        match via {
            Some(Via::Session { id }) => label.push_str(&format!(" via session:{id}")),
            Some(Via::Mcp { client }) => label.push_str(&format!(" via mcp:{client}")),
            None => {}
        }
        Actor {
            label,
            token_digest: Some(hex::encode(crate::auth::digest(token))),
        }
    }
}

/// What one kept write changed. Titles, bodies and labels are the texts
/// sent; a body is named, not copied (the ticket holds it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change<'a> {
    Create {
        state: &'a str,
        title: &'a str,
        labels: &'a [String],
        blocked_by: &'a [String],
    },
    Claim {
        from: &'a str,
        to: &'a str,
    },
    Transition {
        from: &'a str,
        to: &'a str,
    },
    Update {
        title: Option<&'a str>,
        body: bool,
        labels: Option<&'a [String]>,
    },
    Comment {
        seq: i64,
    },
    AddBlocker {
        blocker: &'a str,
    },
    RemoveBlocker {
        blocker: &'a str,
    },
}

impl Change<'_> {
    /// The change as stored (`change_json`): `{"op": …, …}`.
    pub fn to_json(&self) -> String {
        let value = match self {
            Change::Create {
                state,
                title,
                labels,
                blocked_by,
            } => json!({"op": "create", "state": state, "title": title,
                        "labels": labels, "blockedBy": blocked_by}),
            Change::Claim { from, to } => json!({"op": "claim", "from": from, "to": to}),
            Change::Transition { from, to } => {
                json!({"op": "transition", "from": from, "to": to})
            }
            Change::Update {
                title,
                body,
                labels,
            } => {
                let mut fields = Vec::new();
                let mut change = json!({"op": "update"});
                if let Some(title) = title {
                    fields.push("title");
                    change["title"] = Value::from(*title);
                }
                if *body {
                    fields.push("body");
                }
                if let Some(labels) = labels {
                    fields.push("labels");
                    change["labels"] = Value::from(labels.to_vec());
                }
                change["fields"] = Value::from(fields);
                change
            }
            Change::Comment { seq } => json!({"op": "comment", "comment": seq}),
            Change::AddBlocker { blocker } => json!({"op": "add-blocker", "blockerId": blocker}),
            Change::RemoveBlocker { blocker } => {
                json!({"op": "remove-blocker", "blockerId": blocker})
            }
        };
        value.to_string()
    }
}

/// One stored history entry, as `abstore tickets history` reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub seq: i64,
    /// Epoch milliseconds, from the server's clock.
    pub at: i64,
    pub actor: String,
    pub token_digest: Option<String>,
    pub change_json: String,
}

impl Entry {
    /// One line for an operator: `#seq time actor [token digest…] what`.
    pub fn describe(&self) -> String {
        let at = crate::protocol::time::format_iso(self.at);
        let token = match &self.token_digest {
            Some(digest) => format!(" (token {})", &digest[..digest.len().min(16)]),
            None => String::new(),
        };
        format!(
            "#{} {at} {}{token}: {}",
            self.seq,
            self.actor,
            describe_change(&self.change_json)
        )
    }
}

/// A stored change in words; one this build does not know is shown as
/// stored.
pub fn describe_change(change_json: &str) -> String {
    let Ok(change) = serde_json::from_str::<Value>(change_json) else {
        return change_json.to_owned();
    };
    let text = |name: &str| change.get(name).map(Value::to_string).unwrap_or_default();
    match change.get("op").and_then(Value::as_str) {
        Some("create") => format!(
            "created in {} with title {}, labels {}, blocked by {}",
            text("state"),
            text("title"),
            text("labels"),
            text("blockedBy")
        ),
        Some("claim") => format!("claimed: {} -> {}", text("from"), text("to")),
        Some("transition") => format!("moved {} -> {}", text("from"), text("to")),
        Some("update") => {
            let mut said = format!("updated {}", text("fields"));
            if change.get("title").is_some() {
                said.push_str(&format!("; title {}", text("title")));
            }
            if change.get("labels").is_some() {
                said.push_str(&format!("; labels {}", text("labels")));
            }
            said
        }
        Some("comment") => format!("comment {}", text("comment")),
        Some("add-blocker") => format!("blocked by {}", text("blockerId")),
        Some("remove-blocker") => format!("no longer blocked by {}", text("blockerId")),
        _ => change_json.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_actor_names_the_scope_its_delegate_and_the_token_digest() {
        let scope = Scope::Deployment {
            session: "*".into(),
            via: Some(Via::Mcp {
                client: "claude".into(),
            }),
            exp: 1,
        };
        let actor = Actor::of_token(&scope, "tok");
        assert_eq!(actor.label, "deployment via mcp:claude");
        assert_eq!(
            actor.token_digest.as_deref(),
            Some(hex::encode(crate::auth::digest("tok")).as_str())
        );
        assert_eq!(Actor::open().token_digest, None);
    }

    #[test]
    fn an_update_names_its_fields_and_copies_no_body() {
        let labels = vec!["a".to_owned()];
        let change = Change::Update {
            title: Some("T\u{0}"),
            body: true,
            labels: Some(&labels),
        };
        let json: Value = serde_json::from_str(&change.to_json()).unwrap();
        assert_eq!(
            json,
            json!({"op": "update", "title": "T\u{0}", "labels": ["a"],
                   "fields": ["title", "body", "labels"]})
        );
    }

    #[test]
    fn an_entry_reads_as_one_line() {
        let entry = Entry {
            seq: 2,
            at: 0,
            actor: "deployment".into(),
            token_digest: Some("ab".repeat(32)),
            change_json: Change::Transition {
                from: "Ready",
                to: "Doing",
            }
            .to_json(),
        };
        assert_eq!(
            entry.describe(),
            "#2 1970-01-01T00:00:00.000Z deployment (token abababababababab): \
             moved \"Ready\" -> \"Doing\""
        );
        let unknown = Entry {
            change_json: "{\"op\":\"later\"}".into(),
            ..entry
        };
        assert!(unknown.describe().ends_with(": {\"op\":\"later\"}"));
    }
}
