//! Input hygiene and failure reporting through the real binary:
//!
//! - ids, artifact kinds, lease holders and stream labels: the documented
//!   bound (`MAX_ID_BYTES`) is accepted, one byte past it and any NUL are
//!   `400 validation` in bodies and `404` in paths, identically on SQLite and
//!   PostgreSQL (whose `text` refuses NUL and whose btree rows stop near 2.7 KB);
//!   NULs inside JSON strings round-trip;
//! - repeated identity headers must all match (409 otherwise);
//! - `/readyz` notices a blob directory that can no longer be written.

use crate::support;

use abstore::protocol::ident::MAX_ID_BYTES;
use abstore_conformance::fixtures::{build_event, repo_event};
use serde_json::{Value, json};
use support::{Raw, Reply, Server, await_readiness, enc, with_pg};

async fn send(base: &str, raw: Raw<'_>) -> Reply {
    let what = format!("{} {}", raw.method, support_trunc(&raw.target));
    let reply = raw
        .send(base)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        reply.status < 500,
        "{what}: {} {}",
        reply.status,
        reply.text()
    );
    reply.assert_error_shape(&what);
    reply
}

fn support_trunc(s: &str) -> String {
    s.chars().take(120).collect()
}

fn post(path: impl Into<String>, body: &Value) -> Raw<'static> {
    Raw::new("POST", path, None).json(body)
}

fn get(path: impl Into<String>) -> Raw<'static> {
    Raw::new("GET", path, None)
}

