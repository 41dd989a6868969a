//! Sections 1–4, artifacts: put/get/list for builds and repositories, content
//! addressing, per-kind revisions, metadata round trips, the lenient `rev`
//! query, strict canonical base64 and the decoded-byte ceiling.

use serde_json::{Value, json};

use super::{CheckResult, Registry};
use crate::client::{Ctx, Res, same, shape, time_of};
use crate::ensure;
use crate::util::{b64, sha256_hex, unb64};

const META_KEYS: [&str; 6] = [
    "KEY",
    "kind",
    "revision",
    "blobRef",
    "metadata",
    "createdAt",
];

fn meta_keys(res: Res) -> Vec<&'static str> {
    META_KEYS
        .iter()
        .map(|k| if *k == "KEY" { res.key() } else { *k })
        .collect()
}

pub fn register(r: &mut Registry) {
    for res in [Res::Build, Res::Repo] {
        let s = res.sec();
        let p = format!("s{s}.artifacts");
        r.add(format!("{p}.put_shape"), s, move |c| put_shape(c, res));
        r.add(format!("{p}.blob_ref_is_sha256"), s, move |c| {
            blob_ref(c, res)
        });
        r.add(format!("{p}.revisions_per_kind_from_0"), s, move |c| {
            revisions(c, res)
        });
        r.add(format!("{p}.identical_bytes_next_revision"), s, move |c| {
            identical(c, res)
        });
        r.add(format!("{p}.metadata_defaults_empty"), s, move |c| {
            metadata_default(c, res)
        });
        r.add(format!("{p}.metadata_round_trip_nested"), s, move |c| {
            metadata_nested(c, res)
        });
        r.add(format!("{p}.metadata_not_object_400"), s, move |c| {
            metadata_not_object(c, res)
        });
        r.add(format!("{p}.binary_bytes_round_trip"), s, move |c| {
            binary(c, res)
        });
        r.add(format!("{p}.empty_content"), s, move |c| {
            empty_content(c, res)
        });
        r.add(format!("{p}.get_latest_without_rev"), s, move |c| {
            get_latest(c, res)
        });
        r.add(format!("{p}.get_pinned_rev"), s, move |c| {
            get_pinned(c, res)
        });
        r.add(format!("{p}.get_empty_rev_is_zero"), s, move |c| {
            get_rev_empty(c, res)
        });
        r.add(format!("{p}.get_rev_lenient_forms"), s, move |c| {
            get_rev_lenient(c, res)
        });
        r.add(format!("{p}.get_absent_kind_null"), s, move |c| {
            get_null(c, res, "?kind=never-put")
        });
        r.add(format!("{p}.get_absent_rev_null"), s, move |c| {
            get_null(c, res, "?kind=notes&rev=7")
        });
        r.add(format!("{p}.get_negative_rev_null"), s, move |c| {
            get_null(c, res, "?kind=notes&rev=-1")
        });
        for (name, raw) in [
            ("abc", "abc"),
            ("fraction", "1.5"),
            ("nan", "NaN"),
            ("infinity", "Infinity"),
        ] {
            r.add(format!("{p}.get_rev_rejects_{name}"), s, move |c| {
                get_rev_rejects(c, res, raw)
            });
        }
        r.add(format!("{p}.get_missing_kind_400"), s, move |c| {
            get_kind_required(c, res, "")
        });
        r.add(format!("{p}.get_empty_kind_400"), s, move |c| {
            get_kind_required(c, res, "?kind=")
        });
        r.add(format!("{p}.get_kind_only_rev_400"), s, move |c| {
            get_kind_required(c, res, "?rev=0")
        });
        r.add(
            format!("{p}.list_ordered_by_kind_then_revision"),
            s,
            move |c| list_order(c, res),
        );
        r.add(format!("{p}.list_kind_filter"), s, move |c| {
            list_filter(c, res)
        });
        r.add(format!("{p}.list_empty"), s, move |c| list_empty(c, res));
        r.add(format!("{p}.numeric_revisions_past_ten"), s, move |c| {
            numeric_revisions(c, res)
        });
        r.add(format!("{p}.encoded_kind_round_trip"), s, move |c| {
            encoded_kind(c, res)
        });
        let bad_puts: [(&str, Value); 5] = [
            ("missing_kind", json!({"contentBase64": "YQ=="})),
            ("empty_kind", json!({"kind": "", "contentBase64": "YQ=="})),
            ("missing_content", json!({"kind": "notes"})),
            (
                "content_not_string",
                json!({"kind": "notes", "contentBase64": 5}),
            ),
            (
                "kind_not_string",
                json!({"kind": ["notes"], "contentBase64": "YQ=="}),
            ),
        ];
        for (name, body) in bad_puts {
            r.add(format!("{p}.put_rejects_{name}"), s, move |c| {
                put_rejects(c, res, body.clone())
            });
        }
        r.add(format!("{p}.unknown_resource_404"), s, move |c| {
            unknown(c, res)
        });

        let bp = format!("s{s}.base64");
        let bad64: [(&str, &str); 12] = [
            ("urlsafe_chars", "-_8="),
            ("missing_padding", "YQ"),
            ("missing_one_pad", "YWI"),
            ("nonzero_trailing_bits_2", "YR=="),
            ("nonzero_trailing_bits_1", "YWJ="),
            ("inner_whitespace", "YW Jj"),
            ("trailing_newline", "YWJj\n"),
            ("line_wrapped", "YWJj\nZGVm"),
            ("invalid_char", "YW*j"),
            ("excess_padding", "YQ==="),
            ("padding_in_middle", "YQ==YWJj"),
            ("bad_length", "YWJjZ"),
        ];
        for (name, text) in bad64 {
            r.add(format!("{bp}.rejects_{name}"), s, move |c| {
                base64_rejects(c, res, text)
            });
        }
        r.add(format!("{bp}.accepts_canonical"), s, move |c| {
            base64_accepts(c, res)
        });

        let cp = format!("s{s}.ceiling");
        r.add(format!("{cp}.exact_limit_accepted"), s, move |c| {
            ceiling_exact(c, res)
        });
        r.add(format!("{cp}.one_over_413"), s, move |c| {
            ceiling_over(c, res)
        });
        r.add(
            format!("{cp}.deposit_one_oversized_413_atomic"),
            s,
            move |c| ceiling_deposit(c, res),
        );
    }
}

