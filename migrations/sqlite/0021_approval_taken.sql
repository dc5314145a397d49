-- Scale-out (issue 27): when the turn that asked took a request's answer. A decision stored
-- for a turn whose node died before it took the answer (a click that landed while the dead
-- node's lease still ran) never reached a turn, so the node that takes the workstream over
-- resumes it with the stored decision; once taken, the call may have run, and the thread is
-- only told it was interrupted. Rows older than this column count as taken (0): they are
-- never resumed unasked.
ALTER TABLE tool_approvals ADD COLUMN taken_at BIGINT;
UPDATE tool_approvals SET taken_at = 0;
