//! The web console (issue 51; docs/console.md) over HTTP against the real
//! binary, on a SQLite file and on PostgreSQL, without a browser (the
//! headless-Chromium tests are `console_browser*`): sign-in and sign-out,
//! the session cookie's flags, the security headers of every page, CSRF
//! and Origin refusals, scope 404s, a revoked token's session ending, the
//! sign-in rate limit at its edge, download headers, hostile text escaped
//! in the HTML, paging bounds, operator scopes, and `--no-console`.

use abstore_conformance::token;
use abstore_conformance::util::random_hex;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

use crate::support::{Raw, Server, enc, with_pg};

const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'";

/// Text that must never reach a page unescaped.
const HOSTILE: &str = "<script>window.__pwned=1</script><img src=x onerror=alert(1)>\u{202e}";

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn strong_secret() -> String {
    (0..4).map(|_| random_hex()).collect()
}

fn mint(secret: &str, scope: Value) -> String {
    let mut scope = scope;
    scope["exp"] = json!(now_ms() + 3_600_000);
    token::mint(secret, &scope)
}

fn deployment(secret: &str) -> String {
    mint(secret, json!({"operator": true, "session": "*"}))
}

/// A browser without cookies or redirects of its own: each test carries
/// its session cookie by hand, so what the server set is what is sent.
struct Browser {
    base: String,
    http: reqwest::Client,
    cookie: Option<String>,
}

struct Page {
    status: u16,
    headers: HeaderMap,
    body: String,
}

impl Page {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    /// The value of the first `name="csrf"` field.
    fn csrf(&self) -> String {
        let at = self
            .body
            .find("name=\"csrf\" value=\"")
            .expect("a csrf field");
        let rest = &self.body[at + "name=\"csrf\" value=\"".len()..];
        rest[..rest.find('"').unwrap()].to_owned()
    }

    /// The headers every console page carries.
    fn assert_secured(&self, what: &str) {
        assert_eq!(self.header("content-security-policy"), CSP, "{what}");
        assert_eq!(self.header("x-content-type-options"), "nosniff", "{what}");
        assert_eq!(self.header("referrer-policy"), "same-origin", "{what}");
    }
}

impl Browser {
    fn new(server: &Server) -> Browser {
        Browser {
            base: server.url().trim_end_matches('/').to_owned(),
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            cookie: None,
        }
    }

    fn origin(&self) -> String {
        self.base.clone()
    }

    async fn get(&self, path: &str) -> Page {
        let mut request = self.http.get(format!("{}{path}", self.base));
        if let Some(cookie) = &self.cookie {
            request = request.header("cookie", cookie);
        }
        read(request.send().await.unwrap()).await
    }

    async fn post(&self, path: &str, form: &[(&str, &str)], origin: Option<&str>) -> Page {
        let body: String = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        let mut request = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        if let Some(cookie) = &self.cookie {
            request = request.header("cookie", cookie);
        }
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        read(request.send().await.unwrap()).await
    }

    /// Sign in with `token`; the cookie is kept.
    async fn sign_in(&mut self, token: &str) -> Page {
        let origin = self.origin();
        let page = self
            .post("/console/sign-in", &[("token", token)], Some(&origin))
            .await;
        assert_eq!(page.status, 303, "sign-in: {}", page.body);
        let set = page.header("set-cookie").to_owned();
        self.cookie = Some(set.split(';').next().unwrap().to_owned());
        page
    }
}

async fn read(response: reqwest::Response) -> Page {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.text().await.unwrap();
    Page {
        status,
        headers,
        body,
    }
}

async fn protocol(base: &str, method: &str, path: &str, token: Option<&str>, body: Value) -> Value {
    let reply = Raw::new(method, path.to_owned(), token)
        .json(&body)
        .send(base)
        .await
        .unwrap();
    assert!(
        (200..300).contains(&reply.status),
        "{method} {path}: {} {}",
        reply.status,
        reply.text()
    );
    reply.json()
}

