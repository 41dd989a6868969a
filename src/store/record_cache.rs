//! Each build's record as `GET /builds` writes it, kept with the columns it
//! was rendered from (issue 52). A protocol-3 dashboard frame and a
//! dispatcher tick list every build, and rendering a record (its attributes
//! parsed, an object built, its times spelled, the whole serialised) was
//! most of the listing's cost: 5.4 ms of server CPU for 1,000 builds, about
//! 40 % of a month-old store's frame (docs/benchmarks/issue-52.md).
//!
//! An entry is exact by construction: a record's wire JSON is a function of
//! the columns it is checked against (`id`, `attrs`, `created_at`,
//! `updated_at`, the lease's holder and expiry, `heartbeat_at`). A row whose
//! columns equal the entry's renders to the entry's bytes, whichever process
//! or replica wrote it, so nothing needs announcing and no write can be
//! missed. Every listing still reads every row (one snapshot, as before);
//! only the rendering of the rows that did not change is skipped.
//!
//! Bounded by bytes (the JSON and the columns kept to check it). Once full,
//! a build not kept yet is not kept: every listing walks the builds in one
//! order, which least-recently-used eviction answers with no hits at all.

use std::sync::{Mutex, PoisonError};

use bytes::BytesMut;

use super::error::StoreResult;
use super::resources::sql as resources;
use super::rows::write_json;
use super::statement::Columns;
use crate::bounded::{Bounded, Weighed};
use crate::protocol::ResourceKind;

/// Builds' rendered records, by slug.
pub struct BuildRecordCache {
    by_slug: Mutex<Bounded<String, RenderedRecord>>,
}

/// One build's wire JSON and the columns it was rendered from.
struct RenderedRecord {
    columns: RecordColumns<Box<str>>,
    json: Box<[u8]>,
    /// The length of its slug, the map's key.
    slug_len: usize,
}

/// What a build record's JSON is made of, besides its slug; `S` is
/// borrowed from a row, or owned by an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RecordColumns<S> {
    attrs: Option<S>,
    created_at: i64,
    updated_at: i64,
    lease_holder: Option<S>,
    lease_expires_at: Option<i64>,
    heartbeat_at: Option<i64>,
}

/// What an entry weighs besides its strings: the map's slot, the boxes'
/// lengths and pointers, the integers (an estimate, as the other caches').
const ENTRY_OVERHEAD: usize = 128;

impl Weighed for RenderedRecord {
    fn bytes(&self) -> usize {
        let columns = &self.columns;
        ENTRY_OVERHEAD
            + self.slug_len
            + self.json.len()
            + columns.attrs.as_ref().map_or(0, |attrs| attrs.len())
            + columns
                .lease_holder
                .as_ref()
                .map_or(0, |holder| holder.len())
    }
}

impl<'r> RecordColumns<&'r str> {
    /// A `resource_columns!` row's, borrowed.
    fn of(row: &'r (impl Columns + ?Sized)) -> StoreResult<Self> {
        Ok(RecordColumns {
            attrs: row.optional_str(1)?,
            created_at: row.int(2)?,
            updated_at: row.int(3)?,
            lease_holder: row.optional_str(5)?,
            lease_expires_at: row.optional_int(6)?,
            heartbeat_at: row.optional_int(8)?,
        })
    }

    fn to_owned(self) -> RecordColumns<Box<str>> {
        RecordColumns {
            attrs: self.attrs.map(Box::from),
            created_at: self.created_at,
            updated_at: self.updated_at,
            lease_holder: self.lease_holder.map(Box::from),
            lease_expires_at: self.lease_expires_at,
            heartbeat_at: self.heartbeat_at,
        }
    }
}

impl RecordColumns<Box<str>> {
    fn borrowed(&self) -> RecordColumns<&str> {
        RecordColumns {
            attrs: self.attrs.as_deref(),
            created_at: self.created_at,
            updated_at: self.updated_at,
            lease_holder: self.lease_holder.as_deref(),
            lease_expires_at: self.lease_expires_at,
            heartbeat_at: self.heartbeat_at,
        }
    }
}

