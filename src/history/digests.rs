//! The build-digests cache (issue 52, item 1): a protocol-3 dashboard frame
//! and dispatcher tick read `GET /repos/{repo}/build-digests`, one digest
//! per build of the repository. Derived afresh, that read walks every
//! digest event the repository's builds ever logged (9,228 on the week-old
//! store the frame benchmark seeds, 403 KB of answer), so a frame cost
//! grew with the store's age although almost nothing changes between two
//! frames.
//!
//! A build's digest is a function of its log up to its tail, and that
//! never changes: logs are append-only with contiguous sequences, and
//! builds are never deleted nor moved to another repository. So each build's
//! digest is kept with the tail it was folded to, and a read first asks the
//! repository's builds and their tails (one statement on the repository
//! index, no event read): when every tail is the one kept, the kept answer
//! is served; otherwise only the events past each kept tail are read and
//! folded into the kept digests (a new build from its first event). The
//! answer is exact on every replica and after any other writer, with no
//! announcement to miss: the tails come from the database on every read.
//!
//! Entries are bounded by bytes (each build's digest and its JSON, the
//! whole answer and its zstd form); the least recently read repository goes
//! first. A repository whose digests take more than a quarter of the
//! capacity is derived afresh on every read, as without the cache.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::{Bytes, BytesMut};

use super::kept::KeptAnswer;
use crate::bounded::{Bounded, Weighed};
use crate::store::{BuildDigest, DigestEvent, LogSpan, StoreError};

/// The build digests of recently read repositories.
pub struct DigestsCache {
    capacity: usize,
    by_repo: Mutex<Bounded<String, Arc<RepoDigests>>>,
}

/// One repository's digests, each at its build's tail, and the whole
/// answer they make.
pub struct RepoDigests {
    /// Every build of the repository, in the answer's order.
    builds: Vec<Arc<KeptDigest>>,
    /// `[`, each build's JSON, `]`.
    pub kept: KeptAnswer,
}

/// One build's digest as its log stood at `tail`.
struct KeptDigest {
    slug: String,
    tail: i64,
    digest: BuildDigest,
    /// The digest as the answer writes it.
    json: Bytes,
}

impl KeptDigest {
    fn new(slug: String, tail: i64, digest: BuildDigest) -> Result<Self, StoreError> {
        let json = serde_json::to_vec(&digest)
            .map_err(|err| StoreError::Corrupt(format!("a build digest as JSON: {err}")))?;
        Ok(KeptDigest {
            slug,
            tail,
            digest,
            json: Bytes::from(json),
        })
    }

    /// What this entry holds: the digest (its observations are about the
    /// size of their JSON) and its JSON.
    fn bytes(&self) -> usize {
        self.slug.len() + 2 * self.json.len()
    }
}

impl Weighed for Arc<RepoDigests> {
    fn bytes(&self) -> usize {
        self.kept.held_bytes() + self.builds.iter().map(|b| b.bytes()).sum::<usize>()
    }
}

impl RepoDigests {
    /// Whether these digests are the ones of builds at `tails` (slug and
    /// tail, in the answer's order).
    pub fn is_at(&self, tails: &[(String, i64)]) -> bool {
        self.builds.len() == tails.len()
            && self
                .builds
                .iter()
                .zip(tails)
                .all(|(kept, (slug, tail))| kept.slug == *slug && kept.tail == *tail)
    }

    /// The stretches of log to read to bring `kept` (nothing: no digest is
    /// kept) to `tails`: each build whose tail moved, from its kept tail,
    /// and each build not kept, from its start. A kept tail past the one
    /// read (a slower read racing a newer one) is read again from the start.
    pub fn spans(kept: Option<&RepoDigests>, tails: &[(String, i64)]) -> Vec<LogSpan> {
        let known = kept.map(RepoDigests::by_slug).unwrap_or_default();
        tails
            .iter()
            .filter_map(|(slug, tail)| {
                let after = match known.get(slug.as_str()) {
                    Some(kept) if kept.tail == *tail => return None,
                    Some(kept) if kept.tail < *tail => kept.tail,
                    _ => 0,
                };
                (*tail > after).then(|| LogSpan {
                    slug: slug.clone(),
                    after,
                    until: *tail,
                })
            })
            .collect()
    }

