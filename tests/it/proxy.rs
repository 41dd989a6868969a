//! abstore behind Debian's nginx, configured as docs/deployment.md says:
//! the whole conformance suite runs through the proxy, including held reads
//! and deposits carrying a maximum-size artifact, over plain HTTP and over
//! TLS (a private CA made with `openssl`, trusted through `Tls::ca_file`).
//! `.ci/run` installs nginx and openssl; without either this test fails
//! under `CI=true`, and `scripts/test` leaves it out (counted as skipped:
//! its name says `nginx`).

use std::process::Stdio;
use std::time::Duration;

use abstore_conformance::{Ctx, all_checks, run_checks};

use crate::support::{self, Server, free_port};

pub(crate) fn nginx_binary() -> Option<String> {
    ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"]
        .iter()
        .find(|p| std::path::Path::new(p).exists())
        .map(|p| p.to_string())
}

/// The documented configuration, on loopback, with its files in `dir`; with
/// `tls`, the same proxy also listens with TLS on the second port.
pub(crate) fn nginx_conf(
    dir: &std::path::Path,
    listen: u16,
    upstream: &str,
    tls: Option<(u16, &Certs)>,
) -> String {
    let d = dir.display();
    // The documented server block's body, shared by the plain and TLS fronts.
    let proxy = r#"
        client_max_body_size 20m;
        # nginx itself rejects malformed percent-encoding (400) before abstore
        # sees it; answer in the protocol's error shape all the same.
        error_page 400 =400 /_abstore_errors/400;
        location = /_abstore_errors/400 {
            internal;
            default_type application/json;
            return 200 '{"error":"malformed request","kind":"validation"}';
        }
        location / {
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
        }"#;
    let tls_server = tls.map_or_else(String::new, |(port, certs)| {
        format!(
            "    server {{\n        listen 127.0.0.1:{port} ssl;\n        ssl_certificate {};\n        ssl_certificate_key {};\n{proxy}\n    }}\n",
            certs.leaf.display(),
            certs.leaf_key.display()
        )
    });
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
{proxy}
    }}
{tls_server}}}
"#
    )
}

/// Start nginx on the configuration in `dir`/nginx.conf and wait until it
/// listens on `port` (the console's browser tests use it too).
pub(crate) async fn spawn_nginx(
    nginx: &str,
    dir: &std::path::Path,
    port: u16,
) -> tokio::process::Child {
    let mut proxy = tokio::process::Command::new(nginx)
        .args([
            "-p",
            &dir.display().to_string(),
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
            std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
        );
    }
    proxy
}

/// A private CA and a certificate it signed for `127.0.0.1`/`localhost`.
pub(crate) struct Certs {
    ca: std::path::PathBuf,
    leaf: std::path::PathBuf,
    leaf_key: std::path::PathBuf,
}

/// Make the certificates with the `openssl` command line, or `None` when it
/// is not installed.
fn make_certs(dir: &std::path::Path) -> Option<Certs> {
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output();
        match out {
            Ok(out) if out.status.success() => Some(()),
            Ok(out) => panic!(
                "openssl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(_) => None,
        }
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/CN=abstore test CA",
            ],
        ]
        .concat(),
    )?;
    openssl(
        &[
            &["req"][..],
            &ec,
            &[
                "-keyout",
                "leaf.key",
                "-out",
                "leaf.csr",
                "-subj",
                "/CN=localhost",
            ],
        ]
        .concat(),
    )?;
    std::fs::write(
        dir.join("leaf.ext"),
        "basicConstraints=CA:FALSE\nsubjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "leaf.pem",
        "-days",
        "1",
        "-extfile",
        "leaf.ext",
    ])?;
    Some(Certs {
        ca: dir.join("ca.pem"),
        leaf: dir.join("leaf.pem"),
        leaf_key: dir.join("leaf.key"),
    })
}

