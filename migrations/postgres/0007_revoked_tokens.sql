-- Revoked tokens (issue 33): `abstore token revoke` records the SHA-256 of a
-- token's text (64 lowercase hex digits) here, and every replica refuses a
-- token whose digest is listed, re-reading the table every few seconds
-- (`--revocation-refresh-seconds`). The token itself is never stored.
--
-- `expires_at` is the token's own `exp` (epoch milliseconds) when the token
-- was given, NULL when only its digest was: once it has passed, the token is
-- refused as expired anyway, and `abstore token revocations --prune` may
-- forget the row. `revoked_at` is when it was revoked; `note` the operator's
-- reason, if any. The digest uses the "C" collation: lists order bytewise,
-- as on SQLite.
CREATE TABLE revoked_tokens (
    digest     TEXT   COLLATE "C" NOT NULL PRIMARY KEY,
    expires_at BIGINT,
    revoked_at BIGINT NOT NULL,
    note       TEXT
);
