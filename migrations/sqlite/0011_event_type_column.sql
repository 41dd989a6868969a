-- The event's type as a column (issue 36): protocol 3's derived reads
-- select events by type, which migration 0005 indexed as an expression
-- over the envelope, so every append parsed its whole envelope to index it.
-- Appends now write the type beside the envelope and the index is on the
-- plain column.
--
-- Events stored before this migration have no type yet: the server fills
-- them in bounded batches after the migrations, before it serves
-- (store/backfill.rs), and records that it has in `event_types_filled`.
-- Every writer names the type; an archive import, which carries envelopes
-- only, fills it once its rows are in (archive/format.rs, recount_sql). No
-- trigger here: even one whose WHEN is false cost an append ~6,300
-- instructions (3 %), as much as the column saved (docs/benchmarks.md).
ALTER TABLE events ADD COLUMN type TEXT;
DROP INDEX events_by_type;
CREATE INDEX events_by_type ON events (kind, resource_id, type, seq);
-- One row once every event stored before this migration has its type.
CREATE TABLE event_types_filled (filled_at INTEGER NOT NULL);
