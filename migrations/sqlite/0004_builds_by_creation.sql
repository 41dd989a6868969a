-- `GET /builds` lists every build oldest first (ORDER BY created_at, id).
-- With this index the rows leave in that order as they are read, so the
-- streamed listing starts at once and needs no sort of the whole table
-- (issue 22, item 5: 10,000 builds).
CREATE INDEX resources_by_creation ON resources (kind, created_at, id);
