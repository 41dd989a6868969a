//! Hostile input at the doors of the real binary (issue 33): the test clock
//! under authentication, DNS rebinding against open mode on loopback,
//! database passwords in the output, secret files others can read and weak
//! secrets, request ids, token revocation on every replica, the bound on
//! token lifetimes, and what the server counts and logs about refusals.

use std::time::{Duration, Instant};

use abstore_conformance::token::{admin_scope, deployment_scope, mint, resource_scope};
use abstore_conformance::util::{format_iso_ms, parse_iso_ms, random_hex};
use serde_json::{Value, json};

use crate::support::{self, CLOCK, Server, ServerBuilder, path_text, run, run_with_env};

/// A fresh 48-character signing secret (random hex passes the weak-secret rule).
fn secret() -> String {
    (0..4).map(|_| random_hex()).collect()
}

fn clock_ms() -> i64 {
    parse_iso_ms(CLOCK).unwrap()
}

/// Now on this machine, in epoch milliseconds.
fn support_now() -> i64 {
    abstore_conformance::runner::local_now_ms()
}

/// What names a token in a revocation: the SHA-256 of its text, in hex.
fn hex_digest(token: &str) -> String {
    abstore_conformance::util::sha256_hex(token.as_bytes())
}

/// An answer: status, `x-request-id`, JSON body (or `Null`).
struct Answer {
    status: u16,
    request_id: Option<String>,
    body: Value,
}

