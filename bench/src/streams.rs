//! `streams`: append throughput of 1 KiB batches, and the close of a
//! 10,000-part stream (assembly + artifact deposit), wall time and server CPU.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, Result};
use bytes::Bytes;

use crate::harness::{
    Ctx, Server, ServerOpts, Table, client, create_build, ms, opt, post, rate, with_db,
};

/// A batch of about 1 KiB: one text delta.
fn kib_batch() -> Bytes {
    Bytes::from(serde_json::json!({ "parts": [{ "type": "text-delta", "id": "t1", "delta": "x".repeat(990) }] }).to_string())
}

/// A stream's id from its create response.
fn stream_id(body: &[u8]) -> Result<String> {
    let record: serde_json::Value = serde_json::from_slice(body)?;
    record["id"]
        .as_str()
        .map(str::to_owned)
        .context("no stream id")
}

/// 10,000 parts in 100 batches: one assistant turn with 9,996 text deltas.
fn ten_thousand_parts() -> Vec<Bytes> {
    let mut parts = vec![
        serde_json::json!({"type": "start", "messageId": "m1"}),
        serde_json::json!({"type": "text-start", "id": "t1"}),
    ];
    for i in 0..9_996 {
        parts.push(
            serde_json::json!({"type": "text-delta", "id": "t1", "delta": format!("word{i} ")}),
        );
    }
    parts.push(serde_json::json!({"type": "text-end", "id": "t1"}));
    parts.push(serde_json::json!({"type": "finish"}));
    parts
        .chunks(100)
        .map(|batch| Bytes::from(serde_json::json!({ "parts": batch }).to_string()))
        .collect()
}

pub async fn streams(ctx: &Ctx) -> Result<Table> {
    let mut table = Table::new(
        "streams (1 KiB batch appends; close of a 10,000-part stream)",
        &[
            "backend",
            "measurement",
            "requests",
            "req/s",
            "p50 ms",
            "p99 ms",
            "server CPU",
            "notes",
        ],
    );
    for backend in ctx.backends(true) {
        eprintln!("streams: {}", backend.label());
        let rows = with_db(ctx, backend, |db| async move {
            let server =
                Server::start(ctx, ServerOpts::new(&db, format!("streams-{backend:?}"))).await?;
            let http = client();
            create_build(&http, &server, "sb").await?;
            let create = server.url("/builds/sb/streams");
            let mut rows = Vec::new();
            for clients in [1, 16] {
                let mut urls = Vec::new();
                for _ in 0..clients {
                    let body = post(
                        &http,
                        &create,
                        Bytes::from_static(br#"{"label":"bench"}"#),
                        201,
                    )
                    .await?;
                    urls.push(server.url(&format!("/streams/{}/chunks", stream_id(&body)?)));
                }
                let (urls, http, batch) = (Arc::new(urls), http.clone(), kib_batch());
                let (result, cpu) =
                    crate::harness::measure(ctx, Some(&server), clients, move |worker, _| {
                        let (http, urls, batch) = (http.clone(), urls.clone(), batch.clone());
                        async move {
                            post(&http, &urls[worker], batch, 201).await?;
                            Ok(())
                        }
                    })
                    .await?;
                rows.push(vec![
                    format!("abstore, {}", backend.label()),
                    format!("append 1 KiB batch, {clients} client(s), own stream each"),
                    result.ok.to_string(),
                    rate(result.rate()),
                    ms(result.p(0.5)),
                    ms(result.p(0.99)),
                    format!("{} µs/req", opt(cpu, 0)),
                    result.note(),
                ]);
            }
            let body = post(
                &http,
                &create,
                Bytes::from_static(br#"{"label":"ten thousand"}"#),
                201,
            )
            .await?;
            let id = stream_id(&body)?;
            let chunks = server.url(&format!("/streams/{id}/chunks"));
            for batch in ten_thousand_parts() {
                post(&http, &chunks, batch, 201).await?;
            }
            let cpu0 = server.cpu()?;
            let started = Instant::now();
            let closed = post(
                &http,
                &server.url(&format!("/streams/{id}/close")),
                Bytes::from_static(br#"{"outcome":"completed"}"#),
                200,
            )
            .await?;
            let wall = started.elapsed();
            let cpu = server.cpu()? - cpu0;
            let record: serde_json::Value = serde_json::from_slice(&closed)?;
            rows.push(vec![
                format!("abstore, {}", backend.label()),
                "close a 10,000-part stream (100 chunks)".into(),
                "1".into(),
                "–".into(),
                ms(wall),
                "–".into(),
                format!("{} ms", ms(cpu)),
                format!("status {}", record["status"]),
            ]);
            server.stop().await?;
            Ok(rows)
        })
        .await?;
        for row in rows {
            table.push(row);
        }
    }
    Ok(table)
}
