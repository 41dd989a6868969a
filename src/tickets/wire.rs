//! The request schemas of the ten operations: `{context, input}`, both
//! strict at every level (an unknown member is `400`), as Autobuild's
//! `remote-protocol.ts` has them. Each rejection names the member by its
//! path (`"input.draft.title" must be a string`).
//!
//! Strings the store keeps in columns of their own follow the identifier
//! rule (docs/decisions.md, 17): `context.teamKey`, an idempotency key and
//! every label are refused (`400`) over 512 bytes or holding NUL. Ids and
//! states a request only looks up are not refused here: an id that could
//! never be stored is simply unknown. Titles, bodies and comments are kept
//! byte for byte, whatever they hold.

use serde_json::{Map, Value};

use super::lifecycle::Context;
use super::operation::{Draft, Operation, Patch, TicketOp};
use crate::protocol::ident;
use crate::protocol::wire::{SchemaError, SchemaResult};

fn fail<T>(message: String) -> SchemaResult<T> {
    Err(SchemaError(message))
}

/// An object member of a request, with its path for messages.
struct Object<'a> {
    path: &'a str,
    members: &'a Map<String, Value>,
}

impl<'a> Object<'a> {
    /// `value` at `path` as an object holding only `allowed` members.
    fn strict(value: &'a Value, path: &'a str, allowed: &[&str]) -> SchemaResult<Object<'a>> {
        let Some(members) = value.as_object() else {
            return fail(format!("\"{path}\" must be an object"));
        };
        if let Some(extra) = members.keys().find(|k| !allowed.contains(&k.as_str())) {
            return fail(format!(
                "\"{path}\" has unknown key \"{}\"",
                ident::shown(extra)
            ));
        }
        Ok(Object { path, members })
    }

    fn at(&self, key: &str) -> String {
        format!("{}.{key}", self.path)
    }

    fn required(&self, key: &str) -> SchemaResult<&'a Value> {
        match self.members.get(key) {
            Some(value) => Ok(value),
            None => fail(format!("\"{}\" is required", self.at(key))),
        }
    }

    /// An optional string; `null` is not absent (zod refuses it).
    fn optional_string(&self, key: &str, nonempty: bool) -> SchemaResult<Option<String>> {
        match self.members.get(key) {
            None => Ok(None),
            Some(value) => string(value, &self.at(key), nonempty).map(Some),
        }
    }

    fn string(&self, key: &str, nonempty: bool) -> SchemaResult<String> {
        string(self.required(key)?, &self.at(key), nonempty)
    }

    /// An optional array of strings.
    fn optional_strings(&self, key: &str, nonempty: bool) -> SchemaResult<Option<Vec<String>>> {
        let Some(value) = self.members.get(key) else {
            return Ok(None);
        };
        let path = self.at(key);
        let Some(items) = value.as_array() else {
            return fail(format!("\"{path}\" must be an array of strings"));
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| string(item, &format!("{path}[{i}]"), nonempty))
            .collect::<SchemaResult<Vec<String>>>()
            .map(Some)
    }

    fn strings(&self, key: &str, nonempty: bool) -> SchemaResult<Vec<String>> {
        self.required(key)?;
        Ok(self.optional_strings(key, nonempty)?.unwrap_or_default())
    }
}

fn string(value: &Value, path: &str, nonempty: bool) -> SchemaResult<String> {
    match value {
        Value::String(s) if nonempty && s.is_empty() => {
            fail(format!("\"{path}\" must be a nonempty string"))
        }
        Value::String(s) => Ok(s.clone()),
        _ => fail(format!("\"{path}\" must be a string")),
    }
}

/// `value` at `path` fits a column of its own (the identifier rule).
fn storable(value: &str, path: &str) -> SchemaResult<()> {
    match ident::field_problem(path, value) {
        None => Ok(()),
        Some(problem) => fail(problem),
    }
}

/// Labels, each storable.
fn labels(labels: Vec<String>, path: &str) -> SchemaResult<Vec<String>> {
    for (i, label) in labels.iter().enumerate() {
        storable(label, &format!("{path}[{i}]"))?;
    }
    Ok(labels)
}

/// The request body of `operation`: its context and its input.
pub fn parse(operation: Operation, body: &Value) -> SchemaResult<(Context, TicketOp)> {
    let envelope = match body.as_object() {
        Some(members) => members,
        None => return fail("the request body must be an object".into()),
    };
    if let Some(extra) = envelope.keys().find(|k| *k != "context" && *k != "input") {
        return fail(format!(
            "the request body has unknown key \"{}\"",
            ident::shown(extra)
        ));
    }
    let context = context(envelope.get("context"))?;
    let Some(input) = envelope.get("input") else {
        return fail("\"input\" is required".into());
    };
    Ok((context, op(operation, input)?))
}