fn path(res: Res, id: &str, tail: &str) -> String {
    format!("{}/{tail}", res.path(id))
}

async fn put_shape(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let body = json!({"kind": "plan", "contentBase64": b64(b"# Plan\n"), "metadata": {"round": 1}});
    let r = c.post(&path(res, &id, "artifacts"), &body).send().await?;
    let meta = r.json_status(201)?;
    let keys = meta_keys(res);
    shape("artifact metadata", &meta, &keys, &keys)?;
    ensure!(
        meta[res.key()] == json!(id),
        "{}",
        r.fail(format!("{} = {id:?}", res.key()))
    );
    ensure!(
        meta["kind"] == json!("plan") && meta["revision"] == json!(0),
        "{}",
        r.fail("kind plan, revision 0")
    );
    same("metadata", &meta["metadata"], &json!({"round": 1}))?;
    time_of("artifact metadata", &meta, "createdAt")?;
    Ok(())
}

async fn blob_ref(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let bytes = b"content-addressed bytes \x00\xff";
    let meta = c.put_artifact(res, &id, "notes", bytes, None).await?;
    let want = sha256_hex(bytes);
    ensure!(
        meta["blobRef"] == json!(want),
        "blobRef must be the lowercase hex SHA-256 of the decoded bytes: expected {want}; got {}",
        meta["blobRef"]
    );
    Ok(())
}

async fn revisions(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let mut got = Vec::new();
    for (kind, n) in [
        ("plan", 0),
        ("plan", 1),
        ("spec", 0),
        ("plan", 2),
        ("spec", 1),
    ] {
        let meta = c
            .put_artifact(res, &id, kind, format!("{kind}{n}").as_bytes(), None)
            .await?;
        got.push((kind, meta["revision"].clone()));
        ensure!(
            meta["revision"] == json!(n),
            "put #{} of kind {kind}: expected revision {n}; got {} (all: {got:?})",
            n + 1,
            meta["revision"]
        );
    }
    // Another resource's revisions start at 0 again.
    let other = c.create(res).await?;
    let meta = c.put_artifact(res, &other, "plan", b"x", None).await?;
    ensure!(
        meta["revision"] == json!(0),
        "revisions are per resource: expected 0; got {}",
        meta["revision"]
    );
    Ok(())
}

