-- Issue 24: usernames are no longer copied from display names (anyone can call themselves
-- "alice", so the first to arrive got `alice` and her notifications). Every user becomes the
-- handle of its oldest platform account, `<platform>-<id>` as `account_handle` in
-- agent/src/store/users.rs computes it (the id as it is when made of a-z 0-9 _ . -, lower-cased
-- when made of A-Z 0-9), or `<platform>-<12 hex digits of the user id>` when the id does not
-- fit, two users would share it, or it is too long. Names people chose are reset too: a chosen
-- name and a squatted one look the same in the table, so each person renames again.
CREATE TEMP TABLE handle_plan AS
SELECT u.id AS user_id,
       (SELECT i.platform FROM identities i WHERE i.user_id = u.id
        ORDER BY i.created_at, i.platform, i.platform_user_id LIMIT 1) AS platform,
       (SELECT i.platform_user_id FROM identities i WHERE i.user_id = u.id
        ORDER BY i.created_at, i.platform, i.platform_user_id LIMIT 1) AS account,
       NULL AS handle
FROM users u;

UPDATE handle_plan SET handle = platform || '-' || lower(account)
WHERE account IS NOT NULL AND account <> ''
  AND (account !~ '[^a-z0-9_.-]' OR account !~ '[^A-Z0-9]')
  AND length(platform || '-' || account) <= 32;

UPDATE handle_plan SET handle = NULL
WHERE handle IN (SELECT handle FROM handle_plan WHERE handle IS NOT NULL
                 GROUP BY handle HAVING COUNT(*) > 1);

UPDATE handle_plan SET handle = coalesce(platform, 'user') || '-'
    || substr(replace(user_id, '-', ''), 1, 12)
WHERE handle IS NULL;

-- Park every name on one nobody holds first, so no new name meets an old one half-way.
UPDATE users SET username = '~' || id;
UPDATE users SET username = (SELECT p.handle FROM handle_plan p WHERE p.user_id = users.id);
DROP TABLE handle_plan;

-- A reply to a notification continues its thread only when it comes from the account the
-- notification went to (its platform user id); channel posts have none.
ALTER TABLE notifications ADD COLUMN recipient_account TEXT;
-- The per-recipient rate limit counts a thread's recent notifications to one place.
CREATE INDEX notifications_recipient ON notifications (workstream, platform, channel, created_at);
