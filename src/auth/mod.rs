//! Authentication and authorization (spec section 7), as pure code: no HTTP,
//! no I/O, no clock. Callers pass the header value, the secret and the current
//! epoch milliseconds.
//!
//! # Model
//!
//! A token is a signed, self-contained *scope*: `base64url(JSON scope) + "." +
//! base64url(HMAC-SHA256(secret, first segment))`. The server keeps no token
//! state but the digests of revoked tokens (`crate::revocation`); whoever holds
//! the secret can mint ([`mint`]), and the server trusts whatever a correctly
//! signed, unexpired, unrevoked scope says ([`verify`]). Every verification
//! failure is the same opaque `401 invalid or expired token`; a verified
//! token beyond [`MaxLifetime`] is told so ([`MaxLifetime::refusal`]).
//!
//! A scope ([`Scope`]) has up to three dimensions:
//! - a **resource** it may address: admin (legacy `build: "*"`), one build, one
//!   repository, one operator session, the whole deployment, or — for
//!   attributed human-operator scopes — nothing on the raw store routes;
//! - a **session** that bounds whom its event writes may be attributed to
//!   (`"*"` = any actor the catalog allows, otherwise only that agent session);
//! - an optional **`via`** delegate that is stamped onto human actors.
//!
//! A request goes through, in order: [`bearer()`] (401 when missing), [`verify`]
//! (401), the server's own limits on a verified token (401: its `exp` within
//! [`MaxLifetime`], its [`digest`] not revoked), [`authorize()`] against the
//! route's [`Target`] (403, before the body is read or anything looked up), and
//! for event-bearing writes [`attribute`] (403, before catalog validation). In
//! open mode (no secret) none of this runs. Every refusal has a [`Failure`]
//! reason the server counts; the client sees only the spec's answer (and,
//! for the lifetime bound alone, why).
//!
//! # Layout
//! - [`token`]: the wire format, signing and verification.
//! - [`scope`]: the scope shapes, strictly parsed and canonically serialized.
//! - [`authorize`](mod@authorize): the resource matrix, one table.
//! - [`attribution`]: session and `via` attribution of event actors.
//! - [`bearer`](mod@bearer): the `Authorization` header.
//! - [`lifetime`]: `--max-token-lifetime`, and the one duration parser.
//! - [`failure`]: why a request was refused, for metrics.

pub mod attribution;
pub mod authorize;
pub mod bearer;
pub mod failure;
pub mod lifetime;
pub mod scope;
pub mod token;

pub use attribution::attribute;
pub use authorize::{Denied, Target, authorize};
pub use bearer::{Unauthenticated, bearer};
pub use failure::Failure;
pub use lifetime::{MaxLifetime, parse_duration_ms};
pub use scope::{InvalidScope, Scope, ScopeKind, Via, WILDCARD};
pub use token::{
    InvalidToken, MAX_TOKEN_LEN, MIN_SECRET_LEN, Refusal, check, digest, mint, verify,
};
