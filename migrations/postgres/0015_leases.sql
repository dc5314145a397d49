-- Several nodes on one database (issue 17). A workstream is owned by one node at a time: the
-- owner holds a lease row, renewed with every heartbeat while the node is alive; only the
-- owner runs turns there. Another node takes the workstream over once the lease has expired.
-- `turn_started_at` is set while a turn runs, so a turn that a dead node left behind is
-- found and marked in its thread (interrupted by a restart) by whoever takes over.
CREATE TABLE workstream_leases (
    workstream       TEXT PRIMARY KEY,
    node             TEXT NOT NULL,
    expires_at       BIGINT NOT NULL,
    turn_started_at  BIGINT
);
CREATE INDEX workstream_leases_node ON workstream_leases (node);
CREATE INDEX workstream_leases_expiry ON workstream_leases (expires_at);

-- Work that arrived on a node that does not own its workstream (a message, a resumption, a
-- notice), waiting for the owner: the arriving node inserts it and wakes the owner (LISTEN /
-- NOTIFY); the owner deletes it when it takes it. Rows left by a dead owner are taken by the
-- node that takes the workstream over, so nothing that arrived is lost.
CREATE TABLE handoffs (
    id          BIGSERIAL PRIMARY KEY,
    workstream  TEXT NOT NULL,
    payload     TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);
CREATE INDEX handoffs_workstream ON handoffs (workstream, id);
