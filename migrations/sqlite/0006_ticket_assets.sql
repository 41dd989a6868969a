-- Ticket assets (protocol 3, issue 24): named, revisioned bundles of files
-- attached to a ticket, keyed by (repo, ticket_id, asset_kind, name). The
-- database keeps only manifests; file bytes are blobs, content-addressed like
-- artifacts'. No foreign key: assets may precede any repository record.

-- The next revision of each asset and the latest revision's time, bumped by
-- every put and removal inside its transaction: writers of one asset
-- serialise on this row (DESIGN decision 2), and a revision's time is never
-- before its predecessor's.
CREATE TABLE ticket_asset_heads (
    repo          TEXT    NOT NULL,
    ticket_id     TEXT    NOT NULL,
    asset_kind    TEXT    NOT NULL,
    name          TEXT    NOT NULL,
    next_revision INTEGER NOT NULL,
    created_at    INTEGER NOT NULL,
    PRIMARY KEY (repo, ticket_id, asset_kind, name)
) WITHOUT ROWID;

-- One row per revision. `entries` is the manifest's entries exactly as
-- served (JSON text, request order); a removal is a tombstone, a revision
-- with an empty manifest: `layout` and `entries` NULL, no files, no size.
-- The primary key is the list order (kind, name, revision) of a ticket's
-- assets and finds an asset's latest revision.
CREATE TABLE ticket_assets (
    repo       TEXT    NOT NULL,
    ticket_id  TEXT    NOT NULL,
    asset_kind TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    revision   INTEGER NOT NULL,
    layout     TEXT,
    size       INTEGER NOT NULL,
    file_count INTEGER NOT NULL,
    dir_count  INTEGER NOT NULL,
    entries    TEXT,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (repo, ticket_id, asset_kind, name, revision),
    CHECK ((layout IS NULL) = (entries IS NULL))
) WITHOUT ROWID;
