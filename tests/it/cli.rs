//! The command line as operators use it: `catalog check`, startup failures
//! that must be clear one-line errors, `migrate`, variables and log formats,
//! a server nobody reads the stdout of, and shell completions.

use crate::support;

use support::{Server, run as abstore};

fn embedded_catalogs() -> String {
    format!("{}/catalog/catalogs", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn catalog_check_accepts_the_embedded_catalogs() {
    let (ok, stdout, stderr) = abstore(&["catalog", "check", &embedded_catalogs()]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("build.json: 54 event types"), "{stdout}");
    assert!(stdout.contains("is valid"), "{stdout}");
}

#[test]
fn catalog_check_rejects_a_broken_catalog_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["build.json", "repository.json", "session.json"] {
        std::fs::copy(
            format!("{}/{name}", embedded_catalogs()),
            dir.path().join(name),
        )
        .unwrap();
    }
    let build = dir.path().join("build.json");
    let text = std::fs::read_to_string(&build).unwrap().replacen(
        "\"actors\": [",
        "\"actors\": [\"robot\", ",
        1,
    );
    std::fs::write(&build, text).unwrap();
    let (ok, _, stderr) = abstore(&["catalog", "check", dir.path().to_str().unwrap()]);
    assert!(!ok);
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(stderr.contains("unknown actor kind \"robot\""), "{stderr}");
    assert!(!stderr.contains("backtrace"), "{stderr}");

    // A server never starts with a catalog it cannot compile.
    let (ok, _, stderr) = Server::builder()
        .flag("--catalog", dir.path().to_str().unwrap())
        .run();
    assert!(!ok);
    assert!(stderr.contains("unknown actor kind \"robot\""), "{stderr}");
}

#[test]
fn unusable_settings_fail_with_one_clear_line() {
    let (ok, _, stderr) = Server::builder().database("mysql://db/x").run();
    assert!(!ok);
    assert!(stderr.contains("unsupported --database URL"), "{stderr}");
    let (ok, _, stderr) = Server::builder().flag("--test-clock", "yesterday").run();
    assert!(!ok);
    assert!(
        stderr.contains("--test-clock \"yesterday\" is not an ISO-8601 UTC time"),
        "{stderr}"
    );
    let (ok, _, stderr) = Server::builder()
        .database("postgres://nobody:secret@127.0.0.1:1/none")
        .run();
    assert!(!ok);
    assert!(
        !stderr.contains(":secret@"),
        "the password leaked: {stderr}"
    );
    assert!(stderr.contains("REDACTED"), "{stderr}");
    assert!(
        stderr.to_lowercase().contains("refused"),
        "the cause is not named: {stderr}"
    );
}

/// Settings that contradict each other stop the start with one line naming
/// both flags and their values, before the port is bound or the database
/// created; a one-connection pool may stream (nothing else could).
#[tokio::test]
async fn contradicting_settings_stop_the_start_naming_both_flags() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("never.db");
    let database = format!("sqlite://{}", file.display());
    let cases: [(&[(&str, &str)], &str); 5] = [
        (
            &[
                ("--max-wait-seconds", "30"),
                ("--request-timeout-seconds", "34"),
            ],
            "error: --request-timeout-seconds (34) must exceed --max-wait-seconds (30) by at least 5 \
             so held reads are never cut short",
        ),
        (
            &[
                ("--request-timeout-seconds", "60"),
                ("--answer-deadline-seconds", "60"),
            ],
            "error: --answer-deadline-seconds (60) must exceed --request-timeout-seconds (60), \
             so that only an answer its client takes too slowly is ever cut",
        ),
        (
            &[
                ("--max-json-body-bytes", "1048576"),
                ("--max-stream-batch-bytes", "1000000"),
            ],
            "error: --max-json-body-bytes (1048576) must exceed --max-stream-batch-bytes (1000000) \
             by at least 64 KiB, so a batch within its ceiling always fits its request",
        ),
        (
            &[("--db-pool-size", "4"), ("--max-streamed-reads", "4")],
            "error: --max-streamed-reads (4) must be below --db-pool-size (4): otherwise clients \
             reading slowly could hold every database connection",
        ),
        (
            &[("--db-pool-size", "4"), ("--db-write-connections", "4")],
            "error: --db-write-connections (4) must be below --db-pool-size (4): reads need at \
             least one connection",
        ),
    ];
    for (flags, message) in cases {
        let server = flags.iter().fold(
            Server::builder().database(&database),
            |server, (flag, value)| server.flag(flag, value),
        );
        let (ok, stdout, stderr) = server.run();
        assert!(!ok, "{flags:?} started");
        assert!(!stdout.contains("listening"), "{flags:?}: {stdout}");
        assert_eq!(stderr.trim_end(), message, "{flags:?}");
        assert!(!file.exists(), "{flags:?}: the database was created");
    }
    let one = Server::builder()
        .flag("--db-pool-size", "1")
        .flag("--max-streamed-reads", "1")
        .start()
        .await;
    let health = reqwest::get(format!("{}/health", one.url())).await.unwrap();
    assert_eq!(health.status(), 200);
}

