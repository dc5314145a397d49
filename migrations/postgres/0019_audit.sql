-- The audit trail (issue 30): every approval event as an append-only row. Normal operation
-- only inserts; rows older than `[audit] retention_days` are pruned. `kind`, `workstream`,
-- `actor` and `at` are columns for filtering; `detail` is the whole event as JSON. No
-- foreign key: a row outlives the workstream it is about.
CREATE TABLE audit_events (
    id          BIGSERIAL PRIMARY KEY,
    at          BIGINT NOT NULL,
    kind        TEXT NOT NULL,
    workstream  TEXT NOT NULL,
    request_id  TEXT,
    tool        TEXT,
    actor       TEXT,
    actor_id    TEXT,
    detail      TEXT NOT NULL
);
CREATE INDEX audit_events_at ON audit_events (at);
CREATE INDEX audit_events_workstream ON audit_events (workstream, at);
