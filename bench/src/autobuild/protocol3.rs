//! What a protocol-3 client (Autobuild 0.9.0) reads instead of whole
//! histories: the dashboard's observation-pressure sample and the
//! dispatcher's repository view. docs/benchmarks/frame-and-tick.md names the
//! Autobuild files each step stands for.

use std::collections::HashMap;

use anyhow::{Context as _, Result, bail};
use serde_json::{Value, json};

use super::clients::{Proc, enc, last_seq};
use super::stats::Op;

/// A build's digest as far as the model needs it: whether it has a
/// terminal fact, and which.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Terminal {
    None,
    Done,
    Aborted,
}

impl Proc {
    /// `getRepoBuildDigests(repo)`: one entry per build of the repository.
    pub(super) async fn build_digests(&self, repo: &str) -> Result<HashMap<String, Terminal>> {
        let body = self
            .get(
                Op::BuildDigests,
                &format!("/repos/{}/build-digests", enc(repo)),
            )
            .await?;
        let digests: Vec<Value> = serde_json::from_slice(&body).context("a digest list")?;
        digests
            .iter()
            .map(|digest| {
                let slug = digest["slug"].as_str().context("a digest without slug")?;
                let terminal = match digest["terminal"].as_str() {
                    None => Terminal::None,
                    Some("done") => Terminal::Done,
                    Some("aborted") => Terminal::Aborted,
                    Some(other) => bail!("digest of {slug}: terminal {other:?}"),
                };
                Ok((slug.to_owned(), terminal))
            })
            .collect()
    }

    /// `getRepoStateEvents(repo)`: the journal's durable facts and the tail
    /// from the latest `dispatcher.run-started`.
    pub(super) async fn state_events(&self, repo: &str) -> Result<bytes::Bytes> {
        self.get(
            Op::StateEvents,
            &format!("/repos/{}/state-events", enc(repo)),
        )
        .await
    }
}

/// `sampleUnclaimedObservationCount` (`processes/harvest.ts`): the build
/// digests, and at the same time the journal record's probe followed by the
/// bounded journal read. Replaces protocol 2's `scanUnclaimedObservations`
/// (the whole journal and every build's whole log) in a dashboard frame.
pub async fn sample_unclaimed_observations(p: &Proc, repo: &str) -> Result<()> {
    let digests = p.build_digests(repo);
    let journal = async {
        p.get_repo(repo).await?;
        p.state_events(repo).await
    };
    let (digests, journal) = tokio::join!(digests, journal);
    digests?;
    journal?;
    Ok(())
}

/// The protocol-3 dispatcher's in-process repository view (`RepoViewStore`,
/// `processes/repo-view.ts`): the first refresh reads the bounded journal,
/// the listing, the digests and every work build's whole log; each later
/// refresh reads one journal delta, the listing, the digests and one delta
/// per work build. The tick's stages then answer from memory.
pub struct RepoView {
    repo: String,
    /// The journal cursor; `None` before the first refresh.
    journal: Option<u64>,
    /// Work builds (no terminal fact, or aborted) and their cursors.
    work: HashMap<String, u64>,
}

impl RepoView {
    pub fn new(repo: String) -> RepoView {
        RepoView {
            repo,
            journal: None,
            work: HashMap::new(),
        }
    }

    /// `refresh()`, once per tick.
    async fn refresh(&mut self, p: &Proc) -> Result<()> {
        let repo = self.repo.clone();
        self.journal = Some(match self.journal {
            // The cold load also reads a high-water mark (`getRepoHighWater`),
            // a store call with no protocol-3 route in the text abstore
            // serves; the model takes the cursor from the bounded read,
            // whose tail runs to the journal's end once a run has started.
            None => {
                p.get_repo(&repo).await?;
                last_seq(&p.state_events(&repo).await?, 0)?
            }
            Some(cursor) => last_seq(&p.journal(&repo, cursor).await?, cursor)?,
        });
        let builds = p.list_builds().await?;
        let digests = p.build_digests(&repo).await?;
        // Every held work build reads its tail first; a settled one is
        // then let go.
        let held: Vec<(String, u64)> = self.work.drain().collect();
        for (slug, cursor) in held {
            let cursor = last_seq(&p.build_log(&slug, cursor).await?, cursor)?;
            if digests.get(&slug).is_some_and(|t| *t != Terminal::Done) {
                self.work.insert(slug, cursor);
            }
        }
        for build in builds.iter().filter(|b| b.repo == repo) {
            let work = digests
                .get(&build.slug)
                .is_some_and(|t| *t != Terminal::Done);
            if work && !self.work.contains_key(&build.slug) {
                let cursor = last_seq(&p.build_log(&build.slug, 0).await?, 0)?;
                self.work.insert(build.slug.clone(), cursor);
            }
        }
        Ok(())
    }

    /// An own journal append folds into the view when it directly follows
    /// the cursor (otherwise the next delta reads it).
    fn fold(&mut self, appended: &[u8]) -> Result<()> {
        let seq = serde_json::from_slice::<Value>(appended)?["seq"]
            .as_u64()
            .context("an envelope without seq")?;
        if let Some(cursor) = self.journal.as_mut()
            && seq == *cursor + 1
        {
            *cursor = seq;
        }
        Ok(())
    }

    /// One dispatcher tick over the view: `tick-started`, the refresh, the
    /// harvest gate's `ensureRepo` (`evaluateHarvestPressureFromStore`,
    /// whose digests and journal the view already holds), `tick-completed`.
    pub async fn tick(&mut self, p: &Proc, run: &str) -> Result<()> {
        let path = format!("/repos/{}/events", enc(&self.repo));
        let dispatcher = json!({ "kind": "dispatcher" });
        let started = p
            .post(
                Op::RepoAppend,
                &path,
                json!({ "actor": dispatcher, "type": "dispatcher.tick-started", "payload": { "run": run } })
                    .to_string(),
            )
            .await?;
        self.fold(&started)?;
        self.refresh(p).await?;
        p.ensure_repo(&self.repo).await?;
        let completed = p
            .post(Op::RepoAppend, &path, super::clients::tick_completed(run))
            .await?;
        self.fold(&completed)
    }
}
