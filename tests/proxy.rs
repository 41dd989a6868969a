//! abstore behind Debian's nginx, configured as docs/deployment.md says:
//! the whole conformance suite runs through the proxy, including held reads
//! and deposits carrying a maximum-size artifact. `.ci/run` installs nginx;
//! without it this test fails under `CI=true` and skips loudly otherwise.

#![allow(clippy::unwrap_used)] // test setup: a failure should panic with its location

use std::process::Stdio;
use std::time::Duration;

use conformance::{Ctx, Server, all_checks, run_checks};

fn nginx_binary() -> Option<String> {
    ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"]
        .iter()
        .find(|p| std::path::Path::new(p).exists())
        .map(|p| p.to_string())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The documented configuration, on loopback, with its files in `dir`.
fn nginx_conf(dir: &std::path::Path, listen: u16, upstream: &str) -> String {
    let d = dir.display();
    format!(
        r#"# One process (no master): killing it at the end of the test leaves no
# orphaned workers behind. The proxy configuration below is the documented one.
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    upstream abstore {{
        server {upstream};
        keepalive 64;
    }}
    server {{
        listen 127.0.0.1:{listen};
        client_max_body_size 20m;
        # nginx itself rejects malformed percent-encoding (400) before abstore
        # sees it; answer in the protocol's error shape all the same.
        error_page 400 =400 /_abstore_errors/400;
        location = /_abstore_errors/400 {{
            internal;
            default_type application/json;
            return 200 '{{"error":"malformed request","kind":"validation"}}';
        }}
        location / {{
            proxy_pass http://abstore;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_read_timeout 75s;
            proxy_next_upstream error;
            proxy_request_buffering off;
            proxy_buffering off;
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_set_header X-Request-Id $request_id;
        }}
    }}
}}
"#
    )
}

#[tokio::test]
async fn conformance_through_nginx() {
    let Some(nginx) = nginx_binary() else {
        conformance::skip::skipped(
            "nginx proxy conformance",
            "no nginx binary; apt-get install nginx-light",
        );
        return;
    };
    let server = Server::start(
        env!("CARGO_BIN_EXE_abstore"),
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--database",
            "sqlite::memory:",
            "--blobs",
            "memory://",
            "--test-clock",
            "2026-07-15T12:00:00.000Z",
        ],
    )
    .await
    .unwrap_or_else(|e| panic!("starting abstore: {e:#}"));
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let upstream = server.url().trim_start_matches("http://").to_owned();
    std::fs::write(
        dir.path().join("nginx.conf"),
        nginx_conf(dir.path(), port, &upstream),
    )
    .unwrap();
    let mut proxy = tokio::process::Command::new(&nginx)
        .args([
            "-p",
            &dir.path().display().to_string(),
            "-c",
            "nginx.conf",
            "-g",
            "daemon off;",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start nginx");
    let url = format!("http://127.0.0.1:{port}");
    let up = async {
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(10), up)
        .await
        .is_err()
    {
        let _ = proxy.kill().await;
        panic!(
            "nginx did not start: {}",
            std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default()
        );
    }

    let ctx = Ctx::new(&url, "0.8.0").expect("http client");
    let report = run_checks(&ctx, all_checks(), None, 8, |_, _| {}).await;
    eprintln!("conformance [through nginx]: {}", report.summary());
    let failures = report.failures();
    let _ = proxy.kill().await;
    assert!(
        failures.is_empty(),
        "{} checks failed through nginx:\n{}\nnginx error log:\n{}",
        failures.len(),
        failures.join("\n"),
        std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default()
    );
}
