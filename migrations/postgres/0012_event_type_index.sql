-- no-transaction
CREATE INDEX CONCURRENTLY IF NOT EXISTS events_by_type ON events (kind, resource_id, type, seq);
