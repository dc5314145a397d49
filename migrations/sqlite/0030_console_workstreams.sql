-- The console's workstreams follow the project (issue 44): the directory a console
-- workstream's tools last worked in, for `sandpiper chat --list`; and the model a workstream
-- was switched to with `/model` (NULL: the configured one).
ALTER TABLE workstreams ADD COLUMN workdir TEXT;
ALTER TABLE workstreams ADD COLUMN model TEXT;
