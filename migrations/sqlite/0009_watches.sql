-- Watches (issue 13): a command polled in a workstream until its stop condition holds. Durable:
-- a restart finds them here. A runner claims a due watch for a while (claimed_by and
-- claimed_until), so with several nodes on one database exactly one polls it.
CREATE TABLE watches (
    id              TEXT PRIMARY KEY,
    workstream      TEXT NOT NULL REFERENCES workstreams(key) ON DELETE CASCADE,
    name            TEXT NOT NULL,
    command         TEXT NOT NULL,
    poll_every_ms   BIGINT NOT NULL,
    stop_on         TEXT,
    max_polls       BIGINT NOT NULL,
    polls           BIGINT NOT NULL DEFAULT 0,
    state           TEXT NOT NULL,
    created_by      TEXT,
    created_at      BIGINT NOT NULL,
    next_poll_at    BIGINT NOT NULL,
    last_output     TEXT,
    last_exit_code  BIGINT,
    claimed_by      TEXT,
    claimed_until   BIGINT,
    finished_at     BIGINT
);
-- A name is unique among a workstream's active watches.
CREATE UNIQUE INDEX watches_active_name ON watches (workstream, name) WHERE state = 'active';
CREATE INDEX watches_due ON watches (state, next_poll_at);