impl BuildRecordCache {
    /// At most `capacity` bytes of records (at least 1).
    pub fn new(capacity: usize) -> Self {
        BuildRecordCache {
            by_slug: Mutex::new(Bounded::new(
                capacity.max(1),
                usize::MAX,
                "abstore_build_records_cache_bytes",
            )),
        }
    }

    /// A build row of `resource_columns!` as its record's wire JSON into
    /// `piece`: the kept bytes when its columns are the ones they were
    /// rendered from (`true`), else rendered afresh and kept (`false`).
    pub(crate) fn render(
        &self,
        row: &(impl Columns + ?Sized),
        piece: &mut BytesMut,
    ) -> StoreResult<bool> {
        let slug = row.str(0)?;
        let columns = RecordColumns::of(row)?;
        {
            let mut by_slug = self.by_slug.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(kept) = by_slug.get(slug)
                && kept.columns.borrowed() == columns
            {
                piece.extend_from_slice(&kept.json);
                return Ok(true);
            }
        }
        let start = piece.len();
        render_build(row, piece)?;
        let rendered = RenderedRecord {
            columns: columns.to_owned(),
            json: piece[start..].into(),
            slug_len: slug.len(),
        };
        let mut by_slug = self.by_slug.lock().unwrap_or_else(PoisonError::into_inner);
        // Every listing walks every build in one order, so once the records
        // outgrow the bound, least-recently-used eviction throws out the
        // build the next listing needs first, and no listing hits at all
        // (the cache then only adds its own churn). A build not kept yet is
        // kept only while there is room: the builds kept stay kept, and a
        // listing of twice the bound still copies half its records. A kept
        // build whose record changed is replaced as before.
        if by_slug.peek(slug).is_some() || by_slug.has_room_for(rendered.bytes()) {
            by_slug.insert(slug.to_owned(), rendered);
        }
        Ok(false)
    }
}

