//! Autobuild's hosted tickets (docs/tickets.md) through the real binary, on
//! a SQLite file and on PostgreSQL: every operation with its statuses and
//! messages, across a restart; the order of checks and every token kind;
//! the strict schemas; text kept byte for byte; each bound at its edge and
//! the flags' own limits; two replicas claiming one ticket; and tickets in
//! archives and backups.

use abstore_conformance::token;
use abstore_conformance::util::random_hex;
use serde_json::{Value, json};

use crate::support::{self, Raw, Reply, Server, path_text, with_pg};

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn strong_secret() -> String {
    (0..4).map(|_| random_hex()).collect()
}

/// A token for `scope`, expiring in an hour.
fn mint(secret: &str, scope: Value) -> String {
    let mut scope = scope;
    scope["exp"] = json!(now_ms() + 3_600_000);
    token::mint(secret, &scope)
}

async fn serve(database: &str, extra: &[&str]) -> Server {
    Server::builder()
        .database(database)
        .args(extra)
        .start()
        .await
}

/// One team's view of a server, as Autobuild's hosted client is: every
/// call a `POST /tickets/{operation}` with the identity headers.
struct Team {
    base: String,
    token: Option<String>,
    context: Value,
}

impl Team {
    fn new(server: &Server, token: Option<&str>, team: &str) -> Team {
        Team {
            base: server.url().to_owned(),
            token: token.map(str::to_owned),
            context: json!({"teamKey": team}),
        }
    }

    async fn send(&self, operation: &str, input: Value) -> Reply {
        let body = json!({"context": self.context, "input": input});
        Raw::new(
            "POST",
            format!("/tickets/{operation}"),
            self.token.as_deref(),
        )
        .json(&body)
        .send(&self.base)
        .await
        .unwrap_or_else(|e| panic!("{operation}: {e}"))
    }

    /// The answer of a call that must succeed with `status`.
    async fn answer(&self, operation: &str, input: Value, status: u16) -> Value {
        let reply = self.send(operation, input).await;
        assert_eq!(reply.status, status, "{operation}: {}", reply.text());
        reply.json()
    }

    async fn ok(&self, operation: &str, input: Value) -> Value {
        self.answer(operation, input, 200).await
    }

