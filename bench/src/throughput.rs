//! Closed-loop throughput scenarios: append, read, deposit, put, health.
//! Each runs against abstore and, with `--reference`, against Autobuild's
//! reference server on the counterpart store (see `reference`).

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Result;
use base64::Engine as _;
use bytes::Bytes;

use crate::harness::{
    Backend, Ctx, LoadResult, Server, Table, client, create_build, event_body, get, measure, ms,
    opt, post, rate, with_db,
};
use crate::raw;
use crate::reference::{self, Measured, side_by_side};

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

/// Client counts of the scenarios without a shared-build phase.
const CLIENTS: [usize; 2] = [1, 16];

fn phase_label(p: Phase) -> String {
    match (p.clients, p.shared) {
        (1, _) => "1".into(),
        (n, false) => format!("{n}, distinct builds"),
        (n, true) => format!("{n}, one shared build"),
    }
}

/// abstore's own cells of a row: requests, req/s, p50, p99, server CPU.
fn own_cells((result, cpu): &Measured) -> Vec<String> {
    vec![
        result.ok.to_string(),
        rate(result.rate()),
        ms(result.p(0.5)),
        ms(result.p(0.99)),
        opt(*cpu, 0),
    ]
}

/// The cells of a raw-baseline row (no server, so no CPU and no reference).
fn raw_cells(result: &LoadResult) -> Vec<String> {
    let mut cells = vec![
        result.ok.to_string(),
        rate(result.rate()),
        ms(result.p(0.5)),
        ms(result.p(0.99)),
        "–".into(),
    ];
    cells.extend(reference::blank());
    cells
}

/// Everything of an abstore row after its label columns and before any
/// raw-baseline columns: its own figures, then the reference's.
fn compared_cells(measured: &SideBySideRow<'_>) -> Vec<String> {
    let mut cells = own_cells(measured.abstore);
    cells.extend(reference::cells(measured.abstore, measured.reference));
    cells
}

struct SideBySideRow<'a> {
    abstore: &'a Measured,
    reference: Option<&'a Measured>,
}

impl SideBySideRow<'_> {
    fn note(&self) -> String {
        reference::notes(&[self.abstore.0.note(), reference::note(self.reference)])
    }
}

fn rows_of(measured: &reference::SideBySide) -> impl Iterator<Item = SideBySideRow<'_>> {
    measured
        .abstore
        .iter()
        .enumerate()
        .map(|(i, abstore)| SideBySideRow {
            abstore,
            reference: measured.reference_at(i),
        })
}

const OWN_COLUMNS: [&str; 7] = [
    "backend",
    "clients",
    "requests",
    "req/s",
    "p50 ms",
    "p99 ms",
    "server CPU µs/req",
];

/// `append`: POST /builds/{slug}/events against each backend, and the raw baselines.
pub async fn append(ctx: &Ctx) -> Result<Table> {
    let mut table = Table::new(
        "append (POST /builds/{slug}/events)",
        &reference::header(&OWN_COLUMNS, &["raw req/s", "abstore/raw", "notes"]),
    );
    // Raw baselines first, each on its own fresh database.
    let mut raw_rates: HashMap<(Backend, usize, bool), f64> = HashMap::new();
    eprintln!("append: raw SQLite insert+fsync loop");
    for clients in CLIENTS {
        let result = with_db(ctx, Backend::SqliteFile, |db| async move {
            raw::sqlite_insert(ctx, &db, clients).await
        })
        .await?;
        let mut row = vec![
            "raw SQLite file: insert 1 row + commit".into(),
            if clients == 1 {
                "1".into()
            } else {
                format!("{clients} (one connection)")
            },
        ];
        row.extend(raw_cells(&result));
        row.extend(["".into(), "".into(), result.note()]);
        table.push(row);
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
            let mut row = vec![
                "raw PostgreSQL: lock counter, insert, update".into(),
                phase_label(phase),
            ];
            row.extend(raw_cells(&result));
            row.extend(["".into(), "".into(), result.note()]);
            table.push(row);
            raw_rates.insert(
                (Backend::Postgres, phase.clients, phase.shared),
                result.rate(),
            );
        }
    }
    for backend in ctx.backends(true) {
        eprintln!("append: {}", backend.label());
        let measured = with_db(ctx, backend, |db| async move {
            side_by_side(ctx, &db, "append", async |server: &Server| {
                let http = client();
                for i in 0..16 {
                    create_build(&http, server, &format!("b-{i}")).await?;
                }
                create_build(&http, server, "shared").await?;
                let mut measured = Vec::new();
                for phase in APPEND_PHASES {
                    let urls: Arc<Vec<String>> = Arc::new(
                        (0..phase.clients)
                            .map(|i| {
                                if phase.shared {
                                    server.url("/builds/shared/events")
                                } else {
                                    server.url(&format!("/builds/b-{i}/events"))
                                }
                            })
                            .collect(),
                    );
                    let http = http.clone();
                    measured.push(
                        measure(ctx, Some(server), phase.clients, move |worker, _| {
                            let (http, urls) = (http.clone(), urls.clone());
                            async move {
                                post(&http, &urls[worker], event_body(), 201).await?;
                                Ok(())
                            }
                        })
                        .await?,
                    );
                }
                Ok(measured)
            })
            .await
        })
        .await?;
        for (phase, row) in APPEND_PHASES.into_iter().zip(rows_of(&measured)) {
            let raw = raw_rates
                .get(&(backend, phase.clients, phase.shared))
                .copied();
            let ours = row.abstore.0.rate();
            let mut note = row.note();
            if backend == Backend::SqliteFile
                && phase.clients == 16
                && let Some(raw1) = raw_rates.get(&(Backend::SqliteFile, 1, false))
            {
                note =
                    reference::notes(&[format!("{:.2}× the raw 1-client loop", ours / raw1), note]);
            }
            let mut cells = vec![format!("abstore, {}", backend.label()), phase_label(phase)];
            cells.extend(compared_cells(&row));
            cells.extend([
                raw.map_or_else(|| "–".into(), rate),
                opt(raw.map(|raw| ours / raw), 2),
                note,
            ]);
            table.push(cells);
        }
    }
    Ok(table)
}

