-- Protocol 3's derived reads (issue 24). An event's type lives only inside
-- its envelope text, so it is indexed as an expression, which the queries
-- (store/sql.rs) repeat exactly: `GET /repos/{repo}/build-digests` reads four
-- types of each build's log, `GET /repos/{repo}/state-events` the durable
-- types of a repository journal and its latest `dispatcher.run-started`.
--
-- Not `envelope::json ->> 'type'`: PostgreSQL's JSON functions refuse a
-- document holding the escape \u0000 anywhere ("cannot be converted to
-- text"), and a payload string may hold it, so that index would turn such an
-- append into an error, and make the migration fail on a store that has one.
-- abstore_json_member reads the first `"member":"…"` of a JSON text the
-- server wrote (compact serde_json, where a string value cannot contain that
-- sequence unescaped, and the member is the first one of its name: see
-- store/mod.rs, envelope_json) and returns the string as it is written,
-- escapes and all: decoding could meet \u0000 too. The types, times and
-- repositories it is compared with are escaped the same way (serde_json's
-- escaping; types and times have nothing to escape).
CREATE FUNCTION abstore_json_member(doc text, member text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT substring(doc FROM '"' || member || '":"((?:[^"\\]|\\.)*)"')
$$;

-- "C" collation: the durable prefixes are byte ranges, as on SQLite.
CREATE INDEX events_by_type ON events (kind, resource_id, (abstore_json_member(envelope, 'type') COLLATE "C"), seq);
-- A repository's builds, by slug (the digests' order).
CREATE INDEX builds_by_repo ON resources ((abstore_json_member(attrs, 'repo') COLLATE "C"), id) WHERE kind = 'build';