/// `method path` on `base` with the identity headers, `token` and `extra`
/// headers (a `host` among them replaces the URL's).
async fn call(
    base: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    extra: &[(&str, &str)],
    body: Option<&Value>,
) -> Answer {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = support::client().request(method, format!("{base}{path}"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let request_id = response
        .headers()
        .get("x-request-id")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = response.json().await.unwrap_or(Value::Null);
    Answer {
        status,
        request_id,
        body,
    }
}

async fn get(base: &str, path: &str, token: Option<&str>) -> Answer {
    call(base, "GET", path, token, &[], None).await
}

/// `status` with the protocol's error body of `kind` (and `error`, if given).
fn assert_error(answer: &Answer, status: u16, kind: &str, error: Option<&str>, what: &str) {
    assert_eq!(answer.status, status, "{what}: {}", answer.body);
    assert_eq!(answer.body["kind"], kind, "{what}: {}", answer.body);
    assert!(answer.body["error"].is_string(), "{what}: {}", answer.body);
    if let Some(error) = error {
        assert_eq!(answer.body["error"], error, "{what}");
    }
}

/// The one opaque answer to every token that does not verify.
fn assert_invalid(answer: &Answer, what: &str) {
    assert_error(answer, 401, "auth", Some("invalid or expired token"), what);
}

/// The answer to a verified token refused only for its lifetime: a `401`
/// that says so and names the bound (issue 49, item 8).
fn assert_too_long(answer: &Answer, bound: &str, what: &str) {
    assert_error(answer, 401, "auth", None, what);
    let error = answer.body["error"].as_str().unwrap();
    assert!(
        error.starts_with("token lifetime too long: it expires in ")
            && error.contains(&format!("--max-token-lifetime of {bound})")),
        "{what}: {error}"
    );
}

/// Poll `probe` until it holds, for at most `within`; whether it did.
async fn eventually<F, Fut>(within: Duration, mut probe: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if probe().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Wait (bounded) until the server's stderr holds every one of `texts`: a
/// line is written before its response is sent, but read from the pipe
/// by another task; then the log.
async fn logged(server: &Server, texts: &[&str]) -> String {
    eventually(Duration::from_secs(10), || async {
        let log = server.stderr();
        texts.iter().all(|text| log.contains(text))
    })
    .await;
    server.stderr()
}

/// Start `abstore serve …`, which must fail; its stdout and stderr.
fn start_fails(server: ServerBuilder) -> String {
    let (ok, stdout, stderr) = server.run();
    assert!(!ok, "abstore started:\n{stdout}{stderr}");
    assert!(!stdout.contains("listening"), "{stdout}");
    format!("{stdout}{stderr}")
}

/// Write `text` to `path` with `mode`.
fn write_with_mode(path: &std::path::Path, text: &str, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

// ── 5. the test clock ───────────────────────────────────────────────────────

/// With a secret, moving the test clock (which decides what is expired)
/// takes an admin or deployment token; reading it stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_test_clock_moves_only_for_an_operator_token() {
    let secret = secret();
    let server = Server::builder().test_clock().secret(&secret).start().await;
    let url = server.url();
    let exp = clock_ms() + 3_600_000;
    let later = json!({"now": format_iso_ms(clock_ms() + 86_400_000)});
    let set = |token: Option<String>| {
        let later = later.clone();
        async move {
            call(
                url,
                "POST",
                "/_test/clock",
                token.as_deref(),
                &[],
                Some(&later),
            )
            .await
        }
    };
    let read = || async { get(url, "/_test/clock", None).await };

    assert_eq!(read().await.body["now"], CLOCK, "reading needs no token");
    assert_error(
        &set(None).await,
        401,
        "auth",
        Some("missing bearer token"),
        "no token",
    );
    assert_invalid(&set(Some("not.a-token".into())).await, "garbage");
    let expired = mint(&secret, &admin_scope(clock_ms()));
    assert_invalid(&set(Some(expired)).await, "an expired admin token");
    let narrower = [
        resource_scope("build", "b1", "*", exp),
        resource_scope("repo", "acme/w", "*", exp),
        resource_scope("session", "os_1", "*", exp),
        json!({"build": "b1", "session": "*", "exp": exp}),
        json!({"operator": {"user": "alice"}, "exp": exp}),
    ];
    for scope in narrower {
        let answer = set(Some(mint(&secret, &scope))).await;
        assert_error(&answer, 403, "auth", None, &format!("{scope}"));
        let error = answer.body["error"].as_str().unwrap();
        assert!(error.ends_with("may not access the test clock"), "{error}");
    }
    assert_eq!(
        read().await.body["now"],
        CLOCK,
        "no refused request moved it"
    );

    let admin = set(Some(mint(&secret, &admin_scope(exp)))).await;
    assert_eq!(admin.status, 200, "{}", admin.body);
    assert_eq!(read().await.body["now"], later["now"]);
    let back = json!({"now": CLOCK});
    let deployment = mint(&secret, &deployment_scope(exp + 86_400_000));
    let answer = call(
        url,
        "POST",
        "/_test/clock",
        Some(&deployment),
        &[],
        Some(&back),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(read().await.body["now"], CLOCK);

    // Open mode: anyone on loopback may move it, as before.
    let open = Server::builder().test_clock().start().await;
    let answer = call(open.url(), "POST", "/_test/clock", None, &[], Some(&later)).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
}

// ── 6. DNS rebinding ────────────────────────────────────────────────────────

/// Open mode on loopback answers only loopback `Host` names and the
/// allowed ones, on every route; the refusal names the host and the flag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_mode_on_loopback_refuses_foreign_host_names() {
    let server = Server::builder().metrics().accept_protocol3().start().await;
    let metrics = server.metrics_url().to_owned();
    let url = server.url();
    let port = url.rsplit(':').next().unwrap();
    let host = |host: String| async move {
        call(url, "GET", "/health", None, &[("host", &host)], None).await
    };
    for name in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        "127.0.0.2".to_owned(),
        format!("[::1]:{port}"),
        "app.localhost".to_owned(),
        "LOCALHOST".to_owned(),
    ] {
        assert_eq!(host(name.clone()).await.status, 200, "{name}");
    }
    for name in [
        format!("evil.example:{port}"),
        "evil.example".to_owned(),
        "localhost.evil.example".to_owned(),
        "127.0.0.1.evil.example".to_owned(),
        "10.1.2.3".to_owned(),
    ] {
        let answer = host(name.clone()).await;
        assert_error(&answer, 403, "auth", None, &name);
        let error = answer.body["error"].as_str().unwrap();
        assert!(error.contains(&format!("{name:?}")), "{error}");
        assert!(error.contains("--allow-host"), "{error}");
    }
    // Every route: a rebinding page can neither write nor read the store.
    let evil = [("host", "evil.example")];
    let write = call(
        url,
        "POST",
        "/builds",
        None,
        &evil,
        Some(&json!({"slug": "planted", "repo": "r"})),
    )
    .await;
    assert_error(&write, 403, "auth", None, "a write");
    assert_error(
        &call(url, "GET", "/builds", None, &evil, None).await,
        403,
        "auth",
        None,
        "a read",
    );
    let listed = get(url, "/builds", None).await;
    assert_eq!(listed.status, 200);
    assert_eq!(listed.body, json!([]), "the refused write wrote nothing");
    let counted = support::metric(
        &support::client(),
        &metrics,
        "abstore_auth_failures_total{reason=\"host\"}",
    )
    .await;
    assert_eq!(counted, Some(7.0));

    // Names allowed by flag or variable (comma separated).
    let flagged = Server::builder()
        .flag("--allow-host", "abstore.test")
        .start()
        .await;
    let answer = call(
        flagged.url(),
        "GET",
        "/health",
        None,
        &[("host", "ABSTORE.test:8787")],
        None,
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let answer = call(flagged.url(), "GET", "/health", None, &evil, None).await;
    assert_eq!(answer.status, 403);
    let variable = Server::builder()
        .env("ABSTORE_ALLOW_HOSTS", "a.test,b.test")
        .start()
        .await;
    for name in ["a.test", "b.test:80"] {
        let answer = call(
            variable.url(),
            "GET",
            "/health",
            None,
            &[("host", name)],
            None,
        )
        .await;
        assert_eq!(answer.status, 200, "{name}: {}", answer.body);
    }
    let out = start_fails(Server::builder().flag("--allow-host", "a.test:80"));
    assert!(out.contains("is not a host name"), "{out}");
}

/// Every authority a request names must pass the check (issue 49, item 6),
/// through the release binary: an absolute-form target naming loopback with
/// a foreign `Host`, a foreign target with a loopback `Host`, a second
/// `Host` header; and the metrics listener on loopback answers only
/// loopback names too, though it has no tokens at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_authority_a_request_names_is_checked_on_both_listeners() {
    let Some(release) = Server::builder().release() else {
        return;
    };
    let server = release.metrics().start().await;
    let url = server.url();
    let port = url.rsplit(':').next().unwrap();
    let refused = |answer: support::Reply, what: &str| {
        assert_eq!(answer.status, 403, "{what}: {}", answer.text());
        assert!(
            answer.text().contains("evil.example"),
            "{what}: the refusal names the host: {}",
            answer.text()
        );
    };
    let send = |raw: support::Raw<'static>| async move { raw.send(url).await.unwrap() };
    let absolute_loopback = format!("http://localhost:{port}/builds");
    refused(
        send(support::Raw::new("GET", absolute_loopback.clone(), None).host("evil.example")).await,
        "a loopback target with a foreign Host",
    );
    refused(
        send(support::Raw::new("GET", "http://evil.example/builds", None)).await,
        "a foreign target with a loopback Host",
    );
    refused(
        send(support::Raw::new("GET", "/builds", None).header("Host", "evil.example")).await,
        "a foreign second Host",
    );
    refused(
        send(
            support::Raw::new("GET", "/builds", None)
                .host("evil.example")
                .header("Host", format!("127.0.0.1:{port}")),
        )
        .await,
        "a foreign first Host",
    );
    let served = send(support::Raw::new("GET", absolute_loopback, None)).await;
    assert_eq!(served.status, 200, "loopback both ways: {}", served.text());
    // Nothing was written or read for the refused ones: a write too.
    let write = send(
        support::Raw::new("POST", format!("http://localhost:{port}/builds"), None)
            .host("evil.example")
            .json(&json!({"slug": "planted", "repo": "r"})),
    )
    .await;
    refused(write, "a write");
    let listed = send(support::Raw::new("GET", "/builds", None)).await;
    assert_eq!(listed.json(), json!([]), "the refused write wrote nothing");

    // The metrics listener: loopback names only.
    let metrics = server.metrics_url().trim_end_matches("/metrics").to_owned();
    let scrape = |host: Option<&'static str>| {
        let metrics = metrics.clone();
        async move {
            let mut raw = support::Raw::new("GET", "/metrics", None);
            if let Some(host) = host {
                raw = raw.host(host);
            }
            raw.send(&metrics).await.unwrap()
        }
    };
    refused(scrape(Some("evil.example")).await, "a metrics scrape");
    let scraped = scrape(None).await;
    assert_eq!(scraped.status, 200);
    assert!(
        scraped
            .text()
            .contains("abstore_auth_failures_total{reason=\"host\"} 6"),
        "five refusals on the server's listener and one on the metrics listener:\n{}",
        scraped.text()
    );
    assert_eq!(scrape(Some("localhost")).await.status, 200);
}

/// With a secret, or `--open` on a network address, the `Host` is not
/// checked: a page has no token, and a network server trusts its network.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authenticated_and_network_servers_do_not_check_the_host() {
    let secret = secret();
    let server = Server::builder().secret(&secret).start().await;
    let evil = [("host", "evil.example")];
    let token = mint(&secret, &admin_scope(support_now() + 3_600_000));
    let answer = call(server.url(), "GET", "/builds", Some(&token), &evil, None).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let answer = call(server.url(), "GET", "/builds", None, &evil, None).await;
    assert_error(
        &answer,
        401,
        "auth",
        Some("missing bearer token"),
        "no token",
    );

    let network = Server::builder()
        .listen("0.0.0.0:0")
        .arg("--open")
        .start()
        .await;
    let port = network.url().rsplit(':').next().unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let answer = call(&url, "GET", "/builds", None, &evil, None).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
}

