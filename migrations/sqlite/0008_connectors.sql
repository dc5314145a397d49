-- Connector policy (issue 14): the workstream tier (JSON list of MCP server names, NULL = the
-- tier says nothing), the channel a workstream lives in (the project tier's key), and the
-- channel tier. Slack keys (slack:<team>:<channel>:<thread_ts>) name their channel: fill it in.
-- Discord thread keys do not; the adapter records the parent for threads opened from now on.
ALTER TABLE workstreams ADD COLUMN connector_ids TEXT;
ALTER TABLE workstreams ADD COLUMN channel TEXT;
UPDATE workstreams SET channel = rtrim(rtrim(key, replace(key, ':', '')), ':')
    WHERE key LIKE 'slack:%:%:%' AND channel IS NULL;

CREATE TABLE channel_connectors (
    channel        TEXT PRIMARY KEY,
    connector_ids  TEXT NOT NULL,
    updated_by     TEXT,
    updated_at     BIGINT NOT NULL
);