fn context(value: Option<&Value>) -> SchemaResult<Context> {
    let Some(value) = value else {
        return fail("\"context\" is required".into());
    };
    let context = Object::strict(
        value,
        "context",
        &["teamKey", "claimedState", "createState"],
    )?;
    let team_key = context.string("teamKey", true)?;
    storable(&team_key, "context.teamKey")?;
    Ok(Context {
        team_key,
        claimed_state: context.optional_string("claimedState", true)?,
        create_state: context.optional_string("createState", true)?,
    })
}

fn op(operation: Operation, value: &Value) -> SchemaResult<TicketOp> {
    let id_only =
        || -> SchemaResult<String> { Object::strict(value, "input", &["id"])?.string("id", true) };
    let id_and_blocker = || -> SchemaResult<(String, String)> {
        let input = Object::strict(value, "input", &["id", "blockerId"])?;
        Ok((input.string("id", true)?, input.string("blockerId", true)?))
    };
    Ok(match operation {
        Operation::ListReady => {
            let input = Object::strict(value, "input", &["labels", "state"])?;
            TicketOp::ListReady {
                labels: input.optional_strings("labels", false)?.unwrap_or_default(),
                state: input.optional_string("state", false)?,
            }
        }
        Operation::Get => TicketOp::Get { id: id_only()? },
        Operation::Claim => TicketOp::Claim { id: id_only()? },
        Operation::Comment => {
            let input = Object::strict(value, "input", &["id", "body"])?;
            TicketOp::Comment {
                id: input.string("id", true)?,
                body: input.string("body", false)?,
            }
        }
        Operation::Transition => {
            let input = Object::strict(value, "input", &["id", "state"])?;
            TicketOp::Transition {
                id: input.string("id", true)?,
                state: input.string("state", true)?,
            }
        }
        Operation::Create => create(value)?,
        Operation::Update => {
            let input = Object::strict(value, "input", &["id", "patch"])?;
            let id = input.string("id", true)?;
            let patch = Object::strict(
                input.required("patch")?,
                "input.patch",
                &["title", "body", "labels"],
            )?;
            let patch = Patch {
                title: patch.optional_string("title", false)?,
                body: patch.optional_string("body", false)?,
                labels: match patch.optional_strings("labels", false)? {
                    Some(items) => Some(labels(items, "input.patch.labels")?),
                    None => None,
                },
            };
            if patch == Patch::default() {
                return fail(
                    "\"input.patch\": update must name at least one field (title, body or labels)"
                        .into(),
                );
            }
            TicketOp::Update { id, patch }
        }
        Operation::AddBlocker => {
            let (id, blocker_id) = id_and_blocker()?;
            TicketOp::AddBlocker { id, blocker_id }
        }
        Operation::RemoveBlocker => {
            let (id, blocker_id) = id_and_blocker()?;
            TicketOp::RemoveBlocker { id, blocker_id }
        }
        Operation::DependencyStates => {
            let input = Object::strict(value, "input", &["ids"])?;
            TicketOp::DependencyStates {
                ids: input.strings("ids", true)?,
            }
        }
    })
}