// ── 7. database passwords ───────────────────────────────────────────────────

/// Passwords in the URL's user information or in `?password=` never reach
/// stdout or stderr: not when the database cannot be reached, not when the
/// URL does not parse, not from a parameter the driver would ignore.
#[test]
fn database_passwords_never_reach_the_output() {
    let cases = [
        // Unreachable (nothing listens on port 1).
        "postgres://u:hunter2pw@127.0.0.1:1/db?password=hunter3pw",
        // Unparseable: where the password ends cannot be known.
        "postgres://u:hunter2pw@127.0.0.1:notaport/db",
        "postgresql://u:hunter2pw@[::1/db?password=hunter3pw",
        // A secret the driver does not understand.
        "postgres://u@127.0.0.1:1/db?sslpassword=hunter3pw",
    ];
    let debug = [("RUST_LOG", "debug")];
    for database in cases {
        for (command, (ok, stdout, stderr)) in [
            (
                "serve",
                Server::builder()
                    .flag("--db-acquire-timeout-ms", "500")
                    .database(database)
                    .env("RUST_LOG", "debug")
                    .run(),
            ),
            (
                "migrate",
                run_with_env(&["migrate", "--database", database], &debug),
            ),
            (
                "token revocations",
                run_with_env(&["token", "revocations", "--database", database], &debug),
            ),
        ] {
            assert!(!ok, "{command} {database} succeeded");
            let out = format!("{stdout}{stderr}");
            for secret in ["hunter2pw", "hunter3pw"] {
                assert!(!out.contains(secret), "{command} printed {secret}:\n{out}");
            }
            assert!(out.contains("error: "), "{command} {database}: {out}");
        }
    }
    let (_, _, stderr) = run(&["migrate", "--database", cases[1]]);
    assert!(stderr.contains("unparseable URL"), "{stderr}");
    assert!(stderr.contains("invalid port number"), "{stderr}");
    let (_, _, stderr) = run(&["migrate", "--database", cases[3]]);
    assert!(
        stderr.contains("\"sslpassword\" is not supported"),
        "{stderr}"
    );
}

