//! `memory`: the server's resident set (VmRSS) idle, with 10,000 held reads
//! open, and after depositing many large artifacts to a file blob store.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use base64::Engine as _;
use bytes::Bytes;

use crate::harness::{
    Backend, Ctx, Server, ServerOpts, Table, client, client_with_timeout, create_build, mib, post,
    with_db,
};

const HELD: usize = 10_000;
const BUILDS: usize = 1_000;
/// Held reads per client connection pool.
const PER_POOL: usize = 1_000;

pub async fn memory(ctx: &Ctx) -> Result<Table> {
    let mut table = Table::new(
        "memory (server VmRSS)",
        &["backend", "state", "RSS MiB", "threads", "notes"],
    );
    // Idle, with the default configuration (no metrics listener).
    for backend in ctx.backends(true) {
        eprintln!("memory: idle {}", backend.label());
        let row = with_db(ctx, backend, |db| async move {
            let server = Server::start(
                ctx,
                ServerOpts::new(&db, format!("memory-idle-{backend:?}")),
            )
            .await?;
            tokio::time::sleep(Duration::from_secs(1)).await;
            let (rss, threads) = (server.rss()?, server.threads()?);
            server.stop().await?;
            Ok(vec![
                backend.label().into(),
                "idle after start".into(),
                mib(rss),
                threads.to_string(),
                String::new(),
            ])
        })
        .await?;
        table.push(row);
    }
    for backend in ctx.backends(false) {
        eprintln!("memory: {HELD} held reads on {}", backend.label());
        let rows = with_db(
            ctx,
            backend,
            |db| async move { held(ctx, &db, backend).await },
        )
        .await?;
        for row in rows {
            table.push(row);
        }
    }
    eprintln!("memory: large deposits to file blobs");
    let rows = with_db(ctx, Backend::SqliteFile, |db| async move {
        deposits(ctx, &db).await
    })
    .await?;
    for row in rows {
        table.push(row);
    }
    Ok(table)
}