fn create(value: &Value) -> SchemaResult<TicketOp> {
    let input = Object::strict(value, "input", &["draft", "options"])?;
    let draft = Object::strict(
        input.required("draft")?,
        "input.draft",
        &["title", "body", "labels", "blockedBy"],
    )?;
    let draft = Draft {
        title: draft.string("title", false)?,
        body: draft.string("body", false)?,
        labels: labels(
            draft.optional_strings("labels", false)?.unwrap_or_default(),
            "input.draft.labels",
        )?,
        blocked_by: draft
            .optional_strings("blockedBy", false)?
            .unwrap_or_default(),
    };
    let (state, idempotency_key) = match input.members.get("options") {
        None => (None, None),
        Some(options) => {
            let options = Object::strict(options, "input.options", &["state", "idempotencyKey"])?;
            let key = options.optional_string("idempotencyKey", false)?;
            if let Some(key) = &key {
                storable(key, "input.options.idempotencyKey")?;
            }
            (options.optional_string("state", false)?, key)
        }
    };
    Ok(TicketOp::Create {
        draft,
        state,
        idempotency_key,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parsed(operation: &str, input: Value) -> SchemaResult<TicketOp> {
        let op = Operation::from_name(operation).expect("an operation");
        parse(op, &json!({"context": {"teamKey": "ENG"}, "input": input})).map(|(_, op)| op)
    }

    fn refused(operation: &str, input: Value) -> String {
        parsed(operation, input).expect_err("refused").0
    }

    #[test]
    fn every_operation_parses_its_input() {
        assert_eq!(
            parsed("list-ready", json!({})),
            Ok(TicketOp::ListReady {
                labels: vec![],
                state: None
            })
        );
        assert_eq!(
            parsed("list-ready", json!({"labels": ["a"], "state": ""})),
            Ok(TicketOp::ListReady {
                labels: vec!["a".into()],
                state: Some(String::new())
            })
        );
        assert_eq!(
            parsed("get", json!({"id": "x"})),
            Ok(TicketOp::Get { id: "x".into() })
        );
        assert_eq!(
            parsed("comment", json!({"id": "x", "body": ""})),
            Ok(TicketOp::Comment {
                id: "x".into(),
                body: String::new()
            })
        );
        assert_eq!(
            parsed(
                "create",
                json!({"draft": {"title": "t", "body": "b", "blockedBy": ["y"]},
                       "options": {"idempotencyKey": "k"}})
            ),
            Ok(TicketOp::Create {
                draft: Draft {
                    title: "t".into(),
                    body: "b".into(),
                    labels: vec![],
                    blocked_by: vec!["y".into()]
                },
                state: None,
                idempotency_key: Some("k".into()),
            })
        );
        assert_eq!(
            parsed("update", json!({"id": "x", "patch": {"labels": []}})),
            Ok(TicketOp::Update {
                id: "x".into(),
                patch: Patch {
                    labels: Some(vec![]),
                    ..Patch::default()
                }
            })
        );
        assert_eq!(
            parsed("dependency-states", json!({"ids": []})),
            Ok(TicketOp::DependencyStates { ids: vec![] })
        );
    }

    #[test]
    fn schemas_are_strict_and_name_the_member() {
        assert_eq!(
            refused("get", json!({"id": "x", "extra": 1})),
            "\"input\" has unknown key \"extra\""
        );
        assert_eq!(
            refused("get", json!({"id": ""})),
            "\"input.id\" must be a nonempty string"
        );
        assert_eq!(refused("get", json!({})), "\"input.id\" is required");
        assert!(refused("update", json!({"id": "x", "patch": {}})).contains("at least one"));
        assert!(
            refused("update", json!({"id": "x", "patch": {"state": "Done"}})).contains("state")
        );
        assert_eq!(
            refused("create", json!({"draft": {"title": null, "body": "b"}})),
            "\"input.draft.title\" must be a string"
        );
        assert_eq!(
            refused(
                "create",
                json!({"draft": {"title": "t", "body": "b", "labels": ["a\u{0}"]}})
            ),
            "\"input.draft.labels[0]\" must not contain NUL"
        );
        assert_eq!(
            refused("dependency-states", json!({"ids": ["a", ""]})),
            "\"input.ids[1]\" must be a nonempty string"
        );
        assert_eq!(
            refused("transition", json!({"id": "x", "state": ""})),
            "\"input.state\" must be a nonempty string"
        );
        let op = Operation::Get;
        for (body, message) in [
            (json!([]), "the request body must be an object"),
            (json!({"input": {"id": "x"}}), "\"context\" is required"),
            (
                json!({"context": {"teamKey": "E"}}),
                "\"input\" is required",
            ),
            (
                json!({"context": {"teamKey": "E"}, "input": {"id": "x"}, "x": 1}),
                "the request body has unknown key \"x\"",
            ),
            (
                json!({"context": {"teamKey": ""}, "input": {"id": "x"}}),
                "\"context.teamKey\" must be a nonempty string",
            ),
            (
                json!({"context": {"teamKey": "E", "claimedState": null}, "input": {"id": "x"}}),
                "\"context.claimedState\" must be a string",
            ),
            (
                json!({"context": {"teamKey": "E", "team": "x"}, "input": {"id": "x"}}),
                "\"context\" has unknown key \"team\"",
            ),
            (
                json!({"context": {"teamKey": "E\u{0}"}, "input": {"id": "x"}}),
                "\"context.teamKey\" must not contain NUL",
            ),
        ] {
            assert_eq!(parse(op, &body).unwrap_err().0, message, "{body}");
        }
        assert_eq!(Operation::from_name("l%69st-ready"), None);
        assert_eq!(
            Operation::from_name("add-blocker"),
            Some(Operation::AddBlocker)
        );
    }
}
