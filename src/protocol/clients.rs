//! Who may call: the remote-store protocol versions this server answers
//! ([`Protocol`]), the client identities an operator accepts
//! (`--accept-client VERSION/PROTOCOL`, [`ClientIdentity`]) and, for each,
//! the event catalogs its writes are validated against ([`Clients`]).
//!
//! A client sends its identity as two exact headers (spec section 1); the
//! HTTP layer matches them against [`Clients`] and routes declare which
//! protocols reach them (`crate::http::routes`).

use std::sync::Arc;

use abstore_catalog::{Catalogs, VersionedCatalogs};
use anyhow::Context as _;

/// A remote-store protocol version this server can answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    /// Autobuild 0.8.0's protocol (the spec this server was built from).
    V2 = 2,
    /// Autobuild's main branch: digests, state events, conditional session
    /// appends and ticket assets (docs/protocol-versions.md).
    V3 = 3,
}

impl Protocol {
    /// Every protocol this server answers, oldest first.
    pub const SUPPORTED: [Protocol; 2] = [Protocol::V2, Protocol::V3];

    /// `X-Autobuild-Protocol-Version` exactly as clients send it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Protocol::V2 => "2",
            Protocol::V3 => "3",
        }
    }

    /// The protocol whose header text is exactly `text` (`"2"`, never `"02"`).
    pub fn from_header(text: &[u8]) -> Option<Protocol> {
        Protocol::SUPPORTED
            .into_iter()
            .find(|p| p.as_str().as_bytes() == text)
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set of protocols: the ones a route reaches (`crate::http::routes`).
/// The empty set reaches no client, so a route gated by it is unreachable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Protocols(u8);

impl Protocols {
    /// No protocol.
    pub const NONE: Protocols = Protocols(0);
    /// Every protocol this server answers.
    pub const ALL: Protocols = Protocols::of(&Protocol::SUPPORTED);

    /// The set of `protocols`.
    pub const fn of(protocols: &[Protocol]) -> Protocols {
        let mut bits = 0;
        let mut at = 0;
        while at < protocols.len() {
            bits |= Protocols::bit(protocols[at]);
            at += 1;
        }
        Protocols(bits)
    }

    /// `protocol` and every later one this server answers.
    pub const fn since(protocol: Protocol) -> Protocols {
        let mut bits = 0;
        let mut at = 0;
        while at < Protocol::SUPPORTED.len() {
            let later = Protocol::SUPPORTED[at];
            if later as u8 >= protocol as u8 {
                bits |= Protocols::bit(later);
            }
            at += 1;
        }
        Protocols(bits)
    }

    pub const fn contains(self, protocol: Protocol) -> bool {
        self.0 & Protocols::bit(protocol) != 0
    }

    /// The members, oldest first.
    pub fn iter(self) -> impl Iterator<Item = Protocol> {
        Protocol::SUPPORTED
            .into_iter()
            .filter(move |p| self.contains(*p))
    }

    const fn bit(protocol: Protocol) -> u8 {
        1 << protocol as u8
    }
}

/// The identity a server accepts when none is configured: Autobuild 0.8.0,
/// protocol 2.
pub const DEFAULT_VERSION: &str = "0.8.0";
pub const DEFAULT_PROTOCOL: Protocol = Protocol::V2;

/// One client identity a server accepts (`--accept-client VERSION/PROTOCOL`):
/// the exact `X-Autobuild-Version` its clients send and their protocol.
/// Parsing checks the form and that the protocol is one the server answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    pub version: String,
    pub protocol: Protocol,
}

impl std::fmt::Display for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.version, self.protocol)
    }
}

impl std::str::FromStr for ClientIdentity {
    type Err = String;

    fn from_str(text: &str) -> Result<ClientIdentity, String> {
        let Some((version, protocol)) = text.trim().rsplit_once('/') else {
            return Err(format!(
                "expected VERSION/PROTOCOL, e.g. 0.8.0/2, not {text:?}"
            ));
        };
        if version.is_empty() || version.contains(char::is_whitespace) || version.contains('/') {
            return Err(format!(
                "{text:?}: the Autobuild version must be one nonempty word, e.g. 0.8.0"
            ));
        }
        let Some(protocol) = Protocol::from_header(protocol.as_bytes()) else {
            return Err(format!(
                "{text:?}: unknown protocol {protocol:?} (this server answers protocols {})",
                Protocol::SUPPORTED.map(Protocol::as_str).join(" and ")
            ));
        };
        Ok(ClientIdentity {
            version: version.to_owned(),
            protocol,
        })
    }
}