/// A served PostgreSQL store: the start's log lines show the URL with its
/// passwords replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_logs_hide_database_passwords_postgres() {
    support::with_pg("secrets", |url| async move {
        // Trust authentication ignores the passwords, so the server starts.
        let mut parsed = url::Url::parse(&url).unwrap();
        parsed.set_password(Some("hunter2pw")).unwrap();
        parsed.set_query(Some("application_name=abstore&password=hunter3pw"));
        let database = parsed.to_string();
        let mut server = Server::builder()
            .database(&database)
            .env("RUST_LOG", "debug")
            .start()
            .await;
        assert_eq!(get(server.url(), "/health", None).await.status, 200);
        let log = logged(&server, &["password=REDACTED", "serving"]).await;
        server.stop().await.unwrap();
        assert!(log.contains("password=REDACTED"), "{log}");
        assert!(log.contains(":REDACTED@"), "{log}");
        for secret in ["hunter2pw", "hunter3pw"] {
            assert!(!log.contains(secret), "the log holds {secret}:\n{log}");
        }
    })
    .await;
}

// ── 8. secret files and weak secrets ────────────────────────────────────────

/// A secret file its group or others may read is refused at start, by
/// `token mint`, and on reload (the secrets in force stay), unless allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_files_open_to_others_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secret");
    let file = path_text(&path);
    let (old, new) = (secret(), secret());
    write_with_mode(&path, &format!("{old}\n"), 0o644);
    let out = start_fails(Server::builder().flag("--secret-file", file));
    assert!(out.contains("mode 0644"), "{out}");
    assert!(out.contains(&format!("chmod 600 {file}")), "{out}");
    assert!(!out.contains(&old), "the secret was printed");
    let (ok, _, stderr) = run(&["token", "mint", "--admin", "--secret-file", file]);
    assert!(!ok && stderr.contains("mode 0644"), "{stderr}");
    let (ok, stdout, stderr) = run(&[
        "token",
        "mint",
        "--admin",
        "--secret-file",
        file,
        "--allow-insecure-secret-file",
    ]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains('.'), "{stdout}");
    let allowed = Server::builder()
        .flag("--secret-file", file)
        .env("ABSTORE_ALLOW_INSECURE_SECRET_FILE", "true")
        .start()
        .await;
    drop(allowed);

    // Private, it serves; made public with a new secret, a reload refuses it.
    write_with_mode(&path, &format!("{old}\n"), 0o600);
    let server = Server::builder().flag("--secret-file", file).start().await;
    let exp = support_now() + 3_600_000;
    let (old_token, new_token) = (mint(&old, &admin_scope(exp)), mint(&new, &admin_scope(exp)));
    assert_eq!(
        get(server.url(), "/builds", Some(&old_token)).await.status,
        200
    );
    write_with_mode(&path, &format!("{new}\n"), 0o640);
    server.signal("HUP");
    let log = logged(&server, &["NOT reloaded", "mode 0640"]).await;
    assert!(
        log.contains("NOT reloaded") && log.contains("mode 0640"),
        "{log}"
    );
    assert_eq!(
        get(server.url(), "/builds", Some(&old_token)).await.status,
        200
    );
    assert_invalid(
        &get(server.url(), "/builds", Some(&new_token)).await,
        "the refused file's secret",
    );
    assert!(!server.stderr().contains(&new), "a secret was logged");
}

