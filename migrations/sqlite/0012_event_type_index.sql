-- The column's index: built with the column on SQLite (migration 0011);
-- PostgreSQL builds it here, without blocking writes. The versions stay
-- aligned across the two schemas.
SELECT 1;
