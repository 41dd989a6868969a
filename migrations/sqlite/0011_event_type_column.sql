-- The event's type as a column (issue 36): protocol 3's derived reads
-- select events by type, which migration 0005 indexed as an expression
-- over the envelope, so every append parsed its whole envelope to index it.
-- Appends now write the type beside the envelope and the index is on the
-- plain column.
--
-- Events stored before this migration have no type yet: the server fills
-- them in bounded batches after the migrations, before it serves
-- (store/backfill.rs), and records that it has in `event_types_filled`.
-- A writer that does not name the type (an archive import, which carries
-- envelopes only) has it read from the envelope by the trigger, as the old
-- index did; writers that name it pay only the trigger's test.
ALTER TABLE events ADD COLUMN type TEXT;
DROP INDEX events_by_type;
CREATE INDEX events_by_type ON events (kind, resource_id, type, seq);
CREATE TRIGGER events_type_from_envelope AFTER INSERT ON events
WHEN NEW.type IS NULL
BEGIN
    UPDATE events SET type = json_extract(NEW.envelope, '$.type')
    WHERE kind = NEW.kind AND resource_id = NEW.resource_id AND seq = NEW.seq;
END;
-- One row once every event stored before this migration has its type.
CREATE TABLE event_types_filled (filled_at INTEGER NOT NULL);
