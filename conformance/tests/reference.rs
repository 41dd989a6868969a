//! The runner held to the spec alone: run every protocol check (no
//! `abstore.*` check, as `--strict-spec`) against Autobuild's OWN reference
//! server and require that it fails only the checks listed in
//! `conformance/autobuild/reference/expected-failures.txt`, each of which
//! names the protocol 0.8.0 feature the 0.5.0 reference lacks. A failure
//! outside the list means a check asserts something the spec does not
//! require (or the reference disagrees with the spec: then the list says so).
//!
//! Needs an Autobuild checkout with its dependencies (`ABC_AUTOBUILD`, the
//! variable `conformance/autobuild` uses) and Bun (`ABC_BUN`, `BUN`, or `bun`
//! on PATH). Without `ABC_AUTOBUILD` the test prints a SKIPPED line and passes
//! nothing. See docs/conformance.md.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use abstore_conformance::{
    Ctx, Outcome, all_checks, authenticate, is_abstore_specific, run_checks,
};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `(pattern, feature)` rows; a pattern ending in `*` is an id prefix.
fn expected_failures() -> Vec<(String, String)> {
    let path = workspace().join("conformance/autobuild/reference/expected-failures.txt");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (pattern, feature) = line
                .split_once(char::is_whitespace)
                .unwrap_or_else(|| panic!("entry without a feature: {line:?}"));
            (pattern.to_owned(), feature.trim().to_owned())
        })
        .collect()
}

fn matches(pattern: &str, id: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => id.starts_with(prefix),
        None => id == pattern,
    }
}

/// Starts `serve.ts` and waits for its `reference listening on URL` line.
async fn start_reference(autobuild: &str) -> (Child, String) {
    let bun = std::env::var("ABC_BUN")
        .or_else(|_| std::env::var("BUN"))
        .unwrap_or_else(|_| "bun".to_owned());
    let mut child = Command::new(&bun)
        .arg(workspace().join("conformance/autobuild/reference/serve.ts"))
        .env("ABC_AUTOBUILD", autobuild)
        .env_remove("ABC_SECRET")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run Bun ({bun}): {e}; set ABC_BUN"));
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    let url = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.expect("read serve.ts output") {
            if let Some(url) = line.strip_prefix("reference listening on ") {
                return url.to_owned();
            }
        }
        panic!("serve.ts exited without listening")
    })
    .await
    .expect("the reference server started within 60 s");
    (child, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_against_autobuild_reference_fails_only_listed_features() {
    let Ok(autobuild) = std::env::var("ABC_AUTOBUILD") else {
        abstore_testkit::skip::needs_user_supplied(
            "runner_against_autobuild_reference_fails_only_listed_features",
            "set ABC_AUTOBUILD to an Autobuild checkout (and ABC_BUN) to run it",
        );
        return;
    };
    let expected = expected_failures();
    let (mut server, url) = start_reference(&autobuild).await;
    let mut ctx = Ctx::new(&url, "0.8.0").expect("HTTP client");
    authenticate(&mut ctx, None, None)
        .await
        .expect("open mode needs no setup");
    let checks = all_checks()
        .into_iter()
        .filter(|c| !is_abstore_specific(&c.id))
        .collect();
    let report = run_checks(&ctx, checks, None, 4, |_, _| {}).await;
    let _ = server.kill().await;

    let mut unexpected = Vec::new();
    let mut by_feature: std::collections::BTreeMap<&str, usize> = Default::default();
    for (id, outcome) in &report.results {
        if let Outcome::Fail(_) = outcome {
            match expected.iter().find(|(pattern, _)| matches(pattern, id)) {
                Some((_, feature)) => *by_feature.entry(feature.as_str()).or_default() += 1,
                None => unexpected.push(outcome.line(id)),
            }
        }
    }
    eprintln!(
        "against the Autobuild reference at {url}: {}; expected failures by 0.8.0 feature: {by_feature:?}",
        report.summary()
    );
    assert!(
        report.passed() > 0,
        "no check passed: is {url} the reference server?"
    );
    assert!(
        unexpected.is_empty(),
        "{} failures outside expected-failures.txt:\n{}",
        unexpected.len(),
        unexpected.join("\n")
    );
}