/// Two repositories, a build of `acme/x` with `events` events (hostile
/// text in each), an artifact, and a ticket of team ENG with hostile text.
async fn seed(base: &str, token: Option<&str>, events: usize) -> String {
    protocol(base, "POST", "/repos", token, json!({"repo": "acme/x"})).await;
    protocol(base, "POST", "/repos", token, json!({"repo": "acme/y"})).await;
    protocol(
        base,
        "POST",
        "/builds",
        token,
        json!({"slug": "b1", "repo": "acme/x"}),
    )
    .await;
    protocol(
        base,
        "POST",
        "/builds",
        token,
        json!({"slug": "b2", "repo": "acme/y"}),
    )
    .await;
    for n in 0..events {
        protocol(
            base,
            "POST",
            "/builds/b1/events",
            token,
            json!({"actor": {"kind": "kernel"}, "type": "observation.recorded",
                   "payload": {"id": format!("obs-{n}"), "kind": "followup", "summary": HOSTILE}}),
        )
        .await;
    }
    protocol(
        base,
        "POST",
        "/builds/b1/artifacts",
        token,
        json!({"kind": "plan", "contentBase64": "PGh0bWw+aGk8L2h0bWw+", "metadata": {}}),
    )
    .await;
    let ticket = protocol(
        base,
        "POST",
        "/tickets/create",
        token,
        json!({"context": {"teamKey": "ENG"},
               "input": {"draft": {"title": HOSTILE, "body": format!("{HOSTILE}\n\n[x](javascript:alert(1))"),
                                   "labels": [HOSTILE]}}}),
    )
    .await;
    ticket["ref"]["id"].as_str().unwrap().to_owned()
}

/// Every page of a seeded store, as a deployment token sees it.
fn pages(ticket: &str) -> Vec<String> {
    vec![
        "/console/".into(),
        format!("/console/repos/{}", enc("acme/x")),
        "/console/builds/b1".into(),
        "/console/tickets/ENG".into(),
        format!("/console/tickets/ENG/{}", enc(ticket)),
        "/console/tickets/ENG/new".into(),
        "/console/operator".into(),
    ]
}

async fn serve(database: &str, secret: Option<&str>, extra: &[&str]) -> Server {
    let mut builder = Server::builder().database(database).args(extra);
    if let Some(secret) = secret {
        builder = builder.secret(secret);
    }
    builder.start().await
}

// ── Sign-in, pages, headers, escaping, CSRF, sign-out ───────────────────────

