-- Notifications delivered by the notify tool (issue 12), keyed by the platform message they
-- became, so a reply to one continues the workstream that sent it, after a restart too.
CREATE TABLE notifications (
    platform      TEXT NOT NULL,
    channel       TEXT NOT NULL,
    message_id    TEXT NOT NULL,
    workstream    TEXT NOT NULL,
    recipient     TEXT,
    created_at    BIGINT NOT NULL,
    PRIMARY KEY (platform, channel, message_id)
);
CREATE INDEX notifications_created_at ON notifications (created_at);
