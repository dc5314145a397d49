-- The handle a platform keeps unique for an identity, lower-cased: a Discord username (legacy
-- accounts `name#1234`), a Slack member's `name` in its workspace. It is what people type to
-- name someone (`notify(username=alice)`); NULL on the console and until first seen. Display
-- names are never stored here: anyone can show any display name.
ALTER TABLE identities ADD COLUMN handle TEXT;
CREATE INDEX identities_handle ON identities (handle);
