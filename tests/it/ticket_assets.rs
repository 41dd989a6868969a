//! Ticket assets (protocol 3, issue 24 item 4) through the real binary:
//! every route on SQLite and PostgreSQL, every validation message, the
//! shape errors, the token matrix, the deployment ceiling (`--max-body-bytes`)
//! at its edge for requests and for each answer, and the unknown-route
//! answer a protocol-2 client gets.

use abstore_conformance::token;
use abstore_conformance::util::{b64, sha256_hex};
use serde_json::{Value, json};

use crate::support::{self, CLOCK, Server, ServerBuilder};

/// A protocol-3 client of one server, with an optional bearer token.
#[derive(Clone)]
struct P3 {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl P3 {
    fn new(base: &str) -> P3 {
        P3 {
            http: support::protocol3_client(),
            base: base.to_owned(),
            token: None,
        }
    }

    fn with_token(&self, token: Option<String>) -> P3 {
        P3 {
            token,
            ..self.clone()
        }
    }

    async fn send(&self, method: &str, path: &str, body: Option<Vec<u8>>) -> (u16, Value) {
        let method: reqwest::Method = method.parse().unwrap();
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        let value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert!(status < 500, "{path}: {status} {value}");
        (status, value)
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.send("GET", path, None).await
    }

    async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.send("POST", path, Some(body.to_string().into_bytes()))
            .await
    }

    /// A put expected to succeed; its meta.
    async fn put(&self, ticket: &str, body: &Value) -> Value {
        let (status, meta) = self.post(&format!("{ticket}/assets"), body).await;
        assert_eq!(status, 201, "{meta}");
        meta
    }
}

const T: &str = "/repos/acme%2Fwidgets/tickets/AUT-1";

fn put_body(kind: &str, name: &str, layout: &str, entries: Value) -> Value {
    json!({"kind": kind, "name": name, "layout": layout, "entries": entries})
}

fn file(path: &str, bytes: &[u8]) -> Value {
    json!({"type": "file", "path": path, "contentBase64": b64(bytes)})
}

fn dir(path: &str) -> Value {
    json!({"type": "dir", "path": path})
}

/// A server answering protocol-3 clients (ticket assets are theirs only)
/// on the test clock.
fn protocol3() -> ServerBuilder {
    Server::builder().accept_protocol3().test_clock()
}

