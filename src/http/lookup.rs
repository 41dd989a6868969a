//! The spec's order of a resource's checks (section 9): its lookup (404)
//! precedes its body (400/413), its attribution (403) and its catalog
//! (422). The handlers of every family run those checks first and look the
//! resource up only when one fails ([`lookup_on_failure`]), so a request
//! that succeeds costs no lookup; a write that must not leave blobs behind
//! for an absent resource looks it up first ([`existing`]).

use super::error::{ApiError, ApiResult};
use super::state::SharedState;
use crate::protocol::ResourceRef;

/// The spec's order: a resource's lookup precedes its body. `work` (body,
/// query or attribution checks) runs first and costs no lookup when it
/// succeeds; only when it fails is the resource looked up, and the answer
/// is `404` if it does not exist, else `work`'s own failure.
pub(super) async fn lookup_on_failure<T>(
    state: &SharedState,
    resource: &ResourceRef,
    work: impl Future<Output = ApiResult<T>>,
) -> ApiResult<T> {
    match work.await {
        Ok(value) => Ok(value),
        Err(err) => match state.store.get_record(resource).await? {
            Some(_) => Err(err),
            None => Err(ApiError::unknown(resource)),
        },
    }
}

/// The resource must exist (before blobs are written for it).
pub(super) async fn existing(state: &SharedState, resource: &ResourceRef) -> ApiResult<()> {
    match state.store.get_record(resource).await? {
        Some(_) => Ok(()),
        None => Err(ApiError::unknown(resource)),
    }
}
