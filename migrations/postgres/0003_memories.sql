-- Structured memories. scope is global | workstream | user; scope_id is '' for global, the
-- workstream key, or the user id. One memory per (name, scope, scope_id): saving again updates.
CREATE TABLE memories (
    id             TEXT PRIMARY KEY,
    name           TEXT NOT NULL,
    scope          TEXT NOT NULL,
    scope_id       TEXT NOT NULL,
    type           TEXT NOT NULL,
    description    TEXT,
    content        TEXT NOT NULL,
    created_by     TEXT,
    created_at     BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL,
    last_accessed  BIGINT,
    access_count   BIGINT NOT NULL DEFAULT 0,
    UNIQUE (name, scope, scope_id)
);
CREATE INDEX memories_scope ON memories (scope, scope_id);
