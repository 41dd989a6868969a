//! Several client versions, one store (issue 24): `--accept-client
//! VERSION/PROTOCOL` (and `ABSTORE_ACCEPT_CLIENTS`) through the binary. Each
//! accepted identity is answered with its own catalogs and protocol, others
//! get the `409` naming the accepted set, and bad settings stop the start
//! with one clear line.

use serde_json::{Value, json};

use crate::support::Server;

/// A client sending one identity.
struct As {
    http: reqwest::Client,
    base: String,
    version: &'static str,
    protocol: &'static str,
}

impl As {
    fn new(base: &str, version: &'static str, protocol: &'static str) -> As {
        As {
            http: reqwest::Client::new(),
            base: base.to_owned(),
            version,
            protocol,
        }
    }

    async fn send(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("x-autobuild-version", self.version)
            .header("x-autobuild-protocol-version", self.protocol);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        let value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        (status, value)
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::POST, path, Some(body)).await
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.send(reqwest::Method::GET, path, None).await
    }
}

/// A write Autobuild 0.9.0's build catalog has and 0.8.0's does not
/// (`fixtures/catalog/0.9.0/build/workspace.provision-started/`).
fn provision_started() -> Value {
    json!({
        "actor": {"kind": "dispatcher"},
        "type": "workspace.provision-started",
        "payload": {"provider": "vercel-sandbox", "branch": "ab/fix-login", "generation": 0}
    })
}

#[tokio::test]
async fn one_store_answers_each_accepted_client_by_its_own_catalogs() {
    let server = Server::builder().accept_protocol3().start().await;
    let old = As::new(server.url(), "0.8.0", "2");
    let new = As::new(server.url(), "0.9.0", "3");

    // `/health` reports the first identity, in exactly the spec's form.
    let health = reqwest::get(format!("{}/health", server.url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        health,
        r#"{"ok":true,"autobuildVersion":"0.8.0","protocolVersion":"2"}"#
    );

    // Both identities reach the same store.
    let (status, _) = old
        .post("/builds", json!({"slug": "shared", "repo": "acme/w"}))
        .await;
    assert_eq!(status, 201);
    let (status, builds) = new.get("/builds").await;
    assert_eq!(status, 200);
    assert_eq!(builds[0]["slug"], "shared");

    // Anyone else: 409 naming what is accepted.
    for (version, protocol) in [("0.7.0", "2"), ("0.8.0", "3"), ("0.9.0", "2")] {
        let (status, body) = As::new(server.url(), version, protocol)
            .get("/builds")
            .await;
        assert_eq!(status, 409, "{version}/{protocol}: {body}");
        assert_eq!(body["kind"], "conflict");
        assert_eq!(
            body["error"],
            format!(
                "autobuild version mismatch: client package \"{version}\" protocol \"{protocol}\", \
                 server accepts package \"0.8.0\" protocol \"2\" or package \"0.9.0\" protocol \"3\""
            )
        );
    }

    // Catalogs by client: a 0.9.0-only type is 422 for 0.8.0 and 201 for
    // 0.9.0, on every event-bearing route.
    let (status, body) = old.post("/builds/shared/events", provision_started()).await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .starts_with("unknown event type \"workspace.provision-started\""),
        "{body}"
    );
    let (status, body) = new.post("/builds/shared/events", provision_started()).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["seq"], 1);
    let conditional = json!({"expectedSeq": 1, "event": provision_started()});
    let (status, _) = old
        .post("/builds/shared/events/conditional", conditional.clone())
        .await;
    assert_eq!(status, 422);
    let (status, _) = new
        .post("/builds/shared/events/conditional", conditional)
        .await;
    assert_eq!(status, 201);
    let deposit = json!({"artifacts": [{"kind": "plan", "contentBase64": "aGk="}], "event": provision_started()});
    let (status, _) = old.post("/builds/shared/deposits", deposit.clone()).await;
    assert_eq!(status, 422);
    let (status, body) = new.post("/builds/shared/deposits", deposit).await;
    assert_eq!(status, 201, "{body}");

    // Sessions: both clients share Autobuild's public session catalog, so
    // `session.created` is `{title?}` and `message.posted` is `{text}` for
    // either (docs/decisions.md, 22).
    let (status, _) = new.post("/repos", json!({"repo": "acme/w"})).await;
    assert_eq!(status, 200);
    for client in [&old, &new] {
        let (status, session) = client
            .post(
                "/repos/acme%2Fw/sessions",
                json!({"repo": "acme/w", "operator": "alice", "title": "t"}),
            )
            .await;
        assert_eq!(status, 201, "{session}");
        let id = session["id"].as_str().unwrap().to_owned();
        let (_, events) = client.get(&format!("/sessions/{id}/events")).await;
        assert_eq!(
            events[0]["payload"],
            json!({"title": "t"}),
            "{}",
            client.version
        );
        let message = json!({"actor": {"kind": "human", "user": "alice"}, "type": "message.posted", "payload": {"text": "hi"}});
        let (status, body) = client
            .post(&format!("/sessions/{id}/events"), message)
            .await;
        assert_eq!(status, 201, "{}: {body}", client.version);
    }
}

