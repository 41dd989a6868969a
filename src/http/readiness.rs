//! `GET /readyz`: can this process serve requests now? It checks the
//! database (a trivial query) and the blob store (a real write and delete,
//! at most one every two seconds), each with a short timeout. Never authenticated; the body names
//! what failed but never how to reach it. `/health` stays the spec's
//! process-identity answer.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;

use super::response::json;
use super::state::SharedState;

/// Each check's bound: readiness must answer faster than probes time out.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

pub(super) async fn readyz(State(state): State<SharedState>) -> Response {
    let database = match tokio::time::timeout(CHECK_TIMEOUT, state.store.ping()).await {
        Ok(Ok(())) => "ok",
        Ok(Err(err)) => {
            tracing::warn!(error = %err, "readiness: database check failed");
            "failed"
        }
        Err(_) => "timed out",
    };
    let blobs = match tokio::time::timeout(CHECK_TIMEOUT, state.blobs.check()).await {
        Ok(Ok(())) => "ok",
        Ok(Err(err)) => {
            tracing::warn!(error = %err, "readiness: blob store check failed");
            "failed"
        }
        Err(_) => "timed out",
    };
    let shutting_down = state.shutdown.is_cancelled();
    let ready = database == "ok" && blobs == "ok" && !shutting_down;
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    json(
        status,
        &json!({ "ready": ready, "checks": { "database": database, "blobs": blobs }, "shuttingDown": shutting_down }),
    )
}
