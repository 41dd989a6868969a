-- Resources of every family share one table; `kind` is 'build' or 'repo'.
-- Counters live on the rows (DESIGN decision 2); times are epoch milliseconds.
CREATE TABLE resources (
    kind             TEXT    NOT NULL,
    id               TEXT    NOT NULL,
    attrs            TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    last_seq         INTEGER NOT NULL DEFAULT 0,
    lease_holder     TEXT,
    lease_expires_at INTEGER,
    lease_ttl_ms     INTEGER,
    heartbeat_at     INTEGER,
    PRIMARY KEY (kind, id)
) WITHOUT ROWID;

-- Envelopes are stored as the exact JSON text served to readers.
CREATE TABLE events (
    kind        TEXT    NOT NULL,
    resource_id TEXT    NOT NULL,
    seq         INTEGER NOT NULL,
    envelope    TEXT    NOT NULL,
    PRIMARY KEY (kind, resource_id, seq),
    FOREIGN KEY (kind, resource_id) REFERENCES resources (kind, id)
) WITHOUT ROWID;

-- The next revision per (resource, artifact kind).
CREATE TABLE artifact_heads (
    kind          TEXT    NOT NULL,
    resource_id   TEXT    NOT NULL,
    artifact_kind TEXT    NOT NULL,
    next_revision INTEGER NOT NULL,
    PRIMARY KEY (kind, resource_id, artifact_kind)
) WITHOUT ROWID;

CREATE TABLE artifacts (
    kind          TEXT    NOT NULL,
    resource_id   TEXT    NOT NULL,
    artifact_kind TEXT    NOT NULL,
    revision      INTEGER NOT NULL,
    blob_ref      TEXT    NOT NULL,
    size          INTEGER NOT NULL,
    metadata      TEXT    NOT NULL,
    created_at    INTEGER NOT NULL,
    PRIMARY KEY (kind, resource_id, artifact_kind, revision),
    FOREIGN KEY (kind, resource_id) REFERENCES resources (kind, id)
) WITHOUT ROWID;
