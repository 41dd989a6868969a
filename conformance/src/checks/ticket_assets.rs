//! Protocol 3's ticket assets (docs/protocol-versions.md, "Ticket assets"):
//! the limits route, puts and their revisions, manifest and file reads, the
//! list's two views, removal as a tombstone, the validation table's
//! messages, shape errors, the request ceiling when a server advertises
//! one, and the routes' token cells. Every id starts with `p3.`; the checks
//! need no repository record (the routes have no existence gate), and each
//! works in a ticket of its own. Limits are read from the server, so the
//! checks hold whatever ceiling it advertises.

use serde_json::{Value, json};

use super::{CheckResult, Failure, Registry};
use crate::client::{Call, Ctx, same, shape, time_of};
use crate::ensure;
use crate::token::{deployment_scope, resource_scope};
use crate::util::{b64, enc, sha256_hex, unb64, unique};

pub fn register(r: &mut Registry) {
    r.add("p3.s4.ticket_assets.limits", "4", limits_route);
    r.add(
        "p3.s4.ticket_assets.put_answers_the_manifest",
        "4",
        put_answers_manifest,
    );
    r.add(
        "p3.s4.ticket_assets.revisions_per_asset",
        "4",
        revisions_per_asset,
    );
    r.add("p3.s4.ticket_assets.no_repository_gate", "4", no_gate);
    r.add("p3.s4.ticket_assets.one_file", "4", one_file);
    r.add("p3.s4.ticket_assets.list_views", "4", list_views);
    r.add(
        "p3.s4.ticket_assets.removal_is_a_tombstone",
        "4",
        removal_tombstone,
    );
    r.rows(
        "p3.s4.ticket_assets.validation.",
        "4",
        VALIDATION_ROWS.iter().map(|(name, row)| (*name, *row)),
        validation_row,
    );
    r.add("p3.s4.ticket_assets.shape_errors_400", "4", shape_errors);
    r.add(
        "p3.s4.ticket_assets.request_ceiling_413",
        "4",
        request_ceiling,
    );
    r.add(
        "p3.s4.ticket_assets.concurrent_puts_distinct_revisions",
        "4",
        concurrent_puts,
    );
    r.add("p3.s7.ticket_assets.token_matrix", "7", token_matrix);
}

// ── helpers ──────────────────────────────────────────────────────────────────

/// A fresh repository id and ticket: `/repos/{repo}/tickets/{ticket}`.
fn new_ticket() -> (String, String) {
    let repo = format!("{}/w", unique("acme"));
    let base = format!("/repos/{}/tickets/{}", enc(&repo), enc(&unique("T")));
    (repo, base)
}

fn put_body(kind: &str, name: &str, layout: &str, entries: Value) -> Value {
    json!({"kind": kind, "name": name, "layout": layout, "entries": entries})
}

fn file(path: &str, bytes: &[u8]) -> Value {
    json!({"type": "file", "path": path, "contentBase64": b64(bytes)})
}

fn dir(path: &str) -> Value {
    json!({"type": "dir", "path": path})
}

/// A put that must succeed (201); its meta.
async fn put(c: &Ctx, base: &str, body: &Value) -> Result<Value, String> {
    c.post(&format!("{base}/assets"), body)
        .send()
        .await?
        .json_status(201)
}

/// A GET answering 200; its body.
async fn get_ok(c: &Ctx, path: &str) -> Result<Value, String> {
    c.get(path).send().await?.json_status(200)
}

/// The server's advertised limits: `(maxBytes, maxRequestBytes)`.
async fn limits(c: &Ctx) -> Result<(u64, Option<u64>), String> {
    let v = get_ok(c, &format!("/repos/{}/ticket-asset-limits", enc("acme/w"))).await?;
    let max_bytes = v["maxBytes"]
        .as_u64()
        .ok_or_else(|| format!("maxBytes is not a nonnegative integer: {v}"))?;
    Ok((max_bytes, v["maxRequestBytes"].as_u64()))
}

/// The effective byte limit under `ceiling` (the formula the protocol
/// gives clients and servers).
fn effective_max_bytes(ceiling: Option<u64>) -> u64 {
    const DEFAULT: u64 = 26_214_400;
    match ceiling {
        None => DEFAULT,
        Some(c) => (c.saturating_sub(321_024) as u128 * 3 / 4).min(u128::from(DEFAULT)) as u64,
    }
}