    /// The digests at `tails`: `kept`'s where the tail is the same, folded
    /// on with `events` (the events of [`RepoDigests::spans`], by slug then
    /// sequence) where it moved.
    pub fn advance(
        kept: Option<&RepoDigests>,
        tails: &[(String, i64)],
        events: Vec<(String, DigestEvent)>,
    ) -> Result<RepoDigests, StoreError> {
        let known = kept.map(RepoDigests::by_slug).unwrap_or_default();
        let mut read: HashMap<String, Vec<DigestEvent>> = HashMap::new();
        for (slug, event) in events {
            read.entry(slug).or_default().push(event);
        }
        let mut builds = Vec::with_capacity(tails.len());
        let mut answer_bytes = 2;
        for (slug, tail) in tails {
            let entry = match known.get(slug.as_str()) {
                Some(kept) if kept.tail == *tail => Arc::clone(kept),
                previous => {
                    let mut digest = match previous {
                        Some(kept) if kept.tail < *tail => kept.digest.clone(),
                        _ => BuildDigest::new(slug.clone()),
                    };
                    for (seq, event_type, ts) in read.remove(slug).unwrap_or_default() {
                        digest.apply(seq, &event_type, &ts);
                    }
                    Arc::new(KeptDigest::new(slug.clone(), *tail, digest)?)
                }
            };
            answer_bytes += entry.json.len() + 1;
            builds.push(entry);
        }
        let mut text = BytesMut::with_capacity(answer_bytes);
        text.extend_from_slice(b"[");
        for (n, build) in builds.iter().enumerate() {
            if n > 0 {
                text.extend_from_slice(b",");
            }
            text.extend_from_slice(&build.json);
        }
        text.extend_from_slice(b"]");
        Ok(RepoDigests {
            builds,
            kept: KeptAnswer::new(text.freeze()),
        })
    }

    fn by_slug(&self) -> HashMap<&str, &Arc<KeptDigest>> {
        self.builds.iter().map(|b| (b.slug.as_str(), b)).collect()
    }

    /// The sum of the tails: a newer read of the same repository never has
    /// a smaller one (tails only grow and builds are never removed).
    fn progress(&self) -> i128 {
        self.builds.iter().map(|b| i128::from(b.tail) + 1).sum()
    }

    /// The answer as one zstd frame, compressed the first time it is asked
    /// for and counted in the cache then.
    pub fn zstd(&self, cache: &DigestsCache, repo: &str) -> Result<Option<Bytes>, StoreError> {
        let (frame, made) = self.kept.zstd()?;
        if made {
            cache.lock().reweigh(repo);
        }
        Ok(Some(frame))
    }
}

impl DigestsCache {
    /// At most `capacity` bytes of digests (at least 1).
    pub fn new(capacity: usize) -> Self {
        DigestsCache {
            capacity: capacity.max(1),
            by_repo: Mutex::new(Bounded::new(
                capacity.max(1),
                usize::MAX,
                "abstore_build_digests_cache_bytes",
            )),
        }
    }

    /// `repo`'s kept digests, whatever tails they are at.
    pub fn get(&self, repo: &str) -> Option<Arc<RepoDigests>> {
        self.lock().get(repo).cloned()
    }

    /// Keep `digests` as `repo`'s, unless they take more than a quarter of
    /// the capacity (one large repository cannot push every other one out)
    /// or a concurrent read already kept later ones.
    pub fn insert(&self, repo: &str, digests: Arc<RepoDigests>) {
        if digests.bytes() > (self.capacity / 4).max(1) {
            return;
        }
        let mut by_repo = self.lock();
        if let Some(kept) = by_repo.peek(repo)
            && kept.progress() > digests.progress()
        {
            return;
        }
        by_repo.insert(repo.to_owned(), digests);
    }

