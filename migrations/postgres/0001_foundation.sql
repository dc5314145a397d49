-- Workstreams, their messages, tool approval requests and always-allow grants.
-- Timestamps are unix milliseconds (BIGINT), JSON is TEXT: the Any driver decodes both.
CREATE TABLE workstreams (
    key         TEXT PRIMARY KEY,
    owner       TEXT,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);

CREATE TABLE messages (
    id            BIGSERIAL PRIMARY KEY,
    workstream    TEXT NOT NULL REFERENCES workstreams(key) ON DELETE CASCADE,
    seq           BIGINT NOT NULL,
    role          TEXT NOT NULL,
    content       TEXT NOT NULL,
    tool_calls    TEXT,
    tool_call_id  TEXT,
    name          TEXT,
    images        TEXT,
    author        TEXT,
    created_at    BIGINT NOT NULL,
    UNIQUE (workstream, seq)
);

CREATE TABLE tool_approvals (
    id            TEXT PRIMARY KEY,
    workstream    TEXT NOT NULL REFERENCES workstreams(key) ON DELETE CASCADE,
    call_id       TEXT NOT NULL,
    tool          TEXT NOT NULL,
    header        TEXT NOT NULL,
    preview       TEXT NOT NULL,
    requested_by  TEXT,
    status        TEXT NOT NULL,
    decided_by    TEXT,
    feedback      TEXT,
    created_at    BIGINT NOT NULL,
    decided_at    BIGINT
);
CREATE INDEX tool_approvals_workstream_status ON tool_approvals (workstream, status);

CREATE TABLE tool_grants (
    workstream  TEXT NOT NULL REFERENCES workstreams(key) ON DELETE CASCADE,
    tool        TEXT NOT NULL,
    granted_by  TEXT,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (workstream, tool)
);
