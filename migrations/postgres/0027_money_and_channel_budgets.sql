-- Budgets in money as well as tokens, and per channel (issue 42). A change caps one unit of
-- one budget: `unit` is `tokens` or `cost`, and `daily_cap` (formerly daily_tokens) is the cap
-- in that unit (tokens, or micro-dollars); NULL lifts it. `scope` may now be `channel`.
ALTER TABLE budget_changes RENAME COLUMN daily_tokens TO daily_cap;
ALTER TABLE budget_changes ADD COLUMN unit TEXT NOT NULL DEFAULT 'tokens';

-- A reply to a notification continues its thread in a turn no person's message started; it is
-- charged to the person whose turn asked for the notification (a sandpiper user id; for a
-- watch's turn, the watch's creator). NULL: nobody.
ALTER TABLE notifications ADD COLUMN charged_to TEXT;
