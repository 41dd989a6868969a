//! Why a request was refused before its handler, as the server counts it
//! (`abstore_auth_failures_total{reason}`). A client sees only the 401 or
//! 403 answer, whose text never says which check failed, but for
//! [`Failure::Lifetime`]: a token signed by a secret in force learns that
//! its lifetime is the problem, and the bound.

/// One reason for an authentication or authorization refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// No bearer token (`401 missing bearer token`).
    Missing,
    /// Malformed, not signed with a secret in force, or not a valid scope.
    Malformed,
    /// Signed, but expired.
    Expired,
    /// Signed and unexpired, but revoked (`abstore token revoke`).
    Revoked,
    /// Signed, but its `exp` lies beyond `--max-token-lifetime`.
    Lifetime,
    /// A valid token for another resource, or a write attributed to someone
    /// the token may not write as (403).
    Forbidden,
    /// Open mode on loopback: a `Host` that is not a loopback name or an
    /// allowed one (403; DNS rebinding).
    Host,
}

impl Failure {
    pub const ALL: [Failure; 7] = [
        Failure::Missing,
        Failure::Malformed,
        Failure::Expired,
        Failure::Revoked,
        Failure::Lifetime,
        Failure::Forbidden,
        Failure::Host,
    ];

    /// The metric's `reason` label: a fixed, low-cardinality word.
    pub fn label(self) -> &'static str {
        match self {
            Failure::Missing => "missing",
            Failure::Malformed => "malformed_or_bad_signature",
            Failure::Expired => "expired",
            Failure::Revoked => "revoked",
            Failure::Lifetime => "lifetime",
            Failure::Forbidden => "forbidden",
            Failure::Host => "host",
        }
    }
}

impl From<super::token::Refusal> for Failure {
    fn from(refusal: super::token::Refusal) -> Failure {
        match refusal {
            super::token::Refusal::Malformed => Failure::Malformed,
            super::token::Refusal::Expired => Failure::Expired,
        }
    }
}
