-- The services registry (issue 12): every `sandpiper serve` node registers here at start,
-- heartbeats every 30 s and deregisters on a clean shutdown. A node whose heartbeat is older
-- than 120 s counts as stale. The notify tool looks here for healthy gateway nodes; on
-- PostgreSQL, nodes on several machines share it.
CREATE TABLE services (
    id            TEXT PRIMARY KEY,
    role          TEXT NOT NULL,
    url           TEXT NOT NULL,
    version       TEXT NOT NULL,
    -- Chat platforms the node is connected to, comma-separated (`discord,slack`).
    platforms     TEXT NOT NULL DEFAULT '',
    started_at    BIGINT NOT NULL,
    heartbeat_at  BIGINT NOT NULL
);
CREATE INDEX services_role_heartbeat ON services (role, heartbeat_at);
