//! Two replicas on one PostgreSQL database behave as one store: the
//! conformance suite runs through a round-robin TCP balancer that sends
//! each new connection to the next replica, so a check's requests land on
//! both. The test clock is per process, so the clock-controlled checks skip
//! here; every other check must pass.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use abstore_conformance::{Ctx, Outcome, all_checks, run_checks};
use abstore_testkit::scratch_pg;
use tokio::net::{TcpListener, TcpStream};

use crate::support::Server;

/// Accept connections and splice each to the next upstream in turn.
async fn balance(listener: TcpListener, upstreams: Vec<String>) {
    let next = Arc::new(AtomicUsize::new(0));
    loop {
        let Ok((mut inbound, _)) = listener.accept().await else {
            return;
        };
        let target = upstreams[next.fetch_add(1, Ordering::Relaxed) % upstreams.len()].clone();
        tokio::spawn(async move {
            if let Ok(mut outbound) = TcpStream::connect(&target).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_across_two_replicas_postgres() {
    let Some(db) =
        scratch_pg::for_test("PostgreSQL two-replica conformance", "abstore_replicas").await
    else {
        return;
    };
    let blobs = tempfile::tempdir().unwrap();
    let blob_dir = blobs.path().display().to_string();
    let replica = Server::builder().database(&db.url).blobs(&blob_dir);
    // Migrations run once, by the first replica; the second finds them applied.
    let a = replica.clone().start().await;
    let b = replica.arg("--no-migrate").start().await;

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let front = format!("http://{}", listener.local_addr().unwrap());
    let upstreams = [a.url(), b.url()]
        .iter()
        .map(|u| u.trim_start_matches("http://").to_owned())
        .collect();
    let balancer = tokio::spawn(balance(listener, upstreams));

    let ctx = Ctx::new(&front, "0.8.0").expect("http client");
    let report = run_checks(&ctx, all_checks(), None, 8, |_, _| {}).await;
    eprintln!("conformance [two replicas]: {}", report.summary());
    balancer.abort();
    let failures = report.failures();
    let ran = report
        .results
        .iter()
        .filter(|(_, o)| !matches!(o, Outcome::Skip(_)))
        .count();
    drop((a, b));
    let _ = db.drop_db().await;
    assert!(
        failures.is_empty(),
        "{} checks failed across two replicas:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(ran > 400, "only {ran} checks ran");
}
