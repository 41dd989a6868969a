-- Protocol 3's derived reads (issue 24). An event's type lives only inside
-- its envelope text, so it is indexed as an expression, which the queries
-- (store/sql.rs) repeat exactly: `GET /repos/{repo}/build-digests` reads four
-- types of each build's log, `GET /repos/{repo}/state-events` the durable
-- types of a repository journal and its latest `dispatcher.run-started`.
CREATE INDEX events_by_type ON events (kind, resource_id, json_extract(envelope, '$.type'), seq);
-- A repository's builds, by slug (the digests' order).
CREATE INDEX builds_by_repo ON resources (json_extract(attrs, '$.repo'), id) WHERE kind = 'build';
