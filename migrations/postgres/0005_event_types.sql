-- Protocol 3's derived reads (issue 24). An event's type lives only inside
-- its envelope text, so it is indexed as an expression, which the queries
-- (store/sql.rs) repeat exactly: `GET /repos/{repo}/build-digests` reads four
-- types of each build's log, `GET /repos/{repo}/state-events` the durable
-- types of a repository journal and its latest `dispatcher.run-started`.
-- "C" collation: the durable prefixes are byte ranges, as on SQLite.
CREATE INDEX events_by_type ON events (kind, resource_id, ((envelope::json ->> 'type') COLLATE "C"), seq);
-- A repository's builds, by slug (the digests' order).
CREATE INDEX builds_by_repo ON resources (((attrs::json ->> 'repo') COLLATE "C"), id) WHERE kind = 'build';
