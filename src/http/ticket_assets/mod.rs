//! Ticket assets (protocol 3; docs/protocol-versions.md, "Ticket assets"):
//! the limits route and five routes under `/repos/{repo}/tickets/{ticket}`.
//! They have no repository gate (assets may precede any journal), and are
//! authorized as the repository's own routes (admin, deployment, that
//! repository's token), which the middleware did before any handler runs.
//!
//! The deployment ceiling (`maxRequestBytes`) is `--max-body-bytes`: every
//! request body is bounded by it anyway, so it is what a client must plan
//! for. It lowers the advertised `maxBytes`, bounds every ticket-asset
//! request (`413` naming the ceiling), and every answer of these routes is
//! measured against it before it is sent, or, for a put or a removal,
//! before anything is written.
//!
//! An id or label that could never be stored (an id over the identifier
//! bound, a kind or name failing the label rule) names no asset: reads
//! answer `null` or `[]` without asking the store, a put is refused.

mod put;

pub(in crate::http) use put::put_asset;

use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use bytes::BytesMut;
use serde_json::Value;

use super::error::{ApiError, ApiResult};
use super::extract::lenient_int;
use super::extract::{ParsedJson, json_body, query_param};
use super::path::ResourcePath;
use super::response::{json, json_response, json_response_bytes};
use super::state::SharedState;
use crate::protocol::ticket_assets::{self as assets, validate::is_label};
use crate::protocol::{base64, ident, wire};
use crate::store::rows::Next;
use crate::store::{AnswerCheck, AssetEntry, AssetKey, Listing, StoreError, TicketAssetMeta};

/// The repository and ticket a route addresses.
struct Ticket {
    repo: String,
    ticket_id: String,
}

impl Ticket {
    /// Both path ids, strictly decoded (400 on a malformed escape).
    fn of(path: &ResourcePath) -> ApiResult<Ticket> {
        Ok(Ticket {
            repo: path.id()?.to_owned(),
            ticket_id: path.ticket_id()?,
        })
    }

    /// Whether both ids fit the identifier bound the store's columns keep.
    fn storable(&self) -> bool {
        ident::fits(&self.repo) && ident::fits(&self.ticket_id)
    }

    /// The asset `kind`/`name` of this ticket, `None` when it could never
    /// have been stored.
    fn key(&self, kind: &str, name: &str) -> Option<AssetKey> {
        (self.storable() && is_label(kind) && is_label(name)).then(|| AssetKey {
            repo: self.repo.clone(),
            ticket_id: self.ticket_id.clone(),
            kind: kind.to_owned(),
            name: name.to_owned(),
        })
    }

    /// Revision `rev` (the latest without one) of asset `kind`/`name`;
    /// `None` when it does not exist or could never have been stored.
    async fn find(
        &self,
        state: &SharedState,
        kind: &str,
        name: &str,
        rev: Option<i64>,
    ) -> ApiResult<Option<TicketAssetMeta>> {
        let Some(key) = self.key(kind, name) else {
            return Ok(None);
        };
        Ok(state.store.get_ticket_asset(&key, rev).await?)
    }
}

/// The ceiling every ticket-asset request and answer is held to.
fn ceiling(state: &SharedState) -> usize {
    state.limits.max_body_bytes
}

/// A ticket-asset request body: over the ceiling, the `413` names it.
async fn ticket_body(state: &SharedState, body: Body, ceiling: usize) -> ApiResult<ParsedJson> {
    match json_body(body, ceiling, &state.json_budget).await {
        Err(ApiError::TooLarge(_)) => {
            Err(ApiError::TooLarge(assets::request_over_ceiling(ceiling)))
        }
        other => other,
    }
}

/// A query parameter that must be present and nonempty (400).
fn required(uri: &Uri, name: &str) -> ApiResult<String> {
    query_param(uri, name)
        .filter(|value| !value.is_empty())
        .ok_or_else(|| ApiError::BadRequest(format!("query parameter \"{name}\" is required")))
}

fn null() -> Response {
    json_response(StatusCode::OK, "null".into())
}

/// A manifest answer measured against the ceiling inside the writing
/// transaction (put, remove): over it, nothing is written.
fn answer_check(ceiling: usize) -> AnswerCheck {
    Box::new(move |meta| {
        let bytes = meta.to_json_text().len();
        if bytes > ceiling {
            let key = &meta.summary.key;
            return Err(StoreError::TooLarge(assets::manifest_over_ceiling(
                &key.kind, &key.name, bytes, ceiling,
            )));
        }
        Ok(())
    })
}

/// `ticketAssetLimits`: `GET /repos/{repo}/ticket-asset-limits`.
pub(in crate::http) async fn limits(State(state): State<SharedState>) -> Response {
    json(StatusCode::OK, &state.limits.ticket_assets().to_json())
}

