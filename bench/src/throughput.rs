//! Closed-loop throughput scenarios: append, read, deposit.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Result;
use base64::Engine as _;
use bytes::Bytes;

use crate::harness::{
    Backend, Ctx, Server, ServerOpts, Table, client, create_build, event_body, get, ms, opt, post,
    rate, with_db,
};
use crate::raw;

/// How the clients of one phase address builds.
#[derive(Clone, Copy)]
struct Phase {
    clients: usize,
    shared: bool,
}

const APPEND_PHASES: [Phase; 3] = [
    Phase {
        clients: 1,
        shared: false,
    },
    Phase {
        clients: 16,
        shared: false,
    },
    Phase {
        clients: 16,
        shared: true,
    },
];

fn phase_label(p: Phase) -> String {
    match (p.clients, p.shared) {
        (1, _) => "1".into(),
        (n, false) => format!("{n}, distinct builds"),
        (n, true) => format!("{n}, one shared build"),
    }
}

/// `append`: POST /builds/{slug}/events against each backend, and the raw baselines.
pub async fn append(ctx: &Ctx) -> Result<Table> {
    let mut table = Table::new(
        "append (POST /builds/{slug}/events)",
        &[
            "backend",
            "clients",
            "requests",
            "req/s",
            "p50 ms",
            "p99 ms",
            "server CPU µs/req",
            "raw req/s",
            "abstore/raw",
            "notes",
        ],
    );
    // Raw baselines first, each on its own fresh database.
    let mut raw_rates: HashMap<(Backend, usize, bool), f64> = HashMap::new();
    eprintln!("append: raw SQLite insert+fsync loop");
    for clients in [1, 16] {
        let result = with_db(ctx, Backend::SqliteFile, |db| async move {
            raw::sqlite_insert(ctx, &db, clients).await
        })
        .await?;
        table.push(vec![
            "raw SQLite file: insert 1 row + commit".into(),
            if clients == 1 {
                "1".into()
            } else {
                format!("{clients} (one connection)")
            },
            result.ok.to_string(),
            rate(result.rate()),
            ms(result.p(0.5)),
            ms(result.p(0.99)),
            "–".into(),
            "".into(),
            "".into(),
            result.note(),
        ]);
        raw_rates.insert((Backend::SqliteFile, clients, false), result.rate());
        raw_rates.insert((Backend::SqliteFile, clients, true), result.rate());
    }
    if ctx.pg_base.is_some() {
        eprintln!("append: raw PostgreSQL counter transactions");
        for phase in APPEND_PHASES {
            let result = with_db(ctx, Backend::Postgres, |db| async move {
                raw::pg_counter(ctx, &db, phase.clients, phase.shared).await
            })
            .await?;
            table.push(vec![
                "raw PostgreSQL: lock counter, insert, update".into(),
                phase_label(phase),
                result.ok.to_string(),
                rate(result.rate()),
                ms(result.p(0.5)),
                ms(result.p(0.99)),
                "–".into(),
                "".into(),
                "".into(),
                result.note(),
            ]);
            raw_rates.insert(
                (Backend::Postgres, phase.clients, phase.shared),
                result.rate(),
            );
        }
    }
    for backend in ctx.backends(true) {
        eprintln!("append: abstore on {}", backend.label());
        let rows = with_db(ctx, backend, |db| {
            let raw_rates = &raw_rates;
            async move {
                let server =
                    Server::start(ctx, ServerOpts::new(&db, format!("append-{backend:?}"))).await?;
                let http = client();
                for i in 0..16 {
                    create_build(&http, &server, &format!("b-{i}")).await?;
                }
                create_build(&http, &server, "shared").await?;
                let mut rows = Vec::new();
                for phase in APPEND_PHASES {
                    let urls: Arc<Vec<String>> = Arc::new(
                        (0..phase.clients)
                            .map(|i| {
                                server.url(&format!(
                                    "/builds/{}/events",
                                    if phase.shared {
                                        "shared".into()
                                    } else {
                                        format!("b-{i}")
                                    }
                                ))
                            })
                            .collect(),
                    );
                    let http = http.clone();
                    let (result, cpu) = crate::harness::measure(
                        ctx,
                        Some(&server),
                        phase.clients,
                        move |worker, _| {
                            let (http, urls) = (http.clone(), urls.clone());
                            async move {
                                post(&http, &urls[worker], event_body(), 201).await?;
                                Ok(())
                            }
                        },
                    )
                    .await?;
                    let raw = raw_rates
                        .get(&(backend, phase.clients, phase.shared))
                        .copied();
                    let mut note = result.note();
                    if backend == Backend::SqliteFile
                        && phase.clients == 16
                        && let Some(raw1) = raw_rates.get(&(Backend::SqliteFile, 1, false))
                    {
                        note = format!("{:.2}× the raw 1-client loop {note}", result.rate() / raw1);
                    }
                    rows.push(vec![
                        format!("abstore, {}", backend.label()),
                        phase_label(phase),
                        result.ok.to_string(),
                        rate(result.rate()),
                        ms(result.p(0.5)),
                        ms(result.p(0.99)),
                        opt(cpu, 0),
                        raw.map_or_else(|| "–".into(), rate),
                        opt(raw.map(|raw| result.rate() / raw), 2),
                        note,
                    ]);
                }
                server.stop().await?;
                Ok(rows)
            }
        })
        .await?;
        for row in rows {
            table.push(row);
        }
    }
    Ok(table)
}