/// Long secrets without variety (a repeated character or word) are weak:
/// refused by the server and by `token mint`, unless `--allow-weak-secret`.
#[test]
fn uniform_secrets_are_weak() {
    for weak in ["a".repeat(64), "password".repeat(5)] {
        let out = start_fails(Server::builder().secret(&weak));
        assert!(out.contains("looks weak"), "{out}");
        assert!(out.contains("openssl rand"), "{out}");
        assert!(!out.contains(&weak), "the secret was printed");
        let (ok, _, stderr) = run(&["token", "mint", "--admin", "--secret", &weak]);
        assert!(!ok && stderr.contains("looks weak"), "{stderr}");
        let (ok, stdout, stderr) = run(&[
            "token",
            "mint",
            "--admin",
            "--secret",
            &weak,
            "--allow-weak-secret",
        ]);
        assert!(ok, "{stderr}");
        assert!(stdout.contains('.'), "{stdout}");
    }
    // A file with one weak line among good ones.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secret");
    write_with_mode(&path, &format!("{}\n{}\n", secret(), "z".repeat(40)), 0o600);
    let out = start_fails(Server::builder().flag("--secret-file", path_text(&path)));
    assert!(
        out.contains("line 2") && out.contains("looks weak"),
        "{out}"
    );
}

// ── 9. request ids ──────────────────────────────────────────────────────────

/// A client's `x-request-id` is kept (echoed and logged) only when it is at
/// most 128 bytes of visible ASCII; any other is replaced and never logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_short_printable_request_ids_are_kept() {
    let server = Server::builder().start().await;
    let url = server.url();
    let with_id = |id: String| async move {
        call(url, "GET", "/health", None, &[("x-request-id", &id)], None)
            .await
            .request_id
            .unwrap()
    };
    let kept = ["client-id-0001".to_owned(), "k".repeat(128)];
    for id in &kept {
        assert_eq!(&with_id(id.clone()).await, id);
    }
    let replaced = [
        "r".repeat(129),
        "q".repeat(60_000),
        "two words here".to_owned(),
        "tab\there".to_owned(),
    ];
    for id in &replaced {
        let answered = with_id(id.clone()).await;
        assert_ne!(&answered, id);
        assert_eq!(answered.len(), 36, "a fresh UUID: {answered}");
    }
    let log = logged(&server, &["request_id=client-id-0001"]).await;
    assert!(log.contains("request_id=client-id-0001"), "{log}");
    assert!(log.contains(&"k".repeat(128)), "{log}");
    assert!(!log.contains(&"r".repeat(129)), "a refused id was logged");
    assert!(!log.contains("qqqqqqqqqq"), "a refused id was logged");
    assert!(!log.contains("two words"), "a refused id was logged");
}

// ── 10. the revocation commands ─────────────────────────────────────────────

/// Revocations travel with the store: exported, imported, still revoked.
#[test]
fn revocations_travel_in_archives() {
    let dir = tempfile::tempdir().unwrap();
    let source = format!("sqlite://{}", dir.path().join("a.db").display());
    let dest = format!("sqlite://{}", dir.path().join("b.db").display());
    let blobs = path_text(&dir.path().join("blobs")).to_owned();
    let digest = "ab".repeat(32);
    support::run_ok(&[
        "token",
        "revoke",
        "--digest",
        &digest,
        "--database",
        &source,
    ]);
    let archive = dir.path().join("store.ndjson");
    support::export(&source, &blobs, &archive);
    let (ok, _, stderr) = support::import(&archive, &dest, &blobs, true);
    assert!(ok, "{stderr}");
    let listed = support::run_ok(&["token", "revocations", "--database", &dest]);
    assert!(listed.starts_with(&digest), "{listed}");
}

/// The revocation commands refuse what cannot name a token.
#[test]
fn revoke_refuses_what_names_no_token() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("a.db").display());
    for (args, expected) in [
        (vec!["token", "revoke", "--database", &database], "required"),
        (
            vec!["token", "revoke", "Bearer x.y", "--database", &database],
            "not a token",
        ),
        (
            vec![
                "token",
                "revoke",
                "--digest",
                "abc",
                "--database",
                &database,
            ],
            "64 hex digits",
        ),
        (
            vec![
                "token",
                "revoke",
                "--digest",
                &"g".repeat(64),
                "--database",
                &database,
            ],
            "64 hex digits",
        ),
        (
            vec![
                "token",
                "revoke",
                "--digest",
                &"a".repeat(64),
                "--database",
                "sqlite::memory:",
            ],
            "in-memory",
        ),
    ] {
        let (ok, _, stderr) = run(&args);
        assert!(!ok, "{args:?} succeeded");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    let listed = support::run_ok(&["token", "revocations", "--database", &database]);
    assert_eq!(listed, "0 revoked tokens\n");
}

