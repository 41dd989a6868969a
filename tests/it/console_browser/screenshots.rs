//! Every page of the console photographed at 1280 px and 390 px (a phone)
//! into target/console-screenshots/, each checked on the way: it renders its
//! kind, weighs at most 100 KB before compression, carries the console's
//! security headers, and loads only embedded, content-hashed, immutable
//! assets from its own origin. With `ABSTORE_UPDATE_CONSOLE_SCREENSHOTS=1`
//! the 1280 px shots also replace the ones committed under docs/console/
//! (the README and docs/console.md show them).

use std::path::PathBuf;

use serde_json::{Value, json};

use super::browser::{Browser, Page, target_dir};
use super::seed::{self, Store};
use super::{
    TEAM, board_path, build_path, on_sqlite, repo_path, seed_store, sign_in, ticket_path, visit,
};
use crate::support::{Server, enc};

const WIDTHS: [u32; 2] = [1280, 390];
/// The bound on a page's weight before compression.
const MAX_PAGE_BYTES: usize = 100 * 1024;

/// The console's headers on an HTML page, as the issue states them.
fn check_headers(path: &str, headers: &Value) {
    let csp = headers["content-security-policy"]
        .as_str()
        .unwrap_or_default();
    for directive in [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
        "form-action 'self'",
    ] {
        assert!(
            csp.contains(directive),
            "{path}: CSP lacks {directive:?}: {csp:?}"
        );
    }
    assert_eq!(
        headers["x-content-type-options"],
        json!("nosniff"),
        "{path}"
    );
    assert_eq!(headers["referrer-policy"], json!("same-origin"), "{path}");
}

/// The page's weight and headers, fetched with its cookies.
async fn weigh(page: &mut Page<'_>, base: &str, path: &str) {
    let reply = page
        .try_call(
            json!({"op": "request", "method": "GET", "url": format!("{base}{path}"),
                         "headers": {"accept-encoding": "identity"}}),
        )
        .await
        .expect("fetch the page");
    assert_eq!(reply["status"], json!(200), "{path}");
    let bytes = reply["body"].as_str().unwrap_or_default().len();
    assert!(
        bytes <= MAX_PAGE_BYTES,
        "{path} weighs {bytes} bytes, over {MAX_PAGE_BYTES}"
    );
    check_headers(path, &reply["headers"]);
}

/// Every asset the page loaded is embedded under /console/assets/ with a
/// content hash in its name and immutable caching.
async fn check_assets(page: &mut Page<'_>, base: &str) {
    let reports = page.reports().await;
    let assets: Vec<String> = reports["requests"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|u| u.contains("/console/assets/"))
        .map(str::to_owned)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    for url in assets {
        assert!(url.starts_with(base), "{url} is not the server's own");
        let name = url.rsplit('/').next().unwrap_or_default();
        let parts: Vec<&str> = name.split('.').collect();
        assert!(
            parts.len() >= 3 && parts[parts.len() - 2].len() >= 8,
            "{name}: an asset's name carries its content hash (name.HASH.ext)"
        );
        let reply = page
            .try_call(json!({"op": "request", "method": "GET", "url": url}))
            .await
            .expect("fetch the asset");
        let cache = reply["headers"]["cache-control"]
            .as_str()
            .unwrap_or_default();
        assert!(
            cache.contains("immutable"),
            "{name}: cache-control {cache:?}"
        );
    }
}

fn shots_dir() -> PathBuf {
    let dir = target_dir().join("console-screenshots");
    std::fs::create_dir_all(&dir).expect("target/console-screenshots");
    dir
}

async fn photograph_every_page(mut browser: Browser, server: Server) {
    let base = server.url().to_owned();
    let store = Store::new(&base);
    let seeded = seed_store(&store).await;
    let (status, _) = store
        .ticket(
            TEAM,
            "comment",
            json!({"id": seeded.ready, "body": "Reproduced on staging."}),
        )
        .await;
    assert_eq!(status, 200);
    let pages: Vec<(String, &str)> = vec![
        ("/console/".to_owned(), "overview"),
        (repo_path("acme/web"), "repo"),
        (build_path("web-1"), "build"),
        (
            format!("/console/sessions/{}", enc(&seeded.web_session)),
            "session",
        ),
        (board_path(TEAM), "board"),
        (ticket_path(TEAM, &seeded.ready), "ticket"),
        ("/console/operator".to_owned(), "operator"),
    ];
    let dir = shots_dir();
    let update = std::env::var_os("ABSTORE_UPDATE_CONSOLE_SCREENSHOTS").is_some();
    let docs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/console");
    for width in WIDTHS {
        let mut page = browser.open(&format!("w{width}"), width).await;
        // The sign-in page, before signing in.
        page.goto(&format!("{base}/console/sign-in")).await;
        assert_eq!(page.kind().await.0.as_deref(), Some("sign-in"));
        let shot = dir.join(format!("sign-in-{width}.png"));
        page.screenshot(&shot, false).await;
        if update && width == 1280 {
            std::fs::copy(&shot, docs.join("sign-in.png")).expect("docs/console/sign-in.png");
        }
        sign_in(&mut page, &base, &seed::deployment()).await;
        for (path, kind) in &pages {
            visit(&mut page, &base, path, kind).await;
            let shot = dir.join(format!("{kind}-{width}.png"));
            page.screenshot(&shot, width == 390).await;
            assert!(
                std::fs::metadata(&shot).is_ok_and(|m| m.len() > 0),
                "{shot:?}"
            );
            if update && width == 1280 {
                std::fs::copy(&shot, docs.join(format!("{kind}.png")))
                    .unwrap_or_else(|e| panic!("docs/console/{kind}.png: {e}"));
            }
            if width == 1280 {
                weigh(&mut page, &base, path).await;
            }
        }
        check_assets(&mut page, &base).await;
        super::offline_check(&mut page, &base).await;
        super::no_dialog_no_error(&mut page, "the screenshot tour").await;
    }
    eprintln!("console screenshots in {}", dir.display());
}

#[tokio::test]
async fn chromium_screenshots_of_every_page_at_1280_and_390_px() {
    on_sqlite("screenshots of every page", photograph_every_page).await;
}
