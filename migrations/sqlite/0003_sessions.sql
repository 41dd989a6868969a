-- Operator sessions (spec section 5) are resources of kind 'session' whose
-- parent is their repository. `created_order` breaks same-millisecond ties in
-- listings; it comes from the parent's counter (resources.stream_counter,
-- which orders every child a resource creates).
ALTER TABLE resources ADD COLUMN parent TEXT;
ALTER TABLE resources ADD COLUMN created_order INTEGER;
CREATE INDEX resources_by_parent ON resources (kind, parent, created_at, created_order);
