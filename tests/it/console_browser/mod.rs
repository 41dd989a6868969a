//! The web console (`/console/`, issue 51) in a real browser: headless
//! Chromium (Debian's package) through the real debug binary, the store
//! seeded through the protocol's routes, on a SQLite file and on
//! PostgreSQL. A person signs in with a token and sees what was seeded; a
//! build page grows live; a ticket written and moved on the board is what
//! `POST /tickets/get` returns, its history naming the person; hostile text
//! in every field shows as text and never runs; a token's scope bounds every
//! page; and every page is photographed at 1280 px and 390 px.
//!
//! Every test's name carries `chromium`: scripts/test leaves them out,
//! counted as skipped, where Chromium is absent (and CI, which installs it,
//! fails on that skip). The pages' hooks (`data-page`, `data-seq`,
//! `data-ticket`, forms' `data-action`, the `csrf` field) are the console's
//! contract with these tests (docs/console.md).

mod browser;
mod nginx;
mod scopes;
mod screenshots;
mod seed;
mod xss;

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Server, ServerBuilder, enc, with_pg};
use browser::{Browser, Page};
use seed::Store;

/// The team whose board the tests use.
const TEAM: &str = "acme";

/// `abstore serve` with a secret (so sign-in is needed) and a fast
/// revocation refresh (so a revoked session ends within the test's wait).
fn console(server: ServerBuilder) -> ServerBuilder {
    server
        .secret(seed::SECRET)
        .flag("--revocation-refresh-seconds", "1")
}

/// The browser, or `None` after a named skip when Chromium or the driver is
/// absent.
async fn browser(check: &str) -> Option<Browser> {
    if let Some(why) = browser::unavailable() {
        abstore_testkit::skip::skipped(&format!("console in a real browser: {check}"), &why);
        return None;
    }
    Some(Browser::launch().await)
}

/// Run `scenario` against a console on a SQLite file.
async fn on_sqlite<F, Fut>(check: &str, scenario: F)
where
    F: FnOnce(Browser, Server) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let Some(browser) = browser(check).await else {
        return;
    };
    let server = console(Server::builder().sqlite_file()).start().await;
    scenario(browser, server).await;
}

/// The same on a PostgreSQL scratch database.
async fn on_postgres<F, Fut>(check: &str, scenario: F)
where
    F: FnOnce(Browser, Server) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let Some(browser) = browser(check).await else {
        return;
    };
    with_pg("console_browser", move |database| async move {
        let server = console(Server::builder().database(&database)).start().await;
        scenario(browser, server).await;
    })
    .await;
}

/// Sign `page` in with `token` through the sign-in form, as a person does:
/// the console sends an unsigned visitor to the form, and the form to the
/// overview.
async fn sign_in(page: &mut Page<'_>, base: &str, token: &str) {
    let landed = page.goto(&format!("{base}/console/")).await;
    assert_eq!(
        page.kind().await.0.as_deref(),
        Some("sign-in"),
        "an unsigned visitor of /console/ lands on the sign-in form ({landed:?})"
    );
    let landed = page
        .submit("form[data-action=\"sign-in\"]", json!({"token": token}))
        .await;
    assert_eq!(
        page.kind().await.0.as_deref(),
        Some("overview"),
        "signing in lands on the overview ({landed:?})"
    );
    let cookies = page.cookies().await;
    let session = cookies
        .iter()
        .find(|c| c["httpOnly"] == json!(true))
        .unwrap_or_else(|| panic!("no HttpOnly session cookie after sign-in: {cookies:?}"));
    assert_eq!(session["sameSite"], json!("Strict"), "{session}");
    assert!(
        !session["value"]
            .as_str()
            .unwrap_or_default()
            .contains(token),
        "the cookie must not carry the token itself"
    );
}

/// The page at `path` must render as `kind` with status 200.
async fn visit(page: &mut Page<'_>, base: &str, path: &str, kind: &str) {
    let landed = page.goto(&format!("{base}{path}")).await;
    assert_eq!(landed.status, Some(200), "{path}: {landed:?}");
    assert_eq!(
        page.kind().await,
        (Some(kind.to_owned()), None),
        "{path} renders the {kind} page"
    );
}

fn build_path(slug: &str) -> String {
    format!("/console/builds/{}", enc(slug))
}

fn repo_path(repo: &str) -> String {
    format!("/console/repos/{}", enc(repo))
}

fn board_path(team: &str) -> String {
    format!("/console/tickets/{}", enc(team))
}