async fn held(ctx: &Ctx, db: &crate::harness::Db, backend: Backend) -> Result<Vec<Vec<String>>> {
    let mut opts = ServerOpts::new(db, format!("memory-held-{backend:?}"));
    opts.metrics = true;
    // Every reader comes from 127.0.0.1: the per-address ceiling (a quarter
    // of --max-connections by default) would stop them at 4,096.
    opts.extra = vec!["--max-connections-per-address".into(), "16384".into()];
    let server = Server::start(ctx, opts).await?;
    let control = client();
    // Builds are created with 16 concurrent requests.
    let slugs: Arc<Vec<String>> = Arc::new((0..BUILDS).map(|i| format!("m-{i}")).collect());
    let mut creators = Vec::new();
    for worker in 0..16 {
        let (http, slugs, url) = (control.clone(), slugs.clone(), server.url("/builds"));
        creators.push(tokio::spawn(async move {
            for slug in slugs.iter().skip(worker).step_by(16) {
                let body = serde_json::json!({ "slug": slug, "repo": "bench" }).to_string();
                post(&http, &url, body.into(), 201).await?;
            }
            anyhow::Ok(())
        }));
    }
    for creator in creators {
        creator.await??;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = server.rss()?;
    let cpu0 = server.cpu()?;
    let mut rows = vec![vec![
        backend.label().into(),
        format!("{BUILDS} builds, metrics listener on, no held reads"),
        mib(before),
        server.threads()?.to_string(),
        String::new(),
    ]];
    // Open the reads in batches across several connection pools.
    let pools: Vec<reqwest::Client> = (0..HELD.div_ceil(PER_POOL))
        .map(|_| client_with_timeout(Duration::from_secs(60)))
        .collect();
    let mut tasks = Vec::with_capacity(HELD);
    let opened = Instant::now();
    for read in 0..HELD {
        let http = pools[read / PER_POOL].clone();
        let url = server.url(&format!(
            "/builds/{}/events?since=0&wait=30",
            slugs[read % BUILDS]
        ));
        tasks.push(tokio::spawn(async move {
            http.get(&url).send().await.map(|r| r.status().as_u16())
        }));
        if read % 500 == 499 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let held = server
        .wait_held(&control, HELD as u64, Duration::from_secs(22))
        .await?;
    let ramp = opened.elapsed();
    let during = server.rss()?;
    let threads = server.threads()?;
    let cpu = server.cpu()? - cpu0;
    rows.push(vec![
        backend.label().into(),
        format!("{held} held reads"),
        mib(during),
        threads.to_string(),
        format!(
            "+{} MiB over {BUILDS} builds idle ({:.1} KiB per held read); all held after {:.1} s; server CPU {:.2} s to accept them",
            mib(during.saturating_sub(before)),
            during.saturating_sub(before) as f64 / 1024.0 / held.max(1) as f64,
            ramp.as_secs_f64(),
            cpu.as_secs_f64(),
        ),
    ]);
    // The same reads two seconds later, still held: what the ramp's
    // transient allocations (queued probes, request parsing) left resident
    // has had jemalloc's decay time (`dirty_decay_ms`, .cargo/config.toml)
    // to go back; what stays is what a held read keeps for its wait.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let settled = server.rss()?;
    let still_held = server.held_reads(&control).await?;
    rows.push(vec![
        backend.label().into(),
        format!("{still_held} held reads, 2 s later"),
        mib(settled),
        server.threads()?.to_string(),
        format!(
            "+{} MiB over {BUILDS} builds idle ({:.1} KiB per held read)",
            mib(settled.saturating_sub(before)),
            settled.saturating_sub(before) as f64 / 1024.0 / still_held.max(1) as f64,
        ),
    ]);
    // Release them (the client closes every connection) and see what is given back.
    for task in &tasks {
        task.abort();
    }
    drop(tasks);
    drop(pools);
    // The target: within 20 MB of idle 5 s after the clients leave.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let remaining = server.held_reads(&control).await?;
    rows.push(vec![
        backend.label().into(),
        "5 s after the clients disconnected".into(),
        mib(server.rss()?),
        server.threads()?.to_string(),
        format!("{remaining} reads still held"),
    ]);
    server.stop().await?;
    Ok(rows)
}

/// 64 deposits of a distinct 1 MiB artifact each to a `file://` blob store:
/// RSS should return near its level before, as no blob bytes stay in memory.
async fn deposits(ctx: &Ctx, db: &crate::harness::Db) -> Result<Vec<Vec<String>>> {
    const COUNT: usize = 64;
    const SIZE: usize = 1024 * 1024;
    let blobs = db
        .path
        .as_ref()
        .and_then(|p| p.parent())
        .map(|d| d.join("blobs"))
        .expect("a SQLite file database");
    std::fs::create_dir_all(&blobs)?;
    let mut opts = ServerOpts::new(db, "memory-deposits");
    opts.blobs = format!("file://{}", blobs.display());
    let server = Server::start(ctx, opts).await?;
    let http = client();
    create_build(&http, &server, "big").await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = server.rss()?;
    let url = Arc::new(server.url("/builds/big/deposits"));
    let mut peak = before;
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    for chunk in 0..COUNT / 4 {
        // 4 concurrent deposits at a time.
        let mut batch = Vec::new();
        for _ in 0..4 {
            let bytes: Vec<u8> = (0..SIZE)
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
                    "payload": { "round": chunk + 1, "artifact": { "kind": "plan", "rev": -1 } }
                }
            });
            let (http, url) = (http.clone(), url.clone());
            batch.push(tokio::spawn(async move {
                post(&http, &url, Bytes::from(body.to_string()), 201).await
            }));
        }
        for task in batch {
            task.await??;
        }
        peak = peak.max(server.rss()?);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = server.rss()?;
    let threads = server.threads()?;
    server.stop().await?;
    Ok(vec![
        vec![
            "SQLite file + file:// blobs".into(),
            "before large deposits".into(),
            mib(before),
            String::new(),
            String::new(),
        ],
        vec![
            "SQLite file + file:// blobs".into(),
            format!("after {COUNT} deposits of 1 MiB (4 concurrent)"),
            mib(after),
            threads.to_string(),
            format!(
                "peak seen between batches {} MiB; {} MiB of blobs written",
                mib(peak),
                COUNT * SIZE / (1024 * 1024)
            ),
        ],
    ])
}