// ── 10. revocation on the servers, the lifetime bound, accounting ───────────

/// `abstore token revoke` on a running SQLite store: the server refuses the
/// token within its refresh interval, and again from the first request
/// after a restart; by the token, by its digest, idempotently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revocation_on_sqlite_applies_while_serving_and_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("abstore.db").display());
    let secret = secret();
    let mut server = Server::builder()
        .database(&database)
        .secret(&secret)
        .flag("--revocation-refresh-seconds", "1")
        .metrics()
        .start()
        .await;
    let metrics = server.metrics_url().to_owned();
    let exp = support_now() + 3_600_000;
    let (leaked, seen, kept) = (
        mint(&secret, &admin_scope(exp)),
        mint(&secret, &resource_scope("build", "b1", "*", exp)),
        mint(&secret, &admin_scope(exp + 1)),
    );
    for token in [&leaked, &seen, &kept] {
        assert_ne!(
            get(server.url(), "/builds/b1", Some(token)).await.status,
            401
        );
    }

    let (ok, stdout, stderr) = run(&[
        "token",
        "revoke",
        &leaked,
        "--database",
        &database,
        "--note",
        "leaked in a CI log",
    ]);
    assert!(ok, "{stderr}");
    let digest = hex_digest(&leaked);
    assert!(stdout.starts_with(&format!("revoked {digest}")), "{stdout}");
    let refused = eventually(Duration::from_secs(10), || async {
        get(server.url(), "/builds", Some(&leaked)).await.status == 401
    })
    .await;
    assert!(refused, "the revoked token is still accepted");
    assert_invalid(
        &get(server.url(), "/builds", Some(&leaked)).await,
        "revoked",
    );
    assert_eq!(get(server.url(), "/builds", Some(&kept)).await.status, 200);

    // Again: nothing changes. By digest, as `token inspect` prints it.
    let (ok, stdout, _) = run(&["token", "revoke", &leaked, "--database", &database]);
    assert!(ok && stdout.starts_with("already revoked"), "{stdout}");
    let inspected = support::run_ok(&["token", "inspect", &seen]);
    let seen_digest = inspected
        .lines()
        .find_map(|l| l.strip_prefix("digest: "))
        .unwrap()
        .to_owned();
    assert_eq!(seen_digest, hex_digest(&seen));
    let (ok, _, stderr) = run(&[
        "token",
        "revoke",
        "--digest",
        &seen_digest.to_uppercase(),
        "--database",
        &database,
    ]);
    assert!(ok, "{stderr}");
    let refused = eventually(Duration::from_secs(10), || async {
        get(server.url(), "/builds/b1", Some(&seen)).await.status == 401
    })
    .await;
    assert!(refused, "the token revoked by digest is still accepted");
    let listed = support::run_ok(&["token", "revocations", "--database", &database]);
    assert!(
        listed.contains(&digest) && listed.contains("\"leaked in a CI log\""),
        "{listed}"
    );
    assert!(
        listed.contains(&seen_digest) && listed.contains("expires unknown"),
        "{listed}"
    );
    assert!(listed.ends_with("2 revoked tokens\n"), "{listed}");
    let c = support::client();
    assert_eq!(
        support::metric(&c, &metrics, "abstore_revoked_tokens").await,
        Some(2.0)
    );
    let counted = support::metric(
        &c,
        &metrics,
        "abstore_auth_failures_total{reason=\"revoked\"}",
    )
    .await
    .unwrap();
    assert!(counted >= 2.0, "{counted}");

    // A restart loads them before its first request.
    server.restart().await.unwrap();
    assert_invalid(
        &get(server.url(), "/builds", Some(&leaked)).await,
        "after a restart",
    );
    assert_invalid(
        &get(server.url(), "/builds/b1", Some(&seen)).await,
        "after a restart",
    );
    assert_eq!(get(server.url(), "/builds", Some(&kept)).await.status, 200);
    assert!(!server.stderr().contains(&leaked), "a token was logged");
}

