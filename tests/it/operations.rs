//! The operator's side of the binary, through the real process: open mode
//! only by choice off loopback, a generated container secret, secret rotation
//! with SIGHUP, a failed start that leaves no data behind, boolean variables,
//! and the metrics scrape.

use std::time::Duration;

use crate::support::{Server, run_with_env};

/// `GET /builds` with an optional bearer token: the status.
async fn list_builds(url: &str, token: Option<&str>) -> u16 {
    let mut request = reqwest::Client::new()
        .get(format!("{url}/builds"))
        .header("x-autobuild-version", "0.8.0")
        .header("x-autobuild-protocol-version", "2");
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap().status().as_u16()
}

fn mint(secret_file: &std::path::Path) -> String {
    let (ok, stdout, stderr) = run_with_env(
        &[
            "token",
            "mint",
            "--secret-file",
            secret_file.to_str().unwrap(),
            "--admin",
        ],
        &[],
    );
    assert!(ok, "{stderr}");
    stdout.trim().to_owned()
}

/// Wait (bounded) until `GET /builds` with `token` answers `status`: a
/// reload is asynchronous to the signal that asks for it.
async fn until_status(url: &str, token: &str, status: u16) {
    for _ in 0..200 {
        if list_builds(url, Some(token)).await == status {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("GET /builds never answered {status}");
}

/// Wait (bounded) until the server's stderr contains `text`.
async fn until_logged(served: &Server, text: &str) {
    for _ in 0..200 {
        if served.stderr().contains(text) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("never logged {text:?}:\n{}", served.stderr());
}

#[tokio::test]
async fn open_mode_on_a_network_address_is_an_explicit_choice() {
    let (ok, stdout, stderr) = Server::builder().listen("0.0.0.0:0").run();
    assert!(!ok);
    assert!(!stdout.contains("listening"), "{stdout}");
    for way_out in [
        "--secret-file",
        "ABSTORE_SECRET",
        "--open",
        "ABSTORE_OPEN=true",
    ] {
        assert!(stderr.contains(way_out), "{way_out} not named: {stderr}");
    }
    // Both spellings of the choice start an open server.
    let flag = Server::builder()
        .listen("0.0.0.0:0")
        .arg("--open")
        .start()
        .await;
    until_logged(&flag, "OPEN MODE").await;
    let port = flag.url().rsplit(':').next().unwrap().to_owned();
    assert_eq!(
        list_builds(&format!("http://127.0.0.1:{port}"), None).await,
        200
    );
    let variable = Server::builder()
        .listen("0.0.0.0:0")
        .env("ABSTORE_OPEN", "yes")
        .start()
        .await;
    let port = variable.url().rsplit(':').next().unwrap().to_owned();
    assert_eq!(
        list_builds(&format!("http://127.0.0.1:{port}"), None).await,
        200
    );
    // Loopback needs no flag.
    let local = Server::builder().start().await;
    assert_eq!(list_builds(local.url(), None).await, 200);
}

#[tokio::test]
async fn a_created_secret_file_is_private_and_mints_working_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secret");
    let served = Server::builder()
        .listen("0.0.0.0:0")
        .flag("--secret-file", path.to_str().unwrap())
        .env("ABSTORE_CREATE_SECRET_FILE", "true")
        .start()
        .await;
    let url = format!(
        "http://127.0.0.1:{}",
        served.url().rsplit(':').next().unwrap()
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let command = format!(
        "abstore token mint --secret-file {} --admin",
        path.display()
    );
    // The log is read by a task of this test's runtime: wait for the line.
    until_logged(&served, &command).await;
    let secret = std::fs::read_to_string(&path).unwrap();
    assert!(
        !served.stderr().contains(secret.trim()),
        "the secret was logged"
    );
    assert_eq!(list_builds(&url, None).await, 401);
    assert_eq!(list_builds(&url, Some(&mint(&path))).await, 200);
    // An existing file is used as it is, never replaced.
    drop(served);
    let again = Server::builder()
        .flag("--secret-file", path.to_str().unwrap())
        .arg("--create-secret-file")
        .start()
        .await;
    assert_eq!(std::fs::read_to_string(&path).unwrap(), secret);
    assert_eq!(list_builds(again.url(), Some(&mint(&path))).await, 200);
}

#[tokio::test]
async fn secrets_rotate_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secret");
    // Random secrets (uniform ones are refused as weak), in a file private
    // to its owner (one others may read is refused).
    let random = || -> String {
        (0..4)
            .map(|_| abstore_conformance::util::random_hex())
            .collect()
    };
    let (old, new) = (random(), random());
    let write = |text: &str| {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    };
    write(&format!("{old}\n"));
    let old_token = mint(&path);
    let served = Server::builder()
        .flag("--secret-file", path.to_str().unwrap())
        .start()
        .await;
    assert_eq!(list_builds(served.url(), Some(&old_token)).await, 200);

    // A SIGHUP always says what it found, even when nothing changed.
    served.signal("HUP");
    until_logged(&served, "token secrets unchanged (SIGHUP)").await;

    // The window: the new secret signs, both verify.
    write(&format!("{new}\n{old}\n"));
    let new_token = mint(&path);
    assert_ne!(new_token, old_token);
    served.signal("HUP");
    until_status(served.url(), &new_token, 200).await;
    assert_eq!(list_builds(served.url(), Some(&old_token)).await, 200);

    // A broken file changes nothing.
    write("short\n");
    served.signal("HUP");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(list_builds(served.url(), Some(&old_token)).await, 200);
    assert_eq!(list_builds(served.url(), Some(&new_token)).await, 200);

    // The old secret removed: its tokens are refused, the new ones work.
    write(&format!("{new}\n"));
    served.signal("HUP");
    until_status(served.url(), &old_token, 401).await;
    assert_eq!(list_builds(served.url(), Some(&new_token)).await, 200);
    let log = served.stderr();
    assert!(log.contains("token secrets reloaded"), "{log}");
    assert!(log.contains("NOT reloaded"), "{log}");
    assert!(
        !log.contains(&old) && !log.contains(&new),
        "a secret was logged"
    );
}

#[test]
fn a_start_that_cannot_bind_touches_no_storage() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    // The default database and blob locations, relative to the working directory.
    let (ok, _, stderr) = Server::builder()
        .binary_defaults()
        .listen(&addr)
        .current_dir(dir.path())
        .run();
    assert!(!ok);
    assert!(stderr.contains(&format!("binding {addr}")), "{stderr}");
    assert!(
        !dir.path().join("abstore-data").exists(),
        "a failed start created the data directory"
    );
    let metrics = Server::builder()
        .binary_defaults()
        .listen("127.0.0.1:0")
        .flag("--metrics-listen", &addr)
        .current_dir(dir.path())
        .run();
    assert!(!metrics.0);
    assert!(!dir.path().join("abstore-data").exists());
}

#[test]
fn boolean_variables_take_the_usual_spellings_and_errors_name_them() {
    for on in ["1", "yes", "on", "true", "TRUE"] {
        let (ok, stdout, stderr) = run_with_env(
            &["token", "mint", "--secret", "short", "--admin"],
            &[("ABSTORE_ALLOW_WEAK_SECRET", on)],
        );
        assert!(ok, "ABSTORE_ALLOW_WEAK_SECRET={on}: {stderr}");
        assert!(stdout.contains('.'), "{stdout}");
    }
    for off in ["0", "no", "off", "false"] {
        let (ok, _, stderr) = run_with_env(
            &["token", "mint", "--secret", "short", "--admin"],
            &[("ABSTORE_ALLOW_WEAK_SECRET", off)],
        );
        assert!(!ok, "ABSTORE_ALLOW_WEAK_SECRET={off} allowed a weak secret");
        assert!(stderr.contains("at least 32"), "{stderr}");
    }
    let (ok, _, stderr) = Server::builder().env("ABSTORE_NO_MIGRATE", "maybe").run();
    assert!(!ok);
    assert!(stderr.contains("ABSTORE_NO_MIGRATE"), "{stderr}");
    assert!(stderr.contains("yes/no"), "{stderr}");
    // Any variable a bad value came from is named, not only on/off ones.
    let (ok, _, stderr) = Server::builder()
        .binary_defaults()
        .env("ABSTORE_LISTEN", "nowhere")
        .run();
    assert!(!ok);
    assert!(
        stderr.contains("environment variable ABSTORE_LISTEN"),
        "{stderr}"
    );
    assert!(!stderr.contains("yes/no"), "{stderr}");
    // A value typed on the command line blames no variable.
    let (ok, _, stderr) = Server::builder()
        .binary_defaults()
        .listen("nowhere")
        .env("ABSTORE_LISTEN", "nowhere")
        .run();
    assert!(!ok);
    assert!(!stderr.contains("environment variable"), "{stderr}");
}

#[tokio::test]
async fn metrics_describe_themselves_and_the_process() {
    let served = Server::builder()
        .flag("--metrics-listen", "127.0.0.1:0")
        .start()
        .await;
    assert_eq!(list_builds(served.url(), None).await, 200);
    let text = reqwest::get(served.metrics_url())
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let typed: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for name in [
        "abstore_http_requests_total",
        "abstore_build_info",
        "abstore_storage_full_total",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_max_fds",
    ] {
        assert!(typed.contains(&name), "{name} missing:\n{text}");
    }
    for name in &typed {
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "{name} has no HELP text:\n{text}"
        );
    }
    let info = text
        .lines()
        .find(|l| l.starts_with("abstore_build_info{"))
        .unwrap();
    assert!(
        info.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION"))),
        "{info}"
    );
    assert!(info.contains("backend=\"sqlite\""), "{info}");
    assert!(info.ends_with(" 1"), "{info}");
    let value = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(value("process_resident_memory_bytes") > 1_000_000.0);
    assert!(value("process_open_fds") >= 3.0);
    assert!(value("process_cpu_seconds_total") >= 0.0);
}

