-- Autobuild's hosted tickets (issue 35, docs/tickets.md): each team's
-- backlog, keyed by its `teamKey`. Times are epoch milliseconds from the
-- server's clock. Titles, bodies and comments are stored as the JSON string
-- literals served (every byte kept, NUL included, as `\u0000`); labels as
-- the JSON array served. Text keys use the "C" collation: lists and
-- archives order bytewise, as on SQLite.

-- One row per team: the creation sequence of its latest ticket, bumped by
-- every create inside its transaction, so a team's creates serialise on
-- this row (DESIGN decision 2). Tickets are never deleted: it is also the
-- team's ticket count, which `--max-team-tickets` bounds.
CREATE TABLE ticket_teams (
    team_key TEXT   COLLATE "C" NOT NULL,
    last_seq BIGINT NOT NULL,
    PRIMARY KEY (team_key)
);

-- `id` is opaque (`ticket-<uuid>`), unique within the team; `seq` is its
-- creation sequence, which orders a listing after `created_at`. A create
-- with an idempotency key records it as `creation_key`, once per team.
CREATE TABLE tickets (
    team_key     TEXT   COLLATE "C" NOT NULL,
    id           TEXT   COLLATE "C" NOT NULL,
    seq          BIGINT NOT NULL,
    creation_key TEXT   COLLATE "C",
    title_json   TEXT   NOT NULL,
    body_json    TEXT   NOT NULL,
    state        TEXT   COLLATE "C" NOT NULL,
    labels_json  TEXT   NOT NULL,
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL,
    PRIMARY KEY (team_key, id),
    UNIQUE (team_key, seq),
    UNIQUE (team_key, creation_key),
    FOREIGN KEY (team_key) REFERENCES ticket_teams (team_key)
);
-- `list-ready` by state (the dispatcher's read) and without one, in order.
CREATE INDEX tickets_by_state ON tickets (team_key, state, created_at, seq);
CREATE INDEX tickets_by_creation ON tickets (team_key, created_at, seq);

-- A ticket is blocked by other tickets of its team.
CREATE TABLE ticket_blockers (
    team_key   TEXT   COLLATE "C" NOT NULL,
    ticket_id  TEXT   COLLATE "C" NOT NULL,
    blocker_id TEXT   COLLATE "C" NOT NULL,
    PRIMARY KEY (team_key, ticket_id, blocker_id),
    FOREIGN KEY (team_key, ticket_id) REFERENCES tickets (team_key, id),
    FOREIGN KEY (team_key, blocker_id) REFERENCES tickets (team_key, id)
);

-- Comments, numbered 1, 2, 3… per ticket; the protocol writes them and
-- never reads them back, but they are the team's and archives carry them.
CREATE TABLE ticket_comments (
    team_key   TEXT   COLLATE "C" NOT NULL,
    ticket_id  TEXT   COLLATE "C" NOT NULL,
    seq        BIGINT NOT NULL,
    body_json  TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (team_key, ticket_id, seq),
    FOREIGN KEY (team_key, ticket_id) REFERENCES tickets (team_key, id)
);