/// One accepted client identity and what its requests are answered with.
#[derive(Debug)]
pub struct Client {
    /// `X-Autobuild-Version`, exactly as the client sends it.
    pub version: String,
    /// `X-Autobuild-Protocol-Version`.
    pub protocol: Protocol,
    /// The event catalogs this client's writes are validated against.
    pub catalogs: Arc<Catalogs>,
}

/// The accepted identities, in the order configured (never empty). The first
/// is the *primary* one, which `/health` reports.
#[derive(Debug)]
pub struct Clients {
    list: Vec<Arc<Client>>,
}

impl Clients {
    /// The accepted identities of `--accept-client` / `--autobuild-version`
    /// with their catalogs, or the startup error explaining what is wrong.
    ///
    /// - Neither flag: `0.8.0/2` with the default catalogs (unchanged).
    /// - `--autobuild-version V` alone: `V/2`, as before: the catalogs the
    ///   index names for the identity `V/2` when it has one, else the
    ///   default set (today's behaviour for any version).
    /// - `--accept-client V/P`: every pair must be an identity of
    ///   `versions.json` (embedded, or `--catalog DIR` laid out like
    ///   `catalog/catalogs/`), which names its catalog set, or a flat
    ///   `--catalog DIR` serves a single identity.
    /// - Both flags: refused; `--autobuild-version V` is `--accept-client V/2`.
    pub fn resolve(
        accept: &[ClientIdentity],
        autobuild_version: Option<&str>,
        catalog_dir: Option<&std::path::Path>,
    ) -> anyhow::Result<Clients> {
        if let (Some(version), Some(_)) = (autobuild_version, accept.first()) {
            anyhow::bail!(
                "--autobuild-version {version} and --accept-client cannot be combined: \
                 --autobuild-version V means --accept-client V/2, so list every accepted identity \
                 with --accept-client (ABSTORE_ACCEPT_CLIENTS) and drop --autobuild-version \
                 (ABSTORE_AUTOBUILD_VERSION)"
            );
        }
        for (at, identity) in accept.iter().enumerate() {
            if accept[..at].contains(identity) {
                anyhow::bail!("--accept-client {identity} is given twice");
            }
        }
        let source = CatalogSource::open(catalog_dir)?;
        let list = if accept.is_empty() {
            let version = autobuild_version.unwrap_or(DEFAULT_VERSION);
            let catalogs = source.legacy(version);
            vec![Client::new(version, DEFAULT_PROTOCOL, catalogs)]
        } else {
            if accept.len() > 1
                && let CatalogSource::Flat(dir, _) = &source
            {
                anyhow::bail!(
                    "--catalog {} holds one catalog set (no versions.json), but {} client identities are accepted ({}): \
                     give a directory laid out like catalog/catalogs/ whose versions.json names each identity, \
                     or accept one identity",
                    dir.display(),
                    accept.len(),
                    join(accept.iter().map(ToString::to_string))
                );
            }
            accept
                .iter()
                .map(|identity| {
                    source
                        .for_identity(identity)
                        .map(|catalogs| Client::new(&identity.version, identity.protocol, catalogs))
                })
                .collect::<anyhow::Result<Vec<_>>>()?
        };
        Ok(Clients { list })
    }

    /// The identity `/health` reports: the first one configured.
    pub fn primary(&self) -> &Client {
        &self.list[0]
    }

    /// `0.8.0/2, 0.9.0/3`: for logs.
    pub fn describe(&self) -> String {
        join(
            self.list
                .iter()
                .map(|c| format!("{}/{}", c.version, c.protocol)),
        )
    }

    /// The accepted identity whose headers are exactly `version` and
    /// `protocol`, as sent.
    pub fn find(&self, version: &[u8], protocol: &[u8]) -> Option<&Arc<Client>> {
        self.list
            .iter()
            .find(|c| version == c.version.as_bytes() && protocol == c.protocol.as_str().as_bytes())
    }

    /// The 409 diagnostic's server side: the one identity exactly as before
    /// (`server package "0.8.0" protocol "2"`), or the accepted set.
    pub fn server_side(&self) -> String {
        let pair = |c: &Client| format!("package \"{}\" protocol \"{}\"", c.version, c.protocol);
        match self.list.as_slice() {
            [only] => format!("server {}", pair(only)),
            all => format!(
                "server accepts {}",
                all.iter().map(|c| pair(c)).collect::<Vec<_>>().join(" or ")
            ),
        }
    }
}

impl Client {
    fn new(version: &str, protocol: Protocol, catalogs: Arc<Catalogs>) -> Arc<Client> {
        Arc::new(Client {
            version: version.to_owned(),
            protocol,
            catalogs,
        })
    }
}

fn join(items: impl Iterator<Item = String>) -> String {
    items.collect::<Vec<_>>().join(", ")
}

