-- Prompt templates under governance. origin is 'manual' or 'mcp'; MCP-sourced templates are
-- read-only and carry the server that offers them. A manual template of the same name wins.
CREATE TABLE prompt_templates (
    name         TEXT PRIMARY KEY,
    description  TEXT,
    content      TEXT NOT NULL,
    arguments    TEXT,
    origin       TEXT NOT NULL,
    mcp_server   TEXT,
    readonly     INTEGER NOT NULL DEFAULT 0,
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL
);
CREATE INDEX prompt_templates_server ON prompt_templates (mcp_server);