/// `read`: GET /builds/{slug}/events returning 100 events, against the raw query.
pub async fn read(ctx: &Ctx) -> Result<Table> {
    const EVENTS: usize = 100;
    let mut table = Table::new(
        "read 100 events (GET /builds/{slug}/events)",
        &reference::header(&OWN_COLUMNS, &["raw query/s", "abstore/raw", "notes"]),
    );
    for backend in ctx.backends(true) {
        eprintln!("read: {}", backend.label());
        let rows = with_db(ctx, backend, |db| async move {
            let measured = side_by_side(ctx, &db, "read", async |server: &Server| {
                let http = client();
                create_build(&http, server, "r").await?;
                let events_url = server.url("/builds/r/events");
                for _ in 0..EVENTS {
                    post(&http, &events_url, event_body(), 201).await?;
                }
                let first: Vec<serde_json::Value> =
                    serde_json::from_slice(&get(&http, &events_url).await?)?;
                anyhow::ensure!(first.len() == EVENTS, "read {} events", first.len());
                let mut measured = Vec::new();
                for clients in CLIENTS {
                    let (http, url) = (http.clone(), Arc::new(events_url.clone()));
                    measured.push(
                        measure(ctx, Some(server), clients, move |_, _| {
                            let (http, url) = (http.clone(), url.clone());
                            async move {
                                let body = get(&http, &url).await?;
                                anyhow::ensure!(body.len() > 100, "short body");
                                Ok(())
                            }
                        })
                        .await?,
                    );
                }
                Ok(measured)
            })
            .await?;
            // The raw query, on the database abstore wrote, after both servers stopped.
            let mut rows = Vec::new();
            for (clients, row) in CLIENTS.into_iter().zip(rows_of(&measured)) {
                let raw = if backend == Backend::Memory {
                    None
                } else {
                    Some(raw::select_events(ctx, &db, clients, "r", EVENTS).await?)
                };
                let raw_rate = raw.as_ref().map(|r| r.rate());
                let mut cells = vec![format!("abstore, {}", backend.label()), clients.to_string()];
                cells.extend(compared_cells(&row));
                cells.extend([
                    raw_rate.map_or_else(|| "–".into(), rate),
                    opt(raw_rate.map(|raw| row.abstore.0.rate() / raw), 2),
                    reference::notes(&[
                        row.note(),
                        raw.as_ref().map(|r| r.note()).unwrap_or_default(),
                    ]),
                ]);
                rows.push(cells);
            }
            Ok(rows)
        })
        .await?;
        for row in rows {
            table.push(row);
        }
    }
    Ok(table)
}

/// `count` distinct pseudo-random contents of `size` bytes (so blobs are not
/// all one content address), base64-encoded once, before any load phase.
fn distinct_contents_base64(count: usize, size: usize) -> Vec<String> {
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
            base64::engine::general_purpose::STANDARD.encode(&bytes)
        })
        .collect()
}