async fn identical(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let a = c.put_artifact(res, &id, "notes", b"same", None).await?;
    let b = c.put_artifact(res, &id, "notes", b"same", None).await?;
    ensure!(
        a["blobRef"] == b["blobRef"],
        "identical bytes must have the same blobRef: {} vs {}",
        a["blobRef"],
        b["blobRef"]
    );
    ensure!(
        b["revision"] == json!(1),
        "identical bytes still create the next revision: expected 1; got {}",
        b["revision"]
    );
    let list = c.list_artifacts(res, &id, "").await?;
    ensure!(
        list.len() == 2,
        "expected 2 metadata revisions; got {list:?}"
    );
    Ok(())
}

async fn metadata_default(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let meta = c.put_artifact(res, &id, "notes", b"x", None).await?;
    same("metadata when omitted", &meta["metadata"], &json!({}))?;
    let got = c.get_artifact(res, &id, "?kind=notes").await?;
    same(
        "read-back metadata when omitted",
        &got["meta"]["metadata"],
        &json!({}),
    )?;
    Ok(())
}

async fn metadata_nested(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let md = json!({
        "round": 3,
        "ratio": 1.5,
        "neg": -42,
        "flag": false,
        "none": null,
        "text": "ünïcödé ✓ \"quoted\" \\ /",
        "list": [1, "two", {"three": [3]}, [], {}],
        "nested": {"a": {"b": {"c": [true, null]}}},
        "empty": {}
    });
    let meta = c
        .put_artifact(res, &id, "notes", b"x", Some(md.clone()))
        .await?;
    same("metadata in put response", &meta["metadata"], &md)?;
    let got = c.get_artifact(res, &id, "?kind=notes&rev=0").await?;
    same("metadata in artifact read", &got["meta"]["metadata"], &md)?;
    let list = c.list_artifacts(res, &id, "").await?;
    same(
        "metadata in artifact list",
        &list.first().cloned().unwrap_or_default()["metadata"],
        &md,
    )?;
    same("artifact read meta vs put response", &got["meta"], &meta)?;
    Ok(())
}

async fn metadata_not_object(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    for md in [json!([1, 2]), json!("x"), json!(3)] {
        let body = json!({"kind": "notes", "contentBase64": "YQ==", "metadata": md});
        c.post(&path(res, &id, "artifacts"), &body)
            .send()
            .await?
            .e400()?;
    }
    let list = c.list_artifacts(res, &id, "").await?;
    ensure!(
        list.is_empty(),
        "400-rejected puts wrote metadata: {list:?}"
    );
    Ok(())
}

async fn binary(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let bytes: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
    c.put_artifact(res, &id, "bin", &bytes, None).await?;
    let got = c.get_artifact(res, &id, "?kind=bin").await?;
    let obj = got
        .as_object()
        .ok_or_else(|| format!("artifact read: expected an object; got {got}"))?;
    ensure!(
        obj.len() == 2 && obj.contains_key("meta") && obj.contains_key("contentBase64"),
        "artifact read must be exactly {{meta, contentBase64}}; got {got}"
    );
    let text = got["contentBase64"].as_str().unwrap_or_default();
    ensure!(
        text == b64(&bytes),
        "contentBase64 must be the canonical padded base64 of the stored bytes: expected {}; got {text}",
        b64(&bytes)
    );
    ensure!(
        unb64(text).as_deref() == Some(&bytes[..]),
        "bytes differ after round trip"
    );
    Ok(())
}

async fn empty_content(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let r = c
        .post(
            &path(res, &id, "artifacts"),
            &json!({"kind": "empty", "contentBase64": ""}),
        )
        .send()
        .await?;
    let meta = r.json_status(201)?;
    ensure!(
        meta["blobRef"] == json!(sha256_hex(b"")),
        "{}",
        r.fail("blobRef of zero bytes (e3b0c442…)")
    );
    let got = c.get_artifact(res, &id, "?kind=empty").await?;
    ensure!(
        got["contentBase64"] == json!(""),
        "empty content read back as {}",
        got["contentBase64"]
    );
    Ok(())
}

