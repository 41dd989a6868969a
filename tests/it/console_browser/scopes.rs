//! A token's scope bounds the console exactly as it bounds the protocol: a
//! repository token sees its repository and nothing of another (404), a
//! build token cannot open the board, a revoked token's session ends within
//! the revocation refresh, sign-out ends a session at once, and a
//! state-changing POST from another origin, or without the session's CSRF
//! token, changes nothing.

use std::time::{Duration, Instant};

use serde_json::json;

use super::browser::{Browser, Page};
use super::seed::{self, Store};
use super::{TEAM, board_path, build_path, on_sqlite, repo_path, sign_in, ticket_path, visit};
use crate::support::Server;

/// `path` answers `status` and renders an error page (`data-error`).
async fn refused(page: &mut Page<'_>, base: &str, path: &str, statuses: &[u16]) {
    let landed = page.goto(&format!("{base}{path}")).await;
    assert!(
        landed.status.is_some_and(|s| statuses.contains(&s)),
        "{path} must answer one of {statuses:?}: {landed:?}"
    );
    let (_, error) = page.kind().await;
    assert_eq!(
        error.as_deref(),
        landed.status.map(|s| s.to_string()).as_deref(),
        "{path}: an error page with data-error"
    );
}

/// True once `page`, reloaded, has been sent to the sign-in form.
async fn signed_out(page: &mut Page<'_>, base: &str, path: &str) -> bool {
    page.goto(&format!("{base}{path}")).await;
    page.kind().await.0.as_deref() == Some("sign-in")
}

async fn scopes_bound_the_console(mut browser: Browser, server: Server) {
    let base = server.url().to_owned();
    let store = Store::new(&base);
    for (repo, slug) in [("acme/web", "web-1"), ("acme/api", "api-1")] {
        store.repo(repo).await;
        store.build(repo, slug).await;
        store.observation(slug, "implement", "seen").await;
    }
    let ticket = store
        .create_ticket(TEAM, "Guarded title", "body\n", &[], "Ready")
        .await;

    // A repository token: its repository, nothing of the other.
    let mut page = browser.open("repo-person", 1280).await;
    sign_in(&mut page, &base, &seed::repo_token("acme/web")).await;
    let overview = page.text("main").await.unwrap_or_default();
    assert!(
        overview.contains("acme/web"),
        "the overview names its repository:\n{overview}"
    );
    assert!(
        !overview.contains("acme/api"),
        "the overview names no other repository:\n{overview}"
    );
    visit(&mut page, &base, &repo_path("acme/web"), "repo").await;
    // As on the protocol's routes (src/auth/authorize.rs), a repository
    // token opens no build page, its repository's included.
    refused(&mut page, &base, &build_path("web-1"), &[404]).await;
    refused(&mut page, &base, &repo_path("acme/api"), &[404]).await;
    refused(&mut page, &base, &build_path("api-1"), &[404]).await;
    refused(&mut page, &base, "/console/operator", &[403, 404]).await;

    // Sign-out ends the session at once.
    visit(&mut page, &base, "/console/", "overview").await;
    page.submit("form[data-action=\"sign-out\"]", json!({}))
        .await;
    assert!(
        signed_out(&mut page, &base, &repo_path("acme/web")).await,
        "after sign-out the console asks for a token again"
    );

    // A build token cannot open the board (nor another build).
    let mut page = browser.open("build-person", 1280).await;
    sign_in(&mut page, &base, &seed::build_token("web-1")).await;
    visit(&mut page, &base, &build_path("web-1"), "build").await;
    refused(&mut page, &base, &board_path(TEAM), &[403, 404]).await;
    refused(&mut page, &base, &ticket_path(TEAM, &ticket), &[403, 404]).await;
    refused(&mut page, &base, &build_path("api-1"), &[404]).await;

    // A revoked token's session ends within the revocation refresh (1 s
    // here): revoked on the operator page by an admin.
    let doomed = seed::repo_token("acme/api");
    let mut page = browser.open("doomed", 1280).await;
    sign_in(&mut page, &base, &doomed).await;
    visit(&mut page, &base, &repo_path("acme/api"), "repo").await;
    let mut admin = browser.open("admin", 1280).await;
    sign_in(&mut admin, &base, &seed::admin()).await;
    visit(&mut admin, &base, "/console/operator", "operator").await;
    admin
        .submit(
            "form[data-action=\"revoke\"]",
            json!({"digest": seed::digest(&doomed)}),
        )
        .await;
    let listed = format!("[data-revocation=\"{}\"]", seed::digest(&doomed));
    assert_eq!(
        admin.count(&listed).await,
        1,
        "the operator page lists the revocation"
    );
    let revoked = Instant::now();
    let mut page = browser.page("doomed");
    loop {
        if signed_out(&mut page, &base, &repo_path("acme/api")).await {
            break;
        }
        assert!(
            revoked.elapsed() < Duration::from_secs(6),
            "the revoked token's session still shows pages {:?} after its revocation",
            revoked.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // State-changing POSTs: from another origin, or without the CSRF token,
    // they change nothing; the same POST from the console itself does.
    // (A deployment token: the ticket routes refuse admin tokens, and the
    // console's board with them.)
    let mut admin = browser.open("deployer", 1280).await;
    sign_in(&mut admin, &base, &seed::deployment()).await;
    visit(&mut admin, &base, &ticket_path(TEAM, &ticket), "ticket").await;
    let csrf = admin.csrf().await;
    let edit = format!("{base}{}/edit", ticket_path(TEAM, &ticket));
    let fields = |title: &str, csrf: &str| json!({"csrf": csrf, "title": title, "body": "body\n", "labels": ""});
    // A hostile site's form, as the browser sends it.
    admin
        .cross_site_post("http://evil.test", &edit, fields("cross-site", &csrf))
        .await;
    // The session's cookie and CSRF token, but another Origin.
    let (status, _) = admin
        .request(
            "POST",
            &edit,
            fields("foreign origin", &csrf),
            json!({"origin": "http://evil.test"}),
        )
        .await;
    assert_eq!(status, 403, "a POST claiming another Origin is refused");
    // The right Origin, a wrong CSRF token.
    let (status, _) = admin
        .request(
            "POST",
            &edit,
            fields("forged csrf", "0000"),
            json!({"origin": base}),
        )
        .await;
    assert_eq!(
        status, 403,
        "a POST without the session's CSRF token is refused"
    );
    let unchanged = store.get_ticket(TEAM, &ticket).await;
    assert_eq!(unchanged["title"], json!("Guarded title"), "{unchanged}");
    // The control: the same POST from the console's origin with its token.
    let (status, body) = admin
        .request(
            "POST",
            &edit,
            fields("edited at home", &csrf),
            json!({"origin": base}),
        )
        .await;
    assert!(
        (200..400).contains(&status),
        "the console's own POST: {status} {body:.300}"
    );
    let changed = store.get_ticket(TEAM, &ticket).await;
    assert_eq!(changed["title"], json!("edited at home"), "{changed}");
}

#[tokio::test]
async fn chromium_token_scope_bounds_every_console_page_on_a_sqlite_file() {
    on_sqlite("token scopes bound the console", scopes_bound_the_console).await;
}
