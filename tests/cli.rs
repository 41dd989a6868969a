//! The command line as operators use it: `catalog check`, startup failures
//! that must be clear one-line errors, and `migrate`.

mod support;

use support::run as abstore;

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
    let (ok, _, stderr) = abstore(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--database",
        "sqlite::memory:",
        "--blobs",
        "memory://",
        "--catalog",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(stderr.contains("unknown actor kind \"robot\""), "{stderr}");
}

#[test]
fn unusable_settings_fail_with_one_clear_line() {
    let (ok, _, stderr) = abstore(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--database",
        "mysql://db/x",
    ]);
    assert!(!ok);
    assert!(stderr.contains("unsupported --database URL"), "{stderr}");
    let (ok, _, stderr) = abstore(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--database",
        "sqlite::memory:",
        "--test-clock",
        "yesterday",
    ]);
    assert!(!ok);
    assert!(
        stderr.contains("--test-clock \"yesterday\" is not an ISO-8601 UTC time"),
        "{stderr}"
    );
    let (ok, _, stderr) = abstore(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--database",
        "postgres://nobody:secret@127.0.0.1:1/none",
    ]);
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
    let server = conformance::Server::start(
        env!("CARGO_BIN_EXE_abstore"),
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--database",
            "sqlite::memory:",
            "--blobs",
            "memory://",
        ],
    )
    .await
    .unwrap();
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
    let server = conformance::Server::start(
        env!("CARGO_BIN_EXE_abstore"),
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--database",
            "sqlite::memory:",
            "--blobs",
            "memory://",
        ],
    )
    .await
    .unwrap();
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
