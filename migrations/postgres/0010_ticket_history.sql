-- The history of each hosted ticket (issue 35, docs/tickets.md "History"):
-- one row per change that a write kept, written in that write's
-- transaction. See migrations/sqlite/0010_ticket_history.sql for the
-- columns' meaning; the two schemas hold the same rows.
CREATE TABLE ticket_history (
    team_key     TEXT   COLLATE "C" NOT NULL,
    ticket_id    TEXT   COLLATE "C" NOT NULL,
    seq          BIGINT NOT NULL,
    at           BIGINT NOT NULL,
    actor        TEXT   NOT NULL,
    token_digest TEXT,
    change_json  TEXT   NOT NULL,
    PRIMARY KEY (team_key, ticket_id, seq),
    FOREIGN KEY (team_key, ticket_id) REFERENCES tickets (team_key, id)
);
