//! Ticket assets' statements and rows (protocol 3): an asset's revision
//! counter and rows (a tombstone is a row without a layout), the count of
//! a ticket's live assets, and the reads of one revision and of a ticket's
//! assets (a streamed read).

use crate::protocol::ticket_assets::Layout;
use crate::store::assets::{AssetKey, TicketAssetMeta, TicketAssetSummary};
use crate::store::error::{StoreError, StoreResult};
use crate::store::statement::{Columns, Fixed, Statements, args, statement};

/// A ticket-asset row's columns, in the order [`ticket_asset_summary_row`]
/// reads them; a meta read adds `entries` after them.
macro_rules! ticket_asset_columns {
    () => {
        "repo, ticket_id, asset_kind, name, revision, layout, size, file_count, dir_count, created_at"
    };
}

/// One revision of an asset (`None`: the latest), on any connection;
/// absent and tombstones alike are `None`.
pub(crate) async fn ticket_asset(
    db: &mut (impl Statements + ?Sized),
    key: &AssetKey,
    rev: Option<i64>,
) -> StoreResult<Option<TicketAssetMeta>> {
    let decode = |row: &dyn Columns| ticket_asset_row(row);
    let found = match rev {
        Some(rev) => db.first(select_ticket_asset(key, rev), decode).await?,
        None => db.first(select_latest_ticket_asset(key), decode).await?,
    };
    Ok(found.flatten())
}

pub(crate) fn select_ticket_asset(key: &AssetKey, rev: i64) -> Fixed<'_, 5> {
    const SQL: &str = concat!(
        "SELECT ",
        ticket_asset_columns!(),
        ", entries FROM ticket_assets \
         WHERE repo = $1 AND ticket_id = $2 AND asset_kind = $3 AND name = $4 AND revision = $5"
    );
    statement(
        SQL,
        args![&key.repo, &key.ticket_id, &key.kind, &key.name, rev],
    )
}

/// The latest revision, a tombstone included: the latest row decides
/// whether the asset is live.
pub(crate) fn select_latest_ticket_asset(key: &AssetKey) -> Fixed<'_, 4> {
    const SQL: &str = concat!(
        "SELECT ",
        ticket_asset_columns!(),
        ", entries FROM ticket_assets \
         WHERE repo = $1 AND ticket_id = $2 AND asset_kind = $3 AND name = $4 \
         ORDER BY revision DESC LIMIT 1"
    );
    statement(SQL, args![&key.repo, &key.ticket_id, &key.kind, &key.name])
}

/// A ticket's summaries by kind, name, revision, in the primary key's
/// order: with `revisions`, every revision but tombstones; else the latest
/// revision of each kind and name when it is no tombstone.
pub(crate) fn list_ticket_assets<'a>(
    repo: &'a str,
    ticket_id: &'a str,
    revisions: bool,
) -> Fixed<'a, 2> {
    const LATEST: &str = concat!(
        "SELECT ",
        ticket_asset_columns!(),
        " FROM ticket_assets a WHERE repo = $1 AND ticket_id = $2 AND layout IS NOT NULL \
         AND revision = (SELECT MAX(l.revision) FROM ticket_assets l \
         WHERE l.repo = $1 AND l.ticket_id = $2 AND l.asset_kind = a.asset_kind AND l.name = a.name) \
         ORDER BY asset_kind, name, revision"
    );
    const ALL: &str = concat!(
        "SELECT ",
        ticket_asset_columns!(),
        " FROM ticket_assets WHERE repo = $1 AND ticket_id = $2 AND layout IS NOT NULL \
         ORDER BY asset_kind, name, revision"
    );
    statement(if revisions { ALL } else { LATEST }, args![repo, ticket_id])
}