/// Where identities find their catalogs.
enum CatalogSource {
    /// The embedded index (`catalog/catalogs/versions.json`).
    Embedded(VersionedCatalogs),
    /// `--catalog DIR` with a `versions.json`.
    Versioned(std::path::PathBuf, VersionedCatalogs),
    /// `--catalog DIR` with `build.json`, `repository.json`, `session.json`
    /// only: one set, for the one accepted identity (as before).
    Flat(std::path::PathBuf, Arc<Catalogs>),
}

impl CatalogSource {
    fn open(dir: Option<&std::path::Path>) -> anyhow::Result<CatalogSource> {
        Ok(match dir {
            None => CatalogSource::Embedded(
                VersionedCatalogs::embedded().context("compiling the embedded catalogs")?,
            ),
            Some(dir) if dir.join("versions.json").exists() => CatalogSource::Versioned(
                dir.to_owned(),
                VersionedCatalogs::from_dir(dir)
                    .with_context(|| format!("loading catalogs from {}", dir.display()))?,
            ),
            Some(dir) => CatalogSource::Flat(
                dir.to_owned(),
                Arc::new(
                    Catalogs::from_dir(dir)
                        .with_context(|| format!("loading catalogs from {}", dir.display()))?,
                ),
            ),
        })
    }

    /// `--autobuild-version V` (or nothing): the identity `V/2`'s set when
    /// the index has one, else the index's default set; a flat directory's
    /// set.
    fn legacy(&self, version: &str) -> Arc<Catalogs> {
        match self {
            CatalogSource::Flat(_, catalogs) => catalogs.clone(),
            CatalogSource::Embedded(index) | CatalogSource::Versioned(_, index) => {
                let catalogs = index
                    .for_identity(version, DEFAULT_PROTOCOL.as_str())
                    .unwrap_or_else(|| index.default_catalogs());
                Arc::new(catalogs.clone())
            }
        }
    }

