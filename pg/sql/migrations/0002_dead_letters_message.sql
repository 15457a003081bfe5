-- Migration 2: find a message's dead-letter entry by (partition, group,
-- offset). ack_v1 asks whether a message was dead-lettered when a stale
-- lease acks it completed (docs/api.md, "Acks", rule 5).
CREATE INDEX IF NOT EXISTS dead_letters_message ON queen.dead_letters (partition_id, consumer_group, off);