/// `getTicketAsset` (manifest): `GET …/assets?kind=&name=[&rev=]`, the
/// manifest without bytes; `null` when absent, removed (latest) or no
/// such revision (a tombstone's own number included).
pub(in crate::http) async fn get_manifest(
    State(state): State<SharedState>,
    path: ResourcePath,
    uri: Uri,
) -> ApiResult<Response> {
    let ticket = Ticket::of(&path)?;
    let (kind, name) = (required(&uri, "kind")?, required(&uri, "name")?);
    let rev = lenient_int(&uri, "rev")?;
    let Some(meta) = ticket.find(&state, &kind, &name, rev).await? else {
        return Ok(null());
    };
    let text = meta.to_json_text();
    let ceiling = ceiling(&state);
    if text.len() > ceiling {
        return Err(ApiError::TooLarge(assets::manifest_over_ceiling(
            &kind,
            &name,
            text.len(),
            ceiling,
        )));
    }
    Ok(json_response(StatusCode::OK, text))
}

/// `getTicketAsset` (one file): `GET …/assets/file?kind=&name=&path=[&rev=]`:
/// `{"contentBase64"}`; `null` when the asset or revision is absent; `404`
/// when the revision has no file at `path`.
pub(in crate::http) async fn get_file(
    State(state): State<SharedState>,
    path: ResourcePath,
    uri: Uri,
) -> ApiResult<Response> {
    let ticket = Ticket::of(&path)?;
    let (kind, name) = (required(&uri, "kind")?, required(&uri, "name")?);
    let file = required(&uri, "path")?;
    let rev = lenient_int(&uri, "rev")?;
    let Some(meta) = ticket.find(&state, &kind, &name, rev).await? else {
        return Ok(null());
    };
    let found = meta.entries()?.into_iter().find_map(|entry| match entry {
        AssetEntry::File {
            path,
            size,
            blob_ref,
        } if path == file => Some((size, blob_ref)),
        _ => None,
    });
    let Some((size, blob_ref)) = found else {
        return Err(ApiError::NotFound(format!(
            "ticket asset {kind}/{name} revision {} has no file \"{file}\"",
            meta.summary.revision
        )));
    };
    let ceiling = ceiling(&state);
    if assets::file_answer_len(size) > ceiling as u64 {
        return Err(ApiError::TooLarge(assets::file_over_ceiling(
            &file, size, ceiling,
        )));
    }
    let bytes = state.blobs.get(&blob_ref).await.map_err(|err| {
        ApiError::Internal(format!(
            "ticket asset {kind}/{name} revision {}: blob {blob_ref} for \"{file}\" unreadable: {err}",
            meta.summary.revision
        ))
    })?;
    let text = Value::String(base64::encode(&bytes)).to_string();
    Ok(json_response(
        StatusCode::OK,
        format!("{{\"contentBase64\":{text}}}"),
    ))
}

/// `listTicketAssets`: `GET …/assets/list[?revisions=1]`, summaries by
/// kind, name, revision: the latest live revision of each asset, or with
/// `revisions=1` every revision but tombstones.
///
/// The rows stream from the store and are kept only while the answer fits
/// the ceiling: past it they are counted, not kept, so the `413` still
/// names the list's exact length while the memory a list takes is the
/// ceiling (plus one piece of rows), whatever the number of revisions.
pub(in crate::http) async fn list_assets(
    State(state): State<SharedState>,
    path: ResourcePath,
    uri: Uri,
) -> ApiResult<Response> {
    let ticket = Ticket::of(&path)?;
    let revisions = query_param(&uri, "revisions").as_deref() == Some("1");
    if !ticket.storable() {
        return Ok(json_response(StatusCode::OK, "[]".into()));
    }
    let listing = Listing::TicketAssets {
        repo: ticket.repo.clone(),
        ticket_id: ticket.ticket_id.clone(),
        revisions,
    };
    let mut rows = state.store.read(listing).await?;
    let ceiling = ceiling(&state);
    // The brackets count too.
    let mut len = 2usize;
    let mut text = Some(BytesMut::from(&b"["[..]));
    while let Some(step) = rows.next().await {
        match step? {
            Next::Piece(piece) => {
                len = len.saturating_add(piece.len());
                if len > ceiling {
                    text = None;
                }
                if let Some(text) = &mut text {
                    text.extend_from_slice(&piece);
                }
            }
            Next::End(()) => break,
        }
    }
    let Some(mut text) = text else {
        return Err(ApiError::TooLarge(assets::list_over_ceiling(
            &ticket.ticket_id,
            len,
            ceiling,
        )));
    };
    text.extend_from_slice(b"]");
    Ok(json_response_bytes(StatusCode::OK, text.freeze()))
}

/// `removeTicketAsset`: `POST …/assets/remove {kind, name}`: the removed
/// revision's meta, or `null` (nothing written) when no live asset exists.
pub(in crate::http) async fn remove_asset(
    State(state): State<SharedState>,
    path: ResourcePath,
    body: Body,
) -> ApiResult<Response> {
    let ticket = Ticket::of(&path)?;
    let ceiling = ceiling(&state);
    let body = ticket_body(&state, body, ceiling).await?;
    let obj = wire::object(&body, "the request body")?;
    let (kind, name) = (
        wire::nonempty_str(obj, "kind")?,
        wire::nonempty_str(obj, "name")?,
    );
    let Some(key) = ticket.key(kind, name) else {
        return Ok(null());
    };
    match state
        .store
        .remove_ticket_asset(&key, answer_check(ceiling))
        .await?
    {
        Some(meta) => Ok(json_response(StatusCode::OK, meta.to_json_text())),
        None => Ok(null()),
    }
}
