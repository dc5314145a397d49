-- What people call the places and roles the platforms name by id (issue 44): a channel's name
-- (`general`, keyed by the channel key workstreams.channel holds: `slack:T1:C1`, `discord:10`)
-- and an approver role's or user group's name (keyed by its Discord role id or Slack user group
-- id). The node that sees a channel or a role first records its name; the page reads them, so
-- it shows `#general on Slack` and `may be decided by alice or @oncall`, not the ids.
CREATE TABLE platform_names (
    kind TEXT NOT NULL,
    id TEXT NOT NULL,
    name TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (kind, id)
);