    /// The message of a call that must be refused with `status` and `kind`.
    async fn refused(&self, operation: &str, input: Value, status: u16, kind: &str) -> String {
        let reply = self.send(operation, input).await;
        reply.expect(status, Some(kind), operation);
        reply.json()["error"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    async fn create(&self, title: &str, state: &str) -> String {
        let ticket = self
            .answer(
                "create",
                json!({"draft": {"title": title, "body": "body\n"}, "options": {"state": state}}),
                201,
            )
            .await;
        ticket["ref"]["id"].as_str().expect("ref.id").to_owned()
    }

    async fn get(&self, id: &str) -> Value {
        self.ok("get", json!({"id": id})).await
    }

    async fn listed(&self, input: Value) -> Vec<String> {
        let listing = self.ok("list-ready", input).await;
        assert_eq!(listing["diagnostics"], json!([]));
        listing["tickets"]
            .as_array()
            .expect("tickets")
            .iter()
            .map(|t| t["ref"]["id"].as_str().expect("ref.id").to_owned())
            .collect()
    }
}

// ── Every operation, across a restart ───────────────────────────────────────

async fn every_operation(database: &str) {
    let mut server = serve(database, &[]).await;
    let t = Team::new(&server, None, "ENG");

    // create: 201, an explicit state, labels, an idempotency key.
    let created = t
        .answer(
            "create",
            json!({"draft": {"title": "First", "body": "# Spec\n\nbody\n", "labels": ["autobuild"]},
                   "options": {"state": "Ready", "idempotencyKey": "key-1"}}),
            201,
        )
        .await;
    let first = created["ref"]["id"].as_str().unwrap().to_owned();
    assert!(first.starts_with("ticket-"), "{created}");
    assert_eq!(
        created,
        json!({"ref": {"source": "database", "id": first, "title": "First"}, "creationKey": "key-1",
               "title": "First", "body": "# Spec\n\nbody\n", "state": "Ready", "labels": ["autobuild"]})
    );
    // A repeat of the key adopts the first ticket, whatever it says now.
    let again = t
        .answer(
            "create",
            json!({"draft": {"title": "Other", "body": "other"},
                   "options": {"state": "Done", "idempotencyKey": "key-1"}}),
            201,
        )
        .await;
    assert_eq!(again, created);
    // Without a state: the triage state; without a key: no creationKey.
    let triaged = t
        .answer(
            "create",
            json!({"draft": {"title": "Second", "body": "b"}}),
            201,
        )
        .await;
    assert_eq!(triaged["state"], "Triage");
    assert!(triaged.get("creationKey").is_none());
    let second = triaged["ref"]["id"].as_str().unwrap().to_owned();

    // get, and get of what the team does not have.
    assert_eq!(t.get(&first).await, created);
    assert_eq!(t.get("ticket-none").await, Value::Null);
    assert_eq!(
        Team::new(&server, None, "OPS").get(&first).await,
        Value::Null
    );

    // list-ready by state and labels, in creation order.
    assert_eq!(
        t.listed(json!({"state": "Ready"})).await,
        std::slice::from_ref(&first)
    );
    assert_eq!(t.listed(json!({})).await, [first.clone(), second.clone()]);
    assert!(
        t.listed(json!({"labels": ["autobuild", "x"]}))
            .await
            .is_empty()
    );

    // claim once, not twice; again after a handback to ready.
    assert_eq!(
        t.ok("claim", json!({"id": first})).await,
        json!({"claimed": true})
    );
    assert_eq!(
        t.ok("claim", json!({"id": first})).await,
        json!({"claimed": false})
    );
    assert_eq!(t.get(&first).await["state"], "Doing");
    assert_eq!(
        t.ok("transition", json!({"id": first, "state": "Ready"}))
            .await,
        json!({"ok": true})
    );
    assert_eq!(
        t.ok("claim", json!({"id": first})).await,
        json!({"claimed": true})
    );
    assert_eq!(
        t.ok("claim", json!({"id": "ticket-none"})).await,
        json!({"claimed": false})
    );

    // comment, transition and update, with their refusals.
    assert_eq!(
        t.ok("comment", json!({"id": first, "body": "done so far"}))
            .await,
        json!({"ok": true})
    );
    assert_eq!(
        t.refused(
            "comment",
            json!({"id": "ticket-none", "body": "x"}),
            404,
            "not-found"
        )
        .await,
        "database ticket source: comment on unknown ticket \"ticket-none\""
    );
    assert_eq!(
        t.refused(
            "transition",
            json!({"id": "ticket-none", "state": "Done"}),
            404,
            "not-found"
        )
        .await,
        "database ticket source: transition on unknown ticket \"ticket-none\""
    );
    assert_eq!(
        t.refused(
            "transition",
            json!({"id": first, "state": "Blocked"}),
            400,
            "validation"
        )
        .await,
        "database ticket state \"Blocked\" is not configured; allowed states: Triage, Ready, Doing, Done"
    );
    assert_eq!(
        t.ok(
            "update",
            json!({"id": second, "patch": {"title": "Renamed", "labels": ["a", "b"]}})
        )
        .await,
        json!({"ok": true})
    );
    let renamed = t.get(&second).await;
    assert_eq!(
        (&renamed["title"], &renamed["ref"]["title"]),
        (&json!("Renamed"), &json!("Renamed"))
    );
    assert_eq!(
        (&renamed["body"], &renamed["labels"]),
        (&json!("b"), &json!(["a", "b"]))
    );
    assert_eq!(
        t.refused(
            "update",
            json!({"id": second, "patch": {"title": " ", "body": "\n"}}),
            400,
            "validation"
        )
        .await,
        "invalid ticket update — title: title must not be blank; body: body must not be blank"
    );
    assert_eq!(
        t.refused(
            "update",
            json!({"id": "ticket-none", "patch": {"body": "x"}}),
            404,
            "not-found"
        )
        .await,
        "database ticket source: update on unknown ticket \"ticket-none\""
    );
    assert_eq!(
        t.get(&second).await,
        renamed,
        "refused updates changed nothing"
    );

    // blockers: self, unknown blocker, unknown target; add twice, remove twice.
    assert_eq!(
        t.refused(
            "add-blocker",
            json!({"id": second, "blockerId": second}),
            400,
            "validation"
        )
        .await,
        format!("database ticket source: ticket \"{second}\" cannot block itself")
    );
    assert_eq!(
        t.refused(
            "add-blocker",
            json!({"id": second, "blockerId": "ticket-none"}),
            404,
            "not-found"
        )
        .await,
        "database ticket source: addBlocker on unknown ticket \"ticket-none\""
    );
    assert_eq!(
        t.refused(
            "add-blocker",
            json!({"id": "ticket-none", "blockerId": first}),
            404,
            "not-found"
        )
        .await,
        "database ticket source: addBlocker on unknown ticket \"ticket-none\""
    );
    assert_eq!(
        t.refused(
            "remove-blocker",
            json!({"id": "ticket-none", "blockerId": first}),
            404,
            "not-found"
        )
        .await,
        "database ticket source: removeBlocker on unknown ticket \"ticket-none\""
    );
    for _ in 0..2 {
        t.ok("add-blocker", json!({"id": second, "blockerId": first}))
            .await;
    }
    assert_eq!(t.get(&second).await["blockedBy"], json!([first]));
    assert_eq!(
        t.ok(
            "dependency-states",
            json!({"ids": ["ticket-none", second, first]})
        )
        .await,
        json!([
            {"id": "ticket-none", "exists": false, "resolved": false, "blockedBy": []},
            {"id": second, "exists": true, "resolved": false, "blockedBy": [first]},
            {"id": first, "exists": true, "resolved": false, "blockedBy": []},
        ])
    );
    t.ok("transition", json!({"id": first, "state": "Done"}))
        .await;
    assert_eq!(
        t.ok("dependency-states", json!({"ids": [first]})).await[0]["resolved"],
        true
    );
    assert_eq!(
        t.ok("claim", json!({"id": first})).await,
        json!({"claimed": false}),
        "done"
    );

    // create's refusals, in the database source's order.
    let create = |title: &str, body: &str, extra: Value| {
        let mut draft = json!({"title": title, "body": body});
        if let (Some(draft), Some(extra)) = (draft.as_object_mut(), extra.as_object()) {
            draft.extend(extra.clone());
        }
        json!({"draft": draft, "options": {"state": "Nope"}})
    };
    assert_eq!(
        t.refused("create", create("\t", "", json!({})), 400, "validation")
            .await,
        "database ticket create: title must be nonblank"
    );
    assert_eq!(
        t.refused(
            "create",
            create("t", " \u{feff}", json!({})),
            400,
            "validation"
        )
        .await,
        "database ticket create: body must be nonblank"
    );
    assert!(
        t.refused("create", create("t", "b", json!({})), 400, "validation")
            .await
            .contains("\"Nope\" is not configured")
    );
    assert_eq!(
        t.refused(
            "create",
            json!({"draft": {"title": "t", "body": "b", "blockedBy": [first, "ticket-none"]}}),
            404,
            "not-found"
        )
        .await,
        "database ticket source: create blocker on unknown ticket \"ticket-none\""
    );

    // The context: a blank team, an unconfigured claimed or create state.
    let mut odd = Team::new(&server, None, " ");
    assert_eq!(
        odd.refused("get", json!({"id": first}), 400, "validation")
            .await,
        "ticket teamKey must be nonblank"
    );
    odd.context = json!({"teamKey": "ENG", "claimedState": "Review"});
    assert!(
        odd.refused("get", json!({"id": first}), 400, "validation")
            .await
            .contains("\"Review\" is not configured")
    );
    odd.context = json!({"teamKey": "ENG", "claimedState": "Ready", "createState": "Done"});
    let filed = odd
        .answer("create", json!({"draft": {"title": "t", "body": "b"}}), 201)
        .await;
    assert_eq!(filed["state"], "Done");

    // Everything is still there after a restart.
    let listing = t.ok("list-ready", json!({})).await;
    let (one, two) = (t.get(&first).await, t.get(&second).await);
    server.restart().await.unwrap();
    let t = Team::new(&server, None, "ENG");
    assert_eq!(t.ok("list-ready", json!({})).await, listing);
    assert_eq!((t.get(&first).await, t.get(&second).await), (one, two));
    let stderr = server.stderr();
    assert!(
        !stderr.contains("internal error") && !stderr.contains("panicked"),
        "{stderr}"
    );
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn every_operation_on_a_sqlite_file_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    every_operation(&format!("sqlite://{}", dir.path().join("t.db").display())).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn every_operation_on_postgres() {
    with_pg("tickets_ops", |database| async move {
        every_operation(&database).await
    })
    .await;
}

// ── The order of checks, and every token kind ───────────────────────────────

fn raw_ticket(target: &str, token: Option<&str>, identity: bool) -> Raw<'static> {
    let mut raw = Raw::new("POST", target.to_owned(), token);
    if !identity {
        raw.headers
            .retain(|(name, _)| !name.starts_with("X-Autobuild"));
    }
    raw
}

async fn status_and_message(raw: Raw<'_>, base: &str) -> (u16, String) {
    let reply = raw.send(base).await.expect("an answer");
    reply.assert_error_shape("ticket route");
    (
        reply.status,
        reply.json()["error"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn checks_run_in_the_hosted_services_order() {
    let secret = strong_secret();
    let server = serve(
        "sqlite::memory:",
        &[
            "--secret",
            &secret,
            "--max-json-body-bytes",
            "70000",
            "--max-stream-batch-bytes",
            "1000",
        ],
    )
    .await;
    let base = server.url();
    let deployment = mint(&secret, token::deployment_scope(0));
    let build = mint(&secret, token::resource_scope("build", "b1", "*", 0));
    let body = json!({"context": {"teamKey": "ENG"}, "input": {"id": "x"}});
    let check = |raw: Raw<'static>, status: u16, message: &'static str| {
        let base = base.to_owned();
        async move {
            let what = format!("{} {}", raw.method, raw.target);
            let (got, text) = status_and_message(raw, &base).await;
            assert_eq!((got, text.as_str()), (status, message), "{what}");
        }
    };
    // 1. Another method, or outside /tickets/: unknown at once.
    for method in ["GET", "PUT", "DELETE"] {
        let mut raw = raw_ticket("/tickets/get", None, false);
        raw.method = method;
        let message = match method {
            "GET" => "no route: GET /tickets/get",
            "PUT" => "no route: PUT /tickets/get",
            _ => "no route: DELETE /tickets/get",
        };
        check(raw, 404, message).await;
    }
    check(
        raw_ticket("/tickets", None, false),
        404,
        "no route: POST /tickets",
    )
    .await;
    // 2. Identity before the token, the operation and the body.
    let mismatch = "autobuild version mismatch: client package (missing) protocol (missing), \
                    server package \"0.8.0\" protocol \"2\"";
    for target in ["/tickets/get", "/tickets/nope", "/tickets/", "/tickets/a/b"] {
        let (status, text) =
            status_and_message(raw_ticket(target, None, false).body("{"), base).await;
        assert_eq!((status, text.as_str()), (409, mismatch), "{target}");
    }
    let wrong = raw_ticket("/tickets/get", Some(&deployment), true)
        .header("X-Autobuild-Protocol-Version", "3");
    assert_eq!(
        status_and_message(wrong.json(&body), base).await.0,
        409,
        "repeated, differing headers"
    );
    // 3. The token before the operation and the body.
    for target in ["/tickets/get", "/tickets/nope"] {
        check(
            raw_ticket(target, None, true).body("{"),
            401,
            "missing bearer token",
        )
        .await;
        check(
            raw_ticket(target, Some("not.a.token"), true).body("{"),
            401,
            "invalid or expired token",
        )
        .await;
        let (status, text) =
            status_and_message(raw_ticket(target, Some(&build), true).body("{"), base).await;
        assert_eq!(
            (status, text.as_str()),
            (
                403,
                "token scoped to build \"b1\" may not access ticket operations"
            )
        );
    }
    // 4. Then the operation, compared as sent.
    for (target, message) in [
        ("/tickets/nope", "no route: POST /tickets/nope"),
        ("/tickets/", "no route: POST /tickets/"),
        ("/tickets/get/more", "no route: POST /tickets/get/more"),
        (
            "/tickets/l%69st-ready",
            "no route: POST /tickets/l%69st-ready",
        ),
        ("/tickets/GET", "no route: POST /tickets/GET"),
    ] {
        check(
            raw_ticket(target, Some(&deployment), true).body("{"),
            404,
            message,
        )
        .await;
    }
    // 5. Then the body: its size, JSON, the schema.
    let big = format!("{{\"x\":\"{}\"}}", "a".repeat(70_000));
    let (status, _) = status_and_message(
        raw_ticket("/tickets/get", Some(&deployment), true).body(big),
        base,
    )
    .await;
    assert_eq!(status, 413);
    check(
        raw_ticket("/tickets/get", Some(&deployment), true).body("{"),
        400,
        "request body is not valid JSON",
    )
    .await;
    check(
        raw_ticket("/tickets/get", Some(&deployment), true),
        400,
        "request body is not valid JSON",
    )
    .await;
    check(
        raw_ticket("/tickets/get", Some(&deployment), true).json(&json!({"input": {"id": "x"}})),
        400,
        "invalid request body: \"context\" is required",
    )
    .await;
    // 6. Then the operation runs.
    let reply = raw_ticket("/tickets/get", Some(&deployment), true)
        .json(&body)
        .send(base)
        .await
        .unwrap();
    assert_eq!((reply.status, reply.text().as_str()), (200, "null"));
}

#[tokio::test(flavor = "multi_thread")]
async fn only_deployment_tokens_reach_the_tickets() {
    let secret = strong_secret();
    let mut server = serve("sqlite::memory:", &["--secret", &secret]).await;
    let body = json!({"context": {"teamKey": "ENG"}, "input": {"id": "x"}});
    let refused = [
        (json!({"build": "*", "session": "*"}), "build \"*\""),
        (json!({"build": "b1", "session": "*"}), "build \"b1\""),
        (token::resource_scope("build", "b1", "*", 0), "build \"b1\""),
        (
            token::resource_scope("repo", "acme/w", "*", 0),
            "repo \"acme/w\"",
        ),
        (
            token::resource_scope("session", "os_1", "*", 0),
            "session \"os_1\"",
        ),
        (json!({"operator": {"user": "alice"}}), "operator \"alice\""),
    ];
    for (scope, named) in refused {
        let token = mint(&secret, scope.clone());
        let reply = Raw::new("POST", "/tickets/get", Some(&token))
            .json(&body)
            .send(server.url())
            .await
            .unwrap();
        reply.expect(403, Some("auth"), &scope.to_string());
        assert_eq!(
            reply.json()["error"],
            format!("token scoped to {named} may not access ticket operations")
        );
    }
    for scope in [
        token::deployment_scope(0),
        json!({"operator": true, "session": "*", "via": {"kind": "mcp", "client": "claude"}}),
    ] {
        let token = mint(&secret, scope.clone());
        let reply = Raw::new("POST", "/tickets/get", Some(&token))
            .json(&body)
            .send(server.url())
            .await
            .unwrap();
        assert_eq!(reply.status, 200, "{scope}: {}", reply.text());
    }
    let expired = token::mint(&secret, &token::deployment_scope(now_ms() - 1));
    let reply = Raw::new("POST", "/tickets/get", Some(&expired))
        .json(&body)
        .send(server.url())
        .await
        .unwrap();
    reply.expect(401, Some("auth"), "an expired deployment token");
    // The log names the acting scope, never the token.
    let stderr = server.stderr();
    assert!(
        stderr.contains("scope=deployment") && stderr.contains("refused=forbidden"),
        "{stderr}"
    );
    server.stop().await.unwrap();

    // Open mode: no token needed; every accepted identity is served.
    let server = serve(
        "sqlite::memory:",
        &[
            "--accept-client",
            "0.8.0/2",
            "--accept-client",
            "0.8.0/3",
            "--accept-client",
            "0.9.0/3",
        ],
    )
    .await;
    for (version, protocol) in [("0.8.0", "2"), ("0.8.0", "3"), ("0.9.0", "3")] {
        let mut raw = Raw::new("POST", "/tickets/get", None).json(&body);
        raw.headers[0].1 = version.as_bytes().to_vec();
        raw.headers[1].1 = protocol.as_bytes().to_vec();
        let reply = raw.send(server.url()).await.unwrap();
        assert_eq!(
            (reply.status, reply.text().as_str()),
            (200, "null"),
            "{version}/{protocol}"
        );
    }
    let mut raw = Raw::new("POST", "/tickets/get", None).json(&body);
    raw.headers[0].1 = b"0.9.0".to_vec();
    raw.headers[1].1 = b"2".to_vec();
    raw.send(server.url())
        .await
        .unwrap()
        .expect(409, Some("conflict"), "an unaccepted identity");
}

// ── Strict schemas ──────────────────────────────────────────────────────────

#[tokio::test(flavor = "multi_thread")]
async fn every_schema_is_strict() {
    let server = serve("sqlite::memory:", &[]).await;
    let send = |operation: &'static str, body: Value| {
        let base = server.url().to_owned();
        async move {
            Raw::new("POST", format!("/tickets/{operation}"), None)
                .json(&body)
                .send(&base)
                .await
                .unwrap()
        }
    };
    let context = json!({"teamKey": "ENG"});
    let cases: Vec<(&str, Value, &str)> = vec![
        ("get", json!([]), "the request body must be an object"),
        (
            "get",
            json!({"context": context, "input": {"id": "x"}, "extra": 1}),
            "the request body has unknown key \"extra\"",
        ),
        (
            "get",
            json!({"context": {"teamKey": "ENG", "x": 1}, "input": {"id": "x"}}),
            "\"context\" has unknown key \"x\"",
        ),
        (
            "get",
            json!({"context": {}, "input": {"id": "x"}}),
            "\"context.teamKey\" is required",
        ),
        (
            "get",
            json!({"context": {"teamKey": 1}, "input": {"id": "x"}}),
            "\"context.teamKey\" must be a string",
        ),
        (
            "get",
            json!({"context": {"teamKey": "E", "createState": ""}, "input": {"id": "x"}}),
            "\"context.createState\" must be a nonempty string",
        ),
        (
            "get",
            json!({"context": {"teamKey": "E\u{0}"}, "input": {"id": "x"}}),
            "\"context.teamKey\" must not contain NUL",
        ),
        ("get", json!({"context": context}), "\"input\" is required"),
        (
            "get",
            json!({"context": context, "input": {"id": "x", "more": true}}),
            "\"input\" has unknown key \"more\"",
        ),
        (
            "claim",
            json!({"context": context, "input": {"id": null}}),
            "\"input.id\" must be a string",
        ),
        (
            "comment",
            json!({"context": context, "input": {"id": "x"}}),
            "\"input.body\" is required",
        ),
        (
            "transition",
            json!({"context": context, "input": {"id": "x", "state": ""}}),
            "\"input.state\" must be a nonempty string",
        ),
        (
            "list-ready",
            json!({"context": context, "input": {"labels": "a"}}),
            "\"input.labels\" must be an array of strings",
        ),
        (
            "list-ready",
            json!({"context": context, "input": {"labels": [1]}}),
            "\"input.labels[0]\" must be a string",
        ),
        (
            "list-ready",
            json!({"context": context, "input": {"state": null}}),
            "\"input.state\" must be a string",
        ),
        (
            "create",
            json!({"context": context, "input": {"draft": {"title": "t"}}}),
            "\"input.draft.body\" is required",
        ),
        (
            "create",
            json!({"context": context, "input": {"draft": {"title": "t", "body": "b", "state": "Ready"}}}),
            "\"input.draft\" has unknown key \"state\"",
        ),
        (
            "create",
            json!({"context": context, "input": {"draft": {"title": "t", "body": "b"}, "options": {"state": "Ready", "x": 1}}}),
            "\"input.options\" has unknown key \"x\"",
        ),
        (
            "create",
            json!({"context": context, "input": {"draft": {"title": "t", "body": "b", "labels": ["x".repeat(513)]}}}),
            "\"input.draft.labels[0]\" is 513 bytes; the limit is 512 bytes",
        ),
        (
            "create",
            json!({"context": context, "input": {"draft": {"title": "t", "body": "b"}, "options": {"idempotencyKey": "k\u{0}"}}}),
            "\"input.options.idempotencyKey\" must not contain NUL",
        ),
        (
            "update",
            json!({"context": context, "input": {"id": "x", "patch": {}}}),
            "\"input.patch\": update must name at least one field (title, body or labels)",
        ),
        (
            "update",
            json!({"context": context, "input": {"id": "x", "patch": {"state": "Done"}}}),
            "\"input.patch\" has unknown key \"state\"",
        ),
        (
            "update",
            json!({"context": context, "input": {"id": "x", "patch": {"labels": null}}}),
            "\"input.patch.labels\" must be an array of strings",
        ),
        (
            "add-blocker",
            json!({"context": context, "input": {"id": "x"}}),
            "\"input.blockerId\" is required",
        ),
        (
            "remove-blocker",
            json!({"context": context, "input": {"id": "x", "blockerId": ""}}),
            "\"input.blockerId\" must be a nonempty string",
        ),
        (
            "dependency-states",
            json!({"context": context, "input": {"ids": ["a", ""]}}),
            "\"input.ids[1]\" must be a nonempty string",
        ),
        (
            "dependency-states",
            json!({"context": context, "input": {}}),
            "\"input.ids\" is required",
        ),
    ];
    for (operation, body, message) in cases {
        let reply = send(operation, body.clone()).await;
        reply.expect(400, Some("validation"), operation);
        assert_eq!(
            reply.json()["error"],
            format!("invalid request body: {message}"),
            "{operation} {body}"
        );
    }
}

// ── Text kept byte for byte ─────────────────────────────────────────────────

const TEXTS: [&str; 6] = [
    "  leading and trailing  \n\n\n",
    "\r\nwindows\r\n\ttabs\t\u{b}\u{c}",
    "unicode é ✓ 𝄞 \u{200b}\u{feff}\u{85}",
    "nul \u{0} inside \u{0}",
    "\"quotes\" \\backslashes\\ </script> \u{7f}\u{1}",
    "\u{2028}\u{2029} separators",
];

async fn opaque_text(database: &str) {
    let server = serve(database, &[]).await;
    let t = Team::new(&server, None, "ENG");
    for text in TEXTS {
        // Raw UTF-8 in the request, not only escapes: the JSON is as sent.
        let body = format!(
            "{{\"context\":{{\"teamKey\":\"ENG\"}},\"input\":{{\"draft\":{{\"title\":{title},\"body\":{body},\"labels\":[\"é ✓\"]}}}}}}",
            title = json!(format!("t {text}")),
            body = json!(text),
        );
        let reply = Raw::new("POST", "/tickets/create", None)
            .body(body)
            .send(server.url())
            .await
            .unwrap();
        assert_eq!(reply.status, 201, "{}", reply.text());
        let created = reply.json();
        assert_eq!(created["body"], text);
        assert_eq!(created["title"], format!("t {text}"));
        assert_eq!(created["labels"], json!(["é ✓"]));
        let id = created["ref"]["id"].as_str().unwrap().to_owned();
        assert_eq!(t.get(&id).await, created);
        t.ok(
            "update",
            json!({"id": id, "patch": {"body": format!("{text}{text}")}}),
        )
        .await;
        assert_eq!(t.get(&id).await["body"], format!("{text}{text}"));
        t.ok("comment", json!({"id": id, "body": text})).await;
    }
    assert_eq!(
        t.listed(json!({"labels": ["é ✓"]})).await.len(),
        TEXTS.len()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn text_is_kept_byte_for_byte_on_a_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    opaque_text(&format!("sqlite://{}", dir.path().join("t.db").display())).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn text_is_kept_byte_for_byte_on_postgres() {
    with_pg("tickets_text", |database| async move {
        opaque_text(&database).await
    })
    .await;
}

// ── Bounds at their edges ───────────────────────────────────────────────────

const BOUNDS: [&str; 10] = [
    "--max-team-tickets",
    "4",
    "--max-ticket-labels",
    "2",
    "--max-ticket-blockers",
    "2",
    "--max-ticket-comments",
    "2",
    "--max-ticket-text-bytes",
    "16",
];

async fn bounds(database: &str) {
    let server = serve(database, &BOUNDS).await;
    let t = Team::new(&server, None, "ENG");
    let too_large = |message: String, part: &str| {
        assert!(message.contains(part), "{message}");
        assert!(message.ends_with("nothing was written"), "{message}");
    };
    // Text: 16 bytes pass, 17 do not (é is two bytes).
    let a = t
        .answer(
            "create",
            json!({"draft": {"title": "x".repeat(16), "body": "é".repeat(8)}}),
            201,
        )
        .await["ref"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    too_large(
        t.refused(
            "create",
            json!({"draft": {"title": "x".repeat(17), "body": "b"}}),
            413,
            "validation",
        )
        .await,
        "\"input.draft.title\" is 17 bytes, over the 16-byte --max-ticket-text-bytes bound",
    );
    too_large(
        t.refused(
            "update",
            json!({"id": a, "patch": {"body": format!("{}a", "é".repeat(8))}}),
            413,
            "validation",
        )
        .await,
        "\"input.patch.body\" is 17 bytes",
    );
    too_large(
        t.refused(
            "comment",
            json!({"id": a, "body": "c".repeat(17)}),
            413,
            "validation",
        )
        .await,
        "\"input.body\" is 17 bytes",
    );
    // Labels: two, not three.
    t.ok("update", json!({"id": a, "patch": {"labels": ["x", "x"]}}))
        .await;
    too_large(
        t.refused(
            "update",
            json!({"id": a, "patch": {"labels": ["x", "y", "z"]}}),
            413,
            "validation",
        )
        .await,
        "\"input.patch.labels\" has 3 labels, over the --max-ticket-labels bound of 2",
    );
    // Comments: two, not three.
    for _ in 0..2 {
        t.ok("comment", json!({"id": a, "body": "c"})).await;
    }
    too_large(
        t.refused("comment", json!({"id": a, "body": "c"}), 413, "validation")
            .await,
        &format!("ticket \"{a}\" has 2 comments, the --max-ticket-comments bound"),
    );
    // Blockers: two, not three.
    let b = t.create("b", "Ready").await;
    let c = t.create("c", "Ready").await;
    let d = t.create("d", "Ready").await;
    too_large(
        t.refused(
            "create",
            json!({"draft": {"title": "e", "body": "b", "blockedBy": [a, b, c]}}),
            413,
            "validation",
        )
        .await,
        "names 3 tickets, over the --max-ticket-blockers bound of 2",
    );
    t.ok("add-blocker", json!({"id": d, "blockerId": a})).await;
    t.ok("add-blocker", json!({"id": d, "blockerId": b})).await;
    t.ok("add-blocker", json!({"id": d, "blockerId": b})).await;
    too_large(
        t.refused(
            "add-blocker",
            json!({"id": d, "blockerId": c}),
            413,
            "validation",
        )
        .await,
        &format!("ticket \"{d}\" has 2 blockers, the --max-ticket-blockers bound"),
    );
    // Tickets: four, not five; another team has its own.
    too_large(
        t.refused(
            "create",
            json!({"draft": {"title": "e", "body": "b"}}),
            413,
            "validation",
        )
        .await,
        "team \"ENG\" holds 4 tickets, the --max-team-tickets bound",
    );
    assert_eq!(t.listed(json!({})).await, [a, b, c, d.clone()]);
    assert_eq!(t.get(&d).await["blockedBy"].as_array().unwrap().len(), 2);
    Team::new(&server, None, "OPS").create("ops", "Ready").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bounds_at_their_edges_on_a_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    bounds(&format!("sqlite://{}", dir.path().join("t.db").display())).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bounds_at_their_edges_on_postgres() {
    with_pg("tickets_bounds", |database| async move {
        bounds(&database).await
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn answers_are_held_to_the_response_ceiling() {
    let server = serve("sqlite::memory:", &["--max-body-bytes", "500"]).await;
    let t = Team::new(&server, None, "ENG");
    let mut ids = Vec::new();
    for n in 0..4 {
        ids.push(t.create(&format!("ticket {n}"), "Ready").await);
    }
    // Each ticket fits; four of them in one listing do not.
    let one = t.get(&ids[0]).await.to_string().len();
    assert!(one < 500 && 4 * one > 500, "{one}");
    assert_eq!(
        t.refused("list-ready", json!({}), 413, "validation").await,
        "the ticket listing of team \"ENG\" exceeds the 500-byte response ceiling (--max-body-bytes)"
    );
    // Narrowed by state, a listing fits again.
    let done = t.create("done", "Done").await;
    assert_eq!(t.listed(json!({"state": "Done"})).await, [done]);
}

#[tokio::test(flavor = "multi_thread")]
async fn ticket_flags_at_their_edges_start_or_are_refused_by_name() {
    for (flags, named) in [
        (vec!["--max-team-tickets", "0"], "--max-team-tickets"),
        (vec!["--max-ticket-labels=-1"], "--max-ticket-labels"),
        (
            vec!["--max-ticket-blockers", "9007199254740992"],
            "--max-ticket-blockers",
        ),
        (
            vec!["--max-ticket-comments", "1.5"],
            "--max-ticket-comments",
        ),
        (
            vec!["--max-ticket-text-bytes", "x"],
            "--max-ticket-text-bytes",
        ),
        (vec!["--ticket-done-state", "Ready"], "--ticket-done-state"),
        (vec!["--ticket-triage-state", " "], "--ticket-triage-state"),
    ] {
        let mut args = vec![
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--database",
            "sqlite::memory:",
            "--blobs",
            "memory://",
        ];
        args.extend(&flags);
        let (ok, _, stderr) = support::run(&args);
        assert!(!ok && stderr.contains(named), "{flags:?}: {stderr}");
    }
    let (ok, _, stderr) = support::run_with_env(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--database",
            "sqlite::memory:",
            "--blobs",
            "memory://",
        ],
        &[("ABSTORE_TICKET_DOING_STATE", "Triage")],
    );
    assert!(!ok && stderr.contains("distinct"), "{stderr}");
    // At the largest bound and with other states, the server serves them.
    let server = serve(
        "sqlite::memory:",
        &[
            "--max-team-tickets",
            "9007199254740991",
            "--max-ticket-text-bytes",
            "1",
            "--ticket-triage-state",
            "Inbox",
            "--ticket-ready-state",
            "Todo",
            "--ticket-doing-state",
            "In Progress",
            "--ticket-done-state",
            "Shipped",
        ],
    )
    .await;
    let t = Team::new(&server, None, "ENG");
    let created = t
        .answer("create", json!({"draft": {"title": "t", "body": "b"}}), 201)
        .await;
    assert_eq!(created["state"], "Inbox");
    let id = created["ref"]["id"].as_str().unwrap();
    assert_eq!(
        t.ok("claim", json!({"id": id})).await,
        json!({"claimed": true})
    );
    assert_eq!(t.get(id).await["state"], "In Progress");
    assert!(
        t.refused(
            "transition",
            json!({"id": id, "state": "Done"}),
            400,
            "validation"
        )
        .await
        .ends_with("allowed states: Inbox, Todo, In Progress, Shipped")
    );
}

// ── Replicas ────────────────────────────────────────────────────────────────

/// Two servers on one PostgreSQL database claim the same tickets at once:
/// for each, exactly one claim wins.
#[tokio::test(flavor = "multi_thread")]
async fn two_replicas_claim_one_ticket_postgres() {
    with_pg("tickets_replicas", |database| async move {
        let one = serve(&database, &[]).await;
        let two = serve(&database, &[]).await;
        let (a, b) = (Team::new(&one, None, "ENG"), Team::new(&two, None, "ENG"));
        for n in 0..20 {
            let id = a.create(&format!("race {n}"), "Ready").await;
            let input = json!({"id": id});
            let claims = futures_util::future::join_all([
                a.ok("claim", input.clone()),
                b.ok("claim", input.clone()),
                a.ok("claim", input.clone()),
                b.ok("claim", input.clone()),
            ])
            .await;
            let won = claims.iter().filter(|c| c["claimed"] == true).count();
            assert_eq!(won, 1, "{id}: {claims:?}");
            assert_eq!(b.get(&id).await["state"], "Doing");
            let ops: Vec<Value> = history(&database, "ENG", &id)
                .iter()
                .map(|entry| entry["change"]["op"].clone())
                .collect();
            assert_eq!(ops, [json!("create"), json!("claim")], "{id}");
        }
        // Creates through both replicas with one key: one ticket.
        let draft =
            json!({"draft": {"title": "once", "body": "b"}, "options": {"idempotencyKey": "k"}});
        let created = futures_util::future::join_all([
            a.answer("create", draft.clone(), 201),
            b.answer("create", draft.clone(), 201),
        ])
        .await;
        assert_eq!(created[0], created[1]);
    })
    .await;
}

// ── History ─────────────────────────────────────────────────────────────────

/// `abstore tickets history --json` of the team's ticket `id`.
fn history(database: &str, team: &str, id: &str) -> Vec<Value> {
    let out = support::run_ok(&[
        "tickets",
        "history",
        id,
        "--team",
        team,
        "--database",
        database,
        "--json",
    ]);
    out.lines()
        .map(|line| serde_json::from_str(line).expect("a history line is JSON"))
        .collect()
}

/// Each kept change is written with the token that made it (its scope,
/// delegate and digest) and the server's time; an operator reads it with
/// `abstore tickets history`, beside the running server and after a
/// restart; refusals write none.
#[tokio::test(flavor = "multi_thread")]
async fn history_names_the_token_behind_each_change() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("h.db").display());
    let secret = strong_secret();
    let mut server = serve(&database, &["--secret", &secret]).await;
    let session = mint(
        &secret,
        json!({"operator": true, "session": "*", "via": {"kind": "session", "id": "os_7"}}),
    );
    let mcp = mint(
        &secret,
        json!({"operator": true, "session": "*", "via": {"kind": "mcp", "client": "claude"}}),
    );
    let plain = mint(&secret, token::deployment_scope(0));
    let (by_session, by_mcp, by_plain) = (
        Team::new(&server, Some(&session), "ENG"),
        Team::new(&server, Some(&mcp), "ENG"),
        Team::new(&server, Some(&plain), "ENG"),
    );
    let id = by_session.create("tracked", "Ready").await;
    assert_eq!(
        by_mcp.ok("claim", json!({"id": id})).await,
        json!({"claimed": true})
    );
    assert_eq!(
        by_plain.ok("claim", json!({"id": id})).await,
        json!({"claimed": false})
    );
    by_plain
        .refused(
            "add-blocker",
            json!({"id": id, "blockerId": id}),
            400,
            "validation",
        )
        .await;
    by_plain
        .ok("transition", json!({"id": id, "state": "Done"}))
        .await;
    server.stop().await.unwrap();
    let mut server = serve(&database, &["--secret", &secret]).await;
    let by_plain = Team::new(&server, Some(&plain), "ENG");
    by_plain
        .ok("update", json!({"id": id, "patch": {"labels": ["x"]}}))
        .await;

    let digest = |token: &str| {
        use sha2::Digest as _;
        hex::encode(sha2::Sha256::digest(token.as_bytes()))
    };
    let entries = history(&database, "ENG", &id);
    let seen: Vec<(Value, Value, Value, Value)> = entries
        .iter()
        .map(|e| {
            (
                e["seq"].clone(),
                e["actor"].clone(),
                e["tokenDigest"].clone(),
                e["change"].clone(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (
                json!(1),
                json!("deployment via session:os_7"),
                json!(digest(&session)),
                json!({"op": "create", "state": "Ready", "title": "tracked", "labels": [],
                       "blockedBy": []})
            ),
            (
                json!(2),
                json!("deployment via mcp:claude"),
                json!(digest(&mcp)),
                json!({"op": "claim", "from": "Ready", "to": "Doing"})
            ),
            (
                json!(3),
                json!("deployment"),
                json!(digest(&plain)),
                json!({"op": "transition", "from": "Doing", "to": "Done"})
            ),
            (
                json!(4),
                json!("deployment"),
                json!(digest(&plain)),
                json!({"op": "update", "labels": ["x"], "fields": ["labels"]})
            ),
        ]
    );
    for entry in &entries {
        let at = entry["at"].as_str().expect("an ISO time");
        assert!(at.ends_with('Z') && at.len() == 24, "{at}");
    }
    // The lines an operator reads, while the server runs.
    let text = support::run_ok(&[
        "tickets",
        "history",
        &id,
        "--team",
        "ENG",
        "--database",
        &database,
    ]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    assert!(
        lines[1].starts_with("#2 ")
            && lines[1].contains(&format!(
                " deployment via mcp:claude (token {}): claimed: \"Ready\" -> \"Doing\"",
                &digest(&mcp)[..16]
            )),
        "{text}"
    );
    assert_eq!(lines[4], "4 changes");
    // Another team's id, or none: said, and a failure.
    for (team, ticket) in [("OPS", id.as_str()), ("ENG", "ticket-none")] {
        let (ok, _, err) = support::run(&[
            "tickets",
            "history",
            ticket,
            "--team",
            team,
            "--database",
            &database,
        ]);
        assert!(
            !ok && err.contains(&format!("team \"{team}\" has no ticket \"{ticket}\"")),
            "{err}"
        );
    }
    server.stop().await.unwrap();

    // Open mode: the actor is `open`, with no digest.
    let mut open = serve(&database, &[]).await;
    Team::new(&open, None, "ENG")
        .ok("comment", json!({"id": id, "body": "late"}))
        .await;
    open.stop().await.unwrap();
    let last = history(&database, "ENG", &id).pop().unwrap();
    assert_eq!(
        (&last["actor"], &last["tokenDigest"], &last["change"]),
        (
            &json!("open"),
            &Value::Null,
            &json!({"op": "comment", "comment": 1})
        )
    );
}

// ── Archives and backups ────────────────────────────────────────────────────

/// Tickets with blockers, comments, labels and NUL-bearing text.
async fn seed(t: &Team) -> Vec<String> {
    let a = t.create("a", "Ready").await;
    let b = t
        .answer(
            "create",
            json!({"draft": {"title": "b", "body": "nul \u{0} é\n", "labels": ["x", "y"], "blockedBy": [a]},
                   "options": {"idempotencyKey": "key-b"}}),
            201,
        )
        .await["ref"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    t.ok("comment", json!({"id": b, "body": "first"})).await;
    t.ok("comment", json!({"id": b, "body": "second \u{0}"}))
        .await;
    t.ok("claim", json!({"id": a})).await;
    vec![a, b]
}

/// What a team's tickets read as, through the protocol.
async fn read_all(t: &Team, ids: &[String]) -> (Value, Value) {
    (
        t.ok("list-ready", json!({})).await,
        t.ok("dependency-states", json!({"ids": ids})).await,
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn tickets_travel_in_archives_and_backups() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    let database = format!("sqlite://{}", path("source.db").display());
    let blobs = path_text(&path("blobs")).to_owned();
    let mut server = serve(&database, &[]).await;
    let t = Team::new(&server, None, "ENG");
    let ids = seed(&t).await;
    Team::new(&server, None, "OPS")
        .create("ops", "Triage")
        .await;
    let before = read_all(&t, &ids).await;
    server.stop().await.unwrap();

    // export → verify → import → the same archive, the same answers.
    let archive = path("a.ndjson");
    support::export(&database, &blobs, &archive);
    let text = std::fs::read_to_string(&archive).unwrap();
    for record in [
        "\"type\":\"ticket_team\"",
        "\"type\":\"ticket\"",
        "\"type\":\"ticket_blocker\"",
        "\"type\":\"ticket_comment\"",
        "\"type\":\"ticket_history\"",
    ] {
        assert!(text.contains(record), "{record}");
    }
    let footer: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(
        (
            &footer["counts"]["ticket_team"],
            &footer["counts"]["ticket"],
            &footer["counts"]["ticket_blocker"],
            &footer["counts"]["ticket_comment"],
            &footer["counts"]["ticket_history"]
        ),
        (&json!(2), &json!(3), &json!(1), &json!(2), &json!(6))
    );
    let verdict = support::run_ok(&["verify", path_text(&archive), "--quiet"]);
    assert!(verdict.contains(": OK: sqlite archive"), "{verdict}");
    let copy = format!("sqlite://{}", path("copy.db").display());
    let (ok, _, err) = support::import(&archive, &copy, &blobs, true);
    assert!(ok, "{err}");
    let again = path("again.ndjson");
    support::export(&copy, &blobs, &again);
    support::assert_same_archive_body(&archive, &again, "a ticket archive re-exported");
    for id in &ids {
        assert_eq!(history(&copy, "ENG", id), history(&database, "ENG", id));
    }
    let mut copied = serve(&copy, &[]).await;
    let t = Team::new(&copied, None, "ENG");
    assert_eq!(read_all(&t, &ids).await, before);
    // The imported team keeps counting: a new ticket lists last.
    let next = t.create("after import", "Ready").await;
    assert_eq!(t.listed(json!({})).await.last(), Some(&next));
    copied.stop().await.unwrap();

    // A comment out of sequence is caught by verify.
    let broken = path("broken.ndjson");
    std::fs::write(
        &broken,
        text.replace("\"seq\":2,\"body_json\"", "\"seq\":3,\"body_json\""),
    )
    .unwrap();
    let (ok, _, err) = support::run(&["verify", path_text(&broken), "--quiet"]);
    assert!(!ok && err.contains("ticket_comment sequence gap"), "{err}");

    // abstore backup of the SQLite file carries them too.
    let mut server = serve(&database, &[]).await;
    let backup = path("backup.db");
    support::run_ok(&[
        "backup",
        "--database",
        &database,
        "--blobs",
        &blobs,
        "--out",
        path_text(&backup),
        "--quiet",
    ]);
    server.stop().await.unwrap();
    let mut restored = serve(&format!("sqlite://{}", backup.display()), &[]).await;
    assert_eq!(
        read_all(&Team::new(&restored, None, "ENG"), &ids).await,
        before
    );
    restored.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn tickets_travel_in_archives_from_sqlite_to_postgres() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("s.db").display());
    let blobs = path_text(&dir.path().join("blobs")).to_owned();
    let mut server = serve(&database, &[]).await;
    let t = Team::new(&server, None, "ENG");
    let ids = seed(&t).await;
    let before = read_all(&t, &ids).await;
    server.stop().await.unwrap();
    let archive = dir.path().join("a.ndjson");
    support::export(&database, &blobs, &archive);
    let Some(pg) = support::pg_database("tickets_archive").await else {
        return;
    };
    let (ok, _, err) = support::import(&archive, &pg.url, &blobs, true);
    assert!(ok, "{err}");
    let again = dir.path().join("pg.ndjson");
    support::export(&pg.url, &blobs, &again);
    support::assert_same_archive_body(&archive, &again, "SQLite and PostgreSQL ticket archives");
    let mut on_pg = serve(&pg.url, &[]).await;
    assert_eq!(
        read_all(&Team::new(&on_pg, None, "ENG"), &ids).await,
        before
    );
    on_pg.stop().await.unwrap();
    support::drop_pg(pg).await;
}

// ── Autobuild's own contract ────────────────────────────────────────────────

/// Autobuild's own `TicketSource` contract through its own hosted client
/// (`HostedTicketSource`) against this binary, in authenticated mode with a
/// deployment token, on SQLite and (when configured) PostgreSQL:
/// `conformance/autobuild/tickets/`. Needs an Autobuild checkout with the
/// hosted ticket client that the user supplies (`ABC_AUTOBUILD`) and Bun
/// (`ABC_BUN`, `BUN` or `bun`); without a checkout it is recorded as not run.
#[tokio::test(flavor = "multi_thread")]
async fn autobuild_ticket_contract() {
    let Ok(autobuild) = std::env::var("ABC_AUTOBUILD") else {
        abstore_testkit::skip::needs_user_supplied(
            "Autobuild's TicketSource contract through its hosted client",
            "set ABC_AUTOBUILD to an Autobuild checkout with hosted tickets (and ABC_BUN)",
        );
        return;
    };
    let bun = std::env::var("ABC_BUN")
        .or_else(|_| std::env::var("BUN"))
        .unwrap_or_else(|_| "bun".to_owned());
    let dir = format!(
        "{}/conformance/autobuild/tickets",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut backends = vec![None];
    if let Ok(url) = std::env::var("ABSTORE_TEST_POSTGRES_URL") {
        backends.push(Some(url));
    }
    for postgres in backends {
        let mut command = tokio::process::Command::new(&bun);
        command
            .args(["test", "--timeout", "30000", "./abstore.tickets.test.ts"])
            .current_dir(&dir)
            .env("ABC_AUTOBUILD", &autobuild)
            .env("ABC_ABSTORE_BIN", support::bin())
            .env("ABC_SECRET", "random")
            .env_remove("ABC_POSTGRES");
        if let Some(url) = &postgres {
            command.env("ABC_POSTGRES", url);
        }
        let status = command
            .status()
            .await
            .unwrap_or_else(|e| panic!("cannot run Bun ({bun}): {e}; set ABC_BUN"));
        assert!(
            status.success(),
            "Autobuild's TicketSource contract failed against abstore ({}): {status}",
            postgres
                .as_deref()
                .map_or("sqlite::memory:", |_| "postgres")
        );
    }
}