async fn signed_in_session(database: &str) {
    let secret = strong_secret();
    let server = serve(database, Some(&secret), &[]).await;
    let admin = deployment(&secret);
    let ticket = seed(server.url(), Some(&admin), 3).await;
    let mut browser = Browser::new(&server);

    // Without a session every page sends the browser to sign in.
    let page = browser.get("/console/").await;
    assert_eq!(page.status, 303);
    assert_eq!(page.header("location"), "/console/sign-in");
    let form = browser.get("/console/sign-in").await;
    assert_eq!(form.status, 200);
    form.assert_secured("sign-in");
    assert!(form.body.contains("data-page=\"sign-in\""));
    assert!(form.body.contains("type=\"password\""));

    // A sign-in from elsewhere, or with a token that does not verify.
    let origin = browser.origin();
    let elsewhere = browser
        .post(
            "/console/sign-in",
            &[("token", &admin)],
            Some("https://evil.example"),
        )
        .await;
    assert_eq!(elsewhere.status, 403);
    let wrong = browser
        .post(
            "/console/sign-in",
            &[("token", "not-a-token")],
            Some(&origin),
        )
        .await;
    assert_eq!(wrong.status, 401);
    assert!(wrong.header("set-cookie").is_empty());

    let signed = browser.sign_in(&admin).await;
    let cookie = signed.header("set-cookie");
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    assert!(cookie.contains("SameSite=Strict"), "{cookie}");
    assert!(cookie.contains("Path=/console/"), "{cookie}");
    assert!(!cookie.contains("Secure"), "plain HTTP: {cookie}");
    assert!(!cookie.contains(&admin), "the cookie never holds the token");
    signed.assert_secured("sign-in redirect");

    for path in pages(&ticket) {
        let page = browser.get(&path).await;
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        page.assert_secured(&path);
        assert_eq!(page.header("cache-control"), "no-store", "{path}");
        assert!(page.body.contains("<main data-page="), "{path}");
        assert!(
            !page.body.contains("<script>window"),
            "{path}: hostile text unescaped"
        );
        assert!(
            !page.body.contains("<img src=x"),
            "{path}: hostile text unescaped"
        );
        assert!(
            !page.body.contains("href=\"javascript"),
            "{path}: a javascript: link"
        );
        assert!(!page.body.contains(&admin), "{path}: the token on a page");
        assert!(
            page.body.len() <= 100 * 1024,
            "{path}: {} bytes",
            page.body.len()
        );
        assert!(!page.body.contains(" style="), "{path}: inline style");
    }
    let overview = browser.get("/console/").await;
    assert!(overview.body.contains("data-repo=\"acme/x\""));
    assert!(overview.body.contains("data-repo=\"acme/y\""));
    let build = browser.get("/console/builds/b1").await;
    assert!(build.body.contains("data-seq=\"3\""));
    assert!(
        build
            .body
            .contains("&lt;script&gt;window.__pwned=1&lt;/script&gt;")
    );
    let board = browser.get("/console/tickets/ENG").await;
    for state in ["Triage", "Ready", "Doing", "Done"] {
        assert!(
            board.body.contains(&format!("data-state=\"{state}\"")),
            "{state}"
        );
    }
    assert!(board.body.contains(&format!("data-ticket=\"{ticket}\"")));

    // Assets: hashed names, immutable, same headers.
    let at = build.body.find("/console/assets/console.").unwrap();
    let asset = &build.body[at..at + build.body[at..].find('"').unwrap()];
    let css = browser.get(asset).await;
    assert_eq!(css.status, 200);
    assert!(css.header("cache-control").contains("immutable"));
    css.assert_secured("asset");

    // A download is an attachment of octet-stream.
    let at = build
        .body
        .find("/console/builds/b1/artifacts/plan/")
        .unwrap();
    let link = &build.body[at..at + build.body[at..].find('"').unwrap()];
    let download = browser.get(link).await;
    assert_eq!(download.status, 200);
    assert_eq!(download.header("content-type"), "application/octet-stream");
    assert!(
        download
            .header("content-disposition")
            .starts_with("attachment")
    );
    assert_eq!(download.body, "<html>hi</html>");
    download.assert_secured("download");

    // A state-changing request needs the session's CSRF token and the
    // console's own Origin.
    let ticket_path = format!("/console/tickets/ENG/{}", enc(&ticket));
    let csrf = browser.get(&ticket_path).await.csrf();
    let comment = format!("{ticket_path}/comment");
    let no_csrf = browser
        .post(&comment, &[("text", "hi")], Some(&origin))
        .await;
    assert_eq!(no_csrf.status, 403);
    let cross = browser
        .post(
            &comment,
            &[("csrf", &csrf), ("text", "hi")],
            Some("https://evil.example"),
        )
        .await;
    assert_eq!(cross.status, 403);
    let no_origin = browser
        .post(&comment, &[("csrf", &csrf), ("text", "hi")], None)
        .await;
    assert_eq!(no_origin.status, 403);
    let done = browser
        .post(
            &comment,
            &[("csrf", &csrf), ("text", "a comment")],
            Some(&origin),
        )
        .await;
    assert_eq!(done.status, 303, "{}", done.body);
    let moved = browser
        .post(
            &format!("{ticket_path}/move"),
            &[("csrf", &csrf), ("state", "Ready")],
            Some(&origin),
        )
        .await;
    assert_eq!(moved.status, 303, "{}", moved.body);
    let got = protocol(
        server.url(),
        "POST",
        "/tickets/get",
        Some(&admin),
        json!({"context": {"teamKey": "ENG"}, "input": {"id": ticket}}),
    )
    .await;
    assert_eq!(got["state"], "Ready");
    let page = browser.get(&ticket_path).await;
    assert!(page.body.contains("a comment"));
    assert!(page.body.contains("data-ticket-history"));
    assert!(page.body.contains("moved"), "{}", page.body);

    // Sign-out ends the session at once; the old cookie opens nothing.
    let out = browser
        .post("/console/sign-out", &[("csrf", &csrf)], Some(&origin))
        .await;
    assert_eq!(out.status, 303);
    assert!(out.header("set-cookie").contains("Max-Age=0"));
    let after = browser.get("/console/").await;
    assert_eq!(after.status, 303);
    assert_eq!(after.header("location"), "/console/sign-in");
}

#[tokio::test(flavor = "multi_thread")]
async fn console_session_pages_and_refusals_on_a_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    signed_in_session(&format!("sqlite://{}", dir.path().join("c.db").display())).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn console_session_pages_and_refusals_on_postgres() {
    with_pg("console_session", |database| async move {
        signed_in_session(&database).await
    })
    .await;
}

// ── Scopes ──────────────────────────────────────────────────────────────────

