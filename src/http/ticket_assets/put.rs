//! `putTicketAsset`: `POST /repos/{repo}/tickets/{ticket}/assets`.
//!
//! In order: the path ids (400 when they could never be stored), the body
//! within the ceiling (413), its shape (400: members of the wrong JSON type,
//! `contentBase64` that is not strict padded base64, as on the artifact
//! routes), the 18 checks against the effective limits (422), then the
//! blobs, then one store write that assigns the revision.

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value};

use super::{Ticket, answer_check, ceiling, ticket_body};
use crate::blobs::blob_ref;
use crate::http::error::{ApiError, ApiResult};
use crate::http::path::ResourcePath;
use crate::http::response::json_response;
use crate::http::state::SharedState;
use crate::protocol::ticket_assets::validate::{EntryInput, PutInput, validate};
use crate::protocol::wire::{self, SchemaError, SchemaResult};
use crate::protocol::{base64, ident};
use crate::store::{AssetEntry, AssetKey, NewTicketAsset};

/// One entry as sent, its content decoded.
struct Entry<'a> {
    entry_type: &'a str,
    path: &'a str,
    /// A file's bytes (`type: "file"` only).
    content: Option<Vec<u8>>,
}

/// A member that must be a string (empty allowed: emptiness is the
/// validation's to report).
fn string<'a>(obj: &'a Map<String, Value>, key: &str, what: &str) -> SchemaResult<&'a str> {
    match obj.get(key) {
        Some(Value::String(s)) => Ok(s),
        None => Err(SchemaError(format!("\"{key}\" of {what} is required"))),
        Some(_) => Err(SchemaError(format!("\"{key}\" of {what} must be a string"))),
    }
}

/// An entry's shape: `type` and `path` strings, and for a file strict
/// base64 content. An entry of another type is left for the validation,
/// which names the type rule.
fn entry<'a>(value: &'a Value, at: usize) -> ApiResult<Entry<'a>> {
    let what = format!("entry {at}");
    let obj = wire::object(value, &what)?;
    let entry_type = string(obj, "type", &what)?;
    let path = string(obj, "path", &what)?;
    let content = if entry_type == "file" {
        let text = string(obj, "contentBase64", &what)?;
        // The body bound already bounds the decoded bytes.
        Some(base64::decode(text, usize::MAX).map_err(|_| {
            ApiError::BadRequest(format!(
                "invalid request body: \"contentBase64\" of {what} is not strict padded standard base64"
            ))
        })?)
    } else {
        None
    };
    Ok(Entry {
        entry_type,
        path,
        content,
    })
}

pub(in crate::http) async fn put_asset(
    State(state): State<SharedState>,
    path: ResourcePath,
    body: Body,
) -> ApiResult<Response> {
    let ticket = Ticket::of(&path)?;
    for (what, id) in [("repo", &ticket.repo), ("ticket id", &ticket.ticket_id)] {
        if let Some(problem) = ident::field_problem(what, id) {
            return Err(ApiError::BadRequest(format!("path {problem}")));
        }
    }
    let ceiling = ceiling(&state);
    let body = ticket_body(&state, body, ceiling).await?;
    let obj = wire::object(&body, "the request body")?;
    let what = "the request body";
    let (kind, name, layout) = (
        string(obj, "kind", what)?,
        string(obj, "name", what)?,
        string(obj, "layout", what)?,
    );
    let items = match obj.get("entries") {
        Some(Value::Array(items)) => items,
        Some(_) => return Err(SchemaError("\"entries\" must be an array".into()).into()),
        None => return Err(SchemaError("\"entries\" is required".into()).into()),
    };
    let entries = items
        .iter()
        .enumerate()
        .map(|(at, value)| entry(value, at))
        .collect::<ApiResult<Vec<_>>>()?;
    let inputs: Vec<EntryInput<'_>> = entries
        .iter()
        .map(|e| EntryInput {
            entry_type: e.entry_type,
            path: e.path,
            size: e.content.as_ref().map_or(0, |c| c.len() as u64),
        })
        .collect();
    let input = PutInput {
        kind,
        name,
        layout,
        entries: &inputs,
    };
    let valid = validate(&input, &state.limits.ticket_assets()).map_err(ApiError::Unprocessable)?;

    // Blobs before the manifest (docs/decisions.md, 5); each distinct
    // content once.
    let mut manifest = Vec::with_capacity(entries.len());
    let mut written = std::collections::HashSet::new();
    for e in entries {
        let Some(content) = e.content else {
            manifest.push(AssetEntry::Dir {
                path: e.path.to_owned(),
            });
            continue;
        };
        let address = blob_ref(&content);
        let size = content.len() as u64;
        if written.insert(address.clone()) {
            metrics::counter!("abstore_blob_bytes_written_total").increment(size);
            state
                .blobs
                .put(&address, content)
                .await
                .map_err(ApiError::blob_write_failed)?;
        }
        manifest.push(AssetEntry::File {
            path: e.path.to_owned(),
            size,
            blob_ref: address,
        });
    }
    let asset = NewTicketAsset {
        key: AssetKey {
            repo: ticket.repo,
            ticket_id: ticket.ticket_id,
            kind: kind.to_owned(),
            name: name.to_owned(),
        },
        layout: valid.layout,
        entries: manifest,
    };
    let meta = state
        .store
        .put_ticket_asset(asset, answer_check(ceiling))
        .await?;
    Ok(json_response(StatusCode::CREATED, meta.to_json_text()))
}