/// One PostgreSQL database, three replicas: a revocation reaches the two
/// that re-read every second within seconds, while the one told to re-read
/// hourly still accepts the token (the interval is what governs).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn revocation_reaches_every_replica_postgres() {
    support::with_pg("revoke", |database| async move {
        let secret = secret();
        let replica = |refresh: &'static str, migrate: bool| {
            let mut server = Server::builder()
                .database(&database)
                .secret(&secret)
                .flag("--revocation-refresh-seconds", refresh);
            if !migrate {
                server = server.arg("--no-migrate");
            }
            server.start()
        };
        let a = replica("1", true).await;
        let b = replica("1", false).await;
        let hourly = replica("3600", false).await;
        let token = mint(&secret, &admin_scope(support_now() + 3_600_000));
        for server in [&a, &b, &hourly] {
            assert_eq!(get(server.url(), "/builds", Some(&token)).await.status, 200);
        }
        let (ok, _, stderr) = run(&["token", "revoke", &token, "--database", &database]);
        assert!(ok, "{stderr}");
        let revoked_at = Instant::now();
        for server in [&a, &b] {
            let refused = eventually(Duration::from_secs(6), || async {
                get(server.url(), "/builds", Some(&token)).await.status == 401
            })
            .await;
            assert!(
                refused,
                "a replica re-reading every second still accepts the token after {:?}",
                revoked_at.elapsed()
            );
            assert_invalid(&get(server.url(), "/builds", Some(&token)).await, "revoked");
        }
        assert_eq!(
            get(hourly.url(), "/builds", Some(&token)).await.status,
            200,
            "the hourly replica has not re-read yet"
        );
    })
    .await;
}

/// A server that cannot read the revocations does not start in
/// authenticated mode (here: `--no-migrate` on an empty database, which
/// has no table); in open mode it does not read them.
#[test]
fn a_start_that_cannot_read_the_revocations_fails() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("empty.db").display());
    let out = start_fails(
        Server::builder()
            .database(&database)
            .arg("--no-migrate")
            .secret(&secret()),
    );
    assert!(out.contains("loading the revoked tokens"), "{out}");
}

/// `--revocation-refresh-seconds` takes 1 to 3600; outside, the start fails
/// naming the flag or the variable.
#[test]
fn the_refresh_interval_is_bounded() {
    for bad in ["0", "3601", "-1", "soon"] {
        let flag = format!("--revocation-refresh-seconds={bad}");
        let out = start_fails(Server::builder().arg(&flag));
        assert!(out.contains("--revocation-refresh-seconds"), "{bad}: {out}");
    }
    let out = start_fails(Server::builder().env("ABSTORE_REVOCATION_REFRESH_SECONDS", "0"));
    assert!(out.contains("ABSTORE_REVOCATION_REFRESH_SECONDS"), "{out}");
    let out = start_fails(Server::builder().flag("--max-token-lifetime", "forever"));
    assert!(out.contains("--max-token-lifetime"), "{out}");
    let out = start_fails(Server::builder().env("ABSTORE_MAX_TOKEN_LIFETIME", "1w"));
    assert!(out.contains("ABSTORE_MAX_TOKEN_LIFETIME"), "{out}");
}

/// A token whose `exp` lies beyond `--max-token-lifetime` (90 days by
/// default) of the server's now is refused whatever its signature, with an
/// answer that says the lifetime is why (issue 49, item 8: not "expired"),
/// through the release binary; a forged or expired token still gets the
/// opaque answer; `none` lifts the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_beyond_the_lifetime_bound_are_refused_saying_why() {
    let Some(release) = Server::builder().release() else {
        return;
    };
    let secret = secret();
    let now = clock_ms();
    let bounded = release.test_clock().secret(&secret);
    let server = bounded.clone().start().await;
    let day = 86_400_000;
    let at = |exp: i64| mint(&secret, &admin_scope(exp));
    assert_eq!(
        get(server.url(), "/builds", Some(&at(now + 90 * day)))
            .await
            .status,
        200
    );
    assert_too_long(
        &get(server.url(), "/builds", Some(&at(now + 90 * day + 1))).await,
        "90d",
        "a millisecond past 90 days",
    );
    let answer = get(server.url(), "/builds", Some(&at(4_102_444_800_000))).await;
    assert_too_long(&answer, "90d", "the year 2100");
    let error = answer.body["error"].as_str().unwrap();
    assert!(error.contains("expires in 26832d"), "{error}");
    // The same lifetime from a forger, or a token expired, learns nothing.
    let forged = mint(&"f0".repeat(24), &admin_scope(now + 400 * day));
    assert_invalid(
        &get(server.url(), "/builds", Some(&forged)).await,
        "a forged token past the bound",
    );
    assert_invalid(
        &get(server.url(), "/builds", Some(&at(now - 1))).await,
        "an expired token",
    );
    let hour = bounded
        .clone()
        .flag("--max-token-lifetime", "1h")
        .start()
        .await;
    assert_eq!(
        get(hour.url(), "/builds", Some(&at(now + 3_600_000)))
            .await
            .status,
        200
    );
    assert_too_long(
        &get(hour.url(), "/builds", Some(&at(now + 3_600_001))).await,
        "1h",
        "a millisecond past an hour",
    );
    let unbounded = bounded
        .env("ABSTORE_MAX_TOKEN_LIFETIME", "none")
        .start()
        .await;
    assert_eq!(
        get(unbounded.url(), "/builds", Some(&at(4_102_444_800_000)))
            .await
            .status,
        200
    );

    // `token mint` warns about a TTL past the default bound.
    let (ok, _, stderr) = run(&[
        "token", "mint", "--admin", "--secret", &secret, "--ttl", "91d",
    ]);
    assert!(ok && stderr.contains("--max-token-lifetime"), "{stderr}");
    let (ok, _, stderr) = run(&[
        "token", "mint", "--admin", "--secret", &secret, "--ttl", "90d",
    ]);
    assert!(ok && stderr.is_empty(), "{stderr}");
}

