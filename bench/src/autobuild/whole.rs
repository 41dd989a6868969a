//! `whole`: whole-history reads of an aged repository journal (issue 22,
//! items 2–4), on a store seeded the replay's way (a generated archive,
//! imported). For each journal size and backend:
//!
//! - identity: the read that fills the history cache on its own, then
//!   sequential whole-journal reads; MB of response per second of server
//!   CPU;
//! - compressed: the same with `Accept-Encoding: zstd`, `gzip` and `br`; MB of
//!   *identity* answer per server-CPU second, and compressed ÷ identity bytes;
//!   the first gzip and brotli read, which recodes the cached chunks once, on
//!   its own;
//! - memory: VmRSS before, the peak while five whole reads run at once
//!   (sampled every 5 ms), and 5 s after they end.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use super::{Size, archive, history, import, now_ms, scratch};
use crate::harness::{Backend, Ctx, Server, ServerOpts, Table, mib, with_db};

const IDENTITY_READS: usize = 8;
const COMPRESSED_READS: usize = 8;
const CONCURRENT: usize = 5;

pub async fn whole(ctx: &Ctx, journals: &[u64]) -> Result<Vec<Table>> {
    let mut speed = Table::new(
        "whole-journal reads: server CPU per MB (GET /repos/{repo}/events?since=0)",
        &[
            "backend",
            "journal events",
            "answer MB",
            "encoding",
            "reads",
            "server CPU ms / read",
            "MB answered / CPU s",
            "bytes sent ÷ identity",
        ],
    );
    let mut memory = Table::new(
        "whole-journal reads: server memory, five at once",
        &[
            "backend",
            "journal events",
            "RSS before MiB",
            "peak MiB (over before)",
            "5 s after MiB (over before)",
        ],
    );
    for &journal in journals {
        let size = Size {
            journal_events: journal,
            builds: 10,
            events_per_build: 100,
            span_secs: (journal as i64 * 86_400 / 17_000).max(3_600),
        };
        let history = history::generate(1, size, 0, now_ms() - 10_000, 0x5eed);
        let archive_path = ctx.work_dir.join(format!("whole-{journal}.ndjson"));
        archive::write(&history, &archive_path)?;
        for backend in [Backend::SqliteFile, Backend::Postgres] {
            if backend == Backend::Postgres && ctx.pg_base.is_none() {
                continue;
            }
            let (rows, mem) = with_db(ctx, backend, |db| {
                let archive_path = archive_path.clone();
                async move {
                    let blobs = scratch(ctx, "whole-blobs")?;
                    import(ctx, &archive_path, &db.url, &blobs)?;
                    let mut opts = ServerOpts::new(&db, format!("whole-{journal}"));
                    opts.blobs = format!("file://{}", blobs.display());
                    let server = Server::start(ctx, opts).await?;
                    let measured = measure(&server, backend, journal).await;
                    server.stop().await?;
                    let _ = std::fs::remove_dir_all(&blobs);
                    measured
                }
            })
            .await?;
            for row in rows {
                speed.push(row);
            }
            memory.push(mem);
        }
        let _ = std::fs::remove_file(&archive_path);
    }
    Ok(vec![speed, memory])
}

async fn measure(
    server: &Server,
    backend: Backend,
    journal: u64,
) -> Result<(Vec<Vec<String>>, Vec<String>)> {
    let http = crate::harness::client();
    let url = server.url(&format!(
        "/repos/{}/events?since=0",
        super::clients::enc(&history::repo_id(0))
    ));
    let read = |encoding: Option<&'static str>| {
        let (http, url) = (http.clone(), url.clone());
        async move {
            let mut request = http.get(&url);
            if let Some(encoding) = encoding {
                request = request.header("accept-encoding", encoding);
            }
            let res = request.send().await?;
            if res.status() != 200 {
                bail!("GET {url}: {}", res.status());
            }
            let sent = res
                .headers()
                .get("content-encoding")
                .map(|v| v.to_str().unwrap_or("?").to_owned());
            if sent.as_deref() != encoding {
                bail!("asked for {encoding:?}, was sent {sent:?}");
            }
            Ok::<usize, anyhow::Error>(res.bytes().await?.len())
        }
    };
    // Warm up (page cache, prepared statements), and the identity size;
    // this ordinary read teaches the history cache where the journal ends.
    let identity_bytes = read(None).await?;
    let mut rows = Vec::new();
    // The next read (of any encoding) reads the sealed chunks one statement
    // each and keeps their frames: measured on its own, since every later
    // read of the journal copies or decompresses those frames.
    let cpu_before = server.cpu()?;
    let sent = read(None).await?;
    let cpu = (server.cpu()? - cpu_before).as_secs_f64();
    rows.push(vec![
        backend.label().into(),
        journal.to_string(),
        format!("{:.1}", identity_bytes as f64 / 1e6),
        "identity, filling the history cache".into(),
        "1".into(),
        format!("{:.1}", cpu * 1000.0),
        format!("{:.0}", identity_bytes as f64 / 1e6 / cpu.max(1e-9)),
        format!("{:.3}", sent as f64 / identity_bytes as f64),
    ]);
    // gzip and brotli answers recode each cached chunk the first time one
    // is asked for (deflated, or compressed as a brotli stream) and keep
    // it: that read is measured on its own, the later ones copy.
    let phases = [
        (None, "identity", IDENTITY_READS),
        (Some("zstd"), "zstd", COMPRESSED_READS),
        (Some("gzip"), "gzip, recoding the cached chunks", 1),
        (Some("gzip"), "gzip", COMPRESSED_READS),
        (Some("br"), "br, recoding the cached chunks", 1),
        (Some("br"), "br", COMPRESSED_READS),
    ];
    for (encoding, label, reads) in phases {
        let cpu_before = server.cpu()?;
        let mut sent = 0;
        for _ in 0..reads {
            sent += read(encoding).await?;
        }
        let cpu = (server.cpu()? - cpu_before).as_secs_f64();
        let answered = (identity_bytes * reads) as f64;
        rows.push(vec![
            backend.label().into(),
            journal.to_string(),
            format!("{:.1}", identity_bytes as f64 / 1e6),
            label.into(),
            reads.to_string(),
            format!("{:.1}", cpu * 1000.0 / reads as f64),
            format!("{:.0}", answered / 1e6 / cpu.max(1e-9)),
            format!("{:.3}", sent as f64 / answered),
        ]);
        eprintln!("whole: {:?}", rows.last());
    }

    // Memory: settle, then five whole reads at once, sampling VmRSS.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before = server.rss()?;
    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let (sampling, pid) = (sampling.clone(), server.pid);
        tokio::spawn(async move {
            let mut peak = 0;
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(rss) = rss_of(pid) {
                    peak = peak.max(rss);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            peak
        })
    };
    let started = Instant::now();
    let readers: Vec<_> = (0..CONCURRENT).map(|_| tokio::spawn(read(None))).collect();
    for reader in readers {
        reader.await??;
    }
    eprintln!(
        "whole: {CONCURRENT} concurrent reads in {:.2} s",
        started.elapsed().as_secs_f64()
    );
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    let peak = sampler.await.context("the RSS sampler")?.max(before);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = server.rss()?;
    let over = |rss: u64| format!("{} (+{})", mib(rss), mib(rss.saturating_sub(before)));
    let mem = vec![
        backend.label().into(),
        journal.to_string(),
        mib(before),
        over(peak),
        over(after),
    ];
    eprintln!("whole: {mem:?}");
    Ok((rows, mem))
}

fn rss_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}
