-- Durable approvals (issue 17): a request carries what a click on any node is checked
-- against, as it stood when it was asked.
-- `fingerprint`: sha256 (hex) of the tool name and the canonical JSON of its arguments; a
-- stored decision resumes an interrupted call only if the call still has this fingerprint.
-- `approvers`: JSON `{"owner": <user id or null>, "roles": [<role or user group id>, ...]}`,
-- the workstream's owner and the approver roles / user groups in force at ask time.
-- Both are NULL on rows written before this migration; clicks on those fall back to the
-- node's configuration.
ALTER TABLE tool_approvals ADD COLUMN fingerprint TEXT;
ALTER TABLE tool_approvals ADD COLUMN approvers TEXT;