/// A byte count as Autobuild's messages render it (`25 MiB`, `2.8 MiB`,
/// `4 KiB`, `1000 bytes`).
fn human_bytes(bytes: u64) -> String {
    const MIB: u64 = 1 << 20;
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= MIB {
        let tenths = (u128::from(bytes) * 10 + u128::from(MIB / 2)) / u128::from(MIB);
        format!("{}.{} MiB", tenths / 10, tenths % 10)
    } else if bytes >= 1024 && bytes.is_multiple_of(1024) {
        format!("{} KiB", bytes / 1024)
    } else {
        format!("{bytes} bytes")
    }
}

const META: &[&str] = &[
    "repo",
    "ticketId",
    "kind",
    "name",
    "revision",
    "layout",
    "size",
    "entries",
    "createdAt",
];
const SUMMARY: &[&str] = &[
    "repo",
    "ticketId",
    "kind",
    "name",
    "revision",
    "layout",
    "size",
    "fileCount",
    "dirCount",
    "createdAt",
];

/// The summary the list gives of `meta`.
fn summary_of(meta: &Value) -> Value {
    let entries = meta["entries"].as_array().cloned().unwrap_or_default();
    let files = entries.iter().filter(|e| e["type"] == "file").count();
    let mut s = meta.clone();
    if let Some(obj) = s.as_object_mut() {
        obj.remove("entries");
        obj.insert("fileCount".into(), files.into());
        obj.insert("dirCount".into(), (entries.len() - files).into());
    }
    s
}