/// A build row of `resource_columns!` as its record's wire JSON, rendered.
pub(crate) fn render_build(row: &(impl Columns + ?Sized), piece: &mut BytesMut) -> StoreResult<()> {
    write_json(
        piece,
        &resources::resource_row(ResourceKind::Build, row)?
            .record
            .to_json(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::error::StoreError;

    /// A `resource_columns!` row: id, attrs, created_at, updated_at,
    /// last_seq, lease_holder, lease_expires_at, lease_ttl_ms, heartbeat_at.
    #[derive(Clone)]
    struct Row {
        text: [Option<String>; 9],
        int: [Option<i64>; 9],
    }

    impl Columns for Row {
        fn text(&self, i: usize) -> StoreResult<String> {
            Ok(self.str(i)?.to_owned())
        }
        fn optional_text(&self, i: usize) -> StoreResult<Option<String>> {
            Ok(self.text[i].clone())
        }
        fn str(&self, i: usize) -> StoreResult<&str> {
            self.text[i]
                .as_deref()
                .ok_or_else(|| StoreError::Corrupt(format!("column {i} is NULL")))
        }
        fn optional_str(&self, i: usize) -> StoreResult<Option<&str>> {
            Ok(self.text[i].as_deref())
        }
        fn int(&self, i: usize) -> StoreResult<i64> {
            self.int[i].ok_or_else(|| StoreError::Corrupt(format!("column {i} is NULL")))
        }
        fn optional_int(&self, i: usize) -> StoreResult<Option<i64>> {
            Ok(self.int[i])
        }
    }

    fn build(slug: &str) -> Row {
        let mut row = Row {
            text: Default::default(),
            int: [None; 9],
        };
        row.text[0] = Some(slug.to_owned());
        row.text[1] = Some(r#"{"repo":"acme/x","branch":"ab/1"}"#.to_owned());
        row.int[2] = Some(1_784_116_800_000);
        row.int[3] = Some(1_784_116_800_000);
        row.int[4] = Some(0);
        row
    }

    fn fresh(row: &Row) -> String {
        let mut piece = BytesMut::new();
        render_build(row, &mut piece).unwrap();
        String::from_utf8(piece.to_vec()).unwrap()
    }

    fn cached(cache: &BuildRecordCache, row: &Row) -> (String, bool) {
        let mut piece = BytesMut::from(&b"["[..]);
        let kept = cache.render(row, &mut piece).unwrap();
        (String::from_utf8(piece[1..].to_vec()).unwrap(), kept)
    }

    /// Every column the JSON is made of, changed alone, renders afresh, and
    /// the answer is always what rendering the row gives.
    #[test]
    fn a_kept_record_serves_only_the_columns_it_was_rendered_from() {
        let cache = BuildRecordCache::new(1 << 20);
        let row = build("b-1");
        assert_eq!(cached(&cache, &row), (fresh(&row), false));
        assert_eq!(cached(&cache, &row), (fresh(&row), true));
        type Change = (&'static str, fn(&mut Row));
        let changes: [Change; 9] = [
            ("attrs", |r| r.text[1] = Some(r#"{"repo":"acme/y"}"#.into())),
            ("attrs gone", |r| r.text[1] = None),
            ("created", |r| r.int[2] = Some(1)),
            ("updated", |r| r.int[3] = Some(1_784_116_800_001)),
            ("holder", |r| {
                r.text[5] = Some("runner-1".into());
                r.int[6] = Some(1_784_116_860_000);
            }),
            ("other holder", |r| r.text[5] = Some("runner-2".into())),
            ("expiry", |r| r.int[6] = Some(1_784_116_870_000)),
            ("heartbeat", |r| r.int[8] = Some(1_784_116_805_000)),
            ("released", |r| {
                r.text[5] = None;
                r.int[6] = None;
            }),
        ];
        let mut row = row;
        for (what, change) in changes {
            change(&mut row);
            assert_eq!(cached(&cache, &row), (fresh(&row), false), "{what}");
            assert_eq!(cached(&cache, &row), (fresh(&row), true), "{what}");
        }
        // What the JSON is not made of (the tail, the lease's TTL) may
        // change without a new rendering.
        row.int[4] = Some(7);
        row.int[7] = Some(60_000);
        assert_eq!(cached(&cache, &row), (fresh(&row), true));
    }

    /// Hostile attributes (a member named like a record field, duplicate
    /// members) are rendered as the uncached path renders them, and kept.
    #[test]
    fn hostile_attributes_render_as_without_the_cache() {
        let cache = BuildRecordCache::new(1 << 20);
        let mut row = build("b-2");
        row.text[1] = Some(r#"{"createdAt":"x","slug":"y","repo":"a","repo":"b"}"#.into());
        assert_eq!(cached(&cache, &row), (fresh(&row), false));
        assert_eq!(cached(&cache, &row), (fresh(&row), true));
        row.text[1] = Some("[1]".into());
        let mut piece = BytesMut::new();
        assert!(matches!(
            cache.render(&row, &mut piece),
            Err(StoreError::Corrupt(_))
        ));
    }

    /// The bound holds, and listings of more builds than it keeps still
    /// hit: the builds kept first stay kept, instead of each listing
    /// evicting the build the next one needs first.
    #[test]
    fn listings_larger_than_the_bound_keep_hitting_the_builds_kept() {
        let row = build("b-0");
        let one = ENTRY_OVERHEAD + 3 + fresh(&row).len() + row.text[1].as_ref().unwrap().len();
        let cache = BuildRecordCache::new(2 * one + 10);
        let listing = |cache: &BuildRecordCache| {
            ["b-0", "b-1", "b-2", "b-3"].map(|slug| {
                let row = build(slug);
                let (json, kept) = cached(cache, &row);
                assert_eq!(json, fresh(&row));
                kept
            })
        };
        assert_eq!(listing(&cache), [false; 4]);
        for _ in 0..3 {
            assert_eq!(listing(&cache), [true, true, false, false]);
        }
        let by_slug = cache.by_slug.lock().unwrap();
        assert_eq!(by_slug.bytes(), 2 * one);
        drop(by_slug);
        // A kept build whose record changed is rendered again and replaced.
        let mut changed = build("b-1");
        changed.int[3] = Some(1_784_116_800_001);
        assert_eq!(cached(&cache, &changed), (fresh(&changed), false));
        assert_eq!(cached(&cache, &changed), (fresh(&changed), true));
    }
}
