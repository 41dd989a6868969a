-- Streams (spec section 6): per-stream chunk logs that close into an artifact.
-- `resources.stream_counter` orders creations and closes within a scope
-- (ties in milliseconds are broken by it, never by ids).
ALTER TABLE resources ADD COLUMN stream_counter BIGINT NOT NULL DEFAULT 0;

CREATE TABLE streams (
    id                TEXT   COLLATE "C" NOT NULL PRIMARY KEY,
    scope_kind        TEXT   COLLATE "C" NOT NULL,
    scope_id          TEXT   COLLATE "C" NOT NULL,
    label             TEXT   NOT NULL,
    status            TEXT   NOT NULL,
    created_at        BIGINT NOT NULL,
    created_order     BIGINT NOT NULL,
    last_seq          BIGINT NOT NULL DEFAULT 0,
    closed_at         BIGINT,
    closed_order      BIGINT,
    outcome           TEXT,
    artifact_kind     TEXT,
    artifact_revision BIGINT,
    artifact_blob_ref TEXT,
    FOREIGN KEY (scope_kind, scope_id) REFERENCES resources (kind, id)
);
CREATE INDEX streams_by_scope ON streams (scope_kind, scope_id, created_at, created_order);

-- A chunk row is the exact JSON text served to readers.
CREATE TABLE stream_chunks (
    stream_id TEXT   COLLATE "C" NOT NULL,
    seq       BIGINT NOT NULL,
    chunk     TEXT   NOT NULL,
    PRIMARY KEY (stream_id, seq),
    FOREIGN KEY (stream_id) REFERENCES streams (id)
);
