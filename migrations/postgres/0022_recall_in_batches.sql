-- SQLite's full-text index is now brought up to date in batches (migrations/sqlite/0022). On
-- PostgreSQL the search column is generated with its row and indexed by GIN's pending list,
-- which already batches: nothing changes here. The file keeps both databases at the same
-- migration version.
SELECT 1;
