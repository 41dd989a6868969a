-- The event's type as a column (issue 36); see
-- migrations/sqlite/0011_event_type_column.sql. The index on the column is
-- built by migration 0012 without blocking writes (CONCURRENTLY, which
-- cannot run inside this migration's transaction).
--
-- The trigger also covers a rolling upgrade: replicas of an older version,
-- still serving while this one migrates, insert events without the type,
-- and get it from the envelope as the old index read it
-- (abstore_json_member, migration 0005). Their own protocol-3 reads lose
-- the expression index until they are replaced, and stay correct.
ALTER TABLE events ADD COLUMN type TEXT COLLATE "C";
DROP INDEX events_by_type;

CREATE FUNCTION abstore_event_type_from_envelope() RETURNS trigger
    LANGUAGE plpgsql
AS $$
BEGIN
    NEW.type := abstore_json_member(NEW.envelope, 'type');
    RETURN NEW;
END
$$;
CREATE TRIGGER events_type_from_envelope BEFORE INSERT ON events
    FOR EACH ROW WHEN (NEW.type IS NULL)
    EXECUTE FUNCTION abstore_event_type_from_envelope();

-- One row once every event stored before this migration has its type.
CREATE TABLE event_types_filled (filled_at BIGINT NOT NULL);
