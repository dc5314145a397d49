-- Issue 42's leftovers.
--
-- The context note a message was first sent to the model with: the time, the memories shown
-- and the nudges, as JSON. Stored so that a history loaded again (after a restart, on another
-- node) sends each message exactly as before and the model server's prompt cache still holds;
-- NULL when the message was sent without one.
ALTER TABLE messages ADD COLUMN note TEXT;

-- Who the turn that asked is charged to (usage and budgets): its author, or for a turn no
-- person started, whoever set it up (a watch's creator). A turn resumed after a restart is
-- charged to the same person; NULL on rows older than it.
ALTER TABLE tool_approvals ADD COLUMN charged_to TEXT;