/// Each request's line, as a log collector reads it: `json` lines are JSON
/// objects with the request's span and numbers as numbers, `text` lines the
/// documented `key=value` form; a client's text with control characters
/// stays on its line in both.
#[tokio::test]
async fn request_lines_in_json_and_text() {
    let hostile = "/builds/x%0Ay%1B%5B2J";
    for format in ["json", "text"] {
        let served = Server::builder().flag("--log-format", format).start().await;
        let client = reqwest::Client::new();
        let reply = client
            .get(format!("{}/health", served.url()))
            .header("x-request-id", format!("lines-{format}"))
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status(), 200);
        // A path the router does not know, with an encoded newline and
        // escape, refused: it must not reach the log as raw control
        // characters.
        let reply = client
            .get(format!("{}{hostile}", served.url()))
            .send()
            .await
            .unwrap();
        assert!(reply.status().is_client_error(), "{}", reply.status());
        let id = format!("lines-{format}");
        until_logged(&served, &id).await;
        let refused = if format == "json" {
            "\"status\":4"
        } else {
            "status=4"
        };
        until_logged(&served, refused).await;
        let log = served.stderr();
        assert!(!log.contains(['\x1b', '\r']), "{log}");
        let line = log.lines().find(|l| l.contains(&id)).unwrap();
        if format == "json" {
            for line in log.lines() {
                serde_json::from_str::<serde_json::Value>(line)
                    .unwrap_or_else(|e| panic!("{e}: {line}"));
            }
            let line: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(line["level"], "INFO", "{line}");
            assert_eq!(line["target"], "abstore::http::middleware", "{line}");
            assert_eq!(line["fields"]["message"], "request", "{line}");
            assert_eq!(line["fields"]["status"], 200, "{line}");
            assert!(line["fields"]["latency_ms"].is_f64(), "{line}");
            assert_eq!(line["span"]["request_id"], id.as_str(), "{line}");
            assert_eq!(line["span"]["method"], "GET", "{line}");
            assert_eq!(line["span"]["route"], "/health", "{line}");
            assert_eq!(line["span"]["scope"], "open", "{line}");
            assert_eq!(line["span"]["name"], "request", "{line}");
            assert_eq!(line["spans"][0], line["span"], "{line}");
            let timestamp = line["timestamp"].as_str().unwrap();
            assert_eq!(timestamp.len(), 27, "{line}");
            assert!(timestamp.ends_with('Z'), "{line}");
        } else {
            let (timestamp, rest) = line.split_once(' ').unwrap();
            assert_eq!(timestamp.len(), 27, "{line}");
            assert_eq!(
                rest.split(" latency_ms=").next().unwrap(),
                format!(
                    " INFO request{{request_id={id} method=GET route=/health scope=open}}: \
                     abstore::http::middleware: request status=200"
                ),
                "{line}"
            );
        }
    }
}

