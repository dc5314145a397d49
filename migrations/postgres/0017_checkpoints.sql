-- Compaction (issue 23): a long workstream sends the model a checkpoint (a summary of its
-- older messages) plus its recent messages verbatim. The messages themselves stay in
-- `messages`; a checkpoint says which of them it replaces (those with seq < upto_seq) and
-- what it says instead. The newest checkpoint of a workstream is the one in force.
CREATE TABLE checkpoints (
    workstream     TEXT NOT NULL,
    upto_seq       BIGINT NOT NULL,
    summary        TEXT NOT NULL,
    tokens_before  BIGINT NOT NULL,
    tokens_after   BIGINT NOT NULL,
    created_at     BIGINT NOT NULL,
    PRIMARY KEY (workstream, upto_seq)
);