/// `read`: GET /builds/{slug}/events returning 100 events, against the raw query.
pub async fn read(ctx: &Ctx) -> Result<Table> {
    const EVENTS: usize = 100;
    let mut table = Table::new(
        "read 100 events (GET /builds/{slug}/events)",
        &[
            "backend",
            "clients",
            "requests",
            "req/s",
            "p50 ms",
            "p99 ms",
            "server CPU µs/req",
            "raw query/s",
            "abstore/raw",
            "notes",
        ],
    );
    for backend in ctx.backends(true) {
        eprintln!("read: {}", backend.label());
        let rows = with_db(ctx, backend, |db| async move {
            let server =
                Server::start(ctx, ServerOpts::new(&db, format!("read-{backend:?}"))).await?;
            let http = client();
            create_build(&http, &server, "r").await?;
            let events_url = server.url("/builds/r/events");
            for _ in 0..EVENTS {
                post(&http, &events_url, event_body(), 201).await?;
            }
            let first: Vec<serde_json::Value> =
                serde_json::from_slice(&get(&http, &events_url).await?)?;
            anyhow::ensure!(first.len() == EVENTS, "read {} events", first.len());
            let mut rows = Vec::new();
            for clients in [1, 16] {
                let (http, url) = (http.clone(), Arc::new(events_url.clone()));
                let (result, cpu) =
                    crate::harness::measure(ctx, Some(&server), clients, move |_, _| {
                        let (http, url) = (http.clone(), url.clone());
                        async move {
                            let body = get(&http, &url).await?;
                            anyhow::ensure!(body.len() > 100, "short body");
                            Ok(())
                        }
                    })
                    .await?;
                let raw = if backend == Backend::Memory {
                    None
                } else {
                    Some(raw::select_events(ctx, &db, clients, "r", EVENTS).await?)
                };
                let raw_rate = raw.as_ref().map(|r| r.rate());
                let note = [
                    result.note(),
                    raw.as_ref().map(|r| r.note()).unwrap_or_default(),
                ]
                .join(" ")
                .trim()
                .to_owned();
                rows.push(vec![
                    format!("abstore, {}", backend.label()),
                    clients.to_string(),
                    result.ok.to_string(),
                    rate(result.rate()),
                    ms(result.p(0.5)),
                    ms(result.p(0.99)),
                    opt(cpu, 0),
                    raw_rate.map_or_else(|| "–".into(), rate),
                    opt(raw_rate.map(|raw| result.rate() / raw), 2),
                    note,
                ]);
            }
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

/// Distinct 16 KiB artifacts (so blobs are not all one content address).
fn deposit_bodies(count: usize, size: usize) -> Vec<Bytes> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..count)
        .map(|_| {
            let bytes: Vec<u8> = (0..size)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            let body = serde_json::json!({
                "artifacts": [{ "kind": "plan", "contentBase64": base64::engine::general_purpose::STANDARD.encode(&bytes) }],
                "event": {
                    "actor": { "kind": "agent", "role": "plan", "session": "s1" },
                    "type": "plan.completed",
                    "payload": { "round": 1, "artifact": { "kind": "plan", "rev": -1 } }
                }
            });
            Bytes::from(body.to_string())
        })
        .collect()
}

/// `deposit`: a 16 KiB artifact and its event via POST /builds/{slug}/deposits.
pub async fn deposit(ctx: &Ctx) -> Result<Table> {
    let mut table = Table::new(
        "deposit 16 KiB + event (POST /builds/{slug}/deposits, blobs memory://)",
        &[
            "backend",
            "clients",
            "requests",
            "req/s",
            "p50 ms",
            "p99 ms",
            "server CPU µs/req",
            "notes",
        ],
    );
    let bodies = Arc::new(deposit_bodies(64, 16 * 1024));
    for backend in ctx.backends(true) {
        eprintln!("deposit: {}", backend.label());
        let bodies = bodies.clone();
        let rows = with_db(ctx, backend, |db| async move {
            let server =
                Server::start(ctx, ServerOpts::new(&db, format!("deposit-{backend:?}"))).await?;
            let http = client();
            for i in 0..16 {
                create_build(&http, &server, &format!("d-{i}")).await?;
            }
            let mut rows = Vec::new();
            for clients in [1, 16] {
                let urls: Arc<Vec<String>> = Arc::new(
                    (0..clients)
                        .map(|i| server.url(&format!("/builds/d-{i}/deposits")))
                        .collect(),
                );
                let (http, bodies) = (http.clone(), bodies.clone());
                let (result, cpu) =
                    crate::harness::measure(ctx, Some(&server), clients, move |worker, i| {
                        let (http, urls, bodies) = (http.clone(), urls.clone(), bodies.clone());
                        async move {
                            let body = bodies[(worker * 7 + i as usize) % bodies.len()].clone();
                            post(&http, &urls[worker], body, 201).await?;
                            Ok(())
                        }
                    })
                    .await?;
                rows.push(vec![
                    format!("abstore, {}", backend.label()),
                    clients.to_string(),
                    result.ok.to_string(),
                    rate(result.rate()),
                    ms(result.p(0.5)),
                    ms(result.p(0.99)),
                    opt(cpu, 0),
                    result.note(),
                ]);
            }
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