/// Group commit shows itself: the SQLite writer thread records how many
/// writes each commit carried, so an operator can see whether appends share
/// their fsyncs (issue 52). Sixteen concurrent appends to a SQLite file
/// all land in the histogram, each commit counted once.
#[tokio::test]
async fn sqlite_commits_report_how_many_writes_each_carried() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("a.db").display());
    let served = Server::builder()
        .database(&database)
        .flag("--metrics-listen", "127.0.0.1:0")
        .start()
        .await;
    let client = reqwest::Client::new();
    let post = |path: String, body: &'static str| {
        client
            .post(format!("{}{path}", served.url()))
            .header("x-autobuild-version", "0.8.0")
            .header("x-autobuild-protocol-version", "2")
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let created = post("/builds".into(), r#"{"slug":"g","repo":"r"}"#)
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let appends = (0..16).map(|_| {
        post(
            "/builds/g/events".into(),
            r#"{"actor":{"kind":"kernel"},"type":"observation.recorded","payload":{"id":"o1","kind":"followup","summary":"s"}}"#,
        )
    });
    for answer in futures_util::future::join_all(appends).await {
        assert_eq!(answer.unwrap().status(), 201);
    }
    let text = reqwest::get(served.metrics_url())
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let value = |line_start: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(line_start))
            .unwrap_or_else(|| panic!("{line_start} missing:\n{text}"))
            .trim()
            .parse()
            .unwrap()
    };
    assert!(
        text.contains("# HELP abstore_sqlite_commit_batch_jobs "),
        "{text}"
    );
    assert!(
        text.contains("# HELP abstore_sqlite_commit_seconds "),
        "{text}"
    );
    // Every write went through a commit (migrations run before the
    // writer thread: the build and the 16 appends are all there is).
    let commits = value("abstore_sqlite_commit_batch_jobs_count ");
    let jobs = value("abstore_sqlite_commit_batch_jobs_sum ");
    assert!(jobs >= 17.0, "{jobs} jobs:\n{text}");
    assert!(
        (1.0..=jobs).contains(&commits),
        "{commits} commits:\n{text}"
    );
    // The buckets are counts of jobs, not seconds.
    assert_eq!(
        value("abstore_sqlite_commit_batch_jobs_bucket{le=\"256\"} "),
        commits,
        "{text}"
    );
    assert_eq!(
        value("abstore_sqlite_commit_seconds_count "),
        commits,
        "{text}"
    );
}
