-- Full-text search over conversation history for the `recall` tool.
--
-- An external-content FTS5 index over messages (content, the JSON of the assistant's tool
-- calls, and the tool name of a tool result): the text lives once, in `messages`, and the
-- triggers below keep the index in step with every insert, update and delete (including the
-- deletes cascaded from `workstreams`), so it cannot drift. unicode61 with diacritics removed
-- and no stemming: identifiers, paths and flags are found as written, and `cafe` finds `café`.
CREATE VIRTUAL TABLE messages_fts USING fts5(
    content,
    tool_calls,
    name,
    content = 'messages',
    content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);

CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts (rowid, content, tool_calls, name)
    VALUES (new.id, new.content, new.tool_calls, new.name);
END;

CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content, tool_calls, name)
    VALUES ('delete', old.id, old.content, old.tool_calls, old.name);
END;

CREATE TRIGGER messages_fts_update AFTER UPDATE ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content, tool_calls, name)
    VALUES ('delete', old.id, old.content, old.tool_calls, old.name);
    INSERT INTO messages_fts (rowid, content, tool_calls, name)
    VALUES (new.id, new.content, new.tool_calls, new.name);
END;

-- Index the history written before this migration.
INSERT INTO messages_fts (messages_fts) VALUES ('rebuild');

-- Recall searches the workstreams a user took part in (wrote at least one message in).
-- Partial: assistant and tool messages have no author and are never looked up this way.
CREATE INDEX messages_author_workstream ON messages (author, workstream)
    WHERE author IS NOT NULL;