/// Every route's answers, on whichever store `database` names.
async fn every_route(database: &str) {
    let server = protocol3().database(database).start().await;
    let c = P3::new(server.url());

    let (status, limits) = c.get("/repos/acme%2Fwidgets/ticket-asset-limits").await;
    assert_eq!(
        (status, limits),
        (
            200,
            json!({"maxBytes": 12_342_144, "maxEntries": 1000, "maxRequestBytes": 16_777_216})
        )
    );

    // No repository record is needed: acme/widgets was never ensured.
    let html = b"<h1>";
    let first = c
        .put(
            T,
            &put_body(
                "design",
                "home",
                "tree",
                json!([file("index.html", html), dir("img/empty")]),
            ),
        )
        .await;
    assert_eq!(
        first,
        json!({
            "repo": "acme/widgets", "ticketId": "AUT-1", "kind": "design", "name": "home",
            "revision": 0, "layout": "tree", "size": 4,
            "entries": [
                {"type": "file", "path": "index.html", "size": 4, "blobRef": sha256_hex(html)},
                {"type": "dir", "path": "img/empty"}
            ],
            "createdAt": CLOCK
        })
    );
    let second = c
        .put(
            T,
            &put_body("design", "home", "file", json!([file("home.png", b"png")])),
        )
        .await;
    assert_eq!(
        (second["revision"].clone(), second["layout"].clone()),
        (json!(1), json!("file"))
    );
    let empty = c
        .put(T, &put_body("notes", "empty", "tree", json!([])))
        .await;
    assert_eq!(
        (empty["size"].clone(), empty["entries"].clone()),
        (json!(0), json!([]))
    );

    // Manifest reads: latest, by revision (lenient), absent.
    let manifest = |q: &str| format!("{T}/assets?{q}");
    assert_eq!(
        c.get(&manifest("kind=design&name=home")).await,
        (200, second.clone())
    );
    assert_eq!(
        c.get(&manifest("kind=design&name=home&rev=0")).await,
        (200, first.clone())
    );
    assert_eq!(
        c.get(&manifest("kind=design&name=home&rev=")).await,
        (200, first.clone())
    );
    assert_eq!(
        c.get(&manifest("kind=design&name=home&rev=%201%20")).await,
        (200, second.clone())
    );
    for absent in [
        "kind=design&name=home&rev=2",
        "kind=design&name=home&rev=-1",
        "kind=design&name=home&rev=1e300",
        "kind=design&name=nope",
        "kind=nope&name=home",
        // Labels no put could store, and ids the store cannot hold.
        "kind=a%20b&name=home",
        "kind=..&name=home",
        &format!("kind={}&name=home", "k".repeat(65)),
    ] {
        assert_eq!(
            c.get(&manifest(absent)).await,
            (200, Value::Null),
            "{absent}"
        );
    }
    let nul = "/repos/acme%2Fwidgets/tickets/A%00B";
    assert_eq!(
        c.get(&format!("{nul}/assets?kind=design&name=home")).await,
        (200, Value::Null)
    );
    assert_eq!(c.get(&format!("{nul}/assets/list")).await, (200, json!([])));
    assert_eq!(
        c.get("/repos/acme%2Fwidgets/tickets/AUT-2/assets?kind=design&name=home")
            .await,
        (200, Value::Null)
    );
    for (bad, message) in [
        ("name=home", "query parameter \"kind\" is required"),
        ("kind=design&name=", "query parameter \"name\" is required"),
        (
            "kind=design&name=home&rev=x",
            "query parameter \"rev\" must be an integer, got \"x\"",
        ),
        (
            "kind=design&name=home&rev=1.5",
            "query parameter \"rev\" must be an integer, got \"1.5\"",
        ),
    ] {
        assert_eq!(
            c.get(&manifest(bad)).await,
            (400, json!({"kind": "validation", "error": message})),
            "{bad}"
        );
    }

    // One file: bytes, null when the asset or revision is absent, 404 when
    // the revision has no such file (a directory is no file).
    let one = |q: &str| format!("{T}/assets/file?{q}");
    assert_eq!(
        c.get(&one("kind=design&name=home&rev=0&path=index.html"))
            .await,
        (200, json!({"contentBase64": b64(html)}))
    );
    assert_eq!(
        c.get(&one("kind=design&name=home&path=home.png")).await,
        (200, json!({"contentBase64": b64(b"png")}))
    );
    for absent in [
        "kind=design&name=nope&path=index.html",
        "kind=design&name=home&rev=7&path=index.html",
    ] {
        assert_eq!(c.get(&one(absent)).await, (200, Value::Null), "{absent}");
    }
    for (missing, revision) in [
        ("kind=design&name=home&path=index.html", 1),
        ("kind=design&name=home&rev=0&path=img%2Fempty", 0),
        ("kind=design&name=home&rev=0&path=img", 0),
    ] {
        let path = missing.rsplit_once("path=").unwrap().1.replace("%2F", "/");
        assert_eq!(
            c.get(&one(missing)).await,
            (
                404,
                json!({"kind": "not-found", "error": format!("ticket asset design/home revision {revision} has no file \"{path}\"")})
            ),
            "{missing}"
        );
    }
    assert_eq!(
        c.get(&one("kind=design&name=home")).await,
        (
            400,
            json!({"kind": "validation", "error": "query parameter \"path\" is required"})
        )
    );

    // The list: latest live revision of each, or every revision.
    let summary = |meta: &Value, files: u64, dirs: u64| {
        let mut s = meta.clone();
        let s_obj = s.as_object_mut().unwrap();
        s_obj.remove("entries");
        s_obj.remove("createdAt");
        s_obj.insert("fileCount".into(), files.into());
        s_obj.insert("dirCount".into(), dirs.into());
        s_obj.insert("createdAt".into(), CLOCK.into());
        s
    };
    let list = format!("{T}/assets/list");
    assert_eq!(
        c.get(&list).await,
        (200, json!([summary(&second, 1, 0), summary(&empty, 0, 0)]))
    );
    assert_eq!(
        c.get(&format!("{list}?revisions=0")).await,
        c.get(&list).await
    );
    assert_eq!(
        c.get(&format!("{list}?revisions=1")).await,
        (
            200,
            json!([
                summary(&first, 1, 1),
                summary(&second, 1, 0),
                summary(&empty, 0, 0)
            ])
        )
    );

    // Removal: a tombstone; pinned revisions stay readable.
    let remove = format!("{T}/assets/remove");
    let design_home = json!({"kind": "design", "name": "home"});
    assert_eq!(c.post(&remove, &design_home).await, (200, second.clone()));
    assert_eq!(
        c.get(&manifest("kind=design&name=home")).await,
        (200, Value::Null)
    );
    assert_eq!(
        c.get(&manifest("kind=design&name=home&rev=2")).await,
        (200, Value::Null)
    );
    assert_eq!(
        c.get(&manifest("kind=design&name=home&rev=1")).await,
        (200, second.clone())
    );
    assert_eq!(
        c.get(&one("kind=design&name=home&path=home.png")).await,
        (200, Value::Null)
    );
    assert_eq!(
        c.get(&one("kind=design&name=home&rev=1&path=home.png"))
            .await
            .0,
        200
    );
    assert_eq!(c.get(&list).await, (200, json!([summary(&empty, 0, 0)])));
    assert_eq!(
        c.get(&format!("{list}?revisions=1"))
            .await
            .1
            .as_array()
            .unwrap()
            .len(),
        3,
        "the tombstone is never listed"
    );
    assert_eq!(c.post(&remove, &design_home).await, (200, Value::Null));
    assert_eq!(
        c.post(&remove, &json!({"kind": "a b", "name": "x"})).await,
        (200, Value::Null)
    );
    let again = c
        .put(T, &put_body("design", "home", "tree", json!([])))
        .await;
    assert_eq!(again["revision"], 3, "re-attaching skips the tombstone");
    for (bad, message) in [
        (
            json!({"name": "x"}),
            "invalid request body: \"kind\" is required",
        ),
        (
            json!({"kind": "", "name": "x"}),
            "invalid request body: \"kind\" must be a nonempty string",
        ),
        (
            json!({"kind": "k", "name": 1}),
            "invalid request body: \"name\" must be a string",
        ),
        (
            json!([]),
            "invalid request body: the request body must be an object",
        ),
    ] {
        assert_eq!(
            c.post(&remove, &bad).await,
            (400, json!({"kind": "validation", "error": message})),
            "{bad}"
        );
    }

    // A put to a ticket whose id the store could never hold.
    let (status, body) = c
        .post(
            &format!("{nul}/assets"),
            &put_body("d", "n", "tree", json!([])),
        )
        .await;
    assert_eq!(
        (status, body),
        (
            400,
            json!({"kind": "validation", "error": "path \"ticket id\" must not contain NUL"})
        )
    );
    let long = format!("/repos/{}/tickets/T/assets", "r".repeat(600));
    assert_eq!(
        c.post(&long, &put_body("d", "n", "tree", json!([])))
            .await
            .0,
        400
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn every_route_on_sqlite() {
    every_route("sqlite::memory:").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn every_route_on_postgres() {
    support::with_pg(
        "ticket_assets",
        |url| async move { every_route(&url).await },
    )
    .await;
}

/// Each check of the validation table with its exact message, in a
/// request that fails only that check; nothing is stored.
#[tokio::test(flavor = "multi_thread")]
async fn every_validation_row_answers_its_message() {
    let server = protocol3().flag("--max-body-bytes", "400000").start().await;
    let c = P3::new(server.url());
    let tree = |entries: Value| put_body("design", "home", "tree", entries);
    let many: Vec<Value> = (0..1001).map(|i| dir(&format!("d{i}"))).collect();
    let long_path = format!("{}/{}", "p".repeat(100), "q".repeat(157));
    let long_segment = format!("a/{}", "s".repeat(129));
    let rows: Vec<(Value, String)> = vec![
        (
            put_body("", "n", "tree", json!([])),
            "ticket asset kind is required".into(),
        ),
        (
            put_body("k", " \t", "tree", json!([])),
            "ticket asset name is required".into(),
        ),
        (
            put_body(&"k".repeat(65), "n", "tree", json!([])),
            "ticket asset kind must be at most 64 characters".into(),
        ),
        (
            put_body("k", &"é".repeat(65), "tree", json!([])),
            "ticket asset name must be at most 64 characters".into(),
        ),
        (
            put_body("a b", "n", "tree", json!([])),
            "ticket asset kind \"a b\" may contain only letters, digits, '.', '_' and '-'".into(),
        ),
        (
            put_body("k", "..", "tree", json!([])),
            "ticket asset name \"..\" may contain only letters, digits, '.', '_' and '-'".into(),
        ),
        (
            put_body("k", "n", "folder", json!([])),
            "ticket asset layout must be 'file' or 'tree'".into(),
        ),
        (
            put_body("k", "n", "file", json!([file("a", b"1"), dir("b")])),
            "a 'file' ticket asset has exactly one file entry and no directories".into(),
        ),
        (
            put_body("k", "n", "file", json!([file("a/b", b"1")])),
            "a 'file' ticket asset's path is its filename".into(),
        ),
        (
            tree(Value::Array(many)),
            "ticket asset exceeds the 1000-entry limit: 1001 entries (files plus directories)"
                .into(),
        ),
        (
            tree(json!([{"type": "link", "path": "a"}])),
            "ticket asset entry type must be 'file' or 'dir'".into(),
        ),
        (
            tree(json!([dir("")])),
            "ticket asset entry path is required".into(),
        ),
        (
            tree(json!([dir("a\u{0}b")])),
            "ticket asset entry path \"a\u{0}b\" contains a NUL byte".into(),
        ),
        (
            tree(json!([dir("a\\b")])),
            "ticket asset entry path \"a\\b\" must use '/' separators".into(),
        ),
        (
            tree(json!([dir(&long_path)])),
            format!(
                "ticket asset entry path exceeds 256 bytes: \"{}…\"",
                "p".repeat(40)
            ),
        ),
        (
            tree(json!([dir("/a")])),
            "ticket asset entry path \"/a\" must be relative".into(),
        ),
        (
            tree(json!([dir("a/../b")])),
            "ticket asset entry path \"a/../b\" has an empty, '.' or '..' segment".into(),
        ),
        (
            tree(json!([dir(&long_segment)])),
            format!(
                "ticket asset entry path segment exceeds 128 bytes in \"a/{}…\"",
                "s".repeat(38)
            ),
        ),
        (
            tree(json!([file("a", b"1"), dir("a")])),
            "duplicate ticket asset entry path \"a\"".into(),
        ),
        (
            tree(json!([dir("a/b"), file("a", b"1")])),
            "ticket asset entry \"a/b\" has a file as its ancestor directory \"a\"".into(),
        ),
        // 400000 bytes of ceiling leave 59232 bytes of files (not a multiple
        // of 1024: shown in bytes).
        (
            tree(json!([file("a", &[7; 59_000]), file("b", &[7; 233])])),
            "ticket asset exceeds the 59232-byte (59232 bytes) limit: 59233 bytes".into(),
        ),
    ];
    for (body, message) in rows {
        assert_eq!(
            c.post(&format!("{T}/assets"), &body).await,
            (422, json!({"kind": "validation", "error": message})),
            "{}",
            body.to_string().chars().take(200).collect::<String>()
        );
    }
    assert_eq!(
        c.get(&format!("{T}/assets/list?revisions=1")).await,
        (200, json!([]))
    );
    // At the limit it is stored.
    let at_limit = tree(json!([file("a", &[7; 59_000]), file("b", &[7; 232])]));
    assert_eq!(c.put(T, &at_limit).await["size"], 59_232);
}

/// Malformed bodies are `400` before any check of the table (even one
/// whose labels would fail it), and store nothing.
#[tokio::test(flavor = "multi_thread")]
async fn shape_errors_are_400_before_validation() {
    let server = protocol3().start().await;
    let c = P3::new(server.url());
    let invalid = |message: &str| json!({"kind": "validation", "error": message});
    let cases: Vec<(Vec<u8>, Value)> = vec![
        (
            b"not json".to_vec(),
            invalid("request body is not valid JSON"),
        ),
        (
            b"[1]".to_vec(),
            invalid("invalid request body: the request body must be an object"),
        ),
        (
            json!({"name": "n", "layout": "tree", "entries": []})
                .to_string()
                .into_bytes(),
            invalid("invalid request body: \"kind\" of the request body is required"),
        ),
        (
            json!({"kind": 1, "name": "n", "layout": "tree", "entries": []})
                .to_string()
                .into_bytes(),
            invalid("invalid request body: \"kind\" of the request body must be a string"),
        ),
        (
            json!({"kind": "", "name": "n", "layout": null, "entries": []})
                .to_string()
                .into_bytes(),
            invalid("invalid request body: \"layout\" of the request body must be a string"),
        ),
        (
            json!({"kind": "k", "name": "n", "layout": "tree"})
                .to_string()
                .into_bytes(),
            invalid("invalid request body: \"entries\" is required"),
        ),
        (
            json!({"kind": "k", "name": "n", "layout": "tree", "entries": {}})
                .to_string()
                .into_bytes(),
            invalid("invalid request body: \"entries\" must be an array"),
        ),
        (
            put_body("", "n", "tree", json!([1]))
                .to_string()
                .into_bytes(),
            invalid("invalid request body: entry 0 must be an object"),
        ),
        (
            put_body(
                "k",
                "n",
                "tree",
                json!([dir("a"), {"type": 1, "path": "b"}]),
            )
            .to_string()
            .into_bytes(),
            invalid("invalid request body: \"type\" of entry 1 must be a string"),
        ),
        (
            put_body("k", "n", "tree", json!([{"type": "dir"}]))
                .to_string()
                .into_bytes(),
            invalid("invalid request body: \"path\" of entry 0 is required"),
        ),
        (
            put_body("k", "n", "tree", json!([{"type": "file", "path": "a"}]))
                .to_string()
                .into_bytes(),
            invalid("invalid request body: \"contentBase64\" of entry 0 is required"),
        ),
    ];
    for (body, answer) in cases {
        let what = String::from_utf8_lossy(&body).into_owned();
        assert_eq!(
            c.send("POST", &format!("{T}/assets"), Some(body)).await,
            (400, answer),
            "{what}"
        );
    }
    for text in ["YQ", "YQ=", "YR==", "Y Q==", "aGk=\n", "-_8="] {
        let body = put_body(
            "",
            "n",
            "tree",
            json!([{"type": "file", "path": "a", "contentBase64": text}]),
        );
        assert_eq!(
            c.post(&format!("{T}/assets"), &body).await,
            (
                400,
                invalid(
                    "invalid request body: \"contentBase64\" of entry 0 is not strict padded standard base64"
                )
            ),
            "{text:?}"
        );
    }
    // A directory's or an unknown type's extra members are not read.
    let lenient = put_body(
        "k",
        "n",
        "tree",
        json!([{"type": "dir", "path": "d", "contentBase64": "!"}]),
    );
    assert_eq!(c.post(&format!("{T}/assets"), &lenient).await.0, 201);
    assert_eq!(
        c.get(&format!("{T}/assets/list?revisions=1"))
            .await
            .1
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

/// The six routes by token: admin, deployment and the repository's own
/// token pass; another repository's, a build's and a session's are `403`;
/// none is `401`.
#[tokio::test(flavor = "multi_thread")]
async fn the_token_matrix_is_the_repository_column() {
    let secret: String = (0..4)
        .map(|_| abstore_conformance::util::random_hex())
        .collect();
    let server = protocol3().secret(&secret).start().await;
    // A day past the test clock: within the server's bound on how far an
    // `exp` may lie beyond its now (`--max-token-lifetime`, 90 days).
    let exp = abstore_conformance::util::parse_iso_ms(CLOCK).unwrap() + 86_400_000;
    let mint = |scope: Value| Some(token::mint(&secret, &scope));
    let c = P3::new(server.url());
    let admin = c.with_token(mint(token::admin_scope(exp)));
    admin
        .put(
            T,
            &put_body("design", "home", "tree", json!([file("a", b"1")])),
        )
        .await;
    let routes: Vec<(&str, String, Option<Value>)> = vec![
        (
            "GET",
            "/repos/acme%2Fwidgets/ticket-asset-limits".into(),
            None,
        ),
        (
            "POST",
            format!("{T}/assets"),
            Some(put_body("design", "home", "tree", json!([]))),
        ),
        (
            "GET",
            format!("{T}/assets?kind=design&name=home&rev=0"),
            None,
        ),
        (
            "GET",
            format!("{T}/assets/file?kind=design&name=home&rev=0&path=a"),
            None,
        ),
        ("GET", format!("{T}/assets/list"), None),
        (
            "POST",
            format!("{T}/assets/remove"),
            Some(json!({"kind": "x", "name": "y"})),
        ),
    ];
    let allowed = [
        ("admin", admin.clone()),
        (
            "deployment",
            c.with_token(mint(token::deployment_scope(exp))),
        ),
        (
            "the repository's token",
            c.with_token(mint(token::resource_scope(
                "repo",
                "acme/widgets",
                "*",
                exp,
            ))),
        ),
    ];
    let refused = [
        (
            "another repository's token",
            c.with_token(mint(token::resource_scope("repo", "acme/other", "*", exp))),
        ),
        (
            "a build token",
            c.with_token(mint(token::resource_scope("build", "b", "*", exp))),
        ),
        (
            "a session token",
            c.with_token(mint(token::resource_scope("session", "os_1", "*", exp))),
        ),
        (
            "an operator token",
            c.with_token(mint(json!({"operator": {"user": "alice"}, "exp": exp}))),
        ),
    ];
    for (method, path, body) in &routes {
        let body = body.as_ref().map(|b| b.to_string().into_bytes());
        for (who, client) in &allowed {
            let (status, answer) = client.send(method, path, body.clone()).await;
            assert!(
                matches!(status, 200 | 201),
                "{who} on {method} {path}: {status} {answer}"
            );
        }
        for (who, client) in &refused {
            let (status, answer) = client.send(method, path, body.clone()).await;
            assert_eq!(
                (status, &answer["kind"]),
                (403, &json!("auth")),
                "{who} on {method} {path}: {answer}"
            );
        }
        let (status, answer) = c.send(method, path, body.clone()).await;
        assert_eq!(
            (status, &answer["kind"]),
            (401, &json!("auth")),
            "no token on {method} {path}"
        );
    }
}

/// `body` with a `pad` member making its JSON exactly `total` bytes.
fn padded(body: &Value, total: usize) -> Vec<u8> {
    let mut body = body.clone();
    body["pad"] = json!("");
    let bare = body.to_string().len();
    assert!(bare <= total, "the body is {bare} bytes before padding");
    body["pad"] = json!("x".repeat(total - bare));
    let text = body.to_string().into_bytes();
    assert_eq!(text.len(), total);
    text
}

/// 1000 empty files with 201-byte paths: a request of about 246 KB whose
/// answer (each file with its size and address) is about 313 KB.
fn wide() -> Value {
    let entries: Vec<Value> = (0..1000)
        .map(|i| file(&format!("{i:0>120}/{}", "q".repeat(80)), b""))
        .collect();
    put_body("design", "wide", "tree", Value::Array(entries))
}

/// The deployment ceiling at its edge: `--max-body-bytes` bounds every
/// ticket-asset request (exactly the ceiling passes), lowers `maxBytes`, and
/// every answer is measured against it: a put or a removal whose answer
/// would not fit writes nothing; a manifest, file or list that no longer
/// fits (stored under a higher ceiling) is `413` while what fits stays
/// readable.
#[tokio::test(flavor = "multi_thread")]
async fn the_ceiling_bounds_requests_and_answers() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("assets.db").display());
    let blobs = dir.path().join("blobs").display().to_string();
    let too_large = |message: String| (413, json!({"kind": "validation", "error": message}));
    let assets = format!("{T}/assets");
    let remove = format!("{T}/assets/remove");

    // 400000 bytes: requests at the edge.
    let mut server = protocol3()
        .database(&database)
        .blobs(&blobs)
        .flag("--max-body-bytes", "400000")
        .start()
        .await;
    let c = P3::new(server.url());
    assert_eq!(
        c.get("/repos/r/ticket-asset-limits").await,
        (
            200,
            json!({"maxBytes": 59_232, "maxEntries": 1000, "maxRequestBytes": 400_000})
        )
    );
    let edge = put_body("design", "edge", "tree", json!([]));
    assert_eq!(
        c.send("POST", &assets, Some(padded(&edge, 400_000)))
            .await
            .0,
        201
    );
    let over = "ticket asset request body exceeds the deployment request ceiling 400000 bytes";
    assert_eq!(
        c.send("POST", &assets, Some(padded(&edge, 400_001))).await,
        too_large(over.into())
    );
    let gone = json!({"kind": "design", "name": "never"});
    assert_eq!(
        c.send("POST", &remove, Some(padded(&gone, 400_000))).await,
        (200, Value::Null)
    );
    assert_eq!(
        c.send("POST", &remove, Some(padded(&gone, 400_001))).await,
        too_large(over.into())
    );
    // 59227 + 5: exactly the 59232 bytes a revision may hold here.
    let big = vec![9u8; 59_227];
    c.put(
        T,
        &put_body(
            "design",
            "files",
            "tree",
            json!([file("big.bin", &big), file("small.txt", b"small")]),
        ),
    )
    .await;
    for i in 0..5 {
        c.put(
            T,
            &put_body("design", &format!("filler-{i}"), "tree", json!([])),
        )
        .await;
    }
    let wide_meta = c.put(T, &wide()).await;
    let wide_len = wide_meta.to_string().len();
    assert!(wide_len > 300_000, "{wide_len}");
    server.stop().await.unwrap();

    // 300000 bytes: the wide manifest no longer fits; its request does.
    let mut server = protocol3()
        .database(&database)
        .blobs(&blobs)
        .flag("--max-body-bytes", "300000")
        .start()
        .await;
    let c = P3::new(server.url());
    assert!(wide().to_string().len() < 300_000);
    let manifest_over = |n: usize| {
        format!(
            "ticket asset design/wide manifest is {n} bytes, over the 300000-byte response ceiling"
        )
    };
    assert_eq!(
        c.get(&format!("{assets}?kind=design&name=wide")).await,
        too_large(manifest_over(wide_len))
    );
    // A removal whose answer would not fit writes no tombstone …
    assert_eq!(
        c.post(&remove, &json!({"kind": "design", "name": "wide"}))
            .await,
        too_large(manifest_over(wide_len))
    );
    // … and a put whose answer would not fit stores nothing (its answer is
    // the same manifest but for the revision: one digit, same length).
    assert_eq!(
        c.post(&assets, &wide()).await,
        too_large(manifest_over(wide_len))
    );
    let (_, listed) = c.get(&format!("{assets}/list?revisions=1")).await;
    let wide_revisions: Vec<&Value> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["name"] == "wide")
        .map(|s| &s["revision"])
        .collect();
    assert_eq!(wide_revisions, [&json!(0)], "{listed}");
    let next = c
        .put(T, &put_body("design", "wide", "tree", json!([])))
        .await;
    assert_eq!(next["revision"], 1, "no revision was consumed");
    server.stop().await.unwrap();

    // 50000 bytes: the large file no longer fits, the small one does.
    let mut server = protocol3()
        .database(&database)
        .blobs(&blobs)
        .flag("--max-body-bytes", "50000")
        .start()
        .await;
    let c = P3::new(server.url());
    assert_eq!(
        c.get(&format!(
            "{assets}/file?kind=design&name=files&path=big.bin"
        ))
        .await,
        too_large(
            "ticket asset file \"big.bin\" (59227 bytes) exceeds the 50000-byte response ceiling; \
             fetch it from a store with a higher ceiling"
                .into()
        )
    );
    assert_eq!(
        c.get(&format!(
            "{assets}/file?kind=design&name=files&path=small.txt"
        ))
        .await,
        (200, json!({"contentBase64": b64(b"small")}))
    );
    assert_eq!(
        c.get(&format!("{assets}?kind=design&name=files")).await.0,
        200
    );
    server.stop().await.unwrap();

    // 1000 bytes: nothing fits in a revision, and the list no longer fits.
    let server = protocol3()
        .database(&database)
        .blobs(&blobs)
        .flag("--max-body-bytes", "1000")
        .start()
        .await;
    let c = P3::new(server.url());
    assert_eq!(
        c.get("/repos/r/ticket-asset-limits").await.1,
        json!({"maxBytes": 0, "maxEntries": 1000, "maxRequestBytes": 1000})
    );
    let (status, answer) = c.get(&format!("{assets}/list")).await;
    assert_eq!(status, 413, "{answer}");
    let message = answer["error"].as_str().unwrap();
    assert!(
        message.starts_with("ticket asset list of ticket \"AUT-1\" is ")
            && message.ends_with(" bytes, over the 1000-byte response ceiling"),
        "{message}"
    );
    assert_eq!(
        c.post(
            &assets,
            &put_body("design", "one", "file", json!([file("a", b"1")]))
        )
        .await,
        (
            422,
            json!({"kind": "validation", "error": "ticket asset exceeds the 0-byte (0 bytes) limit: 1 bytes"})
        )
    );
}

/// A protocol-2 client reaching any ticket-asset route gets exactly the
/// unknown-route answer; a protocol-3 client of the same server is served.
#[tokio::test(flavor = "multi_thread")]
async fn protocol_2_clients_do_not_reach_ticket_assets() {
    let server = protocol3().start().await;
    let old = support::client();
    for (method, path) in [
        (
            "GET",
            "/repos/acme%2Fwidgets/ticket-asset-limits".to_owned(),
        ),
        ("POST", format!("{T}/assets")),
        ("GET", format!("{T}/assets?kind=design&name=home")),
        (
            "GET",
            format!("{T}/assets/file?kind=design&name=home&path=a"),
        ),
        ("GET", format!("{T}/assets/list")),
        ("POST", format!("{T}/assets/remove")),
    ] {
        let mut request = old.request(method.parse().unwrap(), format!("{}{path}", server.url()));
        if method == "POST" {
            request = request
                .json(&json!({"kind": "design", "name": "home", "layout": "tree", "entries": []}));
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let answer: Value = response.json().await.unwrap();
        let bare = path.split('?').next().unwrap();
        assert_eq!(
            (status, answer),
            (
                404,
                json!({"kind": "not-found", "error": format!("no route: {method} {bare}")})
            ),
            "{method} {path}"
        );
        let (status, answer) = P3::new(server.url())
            .send(
                method,
                &path,
                (method == "POST").then(|| {
                    json!({"kind": "design", "name": "home", "layout": "tree", "entries": []})
                        .to_string()
                        .into_bytes()
                }),
            )
            .await;
        // The file route may find no file `a`: a 404 of its own, not "no route".
        let reached = matches!(status, 200 | 201)
            || answer["error"]
                .as_str()
                .is_some_and(|e| e.starts_with("ticket asset design/home"));
        assert!(reached, "{method} {path}: {status} {answer}");
    }
}

/// A ticket's list of every revision, longer than several 64 KiB pieces of
/// rows, is answered whole at a ceiling of exactly its length and refused
/// one byte below it, the `413` naming its exact length: the rows past the
/// ceiling are counted, not kept, so the list's memory is the ceiling's.
#[tokio::test(flavor = "multi_thread")]
async fn a_long_list_is_held_to_the_ceiling_by_its_exact_length() {
    let dir_ = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir_.path().join("list.db").display());
    let mut server = protocol3().database(&database).start().await;
    let c = P3::new(server.url());
    for n in 0..1200 {
        let name = format!("n{}", n % 3);
        c.put(T, &put_body("design", &name, "tree", json!([dir("d")])))
            .await;
    }
    let http = support::protocol3_client();
    let list = |base: &str| format!("{base}{T}/assets/list?revisions=1");
    let whole = http.get(list(server.url())).send().await.unwrap();
    assert_eq!(whole.status(), 200);
    let whole = whole.text().await.unwrap();
    let rows: Vec<Value> = serde_json::from_str(&whole).unwrap();
    assert_eq!(rows.len(), 1200);
    let len = whole.len();
    assert!(len > 3 * 64 * 1024, "{len}");
    server.stop().await.unwrap();

    let at = len.to_string();
    let mut server = protocol3()
        .database(&database)
        .flag("--max-body-bytes", &at)
        .start()
        .await;
    let answer = http.get(list(server.url())).send().await.unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.text().await.unwrap(), whole);
    server.stop().await.unwrap();

    let below = (len - 1).to_string();
    let server = protocol3()
        .database(&database)
        .flag("--max-body-bytes", &below)
        .start()
        .await;
    let c = P3::new(server.url());
    let (status, answer) = c.get(&format!("{T}/assets/list?revisions=1")).await;
    assert_eq!(status, 413, "{answer}");
    assert_eq!(
        answer,
        json!({
            "error": format!(
                "ticket asset list of ticket \"AUT-1\" is {len} bytes, over the {below}-byte response ceiling"
            ),
            "kind": "validation"
        })
    );
}

/// The server's peak resident set size in KiB (Linux `/proc`).
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// A ticket of 150,000 revisions lists as about 27 MB: under a 1 MiB
/// ceiling the answer is the `413` with the list's exact length, and the
/// server's peak memory grows by about the ceiling, not by the list (built
/// whole, the list took three copies of itself).
#[tokio::test(flavor = "multi_thread")]
async fn a_huge_list_takes_memory_bounded_by_the_ceiling() {
    const REVISIONS: i64 = 150_000;
    let dir_ = tempfile::tempdir().unwrap();
    let path = dir_.path().join("huge.db");
    let database = format!("sqlite://{}", path.display());
    support::run_ok(&["migrate", "--database", &database]);
    let mut conn = rusqlite::Connection::open(&path).unwrap();
    let tx = conn.transaction().unwrap();
    {
        let mut insert = tx
            .prepare(
                "INSERT INTO ticket_assets (repo, ticket_id, asset_kind, name, revision, layout, \
                 size, file_count, dir_count, entries, created_at) VALUES ('acme/widgets', \
                 'AUT-1', 'design', 'home', ?1, 'tree', 0, 0, 1, '[{\"type\":\"dir\",\"path\":\"d\"}]', \
                 1784116800000)",
            )
            .unwrap();
        for revision in 0..REVISIONS {
            insert.execute([revision]).unwrap();
        }
    }
    tx.execute(
        "INSERT INTO ticket_asset_heads VALUES ('acme/widgets', 'AUT-1', 'design', 'home', ?1, 1784116800000)",
        [REVISIONS],
    )
    .unwrap();
    tx.commit().unwrap();
    drop(conn);
    let len: usize = 2 + (0..REVISIONS)
        .map(|revision| {
            format!(
                r#"{{"repo":"acme/widgets","ticketId":"AUT-1","kind":"design","name":"home","revision":{revision},"layout":"tree","size":0,"fileCount":0,"dirCount":1,"createdAt":"{CLOCK}"}}"#
            )
            .len()
                + 1
        })
        .sum::<usize>()
        - 1;
    assert!(len > 25_000_000, "{len}");

    let server = protocol3()
        .database(&database)
        .flag("--max-body-bytes", "1048576")
        .start()
        .await;
    let pid = server.pid().unwrap();
    let c = P3::new(server.url());
    // Warm up every path the big read takes, on a short list.
    let (status, _) = c
        .get("/repos/acme%2Fwidgets/tickets/AUT-2/assets/list")
        .await;
    assert_eq!(status, 200);
    let before = peak_rss_kib(pid);
    let (status, answer) = c.get(&format!("{T}/assets/list?revisions=1")).await;
    assert_eq!(status, 413, "{answer}");
    assert_eq!(
        answer["error"],
        format!(
            "ticket asset list of ticket \"AUT-1\" is {len} bytes, over the 1048576-byte response ceiling"
        )
    );
    let grown = peak_rss_kib(pid).saturating_sub(before);
    assert!(
        grown < 16 * 1024,
        "the peak grew by {grown} KiB for a {len}-byte list"
    );
}