/// A client built from Autobuild's main branch before the 0.9.0 release
/// sends `0.8.0` with protocol `3`. Accepted beside the released `0.8.0/2`,
/// one server answers each by its own protocol and catalogs: the pair, not
/// the version, is the identity.
#[tokio::test]
async fn one_version_with_two_protocols_is_served_side_by_side() {
    let args = [
        "--accept-client",
        "0.8.0/2",
        "--accept-client",
        "0.8.0/3",
        "--accept-client",
        "0.9.0/3",
    ];
    let server = Server::builder().args(args).start().await;
    let released = As::new(server.url(), "0.8.0", "2");
    let main = As::new(server.url(), "0.8.0", "3");

    // The digest route is protocol 3's: an unknown route to /2, served to /3.
    let (status, _) = released.post("/repos", json!({"repo": "acme/w"})).await;
    assert_eq!(status, 200);
    let (status, _) = released
        .post("/builds", json!({"slug": "side", "repo": "acme/w"}))
        .await;
    assert_eq!(status, 201);
    let (status, answer) = released.get("/repos/acme%2Fw/build-digests").await;
    assert_eq!(status, 404, "{answer}");
    assert_eq!(
        answer,
        json!({"kind": "not-found", "error": "no route: GET /repos/acme%2Fw/build-digests"})
    );
    let (status, digests) = main.get("/repos/acme%2Fw/build-digests").await;
    assert_eq!(status, 200, "{digests}");
    assert_eq!(
        digests,
        json!([{"slug": "side", "observations": []}]),
        "the build the /2 client created, in protocol 3's digest shape"
    );

    // A 0.9.0-only event type: the /3 client is validated against the 0.9.0
    // catalogs, the /2 client against 0.8.0's.
    let (status, body) = released
        .post("/builds/side/events", provision_started())
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .starts_with("unknown event type \"workspace.provision-started\""),
        "{body}"
    );
    let (status, body) = main.post("/builds/side/events", provision_started()).await;
    assert_eq!(status, 201, "{body}");

    // Both read the same log.
    let (status, events) = released.get("/builds/side/events").await;
    assert_eq!(status, 200);
    assert_eq!(events[0]["type"], "workspace.provision-started");

    // The pair is the identity: 0.9.0 with protocol 2 is still refused.
    let (status, body) = As::new(server.url(), "0.9.0", "2").get("/builds").await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        body["error"],
        "autobuild version mismatch: client package \"0.9.0\" protocol \"2\", server accepts \
         package \"0.8.0\" protocol \"2\" or package \"0.8.0\" protocol \"3\" or package \"0.9.0\" protocol \"3\""
    );
}

/// A protocol-2 client reaching a protocol-3 route gets exactly the answer
/// an unknown route gives it (authorized as an unknown route, then `404`).
#[tokio::test]
async fn protocol_3_routes_are_unknown_routes_to_protocol_2_clients() {
    let server = Server::builder().accept_protocol3().start().await;
    let old = As::new(server.url(), "0.8.0", "2");
    let (status, _) = old.post("/repos", json!({"repo": "acme/w"})).await;
    assert_eq!(status, 200);
    let (status, session) = old
        .post(
            "/repos/acme%2Fw/sessions",
            json!({"repo": "acme/w", "operator": "alice"}),
        )
        .await;
    assert_eq!(status, 201);
    let id = session["id"].as_str().unwrap();
    for (method, path) in [
        ("GET", "/repos/acme%2Fw/build-digests".to_owned()),
        ("GET", "/repos/acme%2Fw/state-events".to_owned()),
        ("POST", format!("/sessions/{id}/events/conditional")),
        ("GET", "/repos/acme%2Fw/ticket-asset-limits".to_owned()),
        ("POST", "/repos/acme%2Fw/tickets/AUT-1/assets".to_owned()),
        ("GET", "/repos/acme%2Fw/tickets/AUT-1/assets".to_owned()),
        (
            "GET",
            "/repos/acme%2Fw/tickets/AUT-1/assets/file".to_owned(),
        ),
        (
            "GET",
            "/repos/acme%2Fw/tickets/AUT-1/assets/list".to_owned(),
        ),
        (
            "POST",
            "/repos/acme%2Fw/tickets/AUT-1/assets/remove".to_owned(),
        ),
    ] {
        let method: reqwest::Method = method.parse().unwrap();
        let body = (method == reqwest::Method::POST).then(|| json!({}));
        let (status, answer) = old.send(method.clone(), &path, body).await;
        assert_eq!(status, 404, "{method} {path}: {answer}");
        assert_eq!(
            answer,
            json!({"kind": "not-found", "error": format!("no route: {method} {path}")}),
            "{method} {path}"
        );
    }
    // The same routes answer a protocol-3 client.
    let new = As::new(server.url(), "0.9.0", "3");
    let (status, digests) = new.get("/repos/acme%2Fw/build-digests").await;
    assert_eq!((status, digests), (200, json!([])));
    let (status, events) = new.get("/repos/acme%2Fw/state-events").await;
    assert_eq!((status, events), (200, json!([])));
    let (status, assets) = new.get("/repos/acme%2Fw/tickets/AUT-1/assets/list").await;
    assert_eq!((status, assets), (200, json!([])));
}

