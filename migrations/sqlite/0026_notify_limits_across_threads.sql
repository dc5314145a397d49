-- notify's hourly limits count across threads (issue 40): per recipient, whoever asked and
-- from whichever thread, and per person who asked. `requester` is that person's username
-- (NULL for a turn no person started, such as a watch's: its thread is counted then).
ALTER TABLE notifications ADD COLUMN requester TEXT;
CREATE INDEX notifications_to ON notifications (platform, channel, created_at);
CREATE INDEX notifications_by ON notifications (requester, created_at);
