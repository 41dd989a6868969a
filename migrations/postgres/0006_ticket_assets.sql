-- Ticket assets (protocol 3, issue 24): named, revisioned bundles of files
-- attached to a ticket, keyed by (repo, ticket_id, asset_kind, name). The
-- database keeps only manifests; file bytes are blobs, content-addressed like
-- artifacts'. No foreign key: assets may precede any repository record.
-- Text keys use the "C" collation: lists order bytewise, as on SQLite.

-- The next revision of each asset and the latest revision's time, bumped by
-- every put and removal inside its transaction: writers of one asset
-- serialise on this row (DESIGN decision 2), and a revision's time is never
-- before its predecessor's.
CREATE TABLE ticket_asset_heads (
    repo          TEXT   COLLATE "C" NOT NULL,
    ticket_id     TEXT   COLLATE "C" NOT NULL,
    asset_kind    TEXT   COLLATE "C" NOT NULL,
    name          TEXT   COLLATE "C" NOT NULL,
    next_revision BIGINT NOT NULL,
    created_at    BIGINT NOT NULL,
    PRIMARY KEY (repo, ticket_id, asset_kind, name)
);

-- One row per revision. `entries` is the manifest's entries exactly as
-- served (JSON text, request order); a removal is a tombstone, a revision
-- with an empty manifest: `layout` and `entries` NULL, no files, no size.
-- The primary key is the list order (kind, name, revision) of a ticket's
-- assets and finds an asset's latest revision.
CREATE TABLE ticket_assets (
    repo       TEXT   COLLATE "C" NOT NULL,
    ticket_id  TEXT   COLLATE "C" NOT NULL,
    asset_kind TEXT   COLLATE "C" NOT NULL,
    name       TEXT   COLLATE "C" NOT NULL,
    revision   BIGINT NOT NULL,
    layout     TEXT,
    size       BIGINT NOT NULL,
    file_count BIGINT NOT NULL,
    dir_count  BIGINT NOT NULL,
    entries    TEXT,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (repo, ticket_id, asset_kind, name, revision),
    CHECK ((layout IS NULL) = (entries IS NULL))
);
