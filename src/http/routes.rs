//! The route table: every route this server has, once, with its method,
//! its path, the protocols that reach it and what its token must cover
//! (`super::gate`). A route is gated where it is registered, and gating
//! fails closed: a route reaches only the protocols it names, and a path
//! not listed here is `404` (after the checks an unknown path gets).
//!
//! Paths as in the spec; `{id}` is the family resource, `{sid}` a stream,
//! `{ticket}` a ticket (`super::path`). `abstore routes` prints this table.
//!
//! The routes every build, repository and session has are declared once,
//! in [`Table::family`]; what differs between the families is data
//! ([`Family`]). Adding a route to every family is one line there plus its
//! handler.

use std::borrow::Cow;

use axum::Router;
use axum::handler::Handler;
use axum::http::Method;
use axum::routing::{MethodFilter, MethodRouter, on};

use super::auth::AuthRule;
use super::event_reads::READ_EVENTS;
use super::gate::{GateLayer, Rule, no_route};
use super::state::SharedState;
use super::{
    artifacts, builds, events, health, leases, readiness, repos, resources, sessions, streams,
    ticket_assets, tickets,
};
use crate::protocol::{Protocol, Protocols};

/// Every protocol this server answers.
const ALL: Protocols = Protocols::ALL;
/// Protocol 3 onwards (docs/protocol-versions.md).
const V3: Protocols = Protocols::since(Protocol::V3);

/// Which optional routes a server has.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// `--test-clock`: the harness clock route.
    pub test_clock: bool,
    /// The web console's routes (off with `--no-console`).
    pub console: bool,
}

/// What differs between the families whose resources share their routes
/// (`/builds/{id}`, `/repos/{id}`, `/sessions/{id}`): everything else about
/// those routes is [`Table::family`], once.
struct Family {
    /// The resource's path, the prefix of each of its routes.
    resource: &'static str,
    /// What a token must cover on each of them.
    auth: AuthRule,
    /// Who reaches the conditional append; `None`: the family has none.
    conditional_append: Option<Protocols>,
    /// Who reaches the leases; `None`: the family has none.
    leases: Option<Protocols>,
}

const BUILDS: Family = Family {
    resource: "/builds/{id}",
    auth: AuthRule::Build,
    conditional_append: Some(ALL),
    leases: Some(ALL),
};

const REPOS: Family = Family {
    resource: "/repos/{id}",
    auth: AuthRule::Repo,
    conditional_append: None,
    leases: Some(ALL),
};

/// Operator sessions (spec section 8): no leases, and a conditional append
/// from protocol 3 on.
const SESSIONS: Family = Family {
    resource: "/sessions/{id}",
    auth: AuthRule::Session,
    conditional_append: Some(V3),
    leases: None,
};

