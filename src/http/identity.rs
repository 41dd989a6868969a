//! Package and protocol identity (spec section 1): every `/builds`, `/repos`
//! and `/sessions` request must send one of the accepted client identities
//! — an exact Autobuild version and protocol version — checked before
//! authentication, body or lookup. The top-level `/streams` routes carry the
//! identity of the family that owns the stream, so they are checked the same
//! way, and so are Autobuild's hosted ticket operations (`POST /tickets/…`),
//! whose client sends the same two headers as its store client.
//!
//! The server accepts a configured set of identities (`--accept-client
//! VERSION/PROTOCOL`, default `0.8.0/2`; docs/configuration.md). The matched
//! identity rides along in the request's extensions as a [`Client`]: handlers
//! validate events against *its* catalogs, and routes that exist only from
//! some protocol on ([`min_protocol`]) are unknown routes to older clients.

use std::sync::Arc;

use abstore_catalog::{Catalogs, VersionedCatalogs};
use anyhow::Context as _;
use axum::extract::Request;
use axum::http::HeaderValue;

use super::path::{ResourcePath, is_ticket_route};
use super::{ApiError, ApiResult};
use crate::config::ClientIdentity;

pub const VERSION_HEADER: &str = "x-autobuild-version";
pub const PROTOCOL_HEADER: &str = "x-autobuild-protocol-version";

/// The remote-store protocol versions this server can answer.
pub const SUPPORTED_PROTOCOLS: &[u8] = &[2, 3];

/// The identity a server accepts when none is configured: Autobuild 0.8.0,
/// protocol 2.
pub const DEFAULT_VERSION: &str = "0.8.0";
pub const DEFAULT_PROTOCOL: u8 = 2;

/// Route templates that exist only from some protocol version on. A client of
/// an older protocol reaching one gets exactly the unknown-route answer
/// (`404 not-found`, `no route: METHOD PATH`), as from a server without it.
/// Templates as in `docs/protocol-versions.md`; a `{capture}` segment
/// matches any capture name, so `/repos/{repo}/…` is the router's `/repos/{id}/…`.
const PROTOCOL_ROUTES: &[(&str, u8)] = &[
    ("/repos/{repo}/build-digests", 3),
    ("/repos/{repo}/state-events", 3),
    ("/sessions/{id}/events/conditional", 3),
    ("/repos/{repo}/ticket-asset-limits", 3),
    ("/repos/{repo}/tickets/{id}/assets", 3),
    ("/repos/{repo}/tickets/{id}/assets/file", 3),
    ("/repos/{repo}/tickets/{id}/assets/list", 3),
    ("/repos/{repo}/tickets/{id}/assets/remove", 3),
];

/// The lowest protocol a client must speak to reach the route `template`
/// (the matched route, as axum's `MatchedPath` gives it); 2 for every route
/// protocol 2 already had.
pub fn min_protocol(template: &str) -> u8 {
    PROTOCOL_ROUTES
        .iter()
        .find(|(t, _)| same_template(t, template))
        .map_or(DEFAULT_PROTOCOL, |(_, protocol)| *protocol)
}

/// Two route templates are the same route when their literal segments agree
/// and their captures sit in the same places, whatever the captures' names.
fn same_template(a: &str, b: &str) -> bool {
    let capture = |s: &str| s.starts_with('{') && s.ends_with('}');
    a.split('/').count() == b.split('/').count()
        && a.split('/')
            .zip(b.split('/'))
            .all(|(x, y)| x == y || (capture(x) && capture(y)))
}

/// One accepted client identity and what its requests are answered with.
#[derive(Debug)]
pub struct Client {
    /// `X-Autobuild-Version`, exactly as the client sends it.
    pub version: String,
    /// `X-Autobuild-Protocol-Version` as a number (`2`, `3`).
    pub protocol: u8,
    /// The same, as the client sends it.
    protocol_text: String,
    /// The event catalogs this client's writes are validated against.
    pub catalogs: Arc<Catalogs>,
}