fn ticket_path(team: &str, id: &str) -> String {
    format!("/console/tickets/{}/{}", enc(team), enc(id))
}

/// The seqs of a build's whole log, as the protocol returns them.
async fn protocol_seqs(store: &Store, slug: &str) -> Vec<String> {
    let reply = crate::support::Raw::new(
        "GET",
        format!("/builds/{}/events?since=0", enc(slug)),
        Some(&seed::admin()),
    )
    .send(&store.base)
    .await
    .unwrap();
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply
        .json()
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["seq"].to_string())
        .collect()
}

// ── A person signs in and sees the store ────────────────────────────────────

/// The small store every "as a person sees it" test starts from.
struct Seeded {
    web_session: String,
    ready: String,
    blocked: String,
}

async fn seed_store(store: &Store) -> Seeded {
    for repo in ["acme/web", "acme/api"] {
        store.repo(repo).await;
    }
    store.build("acme/web", "web-1").await;
    store
        .observation("web-1", "implement", "publish step failed on node 22")
        .await;
    store
        .observation("web-1", "review", "retry with a pinned lockfile")
        .await;
    store
        .answer("web-1", "ada", "ship it after the retry")
        .await;
    store
        .artifact("web-1", "plan", b"# Plan\n1. pin the lockfile\n")
        .await;
    store.lease("web-1", "runner-7").await;
    store
        .stream(
            "/builds/web-1",
            "implement round 1",
            "I pinned the lockfile and reran publish.",
        )
        .await;
    store.build("acme/web", "web-2").await;
    store
        .observation("web-2", "implement", "second build's first observation")
        .await;
    store.build("acme/api", "api-1").await;
    store
        .journal("acme/web", "ada", "paused dispatch for the release")
        .await;
    let web_session = store
        .session(
            "acme/web",
            "ada",
            "release checklist",
            "please re-run the flaky job",
        )
        .await;
    let ready = store
        .create_ticket(
            TEAM,
            "Fix the login redirect",
            "Users land on **/home**.\n",
            &["auth"],
            "Ready",
        )
        .await;
    let blocked = store
        .create_ticket(
            TEAM,
            "Write the release notes",
            "After the fix.\n",
            &["docs"],
            "Triage",
        )
        .await;
    let (status, answer) = store
        .ticket(
            TEAM,
            "add-blocker",
            json!({"id": blocked, "blockerId": ready}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    Seeded {
        web_session,
        ready,
        blocked,
    }
}

async fn person_sees_the_store(mut browser: Browser, server: Server) {
    let base = server.url().to_owned();
    let store = Store::new(&base);
    let seeded = seed_store(&store).await;
    let mut page = browser.open("person", 1280).await;
    // A deployment token sees every page, the board included (the ticket
    // routes refuse admin tokens, and the console's board with them).
    sign_in(&mut page, &base, &seed::deployment()).await;

    // Overview: both repositories.
    for repo in ["acme/web", "acme/api"] {
        let row = format!("[data-repo=\"{repo}\"]");
        let text = page.text(&row).await;
        assert!(
            text.as_deref().is_some_and(|t| t.contains(repo)),
            "the overview lists {repo}: {text:?}"
        );
    }

    // Repository: reached by its link, builds newest first, journal, sessions.
    let landed = page.follow("[data-repo=\"acme/web\"] a").await;
    assert_eq!(page.kind().await.0.as_deref(), Some("repo"), "{landed:?}");
    let builds = page.attrs("[data-build]", "data-build").await;
    assert_eq!(
        builds,
        ["web-2", "web-1"],
        "acme/web's builds, newest first"
    );
    let body = page.text("main").await.unwrap_or_default();
    assert!(
        body.contains("paused dispatch for the release"),
        "the repository page shows its journal:\n{body}"
    );
    let session_row = format!("[data-session=\"{}\"]", seeded.web_session);
    assert_eq!(
        page.count(&session_row).await,
        1,
        "the repository page lists its session"
    );
    assert!(
        !body.contains("api-1"),
        "acme/api's build is not acme/web's"
    );

    // Build: every event by seq, its artifact, stream transcript and lease.
    let landed = page.follow("[data-build=\"web-1\"] a").await;
    assert_eq!(page.kind().await.0.as_deref(), Some("build"), "{landed:?}");
    let seqs = page.attrs("[data-events] [data-seq]", "data-seq").await;
    assert_eq!(
        seqs,
        protocol_seqs(&store, "web-1").await,
        "the build page's events"
    );
    // textContent: folded parts (a long payload, a transcript) count too.
    let body = page
        .eval("document.querySelector('main').textContent")
        .await;
    let body = body.as_str().unwrap_or_default().to_owned();
    for shown in [
        "publish step failed on node 22",
        "retry with a pinned lockfile",
        "observation.recorded",
        "plan",
        "I pinned the lockfile and reran publish.",
        "runner-7",
    ] {
        assert!(
            body.contains(shown),
            "the build page shows {shown:?}:\n{body}"
        );
    }
    // Who acted: the actor's ids, not only its kind (checked last, so that
    // a failure here still lets the rest of the tour run first).
    let actors = page.texts("[data-events] [data-seq]").await.join("\n");
    // The artifact downloads as an attachment, never inline.
    let hrefs = page
        .attrs("[data-artifact=\"plan\"] a[href*=\"/artifacts/\"]", "href")
        .await;
    let href = hrefs.first().expect("a download link for the plan");
    let url = if href.starts_with("http") {
        href.clone()
    } else {
        format!("{base}{href}")
    };
    let download = page
        .try_call(json!({"op": "request", "method": "GET", "url": url}))
        .await
        .expect("download the plan");
    assert_eq!(download["status"], json!(200), "{download}");
    assert_eq!(
        download["headers"]["content-type"],
        json!("application/octet-stream")
    );
    assert!(
        download["headers"]["content-disposition"]
            .as_str()
            .is_some_and(|d| d.starts_with("attachment")),
        "{download}"
    );
    assert_eq!(download["body"], json!("# Plan\n1. pin the lockfile\n"));

    // Session: its message.
    visit(
        &mut page,
        &base,
        &format!("/console/sessions/{}", enc(&seeded.web_session)),
        "session",
    )
    .await;
    let body = page.text("main").await.unwrap_or_default();
    assert!(body.contains("please re-run the flaky job"), "{body}");

    // Board: a column per state, cards with labels and blockers.
    visit(&mut page, &base, &board_path(TEAM), "board").await;
    let states = page.attrs("[data-state]", "data-state").await;
    for state in ["Triage", "Ready", "Doing", "Done"] {
        assert!(
            states.iter().any(|s| s == state),
            "a {state} column: {states:?}"
        );
    }
    let card = page
        .text(&format!(
            "[data-state=\"Ready\"] [data-ticket=\"{}\"]",
            seeded.ready
        ))
        .await
        .expect("the ready ticket's card in Ready");
    assert!(
        card.contains("Fix the login redirect") && card.contains("auth"),
        "{card}"
    );
    let card = page
        .text(&format!(
            "[data-state=\"Triage\"] [data-ticket=\"{}\"]",
            seeded.blocked
        ))
        .await
        .expect("the blocked ticket's card in Triage");
    assert!(card.contains("docs"), "{card}");
    assert!(
        card.contains(&seeded.ready)
            || card.contains("Fix the login redirect")
            || card.to_lowercase().contains("blocked"),
        "the card shows its blocker: {card}"
    );

    // Ticket: its body.
    let landed = page
        .follow(&format!("[data-ticket=\"{}\"] a", seeded.ready))
        .await;
    assert_eq!(page.kind().await.0.as_deref(), Some("ticket"), "{landed:?}");
    let body = page.text("[data-ticket-body]").await.unwrap_or_default();
    assert!(body.contains("Users land on"), "{body}");

    no_dialog_no_error(&mut page, "browsing the seeded store").await;
    offline_check(&mut page, &base).await;
    for who in ["ada", "implement", "review"] {
        assert!(
            actors.contains(who),
            "the build page's timeline names the actor {who:?}:\n{actors}"
        );
    }
}

/// Nothing opened a dialog or threw, and the page fetched nothing from
/// another origin.
async fn no_dialog_no_error(page: &mut Page<'_>, what: &str) {
    let reports = page.reports().await;
    assert_eq!(reports["dialogs"], json!([]), "{what}: dialogs opened");
    assert_eq!(reports["errors"], json!([]), "{what}: page errors");
}

/// Every request the page made stayed on the server's origin.
async fn offline_check(page: &mut Page<'_>, base: &str) {
    let reports = page.reports().await;
    let foreign: Vec<&Value> = reports["requests"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter(|u| {
                    let u = u.as_str().unwrap_or_default();
                    !u.starts_with(base) && !u.starts_with("data:")
                })
                .collect()
        })
        .unwrap_or_default();
    assert!(
        foreign.is_empty(),
        "requests to another origin: {foreign:?}"
    );
}

#[tokio::test]
async fn chromium_person_signs_in_and_sees_the_store_on_a_sqlite_file() {
    on_sqlite("a person sees the store", person_sees_the_store).await;
}

#[tokio::test]
async fn chromium_person_signs_in_and_sees_the_store_on_postgres() {
    on_postgres("a person sees the store", person_sees_the_store).await;
}

// ── A build page grows live ─────────────────────────────────────────────────

async fn build_page_grows_live(mut browser: Browser, server: Server) {
    let base = server.url().to_owned();
    let store = Store::new(&base);
    store.repo("acme/web").await;
    store.build("acme/web", "live-1").await;
    store.observation("live-1", "implement", "first").await;
    let mut page = browser.open("watcher", 1280).await;
    sign_in(&mut page, &base, &seed::admin()).await;
    visit(&mut page, &base, &build_path("live-1"), "build").await;
    // A mark a reload would wipe.
    page.eval("window.__sameDocument = 'yes'").await;
    // Let the page's script open its held read.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let before = page.reports().await["requests"]
        .as_array()
        .map_or(0, Vec::len);

    for round in 0..2 {
        let appended = Instant::now();
        let seq = store
            .observation(
                "live-1",
                "implement",
                &format!("appended live, round {round}"),
            )
            .await;
        let row = format!("[data-events] [data-seq=\"{seq}\"]");
        let left = Duration::from_secs(2).saturating_sub(appended.elapsed());
        let waited = page.wait(&row, left).await;
        assert!(
            waited.is_ok(),
            "event {seq} did not appear on the open build page within 2 s of its append: {waited:?}"
        );
        eprintln!(
            "round {round}: event {seq} shown {:?} after its append",
            appended.elapsed()
        );
        let text = page.text(&row).await.unwrap_or_default();
        assert!(
            text.contains(&format!("appended live, round {round}")),
            "{text}"
        );
    }
    assert_eq!(
        page.eval("window.__sameDocument").await,
        json!("yes"),
        "the page reloaded instead of growing"
    );
    // One held read per open page, no polling storm: idle for 3 s, the page
    // sends at most a couple of requests (a held read lasts many seconds).
    let idle_from = page.reports().await["requests"]
        .as_array()
        .map_or(0, Vec::len);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let requests = page.reports().await["requests"].clone();
    let all = requests.as_array().map_or(0, Vec::len);
    assert!(
        all - idle_from <= 2,
        "the open build page sent {} requests in 3 idle seconds (of {all} since {before}): {requests}",
        all - idle_from
    );
    no_dialog_no_error(&mut page, "the live build page").await;
}

#[tokio::test]
async fn chromium_build_page_shows_a_new_event_within_two_seconds_on_a_sqlite_file() {
    on_sqlite("a build page grows live", build_page_grows_live).await;
}

#[tokio::test]
async fn chromium_build_page_shows_a_new_event_within_two_seconds_on_postgres() {
    on_postgres("a build page grows live", build_page_grows_live).await;
}

// ── Tickets written on the board ────────────────────────────────────────────

/// The ticket id at the end of a ticket page's URL.
fn ticket_id_from(url: &str) -> Option<String> {
    let prefix = format!("/console/tickets/{}/", enc(TEAM));
    let at = url.find(&prefix)? + prefix.len();
    let segment = url[at..].split(['?', '#', '/']).next()?;
    // The segment is percent-encoded; form decoding undoes that (an id has
    // no `+`).
    let pair = format!("id={segment}");
    let (_, id) = url::form_urlencoded::parse(pair.as_bytes()).next()?;
    (!id.is_empty() && id != "new").then(|| id.into_owned())
}

async fn tickets_written_on_the_board(mut browser: Browser, server: Server) {
    let base = server.url().to_owned();
    let store = Store::new(&base);
    let other = store
        .create_ticket(TEAM, "Blocking work", "first\n", &[], "Ready")
        .await;
    let person = "ada-lovelace";
    let token = seed::operator_user(person);
    let mut page = browser.open("ada", 1280).await;
    sign_in(&mut page, &base, &token).await;

    // Create.
    visit(
        &mut page,
        &base,
        &format!("{}/new", board_path(TEAM)),
        "board",
    )
    .await;
    let landed = page
        .submit(
            "form[data-action=\"create\"]",
            json!({"title": "Console-made ticket", "body": "Made in **Chromium**.\n", "labels": "ui"}),
        )
        .await;
    let id = ticket_id_from(&landed.at)
        .unwrap_or_else(|| panic!("creating lands on the new ticket's page: {landed:?}"));
    assert_eq!(page.kind().await.0.as_deref(), Some("ticket"));
    let created = store.get_ticket(TEAM, &id).await;
    assert_eq!(
        created["title"],
        json!("Console-made ticket"),
        "{landed:?}: {created}"
    );
    assert_eq!(
        created["state"],
        json!("Triage"),
        "new tickets go to triage: {created}"
    );

    // Edit title, body and labels.
    page.submit(
        "form[data-action=\"edit\"]",
        json!({"title": "Console-edited ticket", "body": "Edited in Chromium.\n", "labels": "ui, docs"}),
    )
    .await;
    // Move, on the board where its card offers it, else on its page.
    visit(&mut page, &base, &board_path(TEAM), "board").await;
    let card_move = format!("[data-ticket=\"{id}\"] form[data-action=\"move\"]");
    if page.count(&card_move).await == 0 {
        visit(&mut page, &base, &ticket_path(TEAM, &id), "ticket").await;
        page.submit("form[data-action=\"move\"]", json!({"state": "Doing"}))
            .await;
    } else {
        page.submit(&card_move, json!({"state": "Doing"})).await;
    }
    visit(&mut page, &base, &board_path(TEAM), "board").await;
    assert_eq!(
        page.count(&format!("[data-state=\"Doing\"] [data-ticket=\"{id}\"]"))
            .await,
        1,
        "the moved card is in Doing"
    );

    // Comment, block and unblock on its page.
    visit(&mut page, &base, &ticket_path(TEAM, &id), "ticket").await;
    page.submit(
        "form[data-action=\"comment\"]",
        json!({"text": "Checked in the browser."}),
    )
    .await;
    page.submit("form[data-action=\"block\"]", json!({"blocker": other}))
        .await;
    let blocked = store.get_ticket(TEAM, &id).await;
    assert_eq!(blocked["blockedBy"], json!([other]), "{blocked}");
    // Unblocking is the button beside the blocker it removes.
    let unblock =
        format!("form[data-action=\"unblock\"]:has(input[name=\"blocker\"][value=\"{other}\"])");
    page.submit(&unblock, json!({})).await;

    // What the protocol returns is what the person wrote.
    let ticket = store.get_ticket(TEAM, &id).await;
    assert_eq!(ticket["title"], json!("Console-edited ticket"), "{ticket}");
    let mut labels: Vec<&str> = ticket["labels"]
        .as_array()
        .expect("labels")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    labels.sort_unstable();
    assert_eq!(labels, ["docs", "ui"], "{ticket}");
    assert_eq!(ticket["state"], json!("Doing"), "{ticket}");
    assert!(ticket.get("blockedBy").is_none(), "unblocked: {ticket}");

    // Its page shows the comment, and its history names the person for
    // every change.
    visit(&mut page, &base, &ticket_path(TEAM, &id), "ticket").await;
    let text = page.text("main").await.unwrap_or_default();
    assert!(text.contains("Checked in the browser."), "{text}");
    let history = page
        .texts("[data-ticket-history] li, [data-ticket-history] tr")
        .await;
    let history = if history.is_empty() {
        vec![page.text("[data-ticket-history]").await.unwrap_or_default()]
    } else {
        history
    };
    let by_person = history.iter().filter(|h| h.contains(person)).count();
    assert!(
        by_person >= 5,
        "the history names {person} for the create, edit, move, block and unblock: {history:#?}"
    );
    no_dialog_no_error(&mut page, "writing a ticket").await;
    // A browser sends a textarea's line breaks as CRLF (HTML's form
    // encoding); what the person wrote, and what `ab` reads back, has LF.
    // Checked last so the rest of the scenario has run.
    assert_eq!(ticket["body"], json!("Edited in Chromium.\n"), "{ticket}");
}

#[tokio::test]
async fn chromium_ticket_written_on_the_board_is_what_tickets_get_returns_on_a_sqlite_file() {
    on_sqlite("tickets written on the board", tickets_written_on_the_board).await;
}

#[tokio::test]
async fn chromium_ticket_written_on_the_board_is_what_tickets_get_returns_on_postgres() {
    on_postgres("tickets written on the board", tickets_written_on_the_board).await;
}
