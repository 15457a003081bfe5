-- Migration 9: the copies dead-letter retries appended (docs/api.md,
-- "Retry or drop a dead letter"). A copy is for one group only: for every
-- other group its offset counts as resolved. Cursors that exist at the
-- retry get it in acked at once; a cursor created later (a group's first
-- pop of the partition, after a subscription or a group delete) or moved
-- back by a seek gets the copies past its start from here
-- (queen.dlq_copies_past). Rows go with their message (retention, message
-- delete) or partition (queue delete).
CREATE TABLE queen.dlq_copies (
    partition_id uuid NOT NULL REFERENCES queen.partitions(id) ON DELETE CASCADE,
    off          bigint NOT NULL,
    for_group    text NOT NULL,
    PRIMARY KEY (partition_id, off)
);