    /// The bytes the entries hold now.
    pub fn bytes(&self) -> usize {
        self.lock().bytes()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Bounded<String, Arc<RepoDigests>>> {
        self.by_repo.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tails(list: &[(&str, i64)]) -> Vec<(String, i64)> {
        list.iter().map(|(s, t)| ((*s).to_owned(), *t)).collect()
    }

    fn event(slug: &str, seq: i64, ty: &str) -> (String, DigestEvent) {
        (slug.to_owned(), (seq, ty.to_owned(), format!("t{seq}")))
    }

    fn text(digests: &RepoDigests) -> String {
        String::from_utf8(digests.kept.text().to_vec()).unwrap()
    }

    #[test]
    fn only_moved_tails_and_new_builds_are_read() {
        let at = tails(&[("a", 3), ("b", 0)]);
        let spans = RepoDigests::spans(None, &at);
        // A build without events needs no read.
        assert_eq!(
            spans,
            vec![LogSpan {
                slug: "a".into(),
                after: 0,
                until: 3
            }]
        );
        let first = RepoDigests::advance(
            None,
            &at,
            vec![
                event("a", 1, "observation.recorded"),
                event("a", 3, "build.completed"),
            ],
        )
        .unwrap();
        assert!(first.is_at(&at));
        assert_eq!(
            text(&first),
            r#"[{"slug":"a","terminal":"done","observations":[{"seq":1,"ts":"t1"}]},{"slug":"b","observations":[]}]"#
        );

        // `a` grew, `c` is new, `b` is unchanged.
        let later = tails(&[("a", 5), ("b", 0), ("c", 2)]);
        assert!(!first.is_at(&later));
        let spans = RepoDigests::spans(Some(&first), &later);
        assert_eq!(
            spans,
            vec![
                LogSpan {
                    slug: "a".into(),
                    after: 3,
                    until: 5
                },
                LogSpan {
                    slug: "c".into(),
                    after: 0,
                    until: 2
                },
            ]
        );
        let second = RepoDigests::advance(
            Some(&first),
            &later,
            vec![
                event("a", 4, "observation.recorded"),
                event("a", 5, "pr.merged"),
                event("c", 2, "build.aborted"),
            ],
        )
        .unwrap();
        assert_eq!(
            text(&second),
            concat!(
                r#"[{"slug":"a","terminal":"done","observations":[{"seq":1,"ts":"t1"},{"seq":4,"ts":"t4"}],"merged":"t5"},"#,
                r#"{"slug":"b","observations":[]},{"slug":"c","terminal":"aborted","observations":[]}]"#
            )
        );
        // The unchanged build's entry is shared, not derived again.
        assert!(Arc::ptr_eq(&first.builds[1], &second.builds[1]));
    }

    #[test]
    fn a_kept_tail_past_the_read_one_is_read_again_from_the_start() {
        let newer = RepoDigests::advance(
            None,
            &tails(&[("a", 5)]),
            vec![event("a", 5, "build.completed")],
        )
        .unwrap();
        let older = tails(&[("a", 2)]);
        assert_eq!(
            RepoDigests::spans(Some(&newer), &older),
            vec![LogSpan {
                slug: "a".into(),
                after: 0,
                until: 2
            }]
        );
        let read = RepoDigests::advance(Some(&newer), &older, vec![]).unwrap();
        assert_eq!(text(&read), r#"[{"slug":"a","observations":[]}]"#);
        // The cache keeps the newer of the two.
        let cache = DigestsCache::new(1 << 20);
        cache.insert("r", Arc::new(newer));
        cache.insert("r", Arc::new(read));
        assert!(cache.get("r").unwrap().is_at(&tails(&[("a", 5)])));
    }

    #[test]
    fn the_bound_holds_and_a_large_repository_is_not_kept() {
        let many: Vec<(String, i64)> = (0..50).map(|n| (format!("build-{n:03}"), 0)).collect();
        let digests = Arc::new(RepoDigests::advance(None, &many, vec![]).unwrap());
        let weight = digests.bytes();
        let cache = DigestsCache::new(4 * weight);
        cache.insert("big", digests.clone());
        assert_eq!(cache.bytes(), weight);
        let small = DigestsCache::new(4 * weight - 4);
        small.insert("big", digests);
        assert!(small.get("big").is_none());
        assert_eq!(small.bytes(), 0);
        // The zstd form is counted once made.
        let kept = cache.get("big").unwrap();
        let frame = kept.zstd(&cache, "big").unwrap().unwrap();
        assert_eq!(cache.bytes(), weight + frame.len());
        assert_eq!(
            zstd::decode_all(&frame[..]).unwrap(),
            kept.kept.text().to_vec()
        );
    }
}