/// Every route, in the spec's order of families. One line per route, kept
/// as a table: rustfmt would break each line into five.
#[rustfmt::skip]
pub fn table(options: Options) -> Table {
    use AuthRule as A;
    let c = Rule::clients;
    let t = Table::default()
        // Outside the protocol: probes.
        .get("/health", Rule::OPEN, health::health)
        .get("/readyz", Rule::OPEN, readiness::readyz)
        // Builds (spec section 3).
        .post("/builds", c(ALL, A::BuildCollection), builds::create_build)
        .get("/builds", c(ALL, A::BuildCollection), builds::list_builds)
        .family(&BUILDS)
        // Repositories (spec section 4); there is deliberately no `GET /repos`.
        .post("/repos", c(ALL, A::RepoCollection), repos::ensure_repo)
        .family(&REPOS)
        .post("/repos/{id}/sessions", c(ALL, A::RepoSessions), sessions::create_session)
        .get("/repos/{id}/sessions", c(ALL, A::RepoSessions), sessions::list_sessions)
        // Protocol 3's derived reads and ticket assets, as the repository's
        // own routes.
        .get("/repos/{id}/build-digests", c(V3, A::Repo), repos::build_digests)
        .get("/repos/{id}/state-events", c(V3, A::Repo), repos::state_events)
        .get("/repos/{id}/ticket-asset-limits", c(V3, A::Repo), ticket_assets::limits)
        .post("/repos/{id}/tickets/{ticket}/assets", c(V3, A::Repo), ticket_assets::put_asset)
        .get("/repos/{id}/tickets/{ticket}/assets", c(V3, A::Repo), ticket_assets::get_manifest)
        .get("/repos/{id}/tickets/{ticket}/assets/file", c(V3, A::Repo), ticket_assets::get_file)
        .get("/repos/{id}/tickets/{ticket}/assets/list", c(V3, A::Repo), ticket_assets::list_assets)
        .post("/repos/{id}/tickets/{ticket}/assets/remove", c(V3, A::Repo), ticket_assets::remove_asset)
        // Operator sessions (spec section 8).
        .family(&SESSIONS)
        // Streams addressed by id alone (spec section 6), under the scope of
        // the resource that owns them.
        .get("/streams/{sid}", c(ALL, A::StreamOwner), streams::get_stream)
        .post("/streams/{sid}/chunks", c(ALL, A::StreamOwner), streams::append_chunk)
        .get("/streams/{sid}/chunks", c(ALL, A::StreamOwner), streams::READ_CHUNKS)
        .post("/streams/{sid}/close", c(ALL, A::StreamOwner), streams::close_stream)
        // Autobuild's hosted ticket protocol (docs/tickets.md): every POST
        // under /tickets/ is a ticket operation to the gate; an unknown one
        // is then `404`, as Autobuild's hosted service answers.
        .post("/tickets/", c(ALL, A::Tickets), tickets::ticket_operation)
        .post("/tickets/{*operation}", c(ALL, A::Tickets), tickets::ticket_operation);
    let t = if options.console { console_routes(t) } else { t };
    if !options.test_clock {
        return t;
    }
    // The harness clock (docs/decisions.md, 11): reading is open, moving it
    // decides which tokens and leases are expired.
    t.get("/_test/clock", Rule::OPEN, health::read_clock).post(
        "/_test/clock",
        Rule::anyone(A::TestClock),
        health::set_clock,
    )
}

/// The web console (docs/console.md): pages for browsers, not protocol
/// clients, under `/console/`; each checks its own session cookie
/// (`crate::http::console::viewer`) against the same token rules.
#[rustfmt::skip]
fn console_routes(t: Table) -> Table {
    use crate::http::console::{assets, live, pages as p};
    let b = Rule::anyone(AuthRule::Console);
    t.get("/console", b, p::overview::slash)
        .get("/console/", b, p::overview::overview)
        .get("/console/sign-in", b, p::sign_in::form)
        .post("/console/sign-in", b, p::sign_in::sign_in)
        .post("/console/sign-out", b, p::sign_in::sign_out)
        .get("/console/assets/{name}", b, assets::serve)
        .get("/console/repos/{repo}", b, p::repo::repo)
        .get("/console/builds/{id}", b, p::build::build)
        .get("/console/builds/{id}/artifacts/{kind}/{revision}", b, p::build::download)
        .get("/console/sessions/{id}", b, p::session::session)
        .get("/console/sessions/{id}/artifacts/{kind}/{revision}", b, p::build::download)
        .get("/console/live/{family}/{id}", b, live::events)
        .get("/console/tickets", b, p::overview::team_board)
        .get("/console/tickets/{team}", b, p::tickets::board)
        .post("/console/tickets/{team}", b, p::tickets::create)
        .get("/console/tickets/{team}/new", b, p::tickets::new_form)
        .get("/console/tickets/{team}/{ticket}", b, p::ticket::ticket)
        .post("/console/tickets/{team}/{ticket}/{action}", b, p::ticket::act)
        .get("/console/operator", b, p::operator::operator)
        .post("/console/operator/revocations", b, p::operator::revoke)
}

/// One route as declared: what `abstore routes` prints and tests walk.
#[derive(Clone, Debug)]
pub struct Declared {
    pub method: Method,
    pub path: Cow<'static, str>,
    pub rule: Rule,
}

