-- Full-text search over conversation history for the `recall` tool.
--
-- A generated tsvector over the message text, the JSON of the assistant's tool calls and the
-- tool name of a tool result, with a GIN index. Generated, so it cannot drift from the row.
--
-- The 'simple' configuration (lower-casing, no stemming, no stop words) for all of it: recall
-- looks for what was said, and much of that is code (identifiers, paths, flags, hostnames)
-- that an English stemmer would mangle; it also gives the same matches as the SQLite index
-- (FTS5 unicode61, which does not stem either), so a deployment behaves the same on both.
-- Runs of anything but letters and digits become one space first, as unicode61 splits words:
-- without that the default parser keeps `/etc/hosts` or `nginx.conf` as single tokens, and
-- `hosts` or `nginx` would not find them. Only the first 100,000 characters are indexed: a
-- tsvector must stay under 1 MB, and an insert that overflowed it would fail.
ALTER TABLE messages ADD COLUMN search tsvector GENERATED ALWAYS AS (
    to_tsvector('simple', regexp_replace(
        left(content || ' ' || coalesce(tool_calls, '') || ' ' || coalesce(name, ''), 100000),
        '[^[:alnum:]]+', ' ', 'g'))
) STORED;

CREATE INDEX messages_search ON messages USING GIN (search);

-- Recall searches the workstreams a user took part in (wrote at least one message in).
-- Partial: assistant and tool messages have no author and are never looked up this way.
CREATE INDEX messages_author_workstream ON messages (author, workstream)
    WHERE author IS NOT NULL;