impl Client {
    /// `X-Autobuild-Protocol-Version` as sent (and as `/health` reports it).
    pub fn protocol_text(&self) -> &str {
        &self.protocol_text
    }
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
                    let protocol = identity.protocol_number();
                    source
                        .for_identity(identity)
                        .map(|catalogs| Client::new(&identity.version, protocol, catalogs))
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
                .map(|c| format!("{}/{}", c.version, c.protocol_text)),
        )
    }

    fn find(&self, version: &HeaderValue, protocol: &HeaderValue) -> Option<&Arc<Client>> {
        self.list.iter().find(|c| {
            version.as_bytes() == c.version.as_bytes()
                && protocol.as_bytes() == c.protocol_text.as_bytes()
        })
    }

    /// The 409 diagnostic's server side: the one identity exactly as before
    /// (`server package "0.8.0" protocol "2"`), or the accepted set.
    fn server_side(&self) -> String {
        let pair =
            |c: &Client| format!("package \"{}\" protocol \"{}\"", c.version, c.protocol_text);
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
    fn new(version: &str, protocol: u8, catalogs: Arc<Catalogs>) -> Arc<Client> {
        Arc::new(Client {
            version: version.to_owned(),
            protocol,
            protocol_text: protocol.to_string(),
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
                    .for_identity(version, &DEFAULT_PROTOCOL.to_string())
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
        if let Some(catalogs) = index.for_identity(&identity.version, &identity.protocol) {
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

/// What the identity check decided for one request that it let through.
#[derive(Debug)]
pub enum Admission {
    /// Not a machine route (`/health`, `/readyz`, an unknown top-level path).
    Outside,
    /// An accepted client on a route its protocol has.
    Client(Arc<Client>),
    /// An accepted client on a route newer than its protocol: answered as an
    /// unknown route (after the checks an unknown route gets).
    UnknownToClient,
}

/// [`check`], then the protocol gate for the matched route `template`
/// ([`min_protocol`]; `None` when no route matched).
pub fn admit(clients: &Clients, request: &Request, template: Option<&str>) -> ApiResult<Admission> {
    Ok(match check(clients, request)? {
        None => Admission::Outside,
        Some(client) if template.is_some_and(|t| client.protocol < min_protocol(t)) => {
            Admission::UnknownToClient
        }
        Some(client) => Admission::Client(client),
    })
}

/// 409 unless a machine route carries one of the accepted identities; the
/// identity it carries otherwise (`None` for routes outside the check).
pub fn check(clients: &Clients, request: &Request) -> ApiResult<Option<Arc<Client>>> {
    let path = request.uri().path();
    if ResourcePath::family(path).is_none() && !is_ticket_route(request.method(), path) {
        return Ok(None);
    }
    // Every copy of a repeated header must match: letting the first one
    // win would accept `0.8.0` followed by `9.9.9`.
    let sent = |name: &str| -> (Option<&HeaderValue>, bool) {
        let mut values = request.headers().get_all(name).iter();
        let first = values.next();
        let agree = values.all(|v| Some(v) == first);
        (first, agree)
    };
    let ((version, versions_agree), (protocol, protocols_agree)) =
        (sent(VERSION_HEADER), sent(PROTOCOL_HEADER));
    if versions_agree
        && protocols_agree
        && let (Some(version), Some(protocol)) = (version, protocol)
        && let Some(client) = clients.find(version, protocol)
    {
        return Ok(Some(client.clone()));
    }
    let shown = |v: Option<&HeaderValue>, agree: bool| match v {
        None => "(missing)".to_owned(),
        Some(_) if !agree => "(repeated with differing values)".to_owned(),
        Some(v) => format!("\"{}\"", String::from_utf8_lossy(v.as_bytes())),
    };
    Err(ApiError::Conflict(format!(
        "autobuild version mismatch: client package {} protocol {}, {}",
        shown(version, versions_agree),
        shown(protocol, protocols_agree),
        clients.server_side(),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(text: &str) -> ClientIdentity {
        text.parse().expect("a valid identity")
    }

    fn request(version: Option<&str>, protocol: Option<&str>) -> Request {
        let mut builder = Request::builder().uri("/builds/x");
        if let Some(v) = version {
            builder = builder.header(VERSION_HEADER, v);
        }
        if let Some(p) = protocol {
            builder = builder.header(PROTOCOL_HEADER, p);
        }
        builder.body(axum::body::Body::empty()).unwrap()
    }

    fn refusal(clients: &Clients, request: &Request) -> String {
        match check(clients, request) {
            Err(ApiError::Conflict(message)) => message,
            other => panic!("not a 409: {other:?}"),
        }
    }

    #[test]
    fn the_default_is_one_identity_with_todays_message() {
        let clients = Clients::resolve(&[], None, None).unwrap();
        assert_eq!(clients.describe(), "0.8.0/2");
        let ok = check(&clients, &request(Some("0.8.0"), Some("2"))).unwrap();
        assert_eq!(ok.unwrap().protocol, 2);
        assert_eq!(
            refusal(&clients, &request(Some("0.9.0"), None)),
            "autobuild version mismatch: client package \"0.9.0\" protocol (missing), server package \"0.8.0\" protocol \"2\""
        );
    }

    #[test]
    fn several_identities_each_get_their_catalogs_and_the_refusal_names_all() {
        let clients =
            Clients::resolve(&[identity("0.8.0/2"), identity("0.9.0/3")], None, None).unwrap();
        let old = check(&clients, &request(Some("0.8.0"), Some("2")))
            .unwrap()
            .unwrap();
        let new = check(&clients, &request(Some("0.9.0"), Some("3")))
            .unwrap()
            .unwrap();
        assert_eq!((old.protocol, new.protocol), (2, 3));
        assert_eq!(
            old.catalogs
                .event_types(abstore_catalog::Family::Build)
                .len(),
            54
        );
        assert_eq!(
            new.catalogs
                .event_types(abstore_catalog::Family::Build)
                .len(),
            62
        );
        // Crossed pairs are refused: the pair is the identity.
        assert_eq!(
            refusal(&clients, &request(Some("0.8.0"), Some("3"))),
            "autobuild version mismatch: client package \"0.8.0\" protocol \"3\", server accepts \
             package \"0.8.0\" protocol \"2\" or package \"0.9.0\" protocol \"3\""
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
    /// not the version, decides its catalogs and routes, so it is served
    /// beside `0.8.0/2` with the 0.9.0 set.
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
        let admitted = |protocol, template| {
            let sent = request(Some("0.8.0"), Some(protocol));
            match admit(&clients, &sent, template).unwrap() {
                Admission::Client(client) => Some(client),
                Admission::UnknownToClient => None,
                Admission::Outside => panic!("a machine route"),
            }
        };
        let events = Some("/builds/{id}/events");
        let (old, main) = (
            admitted("2", events).unwrap(),
            admitted("3", events).unwrap(),
        );
        let next = check(&clients, &request(Some("0.9.0"), Some("3")))
            .unwrap()
            .unwrap();
        assert_eq!((old.protocol, main.protocol), (2, 3));
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
        // Protocol 3's routes answer the /3 client only.
        let digests = Some("/repos/{id}/build-digests");
        assert!(admitted("2", digests).is_none());
        assert_eq!(admitted("3", digests).map(|c| c.protocol), Some(3));
    }

    #[test]
    fn older_clients_do_not_reach_newer_routes() {
        let clients =
            Clients::resolve(&[identity("0.8.0/2"), identity("0.9.0/3")], None, None).unwrap();
        let admitted = |version, protocol, template| {
            admit(&clients, &request(Some(version), Some(protocol)), template).unwrap()
        };
        let digests = Some("/repos/{id}/build-digests");
        assert!(matches!(
            admitted("0.8.0", "2", digests),
            Admission::UnknownToClient
        ));
        assert!(matches!(
            admitted("0.9.0", "3", digests),
            Admission::Client(c) if c.protocol == 3
        ));
        assert!(matches!(
            admitted("0.8.0", "2", Some("/builds/{id}/events")),
            Admission::Client(c) if c.protocol == 2
        ));
        // No route matched: the unknown-route answer comes from the fallback.
        assert!(matches!(admitted("0.8.0", "2", None), Admission::Client(_)));
        // The identity check still comes first.
        assert!(admit(&clients, &request(Some("0.7.0"), Some("2")), digests).is_err());
        let health = Request::builder()
            .uri("/health")
            .body(axum::body::Body::empty())
            .unwrap();
        assert!(matches!(
            admit(&clients, &health, Some("/health")).unwrap(),
            Admission::Outside
        ));
    }

    #[test]
    fn protocol_3_routes_are_listed_and_everything_else_is_protocol_2() {
        assert_eq!(min_protocol("/repos/{repo}/build-digests"), 3);
        assert_eq!(min_protocol("/repos/{repo}/state-events"), 3);
        assert_eq!(min_protocol("/sessions/{id}/events/conditional"), 3);
        assert_eq!(min_protocol("/repos/{repo}/tickets/{id}/assets/file"), 3);
        assert_eq!(min_protocol("/builds/{slug}/events/conditional"), 2);
        assert_eq!(min_protocol("/repos/{repo}/events"), 2);
        // The routers name every capture `{id}`.
        assert_eq!(min_protocol("/repos/{id}/build-digests"), 3);
        assert_eq!(min_protocol("/repos/{id}/tickets/{id}/assets"), 3);
        assert_eq!(min_protocol("/repos/{id}/build-digests/x"), 2);
        assert_eq!(min_protocol("/repos/build-digests"), 2);
    }
}
