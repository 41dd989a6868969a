//! `wake`: latency from an append to the response of reads held on that build.
//!
//! N readers hold `GET /builds/{slug}/events?since=S&wait=25`. Once the
//! server reports all N held (its `abstore_held_reads_in_flight` gauge), one
//! append is posted; each reader's latency runs from just before that POST to
//! the moment the reader has the response body. Readers then re-arm with the
//! new `since` and the cycle repeats.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use tokio::sync::mpsc;

use crate::harness::{
    Backend, Ctx, Server, ServerOpts, Table, client, client_with_timeout, create_build, event_body,
    ms, percentile, post, with_db,
};

const READER_COUNTS: [usize; 3] = [1, 100, 1000];

fn appends_for(readers: usize) -> usize {
    match readers {
        1 => 100,
        100 => 30,
        _ => 12,
    }
}

#[derive(Clone, Copy)]
enum Topology {
    OneProcess,
    /// Readers on server A, appends on server B, one PostgreSQL database.
    TwoProcesses,
}

pub async fn wake(ctx: &Ctx) -> Result<Table> {
    let mut table = Table::new(
        "held-read wake (append → held GET …/events?since=N&wait=25 answered)",
        &[
            "backend",
            "topology",
            "readers",
            "appends",
            "wake p50 ms",
            "wake p99 ms",
            "wake max ms",
            "append p50 ms",
            "notes",
        ],
    );
    let mut configs = vec![(Backend::SqliteFile, Topology::OneProcess)];
    if ctx.pg_base.is_some() {
        configs.push((Backend::Postgres, Topology::OneProcess));
        configs.push((Backend::Postgres, Topology::TwoProcesses));
    }
    for (backend, topology) in configs {
        let label = match topology {
            Topology::OneProcess => "one process",
            Topology::TwoProcesses => "two processes (read A, append B)",
        };
        eprintln!("wake: {} {label}", backend.label());
        let rows = with_db(ctx, backend, |db| async move {
            let mut a = ServerOpts::new(&db, format!("wake-{backend:?}-a"));
            a.metrics = true;
            let reader_server = Server::start(ctx, a).await?;
            let writer_server = match topology {
                Topology::OneProcess => None,
                Topology::TwoProcesses => Some(
                    Server::start(ctx, ServerOpts::new(&db, format!("wake-{backend:?}-b"))).await?,
                ),
            };
            let mut rows = Vec::new();
            for readers in READER_COUNTS {
                let writer = writer_server.as_ref().unwrap_or(&reader_server);
                let measured = run(&reader_server, writer, readers, appends_for(readers)).await?;
                rows.push(vec![
                    backend.label().into(),
                    label.into(),
                    readers.to_string(),
                    measured.appends.to_string(),
                    ms(percentile(&measured.wakes, 0.5)),
                    ms(percentile(&measured.wakes, 0.99)),
                    ms(measured.wakes.last().copied().unwrap_or_default()),
                    ms(percentile(&measured.append_latencies, 0.5)),
                    measured.note,
                ]);
            }
            if let Some(writer) = writer_server {
                writer.stop().await?;
            }
            reader_server.stop().await?;
            Ok(rows)
        })
        .await?;
        for row in rows {
            table.push(row);
        }
    }
    Ok(table)
}

struct Measured {
    appends: usize,
    wakes: Vec<Duration>,
    append_latencies: Vec<Duration>,
    note: String,
}

async fn run(
    reader_server: &Server,
    writer: &Server,
    readers: usize,
    appends: usize,
) -> Result<Measured> {
    let slug = format!("w-{readers}");
    let control = client();
    create_build(&control, writer, &slug).await?;
    // Readers see the build even when it was created through the other replica.
    let (tx, mut rx) = mpsc::unbounded_channel::<(usize, i64, Instant)>();
    let mut tasks = Vec::new();
    // Several connection pools of at most 250 connections each.
    let pools: Vec<reqwest::Client> = (0..readers.div_ceil(250))
        .map(|_| client_with_timeout(Duration::from_secs(40)))
        .collect();
    for reader in 0..readers {
        let http = pools[reader / 250].clone();
        let base = reader_server.url(&format!("/builds/{slug}/events"));
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            let mut since = 0i64;
            loop {
                let url = format!("{base}?since={since}&wait=25");
                let Ok(response) = http.get(&url).send().await else {
                    break;
                };
                let Ok(body) = response.bytes().await else {
                    break;
                };
                let at = Instant::now();
                let Ok(events) = serde_json::from_slice::<Vec<serde_json::Value>>(&body) else {
                    break;
                };
                if let Some(seq) = events.last().and_then(|e| e["seq"].as_i64()) {
                    since = seq;
                    if tx.send((reader, seq, at)).is_err() {
                        break;
                    }
                }
            }
        }));
    }
    drop(tx);
    let mut wakes = Vec::with_capacity(readers * appends);
    let mut append_latencies = Vec::with_capacity(appends);
    let mut not_held = 0;
    let events_url = writer.url(&format!("/builds/{slug}/events"));
    let started = Instant::now();
    let mut done = 0;
    for expected_seq in 1..=appends as i64 {
        if started.elapsed() > Duration::from_secs(60) {
            break;
        }
        let held = reader_server
            .wait_held(&control, readers as u64, Duration::from_secs(20))
            .await?;
        if held < readers as u64 {
            not_held += 1;
        }
        let t0 = Instant::now();
        let body = post(&control, &events_url, event_body(), 201).await?;
        append_latencies.push(t0.elapsed());
        let seq = serde_json::from_slice::<serde_json::Value>(&body)?["seq"]
            .as_i64()
            .context("no seq")?;
        if seq != expected_seq {
            bail!("append got seq {seq}, expected {expected_seq}");
        }
        let mut answered = 0;
        while answered < readers {
            match tokio::time::timeout(Duration::from_secs(30), rx.recv()).await {
                Ok(Some((_, got, at))) if got == seq => {
                    wakes.push(at.saturating_duration_since(t0));
                    answered += 1;
                }
                Ok(Some(_)) => {}
                Ok(None) => bail!("readers stopped"),
                Err(_) => bail!(
                    "{} of {readers} readers not woken within 30 s",
                    readers - answered
                ),
            }
        }
        done += 1;
    }
    for task in &tasks {
        task.abort();
    }
    wakes.sort_unstable();
    append_latencies.sort_unstable();
    let note = if not_held > 0 {
        format!("{not_held} appends sent before all {readers} reads were held")
    } else {
        String::new()
    };
    Ok(Measured {
        appends: done,
        wakes,
        append_latencies,
        note,
    })
}
