-- The history of each hosted ticket (issue 35, docs/tickets.md "History"):
-- one row per change that a write kept, written in that write's
-- transaction, so an operator can answer "who moved this, and when".
-- Numbered 1, 2, 3… per ticket; never updated or deleted.
--
-- `actor` is what the request's token was (`deployment`, `deployment via
-- session:<id>`, `deployment via mcp:<client>`; `open` on a server without
-- a secret); `token_digest` is the SHA-256 of the token in hex, the digest
-- `abstore token inspect` prints and `abstore token revoke --digest` takes
-- (NULL in open mode). `change_json` is what changed, a JSON object whose
-- `op` names the operation (docs/tickets.md lists each one's members).
CREATE TABLE ticket_history (
    team_key     TEXT    NOT NULL,
    ticket_id    TEXT    NOT NULL,
    seq          INTEGER NOT NULL,
    at           INTEGER NOT NULL,
    actor        TEXT    NOT NULL,
    token_digest TEXT,
    change_json  TEXT    NOT NULL,
    PRIMARY KEY (team_key, ticket_id, seq),
    FOREIGN KEY (team_key, ticket_id) REFERENCES tickets (team_key, id)
);