/// How many of a ticket's assets are live, and (as a count, 0 or 1)
/// whether `key` is: each asset's head row names its latest revision
/// (`next_revision - 1`), a primary-key lookup, so the cost is one step per
/// asset of the ticket, never per revision. Run before the asset's own
/// counter is bumped.
pub(crate) fn live_ticket_assets(key: &AssetKey) -> Fixed<'_, 4> {
    const SQL: &str = "SELECT COUNT(*) AS live, \
         COALESCE(SUM(CASE WHEN h.asset_kind = $3 AND h.name = $4 THEN 1 ELSE 0 END), 0) AS this \
         FROM ticket_asset_heads h JOIN ticket_assets a ON a.repo = h.repo \
         AND a.ticket_id = h.ticket_id AND a.asset_kind = h.asset_kind AND a.name = h.name \
         AND a.revision = h.next_revision - 1 \
         WHERE h.repo = $1 AND h.ticket_id = $2 AND a.layout IS NOT NULL";
    statement(SQL, args![&key.repo, &key.ticket_id, &key.kind, &key.name])
}

/// Bumps the asset's revision counter (creating it at 1) and returns the
/// revision it assigned with the revision's time: `$5` (the clock), or the
/// previous revision's when the clock is behind it, so times never run
/// backwards along an asset's revisions.
pub(crate) fn next_ticket_asset_revision(key: &AssetKey, now: i64) -> Fixed<'_, 5> {
    const SQL: &str = "INSERT INTO ticket_asset_heads \
         (repo, ticket_id, asset_kind, name, next_revision, created_at) \
         VALUES ($1, $2, $3, $4, 1, $5) ON CONFLICT (repo, ticket_id, asset_kind, name) \
         DO UPDATE SET next_revision = ticket_asset_heads.next_revision + 1, \
         created_at = CASE WHEN ticket_asset_heads.created_at > excluded.created_at \
         THEN ticket_asset_heads.created_at ELSE excluded.created_at END \
         RETURNING next_revision - 1 AS revision, created_at";
    statement(
        SQL,
        args![&key.repo, &key.ticket_id, &key.kind, &key.name, now],
    )
}

/// A revision's row: `meta`'s, or (`None`) a tombstone of `key` at
/// `revision`, created at `now`.
pub(crate) fn insert_ticket_asset<'a>(
    key: &'a AssetKey,
    revision: i64,
    now: i64,
    meta: Option<&'a TicketAssetMeta>,
) -> Fixed<'a, 11> {
    const SQL: &str = "INSERT INTO ticket_assets \
         (repo, ticket_id, asset_kind, name, revision, layout, size, file_count, dir_count, \
         entries, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";
    let (layout, size, files, dirs, entries) = match meta {
        Some(m) => (
            Some(m.summary.layout.as_str()),
            m.summary.size,
            m.summary.file_count,
            m.summary.dir_count,
            Some(m.entries_json.as_str()),
        ),
        None => (None, 0, 0, 0, None),
    };
    statement(
        SQL,
        args![
            &key.repo,
            &key.ticket_id,
            &key.kind,
            &key.name,
            revision,
            layout,
            size,
            files,
            dirs,
            entries,
            now
        ],
    )
}

/// A row of `ticket_asset_columns!()`; `None` for a tombstone.
pub(crate) fn ticket_asset_summary_row(
    row: &(impl Columns + ?Sized),
) -> StoreResult<Option<TicketAssetSummary>> {
    let Some(layout) = row.optional_text(5)? else {
        return Ok(None);
    };
    let layout = Layout::parse(&layout)
        .ok_or_else(|| StoreError::Corrupt(format!("unknown ticket asset layout {layout:?}")))?;
    Ok(Some(TicketAssetSummary {
        key: AssetKey {
            repo: row.text(0)?,
            ticket_id: row.text(1)?,
            kind: row.text(2)?,
            name: row.text(3)?,
        },
        revision: row.int(4)?,
        layout,
        size: row.int(6)?,
        file_count: row.int(7)?,
        dir_count: row.int(8)?,
        created_at: row.int(9)?,
    }))
}

/// A row of `ticket_asset_columns!()` and `entries`; `None` for a tombstone.
pub(crate) fn ticket_asset_row(
    row: &(impl Columns + ?Sized),
) -> StoreResult<Option<TicketAssetMeta>> {
    let Some(summary) = ticket_asset_summary_row(row)? else {
        return Ok(None);
    };
    let entries_json = row
        .optional_text(10)?
        .ok_or_else(|| StoreError::Corrupt("a ticket asset revision without entries".into()))?;
    Ok(Some(TicketAssetMeta {
        summary,
        entries_json,
    }))
}
