//! Blobs on S3-compatible storage, against a real S3 server: the blob
//! contract through `Blobs`, and the whole conformance suite through the
//! binary with `--blobs s3://…`.
//!
//! `ABSTORE_TEST_S3_URL` (e.g. `s3://abstore-test`) names a bucket; the
//! endpoint and credentials come from the usual `AWS_*` variables
//! (`scripts/s3-test-server` starts moto and prints them). Unset: fails
//! under `CI=true`, otherwise skips loudly.

use abstore::blobs::{Blobs, blob_ref};
use abstore_conformance::{Ctx, all_checks, run_checks};

use crate::support::Server;

/// A fresh prefix in the test bucket, or `None` when S3 is not configured.
fn s3_location() -> Option<String> {
    let Ok(base) = std::env::var("ABSTORE_TEST_S3_URL") else {
        abstore_testkit::skip::skipped(
            "S3 blob tests",
            "ABSTORE_TEST_S3_URL is unset; eval \"$(scripts/s3-test-server)\" sets it",
        );
        return None;
    };
    Some(format!(
        "{}/run-{:016x}",
        base.trim_end_matches('/'),
        rand::random::<u64>()
    ))
}

#[tokio::test]
async fn blob_contract_on_s3() {
    let Some(location) = s3_location() else {
        return;
    };
    let blobs = Blobs::open(&location).expect("open the S3 location");
    blobs.check().await.expect("the bucket is reachable");
    let bytes = b"# Plan\n".to_vec();
    let address = blob_ref(&bytes);
    // Content-addressed puts are idempotent; correctness never depends on
    // create-only semantics (some S3 servers ignore them).
    blobs.put(&address, bytes.clone()).await.unwrap();
    blobs.put(&address, bytes.clone()).await.unwrap();
    assert_eq!(
        blobs.get(&address).await.unwrap().as_ref(),
        bytes.as_slice()
    );
    let big = vec![7u8; 1_048_576];
    blobs.put(&blob_ref(&big), big.clone()).await.unwrap();
    assert_eq!(blobs.get(&blob_ref(&big)).await.unwrap().len(), big.len());
    assert!(blobs.get(&blob_ref(b"absent")).await.is_err());
}

#[tokio::test]
async fn conformance_with_s3_blobs() {
    let Some(location) = s3_location() else {
        return;
    };
    let server = Server::builder()
        .blobs(&location)
        .test_clock()
        .start()
        .await;
    let ctx = Ctx::new(server.url(), "0.8.0").expect("http client");
    let report = run_checks(&ctx, all_checks(), None, 8, |_, _| {}).await;
    eprintln!("conformance [s3 blobs]: {}", report.summary());
    let failures = report.failures();
    assert!(
        failures.is_empty(),
        "{} checks failed with S3 blobs:\n{}\n{}",
        failures.len(),
        failures.join("\n"),
        server.stderr()
    );
}
