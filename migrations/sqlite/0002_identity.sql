-- Identity: one sandpiper user per person, reached from any number of platform identities.
-- A user is created on a platform user's first contact; a one-time link code entered on
-- another platform joins that identity to the code's user. Timestamps are unix milliseconds.
CREATE TABLE users (
    id            TEXT PRIMARY KEY,
    username      TEXT NOT NULL UNIQUE,
    display_name  TEXT,
    created_at    BIGINT NOT NULL
);

-- `platform` is `discord`, `slack` or `console` (where the id is the OS user name).
CREATE TABLE identities (
    platform          TEXT NOT NULL,
    platform_user_id  TEXT NOT NULL,
    user_id           TEXT NOT NULL REFERENCES users(id),
    display_name      TEXT,
    created_at        BIGINT NOT NULL,
    PRIMARY KEY (platform, platform_user_id)
);
CREATE INDEX identities_user ON identities (user_id);

-- One-time codes: valid until `expires_at`, spent when `used_at` is set.
CREATE TABLE link_codes (
    code        TEXT PRIMARY KEY,
    user_id     TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL,
    used_at     BIGINT NULL
);
CREATE INDEX link_codes_user ON link_codes (user_id);

-- Every attempt to enter a code, for the per-identity limit (5 an hour).
CREATE TABLE link_attempts (
    id                TEXT PRIMARY KEY,
    platform          TEXT NOT NULL,
    platform_user_id  TEXT NOT NULL,
    attempted_at      BIGINT NOT NULL
);
CREATE INDEX link_attempts_identity ON link_attempts (platform, platform_user_id, attempted_at);