async fn scopes(database: &str) {
    let secret = strong_secret();
    let server = serve(
        database,
        Some(&secret),
        &["--revocation-refresh-seconds", "1"],
    )
    .await;
    seed(server.url(), Some(&deployment(&secret)), 1).await;

    let repo_token = mint(
        &secret,
        json!({"resource": {"kind": "repo", "id": "acme/x"}, "session": "*"}),
    );
    let mut repo = Browser::new(&server);
    repo.sign_in(&repo_token).await;
    assert_eq!(
        repo.get(&format!("/console/repos/{}", enc("acme/x")))
            .await
            .status,
        200
    );
    let other = repo.get(&format!("/console/repos/{}", enc("acme/y"))).await;
    assert_eq!(other.status, 404);
    assert!(other.body.contains("data-error=\"404\""));
    assert_eq!(repo.get("/console/repos/nowhere").await.status, 404);
    assert_eq!(
        repo.get("/console/builds/b1").await.status,
        404,
        "as on /builds/b1"
    );
    assert_eq!(repo.get("/console/tickets/ENG").await.status, 404);
    assert_eq!(repo.get("/console/operator").await.status, 404);
    let overview = repo.get("/console/").await;
    assert!(!overview.body.contains("data-repo=\"acme/y\""));

    let build_token = mint(
        &secret,
        json!({"resource": {"kind": "build", "id": "b1"}, "session": "*"}),
    );
    let mut build = Browser::new(&server);
    build.sign_in(&build_token).await;
    assert_eq!(build.get("/console/builds/b1").await.status, 200);
    assert_eq!(build.get("/console/builds/b2").await.status, 404);
    assert_eq!(
        build.get("/console/tickets/ENG").await.status,
        404,
        "a build token has no board"
    );
    assert_eq!(
        build.get("/console/live/builds/b2?after=0").await.status,
        404
    );

    // A revoked token's session ends (here revoked on the operator page,
    // which puts it in force at once).
    let mut operator = Browser::new(&server);
    operator.sign_in(&deployment(&secret)).await;
    let csrf = operator.get("/console/operator").await.csrf();
    let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(
        build_token.as_bytes(),
    ));
    let origin = operator.origin();
    let revoked = operator
        .post(
            "/console/operator/revocations",
            &[("csrf", &csrf), ("digest", &digest), ("note", "left")],
            Some(&origin),
        )
        .await;
    assert_eq!(revoked.status, 303, "{}", revoked.body);
    assert!(
        operator
            .get("/console/operator")
            .await
            .body
            .contains(&digest)
    );
    let ended = build.get("/console/builds/b1").await;
    assert_eq!(ended.status, 303);
    assert_eq!(ended.header("location"), "/console/sign-in");
}

#[tokio::test(flavor = "multi_thread")]
async fn console_scopes_bound_every_page_on_a_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    scopes(&format!("sqlite://{}", dir.path().join("c.db").display())).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn console_scopes_bound_every_page_on_postgres() {
    with_pg("console_scopes", |database| async move {
        scopes(&database).await
    })
    .await;
}

// ── A person's operator scope ───────────────────────────────────────────────

