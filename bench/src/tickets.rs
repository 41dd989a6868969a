//! `tickets`: the hosted ticket protocol at a team of 10,000 tickets
//! (issue 35; docs/tickets.md): what `list-ready` and `dependency-states`
//! cost in time, server CPU and server memory when the backlog is large.
//!
//! The team: 10,000 tickets created through `POST /tickets/create` by 8
//! clients, a quarter of them in `Ready`, every one labelled `scale`, every
//! other one also `even`, and every tenth blocked by the ticket before it.
//! Then each read is asked `REPEATS` times, one at a time, and its median
//! and slowest latency, server CPU per answer and answer size are reported,
//! with the server's resident set before the reads and its peak after.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use serde_json::{Value, json};

use crate::harness::{
    Backend, Ctx, Server, ServerOpts, Table, client, mib, ms, percentile, post, with_db,
};

const TICKETS: usize = 10_000;
const CREATORS: usize = 8;
const REPEATS: usize = 15;
const TEAM: &str = "SCALE";

pub async fn tickets(ctx: &Ctx) -> Result<Table> {
    let mut table = Table::new(
        &format!("hosted tickets: a team of {TICKETS}"),
        &[
            "backend",
            "request",
            "answer",
            "median ms",
            "max ms",
            "server CPU ms",
            "notes",
        ],
    );
    for backend in ctx.backends(false) {
        eprintln!("tickets: {TICKETS} tickets on {}", backend.label());
        let rows = with_db(ctx, backend, |db| async move {
            let server =
                Server::start(ctx, ServerOpts::new(&db, format!("tickets-{backend:?}"))).await?;
            let rows = team_reads(&server, backend).await;
            server.stop().await?;
            rows
        })
        .await?;
        for row in rows {
            table.push(row);
        }
    }
    Ok(table)
}

/// One operation's body for the bench team.
fn body(input: Value) -> bytes::Bytes {
    json!({"context": {"teamKey": TEAM}, "input": input})
        .to_string()
        .into()
}

async fn call(http: &reqwest::Client, server: &Server, op: &str, input: Value) -> Result<Value> {
    let status = if op == "create" { 201 } else { 200 };
    let answer = post(
        http,
        &server.url(&format!("/tickets/{op}")),
        body(input),
        status,
    )
    .await?;
    Ok(serde_json::from_slice(&answer)?)
}

/// Create the team; the ids in creation order.
async fn seed(server: &Server) -> Result<(Vec<String>, Duration)> {
    let started = Instant::now();
    let http = client();
    let base = Arc::new(server.url("/tickets/create"));
    let mut workers = Vec::new();
    for worker in 0..CREATORS {
        let (http, base) = (http.clone(), base.clone());
        workers.push(tokio::spawn(async move {
            let mut made = Vec::new();
            for n in (worker..TICKETS).step_by(CREATORS) {
                let mut labels = vec!["scale"];
                if n % 2 == 0 {
                    labels.push("even");
                }
                let state = if n % 4 == 0 { "Ready" } else { "Triage" };
                let input = json!({
                    "draft": {"title": format!("ticket {n}"),
                              "body": format!("# Ticket {n}\n\nSome body text for the scale test.\n"),
                              "labels": labels},
                    "options": {"state": state, "idempotencyKey": format!("scale-{n}")},
                });
                let answer = post(&http, &base, body(input), 201).await?;
                let ticket: Value = serde_json::from_slice(&answer)?;
                let id = ticket["ref"]["id"].as_str().context("ref.id")?.to_owned();
                made.push((n, id));
            }
            anyhow::Ok(made)
        }));
    }
    let mut ids = vec![String::new(); TICKETS];
    for worker in workers {
        for (n, id) in worker.await?? {
            ids[n] = id;
        }
    }
    for n in (10..TICKETS).step_by(10) {
        let input = json!({"id": ids[n], "blockerId": ids[n - 1]});
        call(&http, server, "add-blocker", input).await?;
    }
    Ok((ids, started.elapsed()))
}

async fn team_reads(server: &Server, backend: Backend) -> Result<Vec<Vec<String>>> {
    let (ids, seeding) = seed(server).await?;
    let http = client();
    let rss_before = server.rss()?;
    let hundred: Vec<&String> = ids.iter().step_by(TICKETS / 100).collect();
    let reads: [(&str, &str, Value, usize); 5] = [
        (
            "list-ready state=Ready",
            "list-ready",
            json!({"state": "Ready"}),
            TICKETS / 4,
        ),
        (
            "list-ready labels=[even]",
            "list-ready",
            json!({"labels": ["even"]}),
            TICKETS / 2,
        ),
        ("list-ready (every state)", "list-ready", json!({}), TICKETS),
        (
            "dependency-states, 100 ids",
            "dependency-states",
            json!({"ids": hundred}),
            100,
        ),
        (
            "dependency-states, 10,000 ids",
            "dependency-states",
            json!({"ids": ids}),
            TICKETS,
        ),
    ];
    let mut rows = Vec::new();
    for (name, op, input, expected) in reads {
        let url = server.url(&format!("/tickets/{op}"));
        let request = body(input);
        let mut latencies = Vec::with_capacity(REPEATS);
        let mut bytes = 0;
        let cpu0 = server.cpu()?;
        for _ in 0..REPEATS {
            let started = Instant::now();
            let answer = post(&http, &url, request.clone(), 200).await?;
            latencies.push(started.elapsed());
            let parsed: Value = serde_json::from_slice(&answer)?;
            let count = match op {
                "list-ready" => parsed["tickets"].as_array().map(Vec::len),
                _ => parsed.as_array().map(Vec::len),
            };
            anyhow::ensure!(count == Some(expected), "{name}: {count:?} of {expected}");
            bytes = answer.len();
        }
        let cpu = (server.cpu()? - cpu0).as_secs_f64() * 1e3 / REPEATS as f64;
        latencies.sort_unstable();
        rows.push(vec![
            backend.label().into(),
            name.into(),
            format!("{expected} entries, {:.2} MiB", bytes as f64 / 1048576.0),
            ms(percentile(&latencies, 0.5)),
            ms(*latencies.last().unwrap_or(&Duration::ZERO)),
            format!("{cpu:.1}"),
            String::new(),
        ]);
    }
    let note = format!(
        "seeded {TICKETS} creates + {} add-blockers in {:.1} s; RSS {} MiB before the reads, peak {} MiB",
        TICKETS / 10 - 1,
        seeding.as_secs_f64(),
        mib(rss_before),
        mib(server.peak_rss()?)
    );
    if let Some(last) = rows.last_mut() {
        last[6] = note;
    }
    Ok(rows)
}