/// `(kind, name, revision)` of each summary of a list answer.
fn keys(list: &Value) -> Vec<(String, String, i64)> {
    list.as_array()
        .map(|items| {
            items
                .iter()
                .map(|s| {
                    (
                        s["kind"].as_str().unwrap_or_default().to_owned(),
                        s["name"].as_str().unwrap_or_default().to_owned(),
                        s["revision"].as_i64().unwrap_or(-1),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn key(kind: &str, name: &str, revision: i64) -> (String, String, i64) {
    (kind.to_owned(), name.to_owned(), revision)
}

// ── the routes ───────────────────────────────────────────────────────────────

async fn limits_route(c: Ctx) -> CheckResult {
    let v = get_ok(&c, &format!("/repos/{}/ticket-asset-limits", enc("acme/w"))).await?;
    shape(
        "the limits",
        &v,
        &["maxBytes", "maxEntries"],
        &["maxRequestBytes"],
    )?;
    same("maxEntries", &v["maxEntries"], &json!(1000))?;
    let (max_bytes, ceiling) = limits(&c).await?;
    ensure!(
        v.get("maxRequestBytes").is_none() || ceiling.is_some(),
        "maxRequestBytes is not a nonnegative integer: {v}"
    );
    ensure!(
        max_bytes == effective_max_bytes(ceiling),
        "maxBytes {max_bytes} is not the effective limit {} of maxRequestBytes {ceiling:?}",
        effective_max_bytes(ceiling)
    );
    Ok(())
}

async fn put_answers_manifest(c: Ctx) -> CheckResult {
    let (repo, base) = new_ticket();
    let ticket = base.rsplit('/').next().unwrap_or_default().to_owned();
    let html = b"<h1>hi</h1>";
    let meta = put(
        &c,
        &base,
        &put_body(
            "design",
            "home",
            "tree",
            json!([
                dir("img/empty"),
                file("index.html", html),
                file("img/a.png", b"")
            ]),
        ),
    )
    .await?;
    shape("the put's TicketAssetMeta", &meta, META, &[])?;
    time_of("the put's TicketAssetMeta", &meta, "createdAt")?;
    let want = json!({
        "repo": repo, "ticketId": ticket, "kind": "design", "name": "home",
        "revision": 0, "layout": "tree", "size": html.len(),
        "entries": [
            {"type": "dir", "path": "img/empty"},
            {"type": "file", "path": "index.html", "size": html.len(), "blobRef": sha256_hex(html)},
            {"type": "file", "path": "img/a.png", "size": 0, "blobRef": sha256_hex(b"")}
        ],
        "createdAt": meta["createdAt"]
    });
    same("the put's meta", &meta, &want)?;
    let path = format!("{base}/assets?kind=design&name=home");
    same("the manifest read", &get_ok(&c, &path).await?, &meta)?;
    same(
        "the manifest read of rev=0",
        &get_ok(&c, &format!("{path}&rev=0")).await?,
        &meta,
    )?;
    let single = put(
        &c,
        &base,
        &put_body("doc", "spec", "file", json!([file("spec.md", b"# spec")])),
    )
    .await?;
    same("a file layout", &single["layout"], &json!("file"))?;
    same("its size", &single["size"], &json!(6))?;
    Ok(())
}

async fn revisions_per_asset(c: Ctx) -> CheckResult {
    let (_, base) = new_ticket();
    let (_, other_ticket) = new_ticket();
    let body = |n: u8| put_body("design", "home", "tree", json!([file("a", &[n])]));
    let mut revisions = Vec::new();
    for n in 0..3 {
        revisions.push(put(&c, &base, &body(n)).await?["revision"].clone());
    }
    same(
        "revisions of one asset",
        &json!(revisions),
        &json!([0, 1, 2]),
    )?;
    let other = put(&c, &base, &put_body("design", "other", "tree", json!([]))).await?;
    same(
        "another name's first revision",
        &other["revision"],
        &json!(0),
    )?;
    let elsewhere = put(&c, &other_ticket, &body(9)).await?;
    same(
        "another ticket's first revision",
        &elsewhere["revision"],
        &json!(0),
    )?;
    let path = format!("{base}/assets?kind=design&name=home");
    let first = get_ok(&c, &format!("{path}&rev=0")).await?;
    same(
        "revision 0's content address",
        &first["entries"][0]["blobRef"],
        &json!(sha256_hex(&[0])),
    )?;
    same(
        "an empty rev (Number(\"\") is 0)",
        &get_ok(&c, &format!("{path}&rev=")).await?,
        &first,
    )?;
    same(
        "the latest",
        &get_ok(&c, &path).await?["revision"],
        &json!(2),
    )?;
    for rev in ["3", "-1", "1e300"] {
        same(
            &format!("rev={rev}"),
            &get_ok(&c, &format!("{path}&rev={rev}")).await?,
            &Value::Null,
        )?;
    }
    same(
        "an asset never put",
        &get_ok(&c, &format!("{base}/assets?kind=design&name=never")).await?,
        &Value::Null,
    )?;
    for bad in ["rev=x", "rev=1.5"] {
        c.get(&format!("{path}&{bad}")).send().await?.e400()?;
    }
    for missing in ["name=home", "kind=design", "kind=&name=home"] {
        c.get(&format!("{base}/assets?{missing}"))
            .send()
            .await?
            .e400()?;
    }
    Ok(())
}

async fn no_gate(c: Ctx) -> CheckResult {
    let (repo, base) = new_ticket();
    c.get(&format!("/repos/{}", enc(&repo)))
        .send()
        .await?
        .e404()?;
    put(&c, &base, &put_body("d", "n", "tree", json!([]))).await?;
    same(
        "the list of a repository without a record",
        &json!(keys(&get_ok(&c, &format!("{base}/assets/list")).await?)),
        &json!([key("d", "n", 0)]),
    )?;
    Ok(())
}

async fn one_file(c: Ctx) -> CheckResult {
    let (_, base) = new_ticket();
    let bytes: Vec<u8> = (0..=255).collect();
    put(
        &c,
        &base,
        &put_body(
            "design",
            "home",
            "tree",
            json!([file("img/all.bin", &bytes), dir("img/empty")]),
        ),
    )
    .await?;
    let read = |q: &str| format!("{base}/assets/file?kind=design&name=home&{q}");
    let got = get_ok(&c, &read("path=img%2Fall.bin")).await?;
    shape("a file read", &got, &["contentBase64"], &[])?;
    let content = got["contentBase64"].as_str().and_then(unb64);
    ensure!(
        content.as_deref() == Some(&bytes[..]),
        "the file read's bytes differ from the put's: {got}"
    );
    same(
        "rev=0's file",
        &get_ok(&c, &read("rev=0&path=img%2Fall.bin")).await?,
        &got,
    )?;
    for missing in ["path=img%2Fempty", "path=img", "path=nope.txt"] {
        c.get(&read(missing)).send().await?.e404()?;
    }
    for absent in ["rev=1&path=img%2Fall.bin", "rev=-1&path=img%2Fall.bin"] {
        same(absent, &get_ok(&c, &read(absent)).await?, &Value::Null)?;
    }
    same(
        "a file of an asset never put",
        &get_ok(
            &c,
            &format!("{base}/assets/file?kind=design&name=never&path=a"),
        )
        .await?,
        &Value::Null,
    )?;
    c.get(&read("rev=0")).send().await?.e400()?;
    c.get(&read("path=")).send().await?.e400()?;
    Ok(())
}

async fn list_views(c: Ctx) -> CheckResult {
    let (_, base) = new_ticket();
    let list = format!("{base}/assets/list");
    same(
        "an empty ticket's list",
        &get_ok(&c, &list).await?,
        &json!([]),
    )?;
    let mut metas = Vec::new();
    for (kind, name) in [("b", "z"), ("a", "y"), ("b", "a"), ("a", "y"), ("B", "x")] {
        let body = put_body(kind, name, "tree", json!([file("f", b"1"), dir("d")]));
        metas.push(put(&c, &base, &body).await?);
    }
    let latest = get_ok(&c, &list).await?;
    same(
        "the default list (latest of each, by kind, name)",
        &json!(keys(&latest)),
        &json!([
            key("B", "x", 0),
            key("a", "y", 1),
            key("b", "a", 0),
            key("b", "z", 0)
        ]),
    )?;
    for s in latest.as_array().into_iter().flatten() {
        shape("a TicketAssetSummary", s, SUMMARY, &[])?;
    }
    same("the summary of a/y", &latest[1], &summary_of(&metas[3]))?;
    let all = get_ok(&c, &format!("{list}?revisions=1")).await?;
    same(
        "revisions=1",
        &json!(keys(&all)),
        &json!([
            key("B", "x", 0),
            key("a", "y", 0),
            key("a", "y", 1),
            key("b", "a", 0),
            key("b", "z", 0)
        ]),
    )?;
    same("a/y revision 0's summary", &all[1], &summary_of(&metas[1]))?;
    Ok(())
}

async fn removal_tombstone(c: Ctx) -> CheckResult {
    let (_, base) = new_ticket();
    let body = |n: u8| put_body("design", "home", "tree", json!([file("a", &[n])]));
    put(&c, &base, &body(0)).await?;
    let live = put(&c, &base, &body(1)).await?;
    put(&c, &base, &put_body("design", "other", "tree", json!([]))).await?;
    let remove = format!("{base}/assets/remove");
    let target = json!({"kind": "design", "name": "home"});
    let removed = c.post(&remove, &target).send().await?.json_status(200)?;
    same(
        "the removal's answer (the latest live revision)",
        &removed,
        &live,
    )?;
    let path = format!("{base}/assets?kind=design&name=home");
    same(
        "the latest after removal",
        &get_ok(&c, &path).await?,
        &Value::Null,
    )?;
    same(
        "the tombstone's own revision",
        &get_ok(&c, &format!("{path}&rev=2")).await?,
        &Value::Null,
    )?;
    same(
        "a pinned revision after removal",
        &get_ok(&c, &format!("{path}&rev=1")).await?,
        &live,
    )?;
    let file = format!("{base}/assets/file?kind=design&name=home&path=a");
    same("the latest file", &get_ok(&c, &file).await?, &Value::Null)?;
    same(
        "a pinned revision's file",
        &get_ok(&c, &format!("{file}&rev=1")).await?,
        &json!({"contentBase64": b64(&[1])}),
    )?;
    let list = format!("{base}/assets/list");
    same(
        "the default list after removal",
        &json!(keys(&get_ok(&c, &list).await?)),
        &json!([key("design", "other", 0)]),
    )?;
    same(
        "revisions=1 after removal (no tombstone)",
        &json!(keys(&get_ok(&c, &format!("{list}?revisions=1")).await?)),
        &json!([
            key("design", "home", 0),
            key("design", "home", 1),
            key("design", "other", 0)
        ]),
    )?;
    for gone in [target.clone(), json!({"kind": "design", "name": "never"})] {
        same(
            &format!("removing {gone} with nothing live"),
            &c.post(&remove, &gone).send().await?.json_status(200)?,
            &Value::Null,
        )?;
    }
    let again = put(&c, &base, &body(3)).await?;
    same(
        "re-attaching (the tombstone's number skipped, nothing written by the no-op removal)",
        &again["revision"],
        &json!(3),
    )?;
    c.post(&remove, &json!({"name": "home"}))
        .send()
        .await?
        .e400()?;
    Ok(())
}

// ── validation ───────────────────────────────────────────────────────────────

/// A validation row: the request body and the exact 422 message, given the
/// server's effective byte limit.
type Row = fn(u64) -> (Value, String);

fn tree(entries: Value) -> Value {
    put_body("design", "home", "tree", entries)
}

const VALIDATION_ROWS: &[(&str, Row)] = &[
    ("01_kind_required", |_| {
        (
            put_body(" ", "n", "tree", json!([])),
            "ticket asset kind is required".into(),
        )
    }),
    ("01_name_required", |_| {
        (
            put_body("k", "", "tree", json!([])),
            "ticket asset name is required".into(),
        )
    }),
    ("02_label_64_utf16_units", |_| {
        (
            put_body("k", &"é".repeat(65), "tree", json!([])),
            "ticket asset name must be at most 64 characters".into(),
        )
    }),
    ("03_label_characters", |_| {
        (
            put_body("a/b", "n", "tree", json!([])),
            "ticket asset kind \"a/b\" may contain only letters, digits, '.', '_' and '-'".into(),
        )
    }),
    ("03_label_dot", |_| {
        (
            put_body("k", ".", "tree", json!([])),
            "ticket asset name \".\" may contain only letters, digits, '.', '_' and '-'".into(),
        )
    }),
    ("04_layout", |_| {
        (
            put_body("k", "n", "dir", json!([])),
            "ticket asset layout must be 'file' or 'tree'".into(),
        )
    }),
    ("05_file_layout_one_file", |_| {
        (
            put_body("k", "n", "file", json!([dir("a")])),
            "a 'file' ticket asset has exactly one file entry and no directories".into(),
        )
    }),
    ("06_file_layout_filename", |_| {
        (
            put_body("k", "n", "file", json!([file("a/b.txt", b"1")])),
            "a 'file' ticket asset's path is its filename".into(),
        )
    }),
    ("07_entries_limit", |_| {
        let entries: Vec<Value> = (0..1001).map(|i| dir(&format!("d{i}"))).collect();
        (
            tree(Value::Array(entries)),
            "ticket asset exceeds the 1000-entry limit: 1001 entries (files plus directories)"
                .into(),
        )
    }),
    ("08_entry_type", |_| {
        (
            tree(json!([dir("a"), {"type": "symlink", "path": "b"}])),
            "ticket asset entry type must be 'file' or 'dir'".into(),
        )
    }),
    ("09_path_required", |_| {
        (
            tree(json!([file("", b"")])),
            "ticket asset entry path is required".into(),
        )
    }),
    ("10_path_nul", |_| {
        (
            tree(json!([dir("a\u{0}")])),
            "ticket asset entry path \"a\u{0}\" contains a NUL byte".into(),
        )
    }),
    ("11_path_backslash", |_| {
        (
            tree(json!([dir("a\\b")])),
            "ticket asset entry path \"a\\b\" must use '/' separators".into(),
        )
    }),
    ("12_path_256_bytes", |_| {
        let path = format!("{}/{}", "é".repeat(60), "x".repeat(140));
        (
            tree(json!([dir(&path)])),
            format!(
                "ticket asset entry path exceeds 256 bytes: \"{}…\"",
                "é".repeat(40)
            ),
        )
    }),
    ("13_path_relative", |_| {
        (
            tree(json!([dir("/etc")])),
            "ticket asset entry path \"/etc\" must be relative".into(),
        )
    }),
    ("14_path_segments", |_| {
        (
            tree(json!([dir("a/./b")])),
            "ticket asset entry path \"a/./b\" has an empty, '.' or '..' segment".into(),
        )
    }),
    ("15_segment_128_bytes", |_| {
        let path = format!("x/{}", "y".repeat(129));
        (
            tree(json!([dir(&path)])),
            format!(
                "ticket asset entry path segment exceeds 128 bytes in \"x/{}…\"",
                "y".repeat(38)
            ),
        )
    }),
    ("16_duplicate_path", |_| {
        (
            tree(json!([dir("a"), file("b", b""), dir("a")])),
            "duplicate ticket asset entry path \"a\"".into(),
        )
    }),
    ("17_file_ancestor", |_| {
        (
            tree(json!([dir("a/b/c"), file("a/b", b"1")])),
            "ticket asset entry \"a/b/c\" has a file as its ancestor directory \"a/b\"".into(),
        )
    }),
    ("18_byte_limit", |max_bytes| {
        let bytes = vec![0u8; usize::try_from(max_bytes + 1).unwrap_or(usize::MAX)];
        (
            tree(json!([file("big.bin", &bytes)])),
            format!(
                "ticket asset exceeds the {max_bytes}-byte ({}) limit: {} bytes",
                human_bytes(max_bytes),
                max_bytes + 1
            ),
        )
    }),
];

async fn validation_row(c: Ctx, row: Row) -> CheckResult {
    let (max_bytes, _) = limits(&c).await?;
    let (body, message) = row(max_bytes);
    let (_, base) = new_ticket();
    c.post(&format!("{base}/assets"), &body)
        .send()
        .await?
        .error_msg(422, "validation", &message)?;
    same(
        "the ticket after a refused put",
        &get_ok(&c, &format!("{base}/assets/list?revisions=1")).await?,
        &json!([]),
    )?;
    Ok(())
}

async fn shape_errors(c: Ctx) -> CheckResult {
    let (_, base) = new_ticket();
    let assets = format!("{base}/assets");
    let bad = [
        "not json".to_owned(),
        "[]".to_owned(),
        json!({"name": "n", "layout": "tree", "entries": []}).to_string(),
        json!({"kind": 1, "name": "n", "layout": "tree", "entries": []}).to_string(),
        json!({"kind": "k", "name": "n", "layout": "tree", "entries": "a"}).to_string(),
        json!({"kind": "k", "name": "n", "layout": "tree"}).to_string(),
        put_body("k", "n", "tree", json!(["a"])).to_string(),
        put_body("k", "n", "tree", json!([{"type": "dir"}])).to_string(),
        put_body("k", "n", "tree", json!([{"type": "file", "path": "a"}])).to_string(),
        // Before the validation table: these labels would fail it too.
        put_body("", "", "tree", json!([{"type": "file", "path": "a", "contentBase64": "YQ"}]))
            .to_string(),
        put_body("k", "n", "tree", json!([{"type": "file", "path": "a", "contentBase64": "YQ=="}, {"type": "file", "path": "b", "contentBase64": "aGk=\n"}]))
            .to_string(),
    ];
    for body in bad {
        c.post_raw(&assets, body).send().await?.e400()?;
    }
    same(
        "the ticket after refused puts",
        &get_ok(&c, &format!("{assets}/list?revisions=1")).await?,
        &json!([]),
    )?;
    Ok(())
}

async fn request_ceiling(c: Ctx) -> CheckResult {
    let (_, ceiling) = limits(&c).await?;
    let Some(ceiling) = ceiling else {
        return Err(Failure::Skip(
            "the server advertises no maxRequestBytes".into(),
        ));
    };
    let (_, base) = new_ticket();
    let mut body = put_body("design", "home", "tree", json!([]));
    body["pad"] = json!("");
    let bare = body.to_string().len() as u64;
    body["pad"] = json!("x".repeat(usize::try_from(ceiling + 1 - bare).unwrap_or(0)));
    let r = c.post(&format!("{base}/assets"), &body).send().await?;
    let message = r.error(413, "validation")?;
    let wanted = format!("deployment request ceiling {ceiling} bytes");
    ensure!(
        message.contains(&wanted),
        "a request over the ceiling: the 413's message {message:?} does not contain {wanted:?}"
    );
    same(
        "the ticket after the refused put",
        &get_ok(&c, &format!("{base}/assets/list?revisions=1")).await?,
        &json!([]),
    )?;
    Ok(())
}

async fn concurrent_puts(c: Ctx) -> CheckResult {
    let (_, base) = new_ticket();
    let racers: Vec<_> = (0..8u8)
        .map(|n| {
            let (c, base) = (c.clone(), base.clone());
            tokio::spawn(async move {
                let body = put_body("design", "home", "tree", json!([file("a", &[n])]));
                put(&c, &base, &body).await.map(|m| m["revision"].as_i64())
            })
        })
        .collect();
    let mut revisions = Vec::new();
    for racer in racers {
        let revision = racer.await.map_err(|e| format!("racer panicked: {e}"))??;
        revisions.push(revision.unwrap_or(-1));
    }
    revisions.sort_unstable();
    ensure!(
        revisions == (0..8).collect::<Vec<_>>(),
        "8 concurrent puts of one asset got revisions {revisions:?}, not 0..8"
    );
    Ok(())
}

// ── token cells ──────────────────────────────────────────────────────────────

/// `method path` with `body`, as `ctx` sends it.
fn request<'a>(ctx: &'a Ctx, method: &str, path: &str, body: Option<&Value>) -> Call<'a> {
    let call = ctx.call(method, path);
    match body {
        Some(body) => call.raw(body.to_string()),
        None => call,
    }
}

async fn token_matrix(c: Ctx) -> CheckResult {
    c.need_secret()?;
    let (repo, base) = new_ticket();
    let (other, _) = new_ticket();
    let (slug, _) = c.new_build().await?;
    let (_, os) = super::sessions::new_session(&c).await?;
    put(
        &c,
        &base,
        &put_body("design", "home", "tree", json!([file("a", b"1")])),
    )
    .await?;
    let routes: Vec<(&str, String, Option<Value>)> = vec![
        (
            "GET",
            format!("/repos/{}/ticket-asset-limits", enc(&repo)),
            None,
        ),
        (
            "POST",
            format!("{base}/assets"),
            Some(put_body("design", "home", "tree", json!([]))),
        ),
        (
            "GET",
            format!("{base}/assets?kind=design&name=home&rev=0"),
            None,
        ),
        (
            "GET",
            format!("{base}/assets/file?kind=design&name=home&rev=0&path=a"),
            None,
        ),
        ("GET", format!("{base}/assets/list"), None),
        (
            "POST",
            format!("{base}/assets/remove"),
            Some(json!({"kind": "none", "name": "none"})),
        ),
    ];
    let allowed = [
        ("admin", c.clone()),
        ("deployment", c.scoped(&deployment_scope(c.exp_ms))?),
        (
            "its repository's token",
            c.scoped(&resource_scope("repo", &repo, "*", c.exp_ms))?,
        ),
    ];
    let refused = [
        (
            "another repository's token",
            c.scoped(&resource_scope("repo", &other, "*", c.exp_ms))?,
        ),
        (
            "a build token",
            c.scoped(&resource_scope("build", &slug, "*", c.exp_ms))?,
        ),
        (
            "a session token",
            c.scoped(&resource_scope("session", &os, "*", c.exp_ms))?,
        ),
    ];
    for (method, path, body) in &routes {
        let call = |ctx| request(ctx, method, path, body.as_ref());
        for (who, ctx) in &allowed {
            let r = call(ctx).send().await?;
            ensure!(
                matches!(r.status, 200 | 201),
                "{who} on {method} {path}: {}",
                r.fail("200 or 201")
            );
        }
        for (who, ctx) in &refused {
            let r = call(ctx).send().await?;
            r.error(403, "auth").map_err(|e| format!("{who}: {e}"))?;
        }
        let r = call(&c).no_auth().send().await?;
        r.error(401, "auth").map_err(|e| format!("no token: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_and_sizes_follow_the_protocols_formulas() {
        assert_eq!(effective_max_bytes(None), 26_214_400);
        assert_eq!(effective_max_bytes(Some(4_194_304)), 2_904_960);
        assert_eq!(effective_max_bytes(Some(100)), 0);
        assert_eq!(human_bytes(26_214_400), "25 MiB");
        assert_eq!(human_bytes(2_904_960), "2.8 MiB");
        assert_eq!(human_bytes(1_310_720), "1.3 MiB");
        assert_eq!(human_bytes(4096), "4 KiB");
        assert_eq!(human_bytes(1000), "1000 bytes");
    }
}