#[tokio::test]
async fn the_variable_takes_a_comma_separated_list() {
    let server = Server::builder()
        .env("ABSTORE_ACCEPT_CLIENTS", "0.9.0/3,0.8.0/2")
        .start()
        .await;
    let base = server.url();
    let health: Value = reqwest::get(format!("{base}/health"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        health,
        json!({"ok": true, "autobuildVersion": "0.9.0", "protocolVersion": "3"})
    );
    for (version, protocol) in [("0.8.0", "2"), ("0.9.0", "3")] {
        let (status, _) = As::new(base, version, protocol).get("/builds").await;
        assert_eq!(status, 200, "{version}/{protocol}");
    }
}

#[test]
fn unusable_identities_stop_the_start_with_the_reason() {
    // A flat catalog directory: one set, no versions.json.
    let flat = tempfile::tempdir().unwrap();
    for document in ["build.json", "repository.json", "session.json"] {
        let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("catalog/catalogs");
        std::fs::copy(shipped.join(document), flat.path().join(document)).unwrap();
    }
    let flat = flat.path().to_str().unwrap().to_owned();
    let refused = |extra: &[&str], env: &[(&str, &str)]| {
        let server = env
            .iter()
            .fold(Server::builder().args(extra), |server, (name, value)| {
                server.env(name, value)
            });
        let (ok, _, stderr) = server.run();
        assert!(!ok, "{extra:?} {env:?} started");
        stderr
    };
    /// Extra flags, variables, and what stderr must say.
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: &[Case<'_>] = &[
        (
            &["--accept-client", "0.8.0"],
            &[],
            "expected VERSION/PROTOCOL, e.g. 0.8.0/2",
        ),
        (
            &["--accept-client", "0.8.0/4"],
            &[],
            "unknown protocol \"4\" (this server answers protocols 2 and 3)",
        ),
        (
            &["--accept-client", "0.7.0/2"],
            &[],
            "--accept-client 0.7.0/2: no catalogs for Autobuild 0.7.0 in the embedded catalogs (catalog/catalogs/versions.json) (known: 0.8.0/2, 0.8.0/3, 0.9.0/3)",
        ),
        (
            &["--accept-client", "0.9.0/2"],
            &[],
            "names Autobuild 0.9.0 only as 0.9.0/3",
        ),
        (
            &[],
            &[("ABSTORE_ACCEPT_CLIENTS", "0.8.0/2,0.8.0/2")],
            "--accept-client 0.8.0/2 is given twice",
        ),
        (
            &["--autobuild-version", "0.8.0"],
            &[("ABSTORE_ACCEPT_CLIENTS", "0.9.0/3")],
            "--autobuild-version 0.8.0 and --accept-client cannot be combined",
        ),
        (
            &["--catalog", &flat],
            &[("ABSTORE_ACCEPT_CLIENTS", "0.8.0/2,0.9.0/3")],
            "holds one catalog set (no versions.json), but 2 client identities are accepted",
        ),
    ];
    for (extra, env, expected) in cases {
        let stderr = refused(extra, env);
        assert!(stderr.contains(expected), "{extra:?} {env:?}: {stderr}");
    }
}

/// `--autobuild-version` keeps its meaning (any version, protocol 2, the
/// default catalogs), and a `--catalog` directory laid out like
/// `catalog/catalogs/` serves every identity it names.
#[tokio::test]
async fn the_older_flag_and_a_versioned_catalog_directory_keep_working() {
    let server = Server::builder()
        .flag("--autobuild-version", "0.5.0")
        .start()
        .await;
    let health = reqwest::get(format!("{}/health", server.url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        health,
        r#"{"ok":true,"autobuildVersion":"0.5.0","protocolVersion":"2"}"#
    );
    let (status, body) = As::new(server.url(), "0.8.0", "2").get("/builds").await;
    assert_eq!(status, 409);
    assert_eq!(
        body["error"],
        "autobuild version mismatch: client package \"0.8.0\" protocol \"2\", server package \"0.5.0\" protocol \"2\""
    );
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/catalog/catalogs");
    let server = Server::builder()
        .accept_protocol3()
        .flag("--catalog", dir)
        .start()
        .await;
    let new = As::new(server.url(), "0.9.0", "3");
    let (status, _) = new
        .post("/builds", json!({"slug": "b", "repo": "acme/w"}))
        .await;
    assert_eq!(status, 201);
    let (status, body) = new.post("/builds/b/events", provision_started()).await;
    assert_eq!(status, 201, "{body}");
}
