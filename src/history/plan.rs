//! The plan of one answer: which parts of a log's range are read live,
//! which come from complete chunks and which from the last chunk's prefix.

/// One part of an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Segment {
    /// Read now, compressed now, never cached: `since < seq ≤ until`.
    Live { since: i64, until: Option<i64> },
    /// The complete chunk of this index.
    Complete(i64),
    /// The chunk of this index from its start up to `end`, a sequence the
    /// log has committed: the beginning of its last, unfinished chunk.
    Prefix { index: i64, end: i64 },
}

/// The segments answering `seq > since` of a log whose last sequence is
/// at least `last`, in chunks of `n`, when the cache holds the last chunk's
/// prefix up to `cached`; `None` when the range spans no complete chunk and no
/// prefix (the ordinary read answers).
///
/// `since` comes from the request (any `i64`, `1e300` saturating to
/// `i64::MAX`) and `last` from the log: nothing here may overflow, so the
/// first chunk is a rounded-up division that cannot wrap, and the range is
/// known to end inside the log (`first ≤ open`) before anything is
/// multiplied or allocated.
pub fn plan(since: i64, last: i64, n: i64, cached: Option<i64>) -> Option<Vec<Segment>> {
    let since = since.max(0);
    let last = last.max(0);
    let n = n.max(1);
    let first = since / n + i64::from(since % n != 0);
    // The chunk `last` is in, or the next one when `last` ends a chunk.
    let open = last / n;
    if first > open {
        return None;
    }
    // `open · n ≤ last` and `first ≤ open`: these products cannot overflow.
    let start = open * n;
    // The open chunk's cached prefix is used while the log has grown less
    // than a quarter of a chunk past it; then it is made again, longer.
    let prefix_end = (last > start).then(|| match cached {
        Some(end) if end > start && end.saturating_add((n / 4).max(1)) > last => end,
        _ => last,
    });
    if first == open && prefix_end.is_none() {
        return None;
    }
    // One segment per complete chunk in range: bounded by the log's length,
    // which only real appends grow.
    let mut segments = Vec::with_capacity(usize::try_from(open - first).ok()?.saturating_add(3));
    if since < first * n {
        segments.push(Segment::Live {
            since,
            until: Some(first * n),
        });
    }
    segments.extend((first..open).map(Segment::Complete));
    let tail_since = match prefix_end {
        Some(end) => {
            segments.push(Segment::Prefix { index: open, end });
            end
        }
        None => start,
    };
    segments.push(Segment::Live {
        since: tail_since,
        until: None,
    });
    Some(segments)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Segment::{Complete, Live, Prefix};

    fn tail(since: i64) -> Segment {
        Live { since, until: None }
    }

    #[test]
    fn a_read_is_a_live_head_complete_chunks_and_a_live_tail() {
        // Chunks of 10: 1-10, 11-20, 21-30 complete at last = 30.
        assert_eq!(
            plan(0, 30, 10, None),
            Some(vec![Complete(0), Complete(1), Complete(2), tail(30)])
        );
        assert_eq!(
            plan(4, 30, 10, None),
            Some(vec![
                Live {
                    since: 4,
                    until: Some(10)
                },
                Complete(1),
                Complete(2),
                tail(30)
            ])
        );
        assert_eq!(plan(-7, 10, 10, None), Some(vec![Complete(0), tail(10)]));
    }

    #[test]
    fn the_last_chunk_is_answered_from_its_committed_prefix() {
        // Last = 35: 31-35 is the open chunk's prefix, made now.
        assert_eq!(
            plan(0, 35, 10, None),
            Some(vec![
                Complete(0),
                Complete(1),
                Complete(2),
                Prefix { index: 3, end: 35 },
                tail(35)
            ])
        );
        // A short log: its prefix alone.
        assert_eq!(
            plan(0, 7, 10, None),
            Some(vec![Prefix { index: 0, end: 7 }, tail(7)])
        );
        // A cached prefix to 33 serves while the log is less than a
        // quarter of a chunk (2 events) past it; then it is made again.
        assert_eq!(
            plan(0, 34, 10, Some(33)),
            Some(vec![
                Complete(0),
                Complete(1),
                Complete(2),
                Prefix { index: 3, end: 33 },
                tail(33)
            ])
        );
        assert_eq!(
            plan(20, 35, 10, Some(33)),
            Some(vec![Complete(2), Prefix { index: 3, end: 35 }, tail(35)])
        );
        // A cached prefix beyond what reads have taught is committed too.
        assert_eq!(
            plan(0, 5, 10, Some(8)),
            Some(vec![Prefix { index: 0, end: 8 }, tail(8)])
        );
        // A range starting inside a complete chunk: its head, then the rest.
        assert_eq!(
            plan(25, 35, 10, Some(35)),
            Some(vec![
                Live {
                    since: 25,
                    until: Some(30)
                },
                Prefix { index: 3, end: 35 },
                tail(35)
            ])
        );
    }

    #[test]
    fn a_range_without_a_cacheable_chunk_takes_the_ordinary_read() {
        // Starting inside the open chunk: nothing before its tail is whole.
        assert_eq!(plan(1, 9, 10, None), None);
        assert_eq!(plan(21, 29, 10, Some(25)), None);
        assert_eq!(plan(35, 35, 10, None), None);
        // An empty log, or a range past a log that ends a chunk.
        assert_eq!(plan(0, 0, 10, None), None);
        assert_eq!(plan(20, 20, 10, None), None);
    }

    #[test]
    fn a_since_at_the_integers_edge_plans_nothing_and_never_overflows() {
        // `since=1e300` saturates to i64::MAX (issue 33): rounding it up to
        // a chunk used to wrap in release builds and ask for ~10^18 bytes.
        for since in [i64::MAX, i64::MAX - 1, i64::MAX - 255, i64::MAX / 2] {
            for n in [1, 8, 256, 65_536] {
                assert_eq!(plan(since, 30, n, None), None, "{since} {n}");
                // A log as long as the integers go: at most a head, the
                // last chunk's prefix and the tail, computed without wrapping.
                if since > i64::MAX - n {
                    let planned = plan(since, i64::MAX, n, Some(i64::MAX));
                    assert!(planned.is_none_or(|s| s.len() <= 3), "{since} {n}");
                }
            }
        }
        assert_eq!(plan(i64::MIN, 30, 10, None), plan(0, 30, 10, None));
    }
}
