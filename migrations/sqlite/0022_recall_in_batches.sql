-- The full-text index of `messages` is brought up to date in batches instead of by a trigger
-- on every insert (see agent/src/store/recall.rs, `Store::index_recall`): a search first
-- indexes what is new, and a background task does it every few seconds, so a search still
-- finds every message stored before it. Indexing a message on insert wrote its own FTS5
-- segment, structure record and size row: about half of the pages each commit of a turn
-- wrote to the WAL.
--
-- `recall_indexed.last_id` is the highest `messages.id` the index holds. Ids only grow
-- (AUTOINCREMENT) and SQLite has one writer at a time, so everything at or below it is in the
-- index and everything above it is not.
CREATE TABLE recall_indexed (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    last_id INTEGER NOT NULL
);
INSERT INTO recall_indexed (id, last_id) VALUES (1, COALESCE((SELECT MAX(id) FROM messages), 0));

DROP TRIGGER messages_fts_insert;
DROP TRIGGER messages_fts_delete;
DROP TRIGGER messages_fts_update;

-- Only an indexed message has anything to take out of the index; one not yet indexed is
-- indexed as it stands when its turn comes (or never, once deleted).
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages
WHEN old.id <= (SELECT last_id FROM recall_indexed WHERE id = 1)
BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content, tool_calls, name)
    VALUES ('delete', old.id, old.content, old.tool_calls, old.name);
END;

CREATE TRIGGER messages_fts_update AFTER UPDATE ON messages
WHEN old.id <= (SELECT last_id FROM recall_indexed WHERE id = 1)
BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content, tool_calls, name)
    VALUES ('delete', old.id, old.content, old.tool_calls, old.name);
    INSERT INTO messages_fts (rowid, content, tool_calls, name)
    VALUES (new.id, new.content, new.tool_calls, new.name);
END;