async fn put3(c: &Ctx, res: Res) -> Result<String, String> {
    let id = c.create(res).await?;
    for i in 0..3 {
        c.put_artifact(
            res,
            &id,
            "notes",
            format!("rev{i}").as_bytes(),
            Some(json!({"i": i})),
        )
        .await?;
    }
    Ok(id)
}

fn content_of(v: &Value) -> String {
    v["contentBase64"]
        .as_str()
        .and_then(unb64)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

async fn get_latest(c: Ctx, res: Res) -> CheckResult {
    let id = put3(&c, res).await?;
    let got = c.get_artifact(res, &id, "?kind=notes").await?;
    ensure!(
        got["meta"]["revision"] == json!(2) && content_of(&got) == "rev2",
        "absent rev must select the latest (2); got {got}"
    );
    Ok(())
}

async fn get_pinned(c: Ctx, res: Res) -> CheckResult {
    let id = put3(&c, res).await?;
    for i in 0..3 {
        let got = c
            .get_artifact(res, &id, &format!("?kind=notes&rev={i}"))
            .await?;
        ensure!(
            got["meta"]["revision"] == json!(i) && content_of(&got) == format!("rev{i}"),
            "rev={i}: expected revision {i} with bytes rev{i}; got {got}"
        );
        same(
            &format!("rev={i} metadata"),
            &got["meta"]["metadata"],
            &json!({"i": i}),
        )?;
    }
    Ok(())
}

async fn get_rev_empty(c: Ctx, res: Res) -> CheckResult {
    let id = put3(&c, res).await?;
    let got = c.get_artifact(res, &id, "?kind=notes&rev=").await?;
    ensure!(
        got["meta"]["revision"] == json!(0),
        "present empty rev= must select revision 0 (not the latest); got {got}"
    );
    let got = c.get_artifact(res, &id, "?kind=notes&rev=%20").await?;
    ensure!(
        got["meta"]["revision"] == json!(0),
        "whitespace-only rev must select revision 0; got {got}"
    );
    Ok(())
}

async fn get_rev_lenient(c: Ctx, res: Res) -> CheckResult {
    let id = put3(&c, res).await?;
    for (raw, want) in [
        ("0x1", 1),
        ("1e0", 1),
        ("%202%20", 2),
        ("2.0", 2),
        ("%2B1", 1),
    ] {
        let got = c
            .get_artifact(res, &id, &format!("?kind=notes&rev={raw}"))
            .await?;
        ensure!(
            got["meta"]["revision"] == json!(want),
            "rev={raw}: expected revision {want} (JavaScript Number()); got {got}"
        );
    }
    Ok(())
}

async fn get_null(c: Ctx, res: Res, query: &'static str) -> CheckResult {
    let id = put3(&c, res).await?;
    let r = c
        .get(&path(res, &id, &format!("artifacts{query}")))
        .send()
        .await?;
    let v = r.json_status(200)?;
    ensure!(v.is_null(), "{}", r.fail("200 null"));
    Ok(())
}

async fn get_rev_rejects(c: Ctx, res: Res, raw: &'static str) -> CheckResult {
    let id = put3(&c, res).await?;
    c.get(&path(res, &id, &format!("artifacts?kind=notes&rev={raw}")))
        .send()
        .await?
        .e400()?;
    Ok(())
}

async fn get_kind_required(c: Ctx, res: Res, query: &'static str) -> CheckResult {
    let id = put3(&c, res).await?;
    let r = c
        .get(&path(res, &id, &format!("artifacts{query}")))
        .send()
        .await?;
    r.error_msg(400, "validation", "query parameter \"kind\" is required")?;
    Ok(())
}

async fn list_order(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    for kind in ["beta", "alpha", "gamma", "alpha", "beta", "alpha"] {
        c.put_artifact(res, &id, kind, kind.as_bytes(), None)
            .await?;
    }
    let list = c.list_artifacts(res, &id, "").await?;
    let got: Vec<(String, i64)> = list
        .iter()
        .map(|m| {
            (
                m["kind"].as_str().unwrap_or_default().to_string(),
                m["revision"].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    let want: Vec<(String, i64)> = [
        ("alpha", 0),
        ("alpha", 1),
        ("alpha", 2),
        ("beta", 0),
        ("beta", 1),
        ("gamma", 0),
    ]
    .iter()
    .map(|(k, r)| (k.to_string(), *r))
    .collect();
    ensure!(
        got == want,
        "artifact-list must be ordered by kind then revision: expected {want:?}; got {got:?}"
    );
    let keys = meta_keys(res);
    for m in &list {
        shape("artifact-list item", m, &keys, &keys)?;
    }
    Ok(())
}

async fn list_filter(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    for kind in ["plan", "spec", "plan"] {
        c.put_artifact(res, &id, kind, kind.as_bytes(), None)
            .await?;
    }
    let list = c.list_artifacts(res, &id, "?kind=plan").await?;
    let got: Vec<(Value, Value)> = list
        .iter()
        .map(|m| (m["kind"].clone(), m["revision"].clone()))
        .collect();
    ensure!(
        got == vec![(json!("plan"), json!(0)), (json!("plan"), json!(1))],
        "artifact-list?kind=plan: got {got:?}"
    );
    let none = c.list_artifacts(res, &id, "?kind=absent").await?;
    ensure!(
        none.is_empty(),
        "artifact-list?kind=absent: expected []; got {none:?}"
    );
    Ok(())
}

async fn list_empty(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let list = c.list_artifacts(res, &id, "").await?;
    ensure!(
        list.is_empty(),
        "a new resource has no artifacts; got {list:?}"
    );
    Ok(())
}

async fn numeric_revisions(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    for i in 0..12 {
        c.put_artifact(res, &id, "notes", format!("rev{i}").as_bytes(), None)
            .await?;
    }
    let got = c.get_artifact(res, &id, "?kind=notes").await?;
    ensure!(
        got["meta"]["revision"] == json!(11) && content_of(&got) == "rev11",
        "latest of 12 revisions must be 11 (numeric); got {}",
        got["meta"]
    );
    let got = c.get_artifact(res, &id, "?kind=notes&rev=10").await?;
    ensure!(
        content_of(&got) == "rev10",
        "rev=10 must return revision 10; got {}",
        got["meta"]
    );
    let revs: Vec<i64> = c
        .list_artifacts(res, &id, "")
        .await?
        .iter()
        .map(|m| m["revision"].as_i64().unwrap_or(-1))
        .collect();
    ensure!(
        revs == (0..12).collect::<Vec<i64>>(),
        "artifact-list must order revisions numerically; got {revs:?}"
    );
    Ok(())
}

async fn encoded_kind(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let kind = "verify:unit/tests é&x=1";
    let meta = c.put_artifact(res, &id, kind, b"report", None).await?;
    ensure!(
        meta["kind"] == json!(kind),
        "put echoed kind {} for {kind:?}",
        meta["kind"]
    );
    let q = crate::util::enc(kind);
    let got = c
        .get_artifact(res, &id, &format!("?kind={q}&rev=0"))
        .await?;
    ensure!(
        got["meta"]["kind"] == json!(kind) && content_of(&got) == "report",
        "GET artifacts?kind={q}: expected the {kind:?} artifact; got {got}"
    );
    let list = c.list_artifacts(res, &id, &format!("?kind={q}")).await?;
    ensure!(
        list.len() == 1 && list[0]["kind"] == json!(kind),
        "artifact-list?kind={q}: got {list:?}"
    );
    Ok(())
}

async fn put_rejects(c: Ctx, res: Res, body: Value) -> CheckResult {
    let id = c.create(res).await?;
    c.post(&path(res, &id, "artifacts"), &body)
        .send()
        .await?
        .e400()?;
    let list = c.list_artifacts(res, &id, "").await?;
    ensure!(
        list.is_empty(),
        "a 400-rejected put wrote metadata: {list:?}"
    );
    Ok(())
}

async fn unknown(c: Ctx, res: Res) -> CheckResult {
    let id = res.unknown_id();
    let msg = res.unknown_msg(&id);
    c.post(
        &path(res, &id, "artifacts"),
        &json!({"kind": "notes", "contentBase64": "YQ=="}),
    )
    .send()
    .await?
    .error_msg(404, "not-found", &msg)?;
    c.get(&path(res, &id, "artifacts?kind=notes"))
        .send()
        .await?
        .error_msg(404, "not-found", &msg)?;
    c.get(&path(res, &id, "artifact-list"))
        .send()
        .await?
        .error_msg(404, "not-found", &msg)?;
    let g = c.get(&res.path(&id)).send().await?;
    ensure!(
        g.status == 404,
        "{}",
        g.fail("404: artifact writes must not create the resource")
    );
    Ok(())
}

async fn base64_rejects(c: Ctx, res: Res, text: &'static str) -> CheckResult {
    let id = c.create(res).await?;
    let r = c
        .post(
            &path(res, &id, "artifacts"),
            &json!({"kind": "notes", "contentBase64": text}),
        )
        .send()
        .await?;
    r.e400()?;
    let list = c.list_artifacts(res, &id, "").await?;
    ensure!(
        list.is_empty(),
        "rejected base64 {text:?} still wrote metadata: {list:?}"
    );
    Ok(())
}

async fn base64_accepts(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    for (text, bytes) in [
        ("YQ==", &b"a"[..]),
        ("YWI=", b"ab"),
        ("YWJj", b"abc"),
        ("+/+/", b"\xfb\xff\xbf"),
        ("AA==", b"\x00"),
    ] {
        let r = c
            .post(
                &path(res, &id, "artifacts"),
                &json!({"kind": "b64", "contentBase64": text}),
            )
            .send()
            .await?;
        let meta = r.json_status(201)?;
        ensure!(
            meta["blobRef"] == json!(sha256_hex(bytes)),
            "{}",
            r.fail(format!("blobRef of {bytes:?}"))
        );
    }
    Ok(())
}

fn ceiling_named(msg: &str, ceiling: usize) -> bool {
    let plain = ceiling.to_string();
    let mut grouped = String::new();
    for (i, ch) in plain.chars().enumerate() {
        if i > 0 && (plain.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(ch);
    }
    msg.contains(&plain) || msg.contains(&grouped)
}

async fn ceiling_exact(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let bytes = vec![b'x'; c.max_artifact_bytes];
    let meta = c.put_artifact(res, &id, "big", &bytes, None).await?;
    ensure!(
        meta["blobRef"] == json!(sha256_hex(&bytes)),
        "blobRef of the exact-ceiling artifact is wrong: {}",
        meta["blobRef"]
    );
    let got = c.get_artifact(res, &id, "?kind=big").await?;
    ensure!(
        got["contentBase64"]
            .as_str()
            .and_then(unb64)
            .map(|b| b.len())
            == Some(bytes.len()),
        "exact-ceiling artifact did not round-trip"
    );
    Ok(())
}

async fn ceiling_over(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let bytes = vec![b'y'; c.max_artifact_bytes + 1];
    let r = c
        .post(
            &path(res, &id, "artifacts"),
            &json!({"kind": "big", "contentBase64": b64(&bytes)}),
        )
        .send()
        .await?;
    let msg = r.error(413, "validation")?;
    ensure!(
        ceiling_named(&msg, c.max_artifact_bytes),
        "{}",
        r.fail(format!(
            "a 413 message naming the ceiling {}",
            c.max_artifact_bytes
        ))
    );
    let list = c.list_artifacts(res, &id, "").await?;
    ensure!(list.is_empty(), "an oversized put wrote metadata: {list:?}");
    Ok(())
}

async fn ceiling_deposit(c: Ctx, res: Res) -> CheckResult {
    let id = c.create(res).await?;
    let body = json!({
        "artifacts": [
            {"kind": "small", "contentBase64": b64(b"ok")},
            {"kind": "plan", "contentBase64": b64(&vec![b'z'; c.max_artifact_bytes + 1])},
            {"kind": "small", "contentBase64": b64(b"ok2")},
        ],
        "event": res.ref_event(json!({"kind": "plan", "rev": -2})),
    });
    let r = c.deposit(res, &id, &body).await?;
    let msg = r.error(413, "validation")?;
    ensure!(
        ceiling_named(&msg, c.max_artifact_bytes),
        "{}",
        r.fail(format!(
            "a 413 message naming the ceiling {}",
            c.max_artifact_bytes
        ))
    );
    let list = c.list_artifacts(res, &id, "").await?;
    ensure!(
        list.is_empty(),
        "a 413 deposit exposed artifact metadata: {list:?}"
    );
    ensure!(
        c.seqs(res, &id).await?.is_empty(),
        "a 413 deposit appended an event"
    );
    Ok(())
}
