-- Chat channels: token usage and closing per workstream (/status, /close), and the event ids a
-- platform delivered, so a redelivered event is handled once (on every node).
ALTER TABLE workstreams ADD COLUMN tokens_in BIGINT NOT NULL DEFAULT 0;
ALTER TABLE workstreams ADD COLUMN tokens_out BIGINT NOT NULL DEFAULT 0;
ALTER TABLE workstreams ADD COLUMN closed_at BIGINT;

CREATE TABLE channel_events (
    platform  TEXT NOT NULL,
    event_id  TEXT NOT NULL,
    seen_at   BIGINT NOT NULL,
    PRIMARY KEY (platform, event_id)
);
CREATE INDEX channel_events_seen_at ON channel_events (seen_at);
