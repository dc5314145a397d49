-- The status page (issue 28). A person signs in with a one-time link that `/console` (or
-- `sandpiper console-link`) made: only the link's sha256 is stored, it lives 10 minutes and
-- is used once (`used_at`). A browser session is a row too, so signing out ends it on every
-- node, and the cookie holding its id is encrypted with a key every node shares
-- (`web_keys`, made by the first node that needs it, unless a service secret is configured).
-- Each node writes what only it knows (its channels, MCP servers, live turns) to
-- `web_node_status` every few seconds, so any node can show the whole cluster.
CREATE TABLE web_sign_in_links (
    token_hash  TEXT PRIMARY KEY,
    user_id     TEXT,
    admin       INTEGER NOT NULL,
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL,
    used_at     BIGINT
);
CREATE INDEX web_sign_in_links_expiry ON web_sign_in_links (expires_at);

CREATE TABLE web_sessions (
    id          TEXT PRIMARY KEY,
    user_id     TEXT,
    admin       INTEGER NOT NULL,
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL
);
CREATE INDEX web_sessions_expiry ON web_sessions (expires_at);

CREATE TABLE web_keys (
    id          BIGINT PRIMARY KEY,
    secret      TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);

CREATE TABLE web_node_status (
    node        TEXT PRIMARY KEY,
    status      TEXT NOT NULL,
    updated_at  BIGINT NOT NULL
);
