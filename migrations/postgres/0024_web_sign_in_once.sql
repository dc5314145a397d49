-- Service tokens (JWTs) that signed a browser in to the status page, by their `jti`: each
-- signs in once. A row is kept until the token's own expiry, after which the token is
-- refused anyway and the row goes.
CREATE TABLE web_used_tokens (
    jti         TEXT PRIMARY KEY,
    expires_at  BIGINT NOT NULL
);
CREATE INDEX web_used_tokens_expiry ON web_used_tokens (expires_at);

-- The status page's change marker counts the pending requests and reads the newest one and
-- the newest workstream every second: without these indexes those are scans of every
-- request ever asked and every workstream.
CREATE INDEX tool_approvals_pending ON tool_approvals (status, created_at);
CREATE INDEX workstreams_created ON workstreams (created_at);