#[tokio::test(flavor = "multi_thread")]
async fn console_operator_user_tokens_act_under_their_name() {
    let dir = tempfile::tempdir().unwrap();
    let secret_file = dir.path().join("secret");
    std::fs::write(&secret_file, strong_secret()).unwrap();
    std::fs::set_permissions(
        &secret_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let secret = std::fs::read_to_string(&secret_file).unwrap();
    let server = serve(
        &format!("sqlite://{}", dir.path().join("c.db").display()),
        Some(&secret),
        &[],
    )
    .await;
    let ticket = seed(server.url(), Some(&deployment(&secret)), 0).await;
    let person = crate::support::run_ok(&[
        "token",
        "mint",
        "--operator-user",
        "ada",
        "--secret-file",
        crate::support::path_text(&secret_file),
    ]);
    let person = person.trim();
    // Refused on the protocol routes, as Autobuild's operator scope is.
    let refused = Raw::new("GET", "/builds/b1", Some(person))
        .send(server.url())
        .await
        .unwrap();
    assert_eq!(refused.status, 403);
    let mut browser = Browser::new(&server);
    browser.sign_in(person).await;
    assert_eq!(browser.get("/console/operator").await.status, 404);
    let path = format!("/console/tickets/ENG/{}", enc(&ticket));
    let csrf = browser.get(&path).await.csrf();
    let origin = browser.origin();
    let edited = browser
        .post(
            &format!("{path}/edit"),
            &[
                ("csrf", &csrf),
                ("title", "Plain title"),
                ("body", "b"),
                ("labels", "x, y"),
            ],
            Some(&origin),
        )
        .await;
    assert_eq!(edited.status, 303, "{}", edited.body);
    let page = browser.get(&path).await;
    assert!(page.body.contains("operator:ada"), "{}", page.body);
}

// ── Rate limit, paging, open mode, --no-console ─────────────────────────────

#[tokio::test(flavor = "multi_thread")]
async fn console_sign_in_attempts_are_limited_per_address() {
    let secret = strong_secret();
    let server = Server::builder()
        .sqlite_file()
        .secret(&secret)
        .args(["--console-sign-in-attempts", "3"])
        .start()
        .await;
    let browser = Browser::new(&server);
    let origin = browser.origin();
    for _ in 0..3 {
        let page = browser
            .post("/console/sign-in", &[("token", "wrong")], Some(&origin))
            .await;
        assert_eq!(page.status, 401);
    }
    let limited = browser
        .post(
            "/console/sign-in",
            &[("token", &deployment(&secret))],
            Some(&origin),
        )
        .await;
    assert_eq!(limited.status, 429);
    assert!(!limited.header("retry-after").is_empty());
    limited.assert_secured("429");
}

#[tokio::test(flavor = "multi_thread")]
async fn console_build_pages_are_bounded_and_open_mode_needs_no_sign_in() {
    let server = Server::builder().sqlite_file().start().await;
    seed(server.url(), None, 120).await;
    let browser = Browser::new(&server);
    let first = browser.get("/console/builds/b1").await;
    assert_eq!(first.status, 200, "open mode: no sign-in");
    assert_eq!(first.body.matches("<tr data-seq=").count(), 50);
    assert!(first.body.contains("data-seq=\"50\"") && !first.body.contains("data-seq=\"51\""));
    assert!(first.body.contains("?after=50"));
    assert!(!first.body.contains("data-live="), "not the last page");
    let last = browser.get("/console/builds/b1?after=100").await;
    assert_eq!(last.body.matches("<tr data-seq=").count(), 20);
    assert!(last.body.contains("data-live=\"/console/live/builds/b1\""));
    // The live read answers at once when events past `after` exist.
    let live = browser.get("/console/live/builds/b1?after=118").await;
    assert_eq!(live.status, 200);
    let answer: Value = serde_json::from_str(&live.body).unwrap();
    assert_eq!(answer["last"], 120);
    assert_eq!(
        answer["html"]
            .as_str()
            .unwrap()
            .matches("data-seq=")
            .count(),
        2
    );
    live.assert_secured("live");
    // In open mode a POST still needs the page's CSRF token and Origin.
    let page = browser.get("/console/tickets/ENG/new").await;
    let csrf = page.csrf();
    let origin = browser.origin();
    let refused = browser
        .post("/console/tickets/ENG", &[("title", "t")], Some(&origin))
        .await;
    assert_eq!(refused.status, 403);
    let created = browser
        .post(
            "/console/tickets/ENG",
            &[("csrf", &csrf), ("title", "t"), ("body", "b")],
            Some(&origin),
        )
        .await;
    assert_eq!(created.status, 303, "{}", created.body);
    assert!(
        created
            .header("location")
            .starts_with("/console/tickets/ENG/")
    );
}

/// A board stays a page whatever its tickets say: 400 tickets whose titles
/// and labels are as long as the board draws them and made of characters
/// HTML escapes five-fold still give a page under 100 KB, and the columns
/// say how many cards they left out.
#[tokio::test(flavor = "multi_thread")]
async fn console_board_stays_under_100_kb_whatever_its_tickets_hold() {
    let server = Server::builder().sqlite_file().start().await;
    let title = "&".repeat(400);
    let labels: Vec<String> = (0..25).map(|i| format!("{i}{}", "&".repeat(80))).collect();
    for i in 0..400 {
        let state = ["Triage", "Ready", "Doing", "Done"][i % 4];
        protocol(
            server.url(),
            "POST",
            "/tickets/create",
            None,
            json!({"context": {"teamKey": "BIG"},
                   "input": {"draft": {"title": format!("{i}{title}"), "body": "b", "labels": labels},
                             "options": {"state": state}}}),
        )
        .await;
    }
    let board = Browser::new(&server).get("/console/tickets/BIG").await;
    assert_eq!(board.status, 200);
    assert!(board.body.len() <= 100 * 1024, "{} bytes", board.body.len());
    let cards = board.body.matches("<article class=\"card\"").count();
    assert!(cards >= 4, "{cards} cards drawn");
    assert!(board.body.contains("more not shown"));
}

#[tokio::test(flavor = "multi_thread")]
async fn console_off_is_an_unknown_route() {
    let server = Server::builder()
        .sqlite_file()
        .arg("--no-console")
        .start()
        .await;
    let browser = Browser::new(&server);
    for path in ["/console/", "/console/sign-in", "/console/builds/b1"] {
        assert_eq!(browser.get(path).await.status, 404, "{path}");
    }
    let (ok, routes, _) = crate::support::run(&["routes"]);
    assert!(ok);
    assert!(
        routes.contains("/console/"),
        "the table lists the console family"
    );
}