/// Every refusal is counted by reason while the client sees the one opaque
/// answer, and each request's log line names the acting scope, never the
/// token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_counted_by_reason_and_logs_name_the_scope() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("abstore.db").display());
    let secret = secret();
    let server = Server::builder()
        .database(&database)
        .test_clock()
        .secret(&secret)
        .flag("--revocation-refresh-seconds", "1")
        .metrics()
        .start()
        .await;
    let metrics = server.metrics_url().to_owned();
    let url = server.url();
    let now = clock_ms();
    let exp = now + 3_600_000;
    let admin = mint(&secret, &admin_scope(exp));
    let build = mint(&secret, &resource_scope("build", "b1", "s_1", exp));
    let deployment = mint(&secret, &deployment_scope(exp));
    let revoked = mint(&secret, &admin_scope(exp + 1));
    assert_eq!(get(url, "/builds", Some(&revoked)).await.status, 200);
    let (ok, _, stderr) = run(&["token", "revoke", &revoked, "--database", &database]);
    assert!(ok, "{stderr}");
    assert!(
        eventually(Duration::from_secs(10), || async {
            get(url, "/builds", Some(&revoked)).await.status == 401
        })
        .await
    );
    let c = support::client();
    let count = |reason: &'static str| {
        let (c, metrics) = (c.clone(), metrics.clone());
        async move {
            let name = format!("abstore_auth_failures_total{{reason=\"{reason}\"}}");
            support::metric(&c, &metrics, &name).await.unwrap_or(-1.0)
        }
    };
    let forged = mint(&"f0".repeat(24), &admin_scope(exp));
    let cases: [(&str, Option<String>, &str, u16); 7] = [
        ("missing", None, "/builds", 401),
        (
            "malformed_or_bad_signature",
            Some("x.y".into()),
            "/builds",
            401,
        ),
        ("malformed_or_bad_signature", Some(forged), "/builds", 401),
        (
            "expired",
            Some(mint(&secret, &admin_scope(now))),
            "/builds",
            401,
        ),
        (
            "lifetime",
            Some(mint(&secret, &admin_scope(now + 91 * 86_400_000))),
            "/builds",
            401,
        ),
        ("revoked", Some(revoked.clone()), "/builds", 401),
        ("forbidden", Some(build.clone()), "/builds/b2", 403),
    ];
    for (reason, token, path, status) in cases {
        let before = count(reason).await;
        let answer = get(url, path, token.as_deref()).await;
        assert_error(&answer, status, "auth", None, reason);
        if reason == "lifetime" {
            assert_too_long(&answer, "90d", reason);
        } else if status == 401 && token.is_some() {
            assert_invalid(&answer, reason);
        }
        assert_eq!(count(reason).await, before + 1.0, "{reason}");
    }
    // A write attributed to someone else is a forbidden refusal too.
    let created = call(
        url,
        "POST",
        "/builds",
        Some(&admin),
        &[],
        Some(&json!({"slug": "b1", "repo": "acme/w"})),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let before = count("forbidden").await;
    let answer = call(
        url,
        "POST",
        "/builds/b1/events",
        Some(&build),
        &[],
        Some(
            &json!({"actor": {"kind": "kernel"}, "type": "observation.recorded",
            "payload": {"id": "o", "kind": "followup", "summary": "s"}}),
        ),
    )
    .await;
    assert_eq!(answer.status, 403, "{}", answer.body);
    assert_eq!(count("forbidden").await, before + 1.0);

    // The log names the scope of each request it served.
    for (token, path) in [
        (&admin, "/builds"),
        (&build, "/builds/b1"),
        (&deployment, "/repos/acme%2Fw"),
    ] {
        get(url, path, Some(token)).await;
    }
    let expected = [
        "scope=admin",
        "scope=build:b1",
        "scope=deployment",
        "refused=revoked",
        "refused=lifetime",
        "scope=build:b1 refused=forbidden",
    ];
    let log = logged(&server, &expected).await;
    for scope in expected {
        assert!(log.contains(scope), "{scope} not logged:\n{log}");
    }
    for token in [&admin, &build, &deployment, &revoked] {
        assert!(!log.contains(token.as_str()), "a token was logged");
    }
    let open = Server::builder().start().await;
    assert_eq!(get(open.url(), "/builds", None).await.status, 200);
    let log = logged(&open, &["scope=open"]).await;
    assert!(log.contains("scope=open"), "{log}");
}