#[test]
fn migrate_creates_a_usable_sqlite_database() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("data/abstore.db").display());
    let (ok, _, stderr) = abstore(&["migrate", "--database", &url]);
    assert!(ok, "{stderr}");
    assert!(dir.path().join("data/abstore.db").exists());
    // Applying again is a no-op.
    assert!(abstore(&["migrate", "--database", &url]).0);
}

#[tokio::test]
async fn healthcheck_follows_readyz_and_responses_carry_request_ids() {
    let server = Server::builder().start().await;
    let addr = server.url().trim_start_matches("http://").to_owned();
    let (ok, stdout, stderr) =
        tokio::task::spawn_blocking(move || abstore(&["healthcheck", "--listen", &addr]))
            .await
            .unwrap();
    assert!(ok, "{stderr}");
    assert_eq!(stdout.trim(), "ready");

    let client = reqwest::Client::new();
    let ready = client
        .get(format!("{}/readyz", server.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    let generated = ready
        .headers()
        .get("x-request-id")
        .expect("a generated request id")
        .to_str()
        .unwrap()
        .to_owned();
    assert!(!generated.is_empty());
    let body: serde_json::Value = ready.json().await.unwrap();
    assert_eq!(
        body,
        serde_json::json!({"ready": true, "checks": {"database": "ok", "blobs": "ok"}, "shuttingDown": false})
    );
    let kept = client
        .get(format!("{}/health", server.url()))
        .header("x-request-id", "abc-123")
        .send()
        .await
        .unwrap();
    assert_eq!(kept.headers().get("x-request-id").unwrap(), "abc-123");
    // Error bodies keep the spec's exact shape even with a request id.
    let missing: serde_json::Value = client
        .get(format!("{}/nope", server.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        missing,
        serde_json::json!({"error": "no route: GET /nope", "kind": "not-found"})
    );

    // Nothing listening: not ready, non-zero exit.
    let (ok, _, stderr) = tokio::task::spawn_blocking(|| {
        abstore(&[
            "healthcheck",
            "--listen",
            "127.0.0.1:1",
            "--timeout-seconds",
            "2",
        ])
    })
    .await
    .unwrap();
    assert!(!ok);
    assert!(stderr.starts_with("error: "), "{stderr}");
}

/// docs/configuration.md cannot drift from the CLI: every flag and
/// environment variable `--help` shows is documented there.
#[test]
fn every_flag_and_variable_is_documented() {
    let docs = std::fs::read_to_string(format!(
        "{}/docs/configuration.md",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    for command in [
        &["serve", "--help"][..],
        &["migrate", "--help"],
        &["healthcheck", "--help"],
        &["token", "mint", "--help"],
        &["token", "inspect", "--help"],
        &["token", "revoke", "--help"],
        &["token", "revocations", "--help"],
        &["catalog", "check", "--help"],
        &["export", "--help"],
        &["verify", "--help"],
        &["import", "--help"],
        &["backup", "--help"],
        &["gc", "--help"],
        &["completions", "--help"],
    ] {
        let (ok, help, stderr) = abstore(command);
        assert!(ok, "{stderr}");
        for word in help.split(|c: char| {
            c.is_whitespace() || matches!(c, ',' | '[' | ']' | '=' | '<' | '>' | '|' | '(' | ')')
        }) {
            // A whole-word occurrence: `--secret` must not pass on `--secret-file`.
            let documented = |w: &str| {
                docs.match_indices(w).any(|(at, _)| {
                    !docs[at + w.len()..]
                        .starts_with(|c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                })
            };
            if (word.starts_with("--") && word.len() > 2 && word != "--help" && word != "--version")
                || word.starts_with("ABSTORE_")
            {
                assert!(
                    documented(word),
                    "{word} (from abstore {}) is not in docs/configuration.md",
                    command.join(" ")
                );
            }
        }
    }
}

/// A request refused before its body is read (here an unknown stream, which
/// the spec resolves before the body) is answered after the rest of the body
/// is drained and says `Connection: close`, so a keep-alive client neither
/// loses the answer nor reuses a connection the server then closes.
#[tokio::test]
async fn responses_before_the_body_close_the_connection_explicitly() {
    let server = Server::builder().start().await;
    let client = reqwest::Client::new();
    let big =
        serde_json::json!({"parts": [{"type": "text-delta", "delta": "x".repeat(1_100_000)}]});
    let refused = client
        .post(format!("{}/streams/st_unknown/chunks", server.url()))
        .header("x-autobuild-version", "0.8.0")
        .header("x-autobuild-protocol-version", "2")
        .json(&big)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 404);
    assert_eq!(
        refused
            .headers()
            .get("connection")
            .map(|v| v.to_str().unwrap()),
        Some("close")
    );
    // The unread body is drained before the close, so the client never loses
    // the answer to a connection reset while it is still sending.
    for attempt in 0..10 {
        let answer = client
            .post(format!("{}/streams/st_unknown/chunks", server.url()))
            .header("x-autobuild-version", "0.8.0")
            .header("x-autobuild-protocol-version", "2")
            .json(&big)
            .send()
            .await
            .unwrap_or_else(|e| panic!("attempt {attempt}: the 404 was lost: {e}"));
        assert_eq!(answer.status(), 404);
        let body: serde_json::Value = answer.json().await.unwrap();
        assert_eq!(body["error"], "unknown stream \"st_unknown\"");
    }
    // The same client goes on working (on a new connection).
    for _ in 0..3 {
        assert_eq!(
            client
                .get(format!("{}/health", server.url()))
                .send()
                .await
                .unwrap()
                .status(),
            200
        );
    }
    // A request whose body was read keeps its connection.
    let read = client
        .post(format!("{}/builds", server.url()))
        .header("x-autobuild-version", "0.8.0")
        .header("x-autobuild-protocol-version", "2")
        .json(&serde_json::json!({"slug": "keep", "repo": "r"}))
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 201);
    assert!(read.headers().get("connection").is_none());
}

/// `abstore serve | head -1` and friends: stdout closed before the banner.
/// The server neither stops nor hangs: it serves, says on stderr that it
/// could not print, and still stops on SIGTERM.
#[tokio::test]
async fn a_server_whose_stdout_is_closed_serves_and_stops_on_sigterm() {
    let port = support::free_port();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader); // nobody will ever read: the banner write fails
    let mut child = Server::builder()
        .listen(&format!("127.0.0.1:{port}"))
        .command()
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let health = format!("http://127.0.0.1:{port}/health");
    let serving = async {
        loop {
            if let Ok(answer) = reqwest::get(&health).await {
                return answer.status();
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    // Bounds that only catch a hang, never a slow machine.
    let status = tokio::time::timeout(std::time::Duration::from_secs(60), serving)
        .await
        .expect("the server never answered /health");
    assert_eq!(status, 200);
    let pid = child.id().unwrap().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let exited = tokio::time::timeout(std::time::Duration::from_secs(60), child.wait())
        .await
        .expect("the server did not stop on SIGTERM")
        .unwrap();
    assert!(exited.success(), "{exited:?}");
    let mut stderr = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr)
        .await
        .unwrap();
    assert!(
        stderr.contains("cannot print the listening line on stdout"),
        "{stderr}"
    );
}

/// A bad value from a variable is blamed on the variable on the first line
/// (the user may never have typed the flag clap would name), and a log
/// format abstore does not know is refused rather than read as text.
#[test]
fn bad_values_from_variables_name_the_variable_first() {
    let (ok, _, stderr) = Server::builder()
        .binary_defaults()
        .env("ABSTORE_LISTEN", "bogus")
        .run();
    assert!(!ok);
    let first = stderr.lines().next().unwrap_or_default();
    assert!(
        first.contains("'bogus' for the environment variable ABSTORE_LISTEN (--listen)"),
        "{stderr}"
    );
    let (ok, _, stderr) = support::run_with_env(
        &["migrate", "--database", "sqlite::memory:"],
        &[("ABSTORE_LOG_FORMAT", "yaml")],
    );
    assert!(!ok, "ABSTORE_LOG_FORMAT=yaml was accepted");
    assert!(
        stderr.contains("'yaml' for the environment variable ABSTORE_LOG_FORMAT"),
        "{stderr}"
    );
    assert!(stderr.contains("[possible values: text, json]"), "{stderr}");
    // The accepted formats: JSON lines, or text.
    let (ok, _, stderr) = support::run_with_env(
        &["migrate", "--database", "sqlite::memory:"],
        &[("ABSTORE_LOG_FORMAT", "json")],
    );
    assert!(ok, "{stderr}");
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["fields"]["message"] == "migrations applied"),
        "{stderr}"
    );
    let (ok, _, stderr) = abstore(&[
        "migrate",
        "--database",
        "sqlite::memory:",
        "--log-format",
        "text",
    ]);
    assert!(ok, "{stderr}");
    assert!(stderr.contains("INFO") && stderr.contains("migrations applied"));
}

/// `--create-secret-file` creates the file's missing directories (owner-only);
/// when it cannot, the error names the path.
#[tokio::test]
async fn create_secret_file_makes_missing_directories_or_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("run/abstore/secret");
    let server = Server::builder()
        .flag("--secret-file", support::path_text(&secret))
        .arg("--create-secret-file")
        .start()
        .await;
    assert!(secret.is_file(), "{}", server.stderr());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&secret), 0o600);
        assert_eq!(mode(secret.parent().unwrap()), 0o700);
    }
    drop(server);
    // A parent that cannot be a directory (a file is in its place).
    let blocked = dir.path().join("blocked");
    std::fs::write(&blocked, "").unwrap();
    let inside = blocked.join("secret");
    let (ok, _, stderr) = Server::builder()
        .flag("--secret-file", support::path_text(&inside))
        .arg("--create-secret-file")
        .run();
    assert!(!ok);
    assert!(
        stderr.contains(&format!("--secret-file {}", inside.display())),
        "{stderr}"
    );
}

