-- Deciding from the status page (issue 30): which path decided a request when it was not a
-- button in the thread (`web` for the status page), so the thread's card can say so on any
-- node. NULL on every other decision and on rows older than it.
ALTER TABLE tool_approvals ADD COLUMN decided_via TEXT;
