//! `tail`: per-route latency from a server's first request on (issue 21).
//!
//! The throughput scenarios measure after a warm-up, so a stall that only
//! happens while a server is young (a pool opening connections in requests'
//! paths) never reaches their percentiles. Here each backend gets several
//! fresh servers on fresh databases, and one paced client (one request in
//! flight, as each Autobuild process has) works through every write and read
//! route from the start: 20 ms between rounds, 0.6 s after every fifth, as in
//! the issue's reproduction. Every request is measured; the table gives each
//! route's p50, p99 and maximum over all servers.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use bytes::Bytes;
use serde_json::{Value, json};

use crate::harness::{self, Backend, Ctx, Server, ServerOpts, Table, ms, percentile, with_db};

/// Fresh servers per backend.
const SERVERS: usize = 4;
/// Rounds per server; each round calls every route once.
const ROUNDS: usize = 30;

/// The routes, in the order a round calls them.
const ROUTES: [&str; 8] = [
    "append",
    "read events",
    "deposit 16 KiB",
    "lease claim",
    "lease heartbeat",
    "stream chunk append",
    "stream chunk read",
    "list builds",
];

pub async fn tail(ctx: &Ctx) -> Result<Table> {
    let mut table = Table::new(
        "latency of every route from a fresh server on (one paced client, 4 fresh servers × 30 rounds per backend)",
        &["backend", "route", "requests", "p50 ms", "p99 ms", "max ms"],
    );
    for backend in [Backend::SqliteFile, Backend::Postgres] {
        if backend == Backend::Postgres && ctx.pg_base.is_none() {
            continue;
        }
        let mut samples: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
        for n in 0..SERVERS {
            let run = with_db(ctx, backend, |db| async move {
                let server = Server::start(ctx, ServerOpts::new(&db, format!("tail-{n}"))).await?;
                let result = rounds(&server).await;
                server.stop().await?;
                result
            })
            .await?;
            for (route, durations) in run {
                samples.entry(route).or_default().extend(durations);
            }
        }
        for route in ROUTES {
            let mut durations = samples.remove(route).unwrap_or_default();
            durations.sort();
            eprintln!(
                "tail {}: {route} p50 {} p99 {} max {}",
                backend.label(),
                ms(percentile(&durations, 0.5)),
                ms(percentile(&durations, 0.99)),
                ms(durations.last().copied().unwrap_or_default())
            );
            table.push(vec![
                backend.label().into(),
                route.into(),
                durations.len().to_string(),
                ms(percentile(&durations, 0.5)),
                ms(percentile(&durations, 0.99)),
                ms(durations.last().copied().unwrap_or_default()),
            ]);
        }
    }
    Ok(table)
}

/// One server's rounds; each request's duration by route.
async fn rounds(server: &Server) -> Result<BTreeMap<&'static str, Vec<Duration>>> {
    let http = harness::client();
    let mut samples: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
    harness::create_build(&http, server, "tail").await?;
    let build = server.url("/builds/tail");
    let stream = harness::post(
        &http,
        &format!("{build}/streams"),
        Bytes::from_static(br#"{"label":"tail"}"#),
        201,
    )
    .await?;
    let stream: Value = serde_json::from_slice(&stream)?;
    let chunks = format!(
        "{build}/streams/{}/chunks",
        stream["id"].as_str().context("stream id")?
    );
    let deposits = deposit_bodies();
    for (round, deposit) in deposits.iter().enumerate() {
        let calls: [(&str, Call); 8] = [
            (
                "append",
                Call::post(format!("{build}/events"), harness::event_body(), 201),
            ),
            ("read events", Call::get(format!("{build}/events?since=0"))),
            (
                "deposit 16 KiB",
                Call::post(format!("{build}/deposits"), deposit.clone(), 201),
            ),
            (
                "lease claim",
                Call::post(
                    format!("{build}/lease/claim"),
                    Bytes::from_static(br#"{"holder":"runner","ttlMs":60000}"#),
                    200,
                ),
            ),
            (
                "lease heartbeat",
                Call::post(
                    format!("{build}/lease/heartbeat"),
                    Bytes::from_static(br#"{"holder":"runner"}"#),
                    200,
                ),
            ),
            (
                "stream chunk append",
                Call::post(
                    chunks.clone(),
                    Bytes::from_static(
                        br#"{"parts":[{"type":"text-delta","id":"t1","delta":"tail "}]}"#,
                    ),
                    201,
                ),
            ),
            ("stream chunk read", Call::get(format!("{chunks}?since=0"))),
            ("list builds", Call::get(server.url("/builds"))),
        ];
        for (route, call) in calls {
            let started = Instant::now();
            call.run(&http).await.context(route)?;
            samples.entry(route).or_default().push(started.elapsed());
        }
        let pause = if round % 5 == 4 { 600 } else { 20 };
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
    Ok(samples)
}

enum Call {
    Post(String, Bytes, u16),
    Get(String),
}

impl Call {
    fn post(url: String, body: Bytes, expect: u16) -> Call {
        Call::Post(url, body, expect)
    }

    fn get(url: String) -> Call {
        Call::Get(url)
    }

    async fn run(self, http: &reqwest::Client) -> Result<Bytes> {
        match self {
            Call::Post(url, body, expect) => harness::post(http, &url, body, expect).await,
            Call::Get(url) => harness::get(http, &url).await,
        }
    }
}

/// A distinct 16 KiB `plan` artifact and its event per round.
fn deposit_bodies() -> Vec<Bytes> {
    (0..ROUNDS)
        .map(|round| {
            let content: Vec<u8> = (0..16 * 1024)
                .map(|i| ((i * 31 + round * 7) % 251) as u8)
                .collect();
            use base64::Engine as _;
            let body = json!({
                "artifacts": [{
                    "kind": "plan",
                    "contentBase64": base64::engine::general_purpose::STANDARD.encode(&content),
                }],
                "event": {
                    "actor": { "kind": "agent", "role": "plan", "session": "s1" },
                    "type": "plan.completed",
                    "payload": { "round": round + 1, "artifact": { "kind": "plan", "rev": -1 } }
                }
            });
            Bytes::from(body.to_string())
        })
        .collect()
}
