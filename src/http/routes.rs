//! The route table: every route this server has, once, with its method,
//! its path, the protocols that reach it and what its token must cover
//! (`super::gate`). A route is gated where it is registered, and gating
//! fails closed: a route reaches only the protocols it names, and a path
//! not listed here is `404` (after the checks an unknown path gets).
//!
//! Paths as in the spec; `{id}` is the family resource, `{sid}` a stream,
//! `{ticket}` a ticket (`super::path`). `abstore routes` prints this table.

use axum::Router;
use axum::handler::Handler;
use axum::http::Method;
use axum::routing::{MethodFilter, MethodRouter, on};

use super::auth::AuthRule;
use super::event_reads::READ_EVENTS;
use super::gate::{GateLayer, Rule, no_route};
use super::state::SharedState;
use super::{
    builds, health, readiness, repos, resources as any_family, sessions, streams, ticket_assets,
    tickets,
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
        .get("/builds/{id}", c(ALL, A::Build), any_family::get_record)
        .post("/builds/{id}/events", c(ALL, A::Build), any_family::append_event)
        .get("/builds/{id}/events", c(ALL, A::Build), READ_EVENTS)
        .post("/builds/{id}/events/conditional", c(ALL, A::Build), any_family::append_conditional)
        .post("/builds/{id}/deposits", c(ALL, A::Build), any_family::deposit)
        .post("/builds/{id}/artifacts", c(ALL, A::Build), any_family::put_artifact)
        .get("/builds/{id}/artifacts", c(ALL, A::Build), any_family::get_artifact)
        .get("/builds/{id}/artifact-list", c(ALL, A::Build), any_family::list_artifacts)
        .post("/builds/{id}/lease/claim", c(ALL, A::Build), any_family::claim_lease)
        .post("/builds/{id}/lease/heartbeat", c(ALL, A::Build), any_family::heartbeat)
        .post("/builds/{id}/lease/release", c(ALL, A::Build), any_family::release_lease)
        .post("/builds/{id}/streams", c(ALL, A::Build), streams::create_stream)
        .get("/builds/{id}/streams", c(ALL, A::Build), streams::list_streams)
        .get("/builds/{id}/streams/{sid}", c(ALL, A::Build), streams::get_stream)
        .post("/builds/{id}/streams/{sid}/chunks", c(ALL, A::Build), streams::append_chunk)
        .get("/builds/{id}/streams/{sid}/chunks", c(ALL, A::Build), streams::READ_CHUNKS)
        .post("/builds/{id}/streams/{sid}/close", c(ALL, A::Build), streams::close_stream)
        // Repositories (spec section 4); there is deliberately no `GET /repos`.
        .post("/repos", c(ALL, A::RepoCollection), repos::ensure_repo)
        .get("/repos/{id}", c(ALL, A::Repo), any_family::get_record)
        .post("/repos/{id}/events", c(ALL, A::Repo), any_family::append_event)
        .get("/repos/{id}/events", c(ALL, A::Repo), READ_EVENTS)
        .post("/repos/{id}/deposits", c(ALL, A::Repo), any_family::deposit)
        .post("/repos/{id}/artifacts", c(ALL, A::Repo), any_family::put_artifact)
        .get("/repos/{id}/artifacts", c(ALL, A::Repo), any_family::get_artifact)
        .get("/repos/{id}/artifact-list", c(ALL, A::Repo), any_family::list_artifacts)
        .post("/repos/{id}/lease/claim", c(ALL, A::Repo), any_family::claim_lease)
        .post("/repos/{id}/lease/heartbeat", c(ALL, A::Repo), any_family::heartbeat)
        .post("/repos/{id}/lease/release", c(ALL, A::Repo), any_family::release_lease)
        .post("/repos/{id}/streams", c(ALL, A::Repo), streams::create_stream)
        .get("/repos/{id}/streams", c(ALL, A::Repo), streams::list_streams)
        .get("/repos/{id}/streams/{sid}", c(ALL, A::Repo), streams::get_stream)
        .post("/repos/{id}/streams/{sid}/chunks", c(ALL, A::Repo), streams::append_chunk)
        .get("/repos/{id}/streams/{sid}/chunks", c(ALL, A::Repo), streams::READ_CHUNKS)
        .post("/repos/{id}/streams/{sid}/close", c(ALL, A::Repo), streams::close_stream)
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
        // Operator sessions (spec section 8): no leases.
        .get("/sessions/{id}", c(ALL, A::Session), any_family::get_record)
        .post("/sessions/{id}/events", c(ALL, A::Session), any_family::append_event)
        .get("/sessions/{id}/events", c(ALL, A::Session), READ_EVENTS)
        .post("/sessions/{id}/events/conditional", c(V3, A::Session), any_family::append_conditional)
        .post("/sessions/{id}/deposits", c(ALL, A::Session), any_family::deposit)
        .post("/sessions/{id}/artifacts", c(ALL, A::Session), any_family::put_artifact)
        .get("/sessions/{id}/artifacts", c(ALL, A::Session), any_family::get_artifact)
        .get("/sessions/{id}/artifact-list", c(ALL, A::Session), any_family::list_artifacts)
        .post("/sessions/{id}/streams", c(ALL, A::Session), streams::create_stream)
        .get("/sessions/{id}/streams", c(ALL, A::Session), streams::list_streams)
        .get("/sessions/{id}/streams/{sid}", c(ALL, A::Session), streams::get_stream)
        .post("/sessions/{id}/streams/{sid}/chunks", c(ALL, A::Session), streams::append_chunk)
        .get("/sessions/{id}/streams/{sid}/chunks", c(ALL, A::Session), streams::READ_CHUNKS)
        .post("/sessions/{id}/streams/{sid}/close", c(ALL, A::Session), streams::close_stream)
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
/// (`crate::console::viewer`) against the same token rules.
#[rustfmt::skip]
fn console_routes(t: Table) -> Table {
    use crate::console::{assets, live, pages as p};
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
    pub path: &'static str,
    pub rule: Rule,
}

/// The routes declared so far, each with its handler.
#[derive(Default)]
pub struct Table {
    routes: Vec<(Declared, MethodRouter<SharedState>)>,
}

impl Table {
    fn get<H, T>(self, path: &'static str, rule: Rule, handler: H) -> Table
    where
        H: Handler<T, SharedState>,
        T: 'static,
    {
        self.add(Method::GET, path, rule, on(MethodFilter::GET, handler))
    }

    fn post<H, T>(self, path: &'static str, rule: Rule, handler: H) -> Table
    where
        H: Handler<T, SharedState>,
        T: 'static,
    {
        self.add(Method::POST, path, rule, on(MethodFilter::POST, handler))
    }

    fn add(
        mut self,
        method: Method,
        path: &'static str,
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
                router.route(declared.path, route.route_layer(gate(declared.rule)))
            })
            .fallback(unrouted.clone())
            .method_not_allowed_fallback(unrouted)
            .with_state(state.clone())
    }
}
