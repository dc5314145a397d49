-- Approval requests carry a kind: a tool call (Approve / Deny / Always allow) or a review gate
-- on something the agent produced (Accept / Reject / Annotate). Existing rows are tool calls.
ALTER TABLE tool_approvals ADD COLUMN kind TEXT NOT NULL DEFAULT 'tool_call';