/// The `configuration` line shows the connection cap in force (lowered to
/// what the open-file limit allows), and request lines carry a latency in
/// whole microseconds, not a float's noise.
#[tokio::test]
async fn the_configuration_line_shows_the_effective_cap_and_latency_is_rounded() {
    // 1024 descriptors: 128 are kept for the database and blobs.
    let server = Server::builder().open_files(1024).start().await;
    let client = support::client();
    for _ in 0..5 {
        let answer = client
            .get(format!("{}/builds", server.url()))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
    }
    let log = server.stderr();
    let configuration = log
        .lines()
        .find(|l| l.contains(" configuration "))
        .unwrap_or_else(|| panic!("no configuration line:\n{log}"));
    assert!(
        configuration.contains(" max_connections=896 "),
        "{configuration}"
    );
    let latencies: Vec<&str> = log
        .lines()
        .filter_map(|l| l.split(" latency_ms=").nth(1))
        .filter_map(|rest| rest.split_whitespace().next())
        .collect();
    assert!(!latencies.is_empty(), "no request line:\n{log}");
    for latency in latencies {
        let decimals = latency.split('.').nth(1).map_or(0, str::len);
        assert!(decimals <= 3, "latency_ms={latency}");
        assert!(latency.parse::<f64>().is_ok(), "latency_ms={latency}");
    }
}

/// `abstore completions SHELL` prints a completion script that knows the
/// subcommands, for every shell clap_complete supports.
#[test]
fn completions_for_each_shell_know_the_subcommands() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let (ok, script, stderr) = abstore(&["completions", shell]);
        assert!(ok, "{shell}: {stderr}");
        assert!(script.contains("serve"), "{shell}: no serve in\n{script}");
        assert!(script.contains("--listen"), "{shell}: no --listen");
    }
    let (ok, _, stderr) = abstore(&["completions", "tcsh"]);
    assert!(!ok);
    assert!(stderr.contains("possible values"), "{stderr}");
}
