//! The stored-XSS sweep: hostile text in every field the console shows
//! (slugs, repository ids, actor ids, payloads, artifact kinds, stream
//! text, session titles, ticket titles, bodies, labels and comments) shows
//! as text and never runs. Every payload tries to set the canary
//! `window.__pwned` or open a dialog; the pages are read in a context whose
//! Content-Security-Policy is switched off, so the server's escaping alone
//! must hold, and then once more with it on.

use serde_json::json;

use super::browser::{Browser, Page};
use super::seed::{self, Store};
use super::{
    TEAM, board_path, build_path, on_postgres, on_sqlite, repo_path, sign_in, ticket_path,
};
use crate::support::{Server, enc};

/// What a hostile writer stores: markup, handlers, links, SVG, template
/// syntax, bidirectional overrides.
const PAYLOADS: &[&str] = &[
    "<script>window.__pwned='script';alert(1)</script>",
    "<img src=x onerror=\"window.__pwned='img';alert(2)\">",
    "<svg onload=\"window.__pwned='svg'\"><script>window.__pwned='svg-script'</script></svg>",
    "javascript:window.__pwned='href';alert(3)",
    "\"><a href=\"javascript:window.__pwned='link'\">click</a><b x=\"",
    "'><body onload=window.__pwned='body'><x '",
    "<iframe srcdoc=\"<script>parent.__pwned='iframe'</script>\"></iframe>",
    "<details open ontoggle=\"window.__pwned='toggle'\">x</details>",
    "<style>*{display:none}</style>{{constructor.constructor('window.__pwned=1')()}}${alert(4)}",
    "\u{202E}gnp.exe\u{202C} RTL override \u{2066}isolate\u{2069}",
    "[md link](javascript:window.__pwned='md') ![img](x\" onerror=\"window.__pwned='mdimg')",
];

/// A 1 MB string of payloads (under every field's 1 MiB bound).
fn megabyte() -> String {
    let unit = "<img src=x onerror=\"window.__pwned='big'\">\u{202E}";
    unit.repeat(1_000_000 / unit.len())
}

/// A payload as a slug or repository id: one path segment (no `/`, which a
/// repository id may hold but which would make the test's own URLs
/// ambiguous), with its number so that each is distinct.
fn as_id(n: usize, payload: &str) -> String {
    format!("x{n}-{}", payload.replace('/', "\u{2215}"))
}

struct Planted {
    repos: Vec<String>,
    slugs: Vec<String>,
    sessions: Vec<String>,
    tickets: Vec<String>,
}

async fn plant(store: &Store) -> Planted {
    let big = megabyte();
    let mut planted = Planted {
        repos: Vec::new(),
        slugs: Vec::new(),
        sessions: Vec::new(),
        tickets: Vec::new(),
    };
    for (n, payload) in PAYLOADS.iter().enumerate() {
        let repo = as_id(n, payload);
        let slug = as_id(n, &format!("b{payload}"));
        store.repo(&repo).await;
        store.build(&repo, &slug).await;
        store.observation(&slug, payload, payload).await;
        store.answer(&slug, payload, payload).await;
        store.artifact(&slug, payload, payload.as_bytes()).await;
        store.lease(&slug, payload).await;
        store
            .stream(&format!("/builds/{}", enc(&slug)), payload, payload)
            .await;
        store.journal(&repo, payload, payload).await;
        let session = store.session(&repo, payload, payload, payload).await;
        store
            .stream(&format!("/sessions/{}", enc(&session)), payload, payload)
            .await;
        let ticket = store
            .create_ticket(TEAM, payload, payload, &[payload], "Ready")
            .await;
        let (status, answer) = store
            .ticket(TEAM, "comment", json!({"id": ticket, "body": payload}))
            .await;
        assert_eq!(status, 200, "{answer}");
        planted.repos.push(repo);
        planted.slugs.push(slug);
        planted.sessions.push(session);
        planted.tickets.push(ticket);
    }
    // The megabyte: a payload, a stream's text, a ticket's body and comment.
    let slug = planted.slugs[0].clone();
    store.observation(&slug, "big", &big).await;
    store
        .stream(&format!("/builds/{}", enc(&slug)), "big", &big)
        .await;
    let ticket = store
        .create_ticket(TEAM, "a megabyte body", &big, &["big"], "Ready")
        .await;
    let (status, answer) = store
        .ticket(TEAM, "comment", json!({"id": ticket, "body": big}))
        .await;
    assert_eq!(status, 200, "{answer}");
    planted.tickets.push(ticket);
    planted
}

/// Every page the planted text appears on.
fn pages(planted: &Planted) -> Vec<(String, &'static str)> {
    let mut pages = vec![("/console/".to_owned(), "overview")];
    pages.extend(planted.repos.iter().map(|r| (repo_path(r), "repo")));
    pages.extend(planted.slugs.iter().map(|s| (build_path(s), "build")));
    pages.extend(
        planted
            .sessions
            .iter()
            .map(|s| (format!("/console/sessions/{}", enc(s)), "session")),
    );
    pages.push((board_path(TEAM), "board"));
    pages.extend(
        planted
            .tickets
            .iter()
            .map(|t| (ticket_path(TEAM, t), "ticket")),
    );
    pages.push(("/console/operator".to_owned(), "operator"));
    pages
}