/// Every identifier rule, at the bound, one past it and with a NUL.
async fn identifiers(base: &str) {
    let at = "b".repeat(MAX_ID_BYTES);
    let past = "b".repeat(MAX_ID_BYTES + 1);

    // Build slugs: the bound works end to end (append, deposit, read back).
    for (slug, status) in [(&at, 201), (&past, 400), (&"nul\0slug".to_owned(), 400)] {
        let r = send(
            base,
            post("/builds", &json!({"slug": slug, "repo": "acme/w"})),
        )
        .await;
        r.expect(
            status,
            (status == 400).then_some("validation"),
            "create build",
        );
        if status == 400 {
            assert!(r.text().contains("slug"), "names the field: {}", r.text());
        }
    }
    let b = format!("/builds/{}", enc(&at));
    send(
        base,
        post(format!("{b}/events"), &build_event("observation")),
    )
    .await
    .expect(201, None, "append at the bound");

    // Artifact kinds (composite key: family + slug + kind at their bounds).
    let kind_at = "k".repeat(MAX_ID_BYTES);
    for (kind, status) in [
        (kind_at.clone(), 201),
        ("k".repeat(MAX_ID_BYTES + 1), 400),
        ("plan\0x".to_owned(), 400),
    ] {
        let artifact =
            json!({"kind": kind, "contentBase64": "aGk=", "metadata": {"k\u{0}": "v\u{0}"}});
        send(base, post(format!("{b}/artifacts"), &artifact))
            .await
            .expect(status, None, "put artifact");
        let deposit = json!({"artifacts": [artifact], "event": build_event("observation")});
        send(base, post(format!("{b}/deposits"), &deposit))
            .await
            .expect(status, None, "deposit");
    }
    let read = send(base, get(format!("{b}/artifacts?kind={}", enc(&kind_at)))).await;
    read.expect(200, None, "artifact at the bound");
    assert_eq!(read.json()["meta"]["metadata"], json!({"k\u{0}": "v\u{0}"}));
    for query in [
        format!("kind={}", enc("a\0")),
        format!("kind={}", "k".repeat(MAX_ID_BYTES + 1)),
    ] {
        for route in ["artifacts", "artifact-list"] {
            send(base, get(format!("{b}/{route}?{query}")))
                .await
                .expect(400, Some("validation"), "kind query");
        }
    }

    // Lease holders.
    for (holder, claim_status) in [
        ("h".repeat(MAX_ID_BYTES + 1), 400),
        ("h\0".to_owned(), 400),
        ("h".repeat(MAX_ID_BYTES), 200),
    ] {
        for op in ["claim", "heartbeat", "release"] {
            let body = json!({"holder": holder, "ttlMs": 1000});
            send(base, post(format!("{b}/lease/{op}"), &body))
                .await
                .expect(claim_status, None, op);
        }
    }

    // Repository ids and the session routes under them.
    for (repo, status) in [(at.clone(), 200), (past.clone(), 400), ("r\0".into(), 400)] {
        send(base, post("/repos", &json!({"repo": repo})))
            .await
            .expect(status, None, "ensure repo");
    }
    let r = format!("/repos/{}", enc(&at));
    send(
        base,
        post(format!("{r}/events"), &repo_event("pauseRequested")),
    )
    .await
    .expect(201, None, "repo append at the bound");
    let session = send(
        base,
        post(
            format!("{r}/sessions"),
            &json!({"repo": at, "operator": "op\u{0}erator", "title": "t\u{0}"}),
        ),
    )
    .await;
    session.expect(201, None, "session with NUL in operator and title");
    let sid = session.json()["id"].as_str().unwrap_or_default().to_owned();
    let again = send(base, get(format!("/sessions/{sid}"))).await;
    assert_eq!(again.json()["operator"], "op\u{0}erator");

    // Stream labels.
    for (label, status) in [
        ("l".repeat(MAX_ID_BYTES), 201),
        ("l".repeat(MAX_ID_BYTES + 1), 400),
        ("l\0".into(), 400),
    ] {
        send(base, post(format!("{b}/streams"), &json!({"label": label})))
            .await
            .expect(status, None, "create stream");
    }

    // JSON strings with NUL round-trip exactly.
    let mut event = build_event("observation");
    event["payload"]["summary"] = json!("a\u{0}b");
    let appended = send(base, post(format!("{b}/events"), &event)).await;
    appended.expect(201, None, "NUL in a payload string");
    let events = send(base, get(format!("{b}/events?since=0"))).await.json();
    let last = events
        .as_array()
        .and_then(|e| e.last())
        .cloned()
        .unwrap_or_default();
    assert_eq!(last["payload"]["summary"], "a\u{0}b");
    let ticket = json!({"slug": "ticketed", "repo": "r\u{0}", "branch": "b\u{0}",
        "ticket": {"source": "s\u{0}", "id": "i\u{0}", "title": "t\u{0}"}});
    let created = send(base, post("/builds", &ticket)).await;
    created.expect(201, None, "NUL in build attributes");
    assert_eq!(created.json()["ticket"]["title"], "t\u{0}");
    assert_eq!(
        send(base, get("/builds/ticketed")).await.json()["branch"],
        "b\u{0}"
    );

    // Lone UTF-16 surrogates cannot become UTF-8 text: refused as bad JSON
    // everywhere, not passed on to the database.
    for raw in [
        r#"{"slug": "\ud800", "repo": "r"}"#,
        r#"{"slug": "ok-surrogate", "repo": "\udc00x"}"#,
    ] {
        send(base, Raw::new("POST", "/builds", None).body(raw))
            .await
            .expect(400, Some("validation"), raw);
    }
    let lone = r#"{"actor": {"kind": "kernel"}, "type": "observation.recorded",
        "payload": {"id": "o", "kind": "followup", "summary": "\ud83d"}}"#;
    send(
        base,
        Raw::new("POST", format!("{b}/events"), None).body(lone),
    )
    .await
    .expect(400, Some("validation"), "lone surrogate in a payload");

    // Paths naming ids that cannot exist: 404, never a store error.
    for id in [enc("\0"), enc("a\0b"), past.clone()] {
        for (method, path) in [
            ("GET", format!("/builds/{id}")),
            ("POST", format!("/builds/{id}/events")),
            ("GET", format!("/builds/{id}/events")),
            ("GET", format!("/repos/{id}/sessions")),
            ("POST", format!("/repos/{id}/sessions")),
            ("GET", format!("/sessions/{id}")),
            ("GET", format!("/streams/{id}")),
            ("POST", format!("/streams/{id}/chunks")),
            ("POST", format!("/streams/{id}/close")),
            ("GET", format!("{b}/streams/{id}")),
            ("GET", format!("{b}/streams/{id}/chunks")),
        ] {
            let raw = Raw::new(method, path.clone(), None);
            let raw = if method == "POST" {
                raw.json(&json!({}))
            } else {
                raw
            };
            send(base, raw).await.expect(
                404,
                Some("not-found"),
                &format!("{method} {}", support_trunc(&path)),
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn identifiers_sqlite() {
    let mut server = Server::builder().start().await;
    identifiers(server.url()).await;
    server.stop().await.ok();
}

#[tokio::test(flavor = "multi_thread")]
async fn identifiers_postgres() {
    with_pg("robust_ids", |url| async move {
        let mut server = Server::builder().database(&url).start().await;
        identifiers(server.url()).await;
        let stderr = server.stderr();
        assert!(!stderr.contains("ERROR"), "no error logged:\n{stderr}");
        server.stop().await.ok();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn repeated_identity_headers_must_all_match() {
    let mut server = Server::builder().start().await;
    let base = server.url();
    let version = "X-Autobuild-Version";
    let protocol = "X-Autobuild-Protocol-Version";
    for (name, extra, status) in [
        (version, "9.9.9", 409),
        (version, "0.8.0", 200),
        (protocol, "3", 409),
        (protocol, "2", 200),
    ] {
        let r = send(base, get("/builds").header(name, extra)).await;
        r.expect(status, None, &format!("{name}: twice, second {extra}"));
    }
    // The differing copy first: still refused.
    let mut raw = get("/builds");
    raw.headers.insert(0, (version.into(), b"9.9.9".to_vec()));
    send(base, raw)
        .await
        .expect(409, Some("conflict"), "differing first");
    server.stop().await.ok();
}

/// Make `dir` refuse new entries while staying readable, even for root:
/// `chattr +i` where the file system supports it; otherwise a plain file
/// takes the directory's place. Dropping the guard undoes it (also when an
/// assertion fails, so the temporary directory can still be removed).
struct Unwritable(Option<Box<dyn FnOnce()>>);

impl Drop for Unwritable {
    fn drop(&mut self) {
        if let Some(undo) = self.0.take() {
            undo();
        }
    }
}

fn break_writes(dir: &std::path::Path) -> Unwritable {
    Unwritable(Some(undo_of_breaking(dir)))
}

fn undo_of_breaking(dir: &std::path::Path) -> Box<dyn FnOnce()> {
    let chattr = |flag: &str| {
        std::process::Command::new("chattr")
            .arg(flag)
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success())
    };
    if chattr("+i") {
        let dir = dir.to_owned();
        return Box::new(move || {
            let undone = std::process::Command::new("chattr")
                .arg("-i")
                .arg(&dir)
                .status()
                .is_ok_and(|s| s.success());
            assert!(undone, "chattr -i {}", dir.display());
        });
    }
    eprintln!("chattr unavailable: replacing the blob directory by a file");
    let aside = dir.with_extension("aside");
    std::fs::rename(dir, &aside).expect("move the blob directory aside");
    std::fs::write(dir, b"not a directory").expect("file in its place");
    let dir = dir.to_owned();
    Box::new(move || {
        std::fs::remove_file(&dir).expect("remove the file");
        std::fs::rename(&aside, &dir).expect("restore the directory");
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn readiness_fails_when_blobs_cannot_be_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let blobs = dir.path().join("blobs");
    let mut server = Server::builder()
        .blobs(&blobs.display().to_string())
        .start()
        .await;
    let base = server.url().to_owned();
    await_readiness(&base, 200).await;
    send(&base, post("/builds", &json!({"slug": "b", "repo": "r"})))
        .await
        .expect(201, None, "create");
    let http = reqwest::Client::new();
    let put = |content: &str| {
        http.post(format!("{base}/builds/b/artifacts"))
            .header("x-autobuild-version", "0.8.0")
            .header("x-autobuild-protocol-version", "2")
            .json(&json!({"kind": "plan", "contentBase64": content}))
            .send()
    };

    // Still readable (a lookup succeeds), no longer writable.
    let unwritable = break_writes(&blobs);
    let down = await_readiness(&base, 503).await;
    // A write that needs the blob store is refused as retryable, and
    // commits nothing.
    let refused = put("cmVmdXNlZA==").await.expect("put while unwritable");
    let status = refused.status().as_u16();
    let retry_after = refused.headers().get("retry-after").cloned();
    let body: Value = refused.json().await.expect("JSON error body");
    drop(unwritable);
    assert_eq!(down.json()["checks"]["blobs"], "failed", "{}", down.text());
    assert_eq!(down.json()["checks"]["database"], "ok", "{}", down.text());
    assert_eq!(status, 503, "{body}");
    assert_eq!(retry_after.as_ref().map(|v| v.as_bytes()), Some(&b"1"[..]));
    assert_eq!(
        body,
        json!({"error": "blob store unavailable", "kind": "internal"})
    );
    let nothing = send(&base, get("/builds/b/artifacts?kind=plan")).await;
    assert_eq!(nothing.expect(200, None, "read").json(), Value::Null);

    let up = await_readiness(&base, 200).await;
    assert_eq!(up.json()["ready"], true);
    // The retry succeeds once the store takes writes again.
    let retried = put("cmVmdXNlZA==").await.expect("retry");
    assert_eq!(retried.status().as_u16(), 201);
    server.stop().await.ok();
}
