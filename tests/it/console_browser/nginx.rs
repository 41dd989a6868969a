//! The console behind Debian's nginx, configured exactly as
//! docs/deployment.md says (tests/it/proxy.rs's configuration) and abstore
//! started with `--public-url` naming the proxy's address, as the README
//! tells: a person signs in through the proxy, the build page's held read
//! grows it through the proxy, and a ticket filed through it passes the
//! Origin check and is what the protocol returns.

use std::time::{Duration, Instant};

use serde_json::json;

use super::seed::{self, Store};
use super::{TEAM, board_path, browser, build_path, console, sign_in, visit};
use crate::proxy::{nginx_binary, nginx_conf, spawn_nginx};
use crate::support::{Server, free_port};

#[tokio::test]
async fn chromium_console_through_nginx_as_documented() {
    let Some(nginx) = nginx_binary() else {
        abstore_testkit::skip::skipped(
            "the console through nginx",
            "no nginx binary; apt-get install nginx-light",
        );
        return;
    };
    let Some(mut browser) = browser("the console through nginx").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let public = format!("http://127.0.0.1:{port}");
    let server = console(Server::builder().sqlite_file())
        .flag("--public-url", &format!("{public}/"))
        .start()
        .await;
    let upstream = server.url().trim_start_matches("http://").to_owned();
    std::fs::write(
        dir.path().join("nginx.conf"),
        nginx_conf(dir.path(), port, &upstream, None),
    )
    .unwrap();
    let mut proxy = spawn_nginx(&nginx, dir.path(), port).await;

    // Seeded directly; everything the person does goes through the proxy.
    let store = Store::new(server.url());
    store.repo("acme/web").await;
    store.build("acme/web", "proxied-1").await;
    store.observation("proxied-1", "implement", "before").await;

    let mut page = browser.open("behind-nginx", 1280).await;
    sign_in(&mut page, &public, &seed::deployment()).await;
    visit(&mut page, &public, &build_path("proxied-1"), "build").await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let appended = Instant::now();
    let seq = store
        .observation("proxied-1", "implement", "through the proxy")
        .await;
    let left = Duration::from_secs(2).saturating_sub(appended.elapsed());
    let waited = page
        .wait(&format!("[data-events] [data-seq=\"{seq}\"]"), left)
        .await;
    assert!(
        waited.is_ok(),
        "event {seq} not shown through nginx within 2 s: {waited:?}"
    );

    visit(
        &mut page,
        &public,
        &format!("{}/new", board_path(TEAM)),
        "board",
    )
    .await;
    let landed = page
        .submit(
            "form[data-action=\"create\"]",
            json!({"title": "Filed through nginx", "body": "Reached through the proxy.\n", "labels": ""}),
        )
        .await;
    assert_eq!(page.kind().await.0.as_deref(), Some("ticket"), "{landed:?}");
    let id = super::ticket_id_from(&landed.at).expect("the new ticket's id");
    let ticket = store.get_ticket(TEAM, &id).await;
    assert_eq!(ticket["title"], json!("Filed through nginx"), "{ticket}");
    super::offline_check(&mut page, &public).await;
    let _ = proxy.kill().await;
}
