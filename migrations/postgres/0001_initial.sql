-- Resources of every family share one table; `kind` is 'build' or 'repo'.
-- Counters live on the rows (DESIGN decision 2); times are epoch milliseconds.
-- Text keys use the "C" collation so artifact lists order bytewise, as on SQLite.
CREATE TABLE resources (
    kind             TEXT   COLLATE "C" NOT NULL,
    id               TEXT   COLLATE "C" NOT NULL,
    attrs            TEXT,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    last_seq         BIGINT NOT NULL DEFAULT 0,
    lease_holder     TEXT,
    lease_expires_at BIGINT,
    lease_ttl_ms     BIGINT,
    heartbeat_at     BIGINT,
    PRIMARY KEY (kind, id)
);

-- Envelopes are stored as the exact JSON text served to readers.
CREATE TABLE events (
    kind        TEXT   COLLATE "C" NOT NULL,
    resource_id TEXT   COLLATE "C" NOT NULL,
    seq         BIGINT NOT NULL,
    envelope    TEXT   NOT NULL,
    PRIMARY KEY (kind, resource_id, seq),
    FOREIGN KEY (kind, resource_id) REFERENCES resources (kind, id)
);

-- The next revision per (resource, artifact kind).
CREATE TABLE artifact_heads (
    kind          TEXT   COLLATE "C" NOT NULL,
    resource_id   TEXT   COLLATE "C" NOT NULL,
    artifact_kind TEXT   COLLATE "C" NOT NULL,
    next_revision BIGINT NOT NULL,
    PRIMARY KEY (kind, resource_id, artifact_kind)
);

CREATE TABLE artifacts (
    kind          TEXT   COLLATE "C" NOT NULL,
    resource_id   TEXT   COLLATE "C" NOT NULL,
    artifact_kind TEXT   COLLATE "C" NOT NULL,
    revision      BIGINT NOT NULL,
    blob_ref      TEXT   NOT NULL,
    size          BIGINT NOT NULL,
    metadata      TEXT   NOT NULL,
    created_at    BIGINT NOT NULL,
    PRIMARY KEY (kind, resource_id, artifact_kind, revision),
    FOREIGN KEY (kind, resource_id) REFERENCES resources (kind, id)
);
