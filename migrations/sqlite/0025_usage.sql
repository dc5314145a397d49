-- Token usage per model call (issue 42): which thread (a sub-agent's calls count for the
-- thread that started it), whose message started the turn (NULL for a watch's or a
-- notification reply's turn), the model, and the provider's counts. The channel is the
-- thread's (workstreams.channel). No foreign key: usage outlives the workstream it is about.
CREATE TABLE model_usage (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    workstream          TEXT NOT NULL,
    person              TEXT,
    model               TEXT NOT NULL,
    input_tokens        BIGINT NOT NULL,
    cached_tokens       BIGINT NOT NULL,
    cache_write_tokens  BIGINT NOT NULL,
    output_tokens       BIGINT NOT NULL,
    created_at          BIGINT NOT NULL
);
CREATE INDEX model_usage_person ON model_usage (person, created_at);
CREATE INDEX model_usage_workstream ON model_usage (workstream, created_at);
CREATE INDEX model_usage_created ON model_usage (created_at);

-- Budget changes made in chat (/budget): append-only, so every change stays on record; the
-- newest row for a person or a thread is in force. daily_tokens NULL lifts the cap.
CREATE TABLE budget_changes (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    scope         TEXT NOT NULL,
    subject       TEXT NOT NULL,
    daily_tokens  BIGINT,
    set_by        TEXT NOT NULL,
    set_at        BIGINT NOT NULL
);
CREATE INDEX budget_changes_subject ON budget_changes (scope, subject, id);
