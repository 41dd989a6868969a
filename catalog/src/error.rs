//! The two error types of this crate: a rejected event write (the server's
//! `422`, message preserved verbatim) and a catalog document that cannot be
//! loaded (a startup failure).

/// An event write the catalog rejects. `message` is the protocol's `422`
/// error text; clients match on its wording, so it is never rephrased
/// downstream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct EventValidationError {
    /// The complete message, e.g. `actor kind "human" may not emit "plan.completed" (allowed: agent)`.
    pub message: String,
}

impl EventValidationError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        EventValidationError {
            message: message.into(),
        }
    }
}

/// A catalog document that cannot be read or compiled. Every message names the
/// file and, where one is involved, the event type and the offending rule.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The document could not be read from disk.
    #[error("cannot read catalog {path}: {source}")]
    Io {
        /// The file that failed.
        path: String,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The document is not JSON.
    #[error("catalog {file} is not valid JSON: {source}")]
    Json {
        /// The file that failed.
        file: String,
        /// The parser's error (with line and column).
        #[source]
        source: serde_json::Error,
    },
    /// The document's top level is not a catalog document.
    #[error("catalog {file}: {message}")]
    Document {
        /// The file that failed.
        file: String,
        /// What is wrong and what is expected.
        message: String,
    },
    /// One event entry is malformed (missing member, bad rule binding, …).
    #[error("catalog {file}: event \"{event}\": {message}")]
    Entry {
        /// The file that failed.
        file: String,
        /// The event type whose entry is malformed.
        event: String,
        /// What is wrong and what is expected.
        message: String,
    },
    /// An entry allows an actor kind the protocol does not define.
    #[error(
        "catalog {file}: event \"{event}\": unknown actor kind \"{kind}\" (known kinds: kernel, agent, human, dispatcher, ingester)"
    )]
    UnknownActorKind {
        /// The file that failed.
        file: String,
        /// The event type whose entry names the kind.
        event: String,
        /// The unknown kind as written.
        kind: String,
    },
    /// An entry cites a cross-field rule this server does not implement.
    #[error("catalog {file}: event \"{event}\": unknown rule \"{rule}\" (known rules: {known})")]
    UnknownRule {
        /// The file that failed.
        file: String,
        /// The event type whose entry cites the rule.
        event: String,
        /// The unknown rule name as written.
        rule: String,
        /// Comma-separated names of the implemented rules.
        known: String,
    },
    /// An entry's payload schema does not compile as JSON Schema 2020-12.
    #[error("catalog {file}: event \"{event}\": payload schema does not compile: {message}")]
    Schema {
        /// The file that failed.
        file: String,
        /// The event type whose schema failed.
        event: String,
        /// The schema compiler's diagnostic.
        message: String,
    },
    /// A version index (`versions.json`) that cannot be used.
    #[error("catalog index {file}: {message}")]
    Index {
        /// The index file that failed.
        file: String,
        /// What is wrong and what is expected.
        message: String,
    },
    /// No catalogs exist for the requested Autobuild version.
    #[error("no event catalogs for Autobuild version \"{version}\" (known versions: {known})")]
    UnknownVersion {
        /// The version as requested.
        version: String,
        /// Comma-separated versions that have catalogs.
        known: String,
    },
}