/// The routes declared so far, each with its handler.
#[derive(Default)]
pub struct Table {
    routes: Vec<(Declared, MethodRouter<SharedState>)>,
}

impl Table {
    /// The routes every resource of `family` has, one line each, in the
    /// spec's order: a route added here is added to every family, under
    /// what `family` says differs.
    #[rustfmt::skip]
    fn family(self, family: &Family) -> Table {
        let c = |reach| Rule::clients(reach, family.auth);
        let p = |tail: &str| Cow::Owned(format!("{}{tail}", family.resource));
        self.get(p(""), c(ALL), resources::get_record)
            .post(p("/events"), c(ALL), events::append_event)
            .get(p("/events"), c(ALL), READ_EVENTS)
            .with(family.conditional_append, |t, reach| t.post(p("/events/conditional"), c(reach), events::append_conditional))
            .post(p("/deposits"), c(ALL), artifacts::deposit)
            .post(p("/artifacts"), c(ALL), artifacts::put_artifact)
            .get(p("/artifacts"), c(ALL), artifacts::get_artifact)
            .get(p("/artifact-list"), c(ALL), artifacts::list_artifacts)
            .with(family.leases, |t, reach| t.post(p("/lease/claim"), c(reach), leases::claim_lease))
            .with(family.leases, |t, reach| t.post(p("/lease/heartbeat"), c(reach), leases::heartbeat))
            .with(family.leases, |t, reach| t.post(p("/lease/release"), c(reach), leases::release_lease))
            .post(p("/streams"), c(ALL), streams::create_stream)
            .get(p("/streams"), c(ALL), streams::list_streams)
            .get(p("/streams/{sid}"), c(ALL), streams::get_stream)
            .post(p("/streams/{sid}/chunks"), c(ALL), streams::append_chunk)
            .get(p("/streams/{sid}/chunks"), c(ALL), streams::READ_CHUNKS)
            .post(p("/streams/{sid}/close"), c(ALL), streams::close_stream)
    }

    /// `add`'s routes for the protocols `reach` names; none when `None`
    /// (a route the family does not have).
    fn with(self, reach: Option<Protocols>, add: impl FnOnce(Table, Protocols) -> Table) -> Table {
        match reach {
            Some(reach) => add(self, reach),
            None => self,
        }
    }

    fn get<H, T>(self, path: impl Into<Cow<'static, str>>, rule: Rule, handler: H) -> Table
    where
        H: Handler<T, SharedState>,
        T: 'static,
    {
        self.add(
            Method::GET,
            path.into(),
            rule,
            on(MethodFilter::GET, handler),
        )
    }

    fn post<H, T>(self, path: impl Into<Cow<'static, str>>, rule: Rule, handler: H) -> Table
    where
        H: Handler<T, SharedState>,
        T: 'static,
    {
        self.add(
            Method::POST,
            path.into(),
            rule,
            on(MethodFilter::POST, handler),
        )
    }

    fn add(
        mut self,
        method: Method,
        path: Cow<'static, str>,
        rule: Rule,
        route: MethodRouter<SharedState>,
    ) -> Table {
        self.routes.push((Declared { method, path, rule }, route));
        self
    }

    /// The routes, in the table's order.
    pub fn declared(&self) -> impl Iterator<Item = &Declared> {
        self.routes.iter().map(|(declared, _)| declared)
    }

    /// The router: each route behind its gate; every other request (unknown
    /// path, unsupported method) behind the unrouted gate, then `404`.
    pub fn into_router(self, state: SharedState) -> Router {
        let gate = |rule| GateLayer::new(rule, state.clone());
        let unrouted = no_route.layer(gate(Rule::UNROUTED));
        self.routes
            .into_iter()
            .fold(Router::new(), |router, (declared, route)| {
                router.route(&declared.path, route.route_layer(gate(declared.rule)))
            })
            .fallback(unrouted.clone())
            .method_not_allowed_fallback(unrouted)
            .with_state(state.clone())
    }
}