#[tokio::test]
async fn conformance_through_nginx() {
    let Some(nginx) = nginx_binary() else {
        abstore_testkit::skip::skipped(
            "nginx proxy conformance",
            "no nginx binary; apt-get install nginx-light",
        );
        return;
    };
    // Both legs or neither: a run without the TLS leg is not this test.
    if !std::process::Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|out| out.status.success())
    {
        abstore_testkit::skip::skipped("nginx proxy conformance", "no openssl command");
        return;
    }
    let server = Server::builder().test_clock().start().await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let tls_port = free_port();
    let certs = make_certs(dir.path());
    assert!(
        certs.is_some(),
        "openssl could not make the test certificates"
    );
    let upstream = server.url().trim_start_matches("http://").to_owned();
    std::fs::write(
        dir.path().join("nginx.conf"),
        nginx_conf(
            dir.path(),
            port,
            &upstream,
            certs.as_ref().map(|c| (tls_port, c)),
        ),
    )
    .unwrap();
    let mut proxy = spawn_nginx(&nginx, dir.path(), port).await;
    let url = format!("http://127.0.0.1:{port}");

    let ctx = Ctx::new(&url, "0.8.0").expect("http client");
    let report = run_checks(&ctx, all_checks(), None, 8, |_, _| {}).await;
    eprintln!("conformance [through nginx]: {}", report.summary());
    let mut failures = report.failures();
    compressed_through(&url).await;

    if let Some(certs) = &certs {
        // The runner over https: the system's roots alone refuse the private
        // CA; with it (--ca-file) or --insecure the whole suite passes.
        let https = format!("https://localhost:{tls_port}");
        let untrusted = Ctx::new(&https, "0.8.0").expect("http client");
        assert!(
            untrusted
                .http
                .get(format!("{https}/health"))
                .send()
                .await
                .is_err(),
            "a certificate from an unknown CA was accepted"
        );
        let insecure = abstore_conformance::Tls {
            ca_file: None,
            insecure: true,
        };
        let ctx = Ctx::with_tls(&https, "0.8.0", &insecure).expect("http client");
        let health = ctx
            .http
            .get(format!("{https}/health"))
            .send()
            .await
            .unwrap();
        assert_eq!(health.status(), 200);
        let trusted = abstore_conformance::Tls {
            ca_file: Some(certs.ca.clone()),
            insecure: false,
        };
        let ctx = Ctx::with_tls(&https, "0.8.0", &trusted).expect("http client");
        let report = run_checks(&ctx, all_checks(), None, 8, |_, _| {}).await;
        let report_summary = report.summary();
        eprintln!("conformance [through nginx, TLS]: {report_summary}");
        failures.extend(report.failures().into_iter().map(|f| format!("(TLS) {f}")));
    }
    let _ = proxy.kill().await;
    assert!(
        failures.is_empty(),
        "{} checks failed through nginx:\n{}\nnginx error log:\n{}",
        failures.len(),
        failures.join("\n"),
        std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default()
    );
}

/// Compressed answers cross the documented proxy as the server sent them:
/// the encoding the client asked for, `Vary`, and the same answer decoded.
async fn compressed_through(url: &str) {
    let c = support::client();
    let res = c
        .post(format!("{url}/builds"))
        .json(&serde_json::json!({"slug": "zipped", "repo": "acme/w"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 201);
    for n in 0..200 {
        let event = serde_json::json!({"actor": {"kind": "kernel"}, "type": "observation.recorded",
            "payload": {"id": format!("obs-{n}"), "kind": "followup",
                        "summary": format!("through the proxy, observation {n}")}});
        let res = c
            .post(format!("{url}/builds/zipped/events"))
            .json(&event)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), 201);
    }
    let events = format!("{url}/builds/zipped/events?since=0");
    let identity = c.get(&events).send().await.unwrap().bytes().await.unwrap();
    for encoding in ["zstd", "gzip"] {
        let res = c
            .get(&events)
            .header("accept-encoding", encoding)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), 200);
        assert_eq!(
            res.headers()
                .get("content-encoding")
                .map(|v| v.to_str().unwrap()),
            Some(encoding),
            "through nginx"
        );
        let vary = res
            .headers()
            .get("vary")
            .map(|v| v.to_str().unwrap().to_ascii_lowercase());
        assert!(vary.is_some_and(|v| v.contains("accept-encoding")));
        let body = res.bytes().await.unwrap();
        assert!(body.len() < identity.len() / 2, "{encoding} through nginx");
        assert!(
            support::decode(encoding, &body) == identity,
            "{encoding} through nginx: not the same answer"
        );
    }
}