    /// `--accept-client V/P`: the set the index names for exactly `V/P`.
    fn for_identity(&self, identity: &ClientIdentity) -> anyhow::Result<Arc<Catalogs>> {
        let (index, where_) = match self {
            CatalogSource::Flat(_, catalogs) => return Ok(catalogs.clone()),
            CatalogSource::Embedded(index) => (
                index,
                "the embedded catalogs (catalog/catalogs/versions.json)".to_owned(),
            ),
            CatalogSource::Versioned(dir, index) => {
                (index, format!("{}/versions.json", dir.display()))
            }
        };
        if let Some(catalogs) = index.for_identity(&identity.version, identity.protocol.as_str()) {
            return Ok(Arc::new(catalogs.clone()));
        }
        let known = join(index.identities().map(|(v, p)| format!("{v}/{p}")));
        let same_version: Vec<String> = index
            .identities()
            .filter(|(v, _)| *v == identity.version)
            .map(|(v, p)| format!("{v}/{p}"))
            .collect();
        if same_version.is_empty() {
            anyhow::bail!(
                "--accept-client {identity}: no catalogs for Autobuild {} in {where_} (known: {known}); \
                 give --catalog DIR with a versions.json whose \"identities\" name it",
                identity.version
            )
        }
        anyhow::bail!(
            "--accept-client {identity}: {where_} names Autobuild {} only as {} (known: {known}); \
             to serve another pairing, give --catalog DIR with a versions.json whose \"identities\" name it",
            identity.version,
            same_version.join(" and ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(text: &str) -> ClientIdentity {
        text.parse().expect("a valid identity")
    }

    #[test]
    fn protocols_are_read_exactly_as_sent() {
        assert_eq!(Protocol::from_header(b"2"), Some(Protocol::V2));
        assert_eq!(Protocol::from_header(b"3"), Some(Protocol::V3));
        for text in [&b"02"[..], b"4", b"", b" 2", b"2.0"] {
            assert_eq!(Protocol::from_header(text), None);
        }
        assert_eq!(identity("0.9.0/3").protocol, Protocol::V3);
        let refused = "0.9.0/02".parse::<ClientIdentity>().unwrap_err();
        assert_eq!(
            refused,
            "\"0.9.0/02\": unknown protocol \"02\" (this server answers protocols 2 and 3)"
        );
    }

    #[test]
    fn protocol_sets() {
        assert!(!Protocols::NONE.contains(Protocol::V2) && !Protocols::NONE.contains(Protocol::V3));
        assert_eq!(
            Protocols::ALL.iter().collect::<Vec<_>>(),
            Protocol::SUPPORTED
        );
        assert_eq!(
            Protocols::since(Protocol::V3).iter().collect::<Vec<_>>(),
            [Protocol::V3]
        );
        assert_eq!(Protocols::since(Protocol::V2), Protocols::ALL);
        assert_eq!(
            Protocols::of(&[Protocol::V2]).iter().collect::<Vec<_>>(),
            [Protocol::V2]
        );
    }

    #[test]
    fn the_default_is_one_identity() {
        let clients = Clients::resolve(&[], None, None).unwrap();
        assert_eq!(clients.describe(), "0.8.0/2");
        assert_eq!(clients.find(b"0.8.0", b"2").unwrap().protocol, Protocol::V2);
        assert!(clients.find(b"0.8.0", b"3").is_none());
        assert_eq!(
            clients.server_side(),
            "server package \"0.8.0\" protocol \"2\""
        );
    }

    #[test]
    fn several_identities_each_get_their_catalogs() {
        let clients =
            Clients::resolve(&[identity("0.8.0/2"), identity("0.9.0/3")], None, None).unwrap();
        let old = clients.find(b"0.8.0", b"2").unwrap();
        let new = clients.find(b"0.9.0", b"3").unwrap();
        assert_eq!((old.protocol, new.protocol), (Protocol::V2, Protocol::V3));
        let build = abstore_catalog::Family::Build;
        assert_eq!(old.catalogs.event_types(build).len(), 54);
        assert_eq!(new.catalogs.event_types(build).len(), 62);
        // Crossed pairs are no identity: the pair is.
        assert!(clients.find(b"0.8.0", b"3").is_none());
        assert_eq!(
            clients.server_side(),
            "server accepts package \"0.8.0\" protocol \"2\" or package \"0.9.0\" protocol \"3\""
        );
        assert_eq!(clients.primary().version, "0.8.0");
    }

    #[test]
    fn the_legacy_flag_keeps_serving_any_version_with_protocol_2() {
        let clients = Clients::resolve(&[], Some("0.5.0"), None).unwrap();
        assert_eq!(clients.describe(), "0.5.0/2");
        assert_eq!(
            clients
                .primary()
                .catalogs
                .event_types(abstore_catalog::Family::Build)
                .len(),
            54
        );
    }

    #[test]
    fn bad_configurations_are_refused_with_the_reason() {
        let error = |accept: &[&str], legacy: Option<&str>| {
            let accept: Vec<_> = accept.iter().map(|a| identity(a)).collect();
            format!("{:#}", Clients::resolve(&accept, legacy, None).unwrap_err())
        };
        assert!(error(&["0.8.0/2"], Some("0.8.0")).contains("cannot be combined"));
        assert!(
            error(&["0.8.0/2", "0.8.0/2"], None).contains("--accept-client 0.8.0/2 is given twice")
        );
        let unknown = error(&["0.7.0/2"], None);
        assert!(
            unknown.contains("no catalogs for Autobuild 0.7.0"),
            "{unknown}"
        );
        assert!(
            unknown.contains("known: 0.8.0/2, 0.8.0/3, 0.9.0/3"),
            "{unknown}"
        );
        let crossed = error(&["0.9.0/2"], None);
        assert!(
            crossed.contains("names Autobuild 0.9.0 only as 0.9.0/3"),
            "{crossed}"
        );
    }

    /// A client built from Autobuild's main branch before a release sends the
    /// last release's version with the next protocol (`0.8.0/3`): the pair,
    /// not the version, decides its catalogs, so it is served beside
    /// `0.8.0/2` with the 0.9.0 set.
    #[test]
    fn one_version_with_two_protocols_is_two_identities() {
        let clients = Clients::resolve(
            &[
                identity("0.8.0/2"),
                identity("0.8.0/3"),
                identity("0.9.0/3"),
            ],
            None,
            None,
        )
        .unwrap();
        assert_eq!(clients.describe(), "0.8.0/2, 0.8.0/3, 0.9.0/3");
        let old = clients.find(b"0.8.0", b"2").unwrap();
        let main = clients.find(b"0.8.0", b"3").unwrap();
        let next = clients.find(b"0.9.0", b"3").unwrap();
        let build = abstore_catalog::Family::Build;
        assert_eq!(old.catalogs.event_types(build).len(), 54);
        assert_eq!(main.catalogs.event_types(build).len(), 62);
        // One compiled 0.9.0 set behind both protocol-3 identities, and one
        // session document behind all three.
        for family in abstore_catalog::Family::ALL {
            assert!(main.catalogs.shares_document(&next.catalogs, family));
        }
        assert!(
            old.catalogs
                .shares_document(&main.catalogs, abstore_catalog::Family::Session)
        );
        assert!(!old.catalogs.shares_document(&main.catalogs, build));
    }
}