/// Deposit requests: one distinct 16 KiB `plan` artifact and its event each.
fn deposit_bodies(count: usize, size: usize) -> Vec<Bytes> {
    distinct_contents_base64(count, size)
        .into_iter()
        .map(|content| {
            let body = serde_json::json!({
                "artifacts": [{ "kind": "plan", "contentBase64": content }],
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

/// Put requests: one distinct `plan` artifact each.
fn put_bodies(count: usize, size: usize) -> Vec<Bytes> {
    distinct_contents_base64(count, size)
        .into_iter()
        .map(|content| {
            let body = serde_json::json!({ "kind": "plan", "contentBase64": content });
            Bytes::from(body.to_string())
        })
        .collect()
}

/// Closed-loop POSTs of pre-built `bodies` to `/builds/{prefix}-{worker}/{route}`
/// (one build per client), 1 and 16 clients, on every backend.
async fn post_scenario(
    ctx: &Ctx,
    title: &str,
    name: &str,
    route: &str,
    bodies: Vec<Bytes>,
) -> Result<Table> {
    let mut table = Table::new(title, &reference::header(&OWN_COLUMNS, &["notes"]));
    let bodies = Arc::new(bodies);
    for backend in ctx.backends(true) {
        eprintln!("{name}: {}", backend.label());
        let bodies = bodies.clone();
        let measured = with_db(ctx, backend, |db| async move {
            side_by_side(ctx, &db, name, async |server: &Server| {
                let http = client();
                for i in 0..16 {
                    create_build(&http, server, &format!("{name}-{i}")).await?;
                }
                let mut measured = Vec::new();
                for clients in CLIENTS {
                    let urls: Arc<Vec<String>> = Arc::new(
                        (0..clients)
                            .map(|i| server.url(&format!("/builds/{name}-{i}/{route}")))
                            .collect(),
                    );
                    let (http, bodies) = (http.clone(), bodies.clone());
                    measured.push(
                        measure(ctx, Some(server), clients, move |worker, i| {
                            let (http, urls) = (http.clone(), urls.clone());
                            // A reference-counted clone: no payload is copied per request.
                            let body = bodies[(worker * 7 + i as usize) % bodies.len()].clone();
                            async move {
                                post(&http, &urls[worker], body, 201).await?;
                                Ok(())
                            }
                        })
                        .await?,
                    );
                }
                Ok(measured)
            })
            .await
        })
        .await?;
        for (clients, row) in CLIENTS.into_iter().zip(rows_of(&measured)) {
            let mut cells = vec![format!("abstore, {}", backend.label()), clients.to_string()];
            cells.extend(compared_cells(&row));
            cells.push(row.note());
            table.push(cells);
        }
    }
    Ok(table)
}

/// `deposit`: a 16 KiB artifact and its event via POST /builds/{slug}/deposits.
pub async fn deposit(ctx: &Ctx) -> Result<Table> {
    post_scenario(
        ctx,
        "deposit 16 KiB + event (POST /builds/{slug}/deposits, blobs memory://)",
        "deposit",
        "deposits",
        deposit_bodies(64, 16 * 1024),
    )
    .await
}

/// `put`: a 64 KiB artifact via POST /builds/{slug}/artifacts.
pub async fn put(ctx: &Ctx) -> Result<Table> {
    post_scenario(
        ctx,
        "put 64 KiB artifact (POST /builds/{slug}/artifacts, blobs memory://)",
        "put",
        "artifacts",
        put_bodies(64, 64 * 1024),
    )
    .await
}

/// `health`: GET /health, the layer stack with no store work, 1 and 16 clients.
pub async fn health(ctx: &Ctx) -> Result<Table> {
    let mut table = Table::new(
        "health (GET /health)",
        &reference::header(&OWN_COLUMNS, &["notes"]),
    );
    eprintln!("health");
    let measured = with_db(ctx, Backend::Memory, |db| async move {
        side_by_side(ctx, &db, "health", async |server: &Server| {
            let http = client();
            let url = Arc::new(server.url("/health"));
            let mut measured = Vec::new();
            for clients in CLIENTS {
                let (http, url) = (http.clone(), url.clone());
                measured.push(
                    measure(ctx, Some(server), clients, move |_, _| {
                        let (http, url) = (http.clone(), url.clone());
                        async move {
                            get(&http, &url).await?;
                            Ok(())
                        }
                    })
                    .await?,
                );
            }
            Ok(measured)
        })
        .await
    })
    .await?;
    for (clients, row) in CLIENTS.into_iter().zip(rows_of(&measured)) {
        let mut cells = vec![
            format!("abstore, {}", Backend::Memory.label()),
            clients.to_string(),
        ];
        cells.extend(compared_cells(&row));
        cells.push(row.note());
        table.push(cells);
    }
    Ok(table)
}