/// In-page checks: the canary unset, and nothing the payloads carry became
/// markup (no inline script, frame, event-handler attribute or
/// `javascript:` URL anywhere in the document).
const INJECTED: &str = r#"(() => {
  const found = [];
  if (window.__pwned !== undefined) found.push('canary: ' + String(window.__pwned));
  for (const e of document.querySelectorAll('*')) {
    const tag = e.tagName.toLowerCase();
    if ((tag === 'script' && !e.src) || tag === 'iframe' || tag === 'object' || tag === 'embed') {
      found.push('element: ' + e.outerHTML.slice(0, 120));
    }
    for (const a of e.attributes) {
      const name = a.name.toLowerCase();
      const value = a.value.trim().toLowerCase();
      if (name.startsWith('on')) found.push('handler: ' + tag + ' ' + name);
      if (['href', 'src', 'action', 'formaction', 'xlink:href'].includes(name) && value.startsWith('javascript:')) {
        found.push('javascript url: ' + tag + ' ' + name);
      }
    }
  }
  return found;
})()"#;

async fn check_page(page: &mut Page<'_>, base: &str, path: &str, kind: &str) {
    let landed = page.goto(&format!("{base}{path}")).await;
    assert_eq!(landed.status, Some(200), "{path}: {landed:?}");
    assert_eq!(page.kind().await.0.as_deref(), Some(kind), "{path}");
    // Give any planted handler (an image's onerror, an SVG's onload) time to fire.
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    let found = page.eval(INJECTED).await;
    assert_eq!(
        found,
        json!([]),
        "{path}: hostile text became markup or ran"
    );
    let reports = page.reports().await;
    assert_eq!(reports["dialogs"], json!([]), "{path}: a dialog opened");
}

/// The planted text is there, as text: the build page (payloads as text
/// and JSON), the board (titles, labels) and a ticket page (title, body or
/// its rendering, comment).
async fn shown_as_text(page: &mut Page<'_>, base: &str, planted: &Planted) {
    page.goto(&format!("{base}{}", build_path(&planted.slugs[1])))
        .await;
    let text = page
        .eval("document.querySelector('main').textContent")
        .await;
    let text = text.as_str().unwrap_or_default();
    let payload = PAYLOADS[1];
    let as_json = serde_json::to_string(payload).unwrap();
    let as_json = &as_json[1..as_json.len() - 1];
    assert!(
        text.contains(payload) || text.contains(as_json),
        "the build page shows the payload as text"
    );
    assert!(
        text.contains(&planted.slugs[1]),
        "the build page shows its slug as text"
    );

    page.goto(&format!("{base}{}", board_path(TEAM))).await;
    let text = page
        .eval("document.querySelector('main').textContent")
        .await;
    let text = text.as_str().unwrap_or_default();
    for payload in PAYLOADS {
        assert!(
            text.contains(payload),
            "the board shows the title {payload:?} as text"
        );
    }

    page.goto(&format!("{base}{}", ticket_path(TEAM, &planted.tickets[0])))
        .await;
    let text = page
        .eval("document.querySelector('main').textContent")
        .await;
    let text = text.as_str().unwrap_or_default();
    assert!(
        text.contains(PAYLOADS[0]),
        "the ticket page shows its title and comment as text"
    );
}

async fn sweep(mut browser: Browser, server: Server) {
    let base = server.url().to_owned();
    let store = Store::new(&base);
    let planted = plant(&store).await;
    // A deployment token sees every page, the board included (the ticket
    // routes refuse admin tokens, and the console bounds pages the same way).
    let admin = seed::deployment();

    // Escaping alone: no CSP.
    let mut page = browser.open_without_csp("bare").await;
    sign_in(&mut page, &base, &admin).await;
    for (path, kind) in pages(&planted) {
        check_page(&mut page, &base, &path, kind).await;
    }
    shown_as_text(&mut page, &base, &planted).await;

    // And as served, with the CSP.
    let mut page = browser.open("served", 1280).await;
    sign_in(&mut page, &base, &admin).await;
    for (path, kind) in pages(&planted) {
        check_page(&mut page, &base, &path, kind).await;
    }
    let reports = page.reports().await;
    assert_eq!(reports["errors"], json!([]), "page errors");
}

#[tokio::test]
async fn chromium_stored_xss_shows_as_text_and_never_runs_on_a_sqlite_file() {
    on_sqlite("stored-XSS sweep", sweep).await;
}

#[tokio::test]
async fn chromium_stored_xss_shows_as_text_and_never_runs_on_postgres() {
    on_postgres("stored-XSS sweep", sweep).await;
}
