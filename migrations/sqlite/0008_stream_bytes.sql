-- Stream byte totals (issue 33): the UTF-8 bytes of a stream's chunks as
-- stored, kept on the stream row beside its chunk counter (DESIGN decision 2)
-- and bumped by every chunk append, so `--max-stream-bytes` is checked
-- without reading the chunks. A close assembles every chunk in memory: this
-- total is what bounds it. Open streams start from their chunks' lengths;
-- a closed stream takes no more appends (and its chunks are pruned), so
-- its total is left at 0.
ALTER TABLE streams ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;
UPDATE streams SET bytes = (
    SELECT COALESCE(SUM(length(CAST(c.chunk AS BLOB))), 0)
    FROM stream_chunks c WHERE c.stream_id = streams.id
) WHERE status = 'open';
