-- Migration 1: the queen-node tables (pg/migrate.go, docs/storage.md,
-- "Schema migrations"). Unlike later migrations it must stay re-runnable:
-- databases set up before queen.schema_migrations existed ran it at every
-- start and adopt version 1 by running it once more.

CREATE SCHEMA IF NOT EXISTS queen;

-- One row per queue per tenant, with its options. Options are replaced as a
-- whole by POST /api/v1/configure (reference behaviour).
CREATE TABLE IF NOT EXISTS queen.queues (
    id                          uuid PRIMARY KEY,
    tenant                      text NOT NULL,
    name                        text NOT NULL,
    namespace                   text NOT NULL DEFAULT '',
    task                        text NOT NULL DEFAULT '',
    lease_time                  integer NOT NULL DEFAULT 300,
    retry_limit                 integer NOT NULL DEFAULT 3,
    retry_delay                 integer NOT NULL DEFAULT 1000,
    priority                    integer NOT NULL DEFAULT 0,
    delayed_processing          integer NOT NULL DEFAULT 0,
    window_buffer               integer NOT NULL DEFAULT 0,
    max_size                    integer NOT NULL DEFAULT 0,
    ttl                         integer NOT NULL DEFAULT 3600,
    dead_letter_queue           boolean NOT NULL DEFAULT false,
    dlq_after_max_retries       boolean NOT NULL DEFAULT false,
    retention_seconds           integer NOT NULL DEFAULT 0,
    completed_retention_seconds integer NOT NULL DEFAULT 0,
    retention_enabled           boolean NOT NULL DEFAULT false,
    encryption_enabled          boolean NOT NULL DEFAULT false,
    max_wait_time_seconds       integer NOT NULL DEFAULT 0,
    dedup_window_seconds        integer NOT NULL DEFAULT 3600,
    created_at                  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant, name)
);

-- A partition carries the offset watermark: last_offset is the offset of the
-- newest committed message. Pushes take the row lock to allocate offsets, so
-- offsets are dense and increase in commit order.
CREATE TABLE IF NOT EXISTS queen.partitions (
    id            uuid PRIMARY KEY,
    queue_id      uuid NOT NULL REFERENCES queen.queues(id) ON DELETE CASCADE,
    name          text NOT NULL,
    last_offset   bigint NOT NULL DEFAULT 0,
    last_write_at timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (queue_id, name)
);

-- The append-only per-partition log, one row per message (see
-- docs/storage.md for the benchmark against packed segments). Offsets
-- increase in commit order per partition and may have holes (a duplicate
-- skips its offset). No foreign key: the per-row check costs the push path
-- a measurable share, and DeleteQueue removes a queue's messages itself.
CREATE TABLE IF NOT EXISTS queen.messages (
    partition_id   uuid NOT NULL,
    off            bigint NOT NULL,
    id             uuid NOT NULL,
    transaction_id text NOT NULL,
    trace_id       uuid,
    payload        json,
    producer_sub   text,
    created_at     timestamptz NOT NULL,
    PRIMARY KEY (partition_id, off)
);
ALTER TABLE queen.messages DROP CONSTRAINT IF EXISTS messages_partition_id_fkey;
-- De-duplication and ack lookup by (partition, transaction id).
CREATE UNIQUE INDEX IF NOT EXISTS messages_txid ON queen.messages (partition_id, transaction_id);

-- Keyset pagination of the hot-list reseed walks a queue's partitions in id order.
CREATE INDEX IF NOT EXISTS partitions_queue_id ON queen.partitions (queue_id, id);

-- Per (partition, consumer group): the committed cursor and the lease.
-- batch_end is the offset of the last message served under the live lease;
-- the lease ends when committed_offset reaches it.
CREATE TABLE IF NOT EXISTS queen.consumers (
    partition_id     uuid NOT NULL REFERENCES queen.partitions(id) ON DELETE CASCADE,
    consumer_group   text NOT NULL,
    committed_offset bigint NOT NULL DEFAULT 0,
    batch_end        bigint NOT NULL DEFAULT 0,
    lease_id         text,
    lease_owner      text,
    lease_expires_at timestamptz,
    retry_count      integer NOT NULL DEFAULT 0,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (partition_id, consumer_group)
);
-- acked holds the offsets past committed_offset that are already resolved
-- (acked completed or dead-lettered) while an earlier message is not: the
-- cursor only passes a contiguous resolved prefix, pops skip these offsets,
-- and the cursor jumps over them once the gap closes (docs/api.md, "Acks").
-- Sorted, distinct, all > committed_offset; empty in the in-order case.
ALTER TABLE queen.consumers ADD COLUMN IF NOT EXISTS acked bigint[] NOT NULL DEFAULT '{}';
CREATE INDEX IF NOT EXISTS consumers_lease ON queen.consumers (lease_id) WHERE lease_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS consumers_group ON queen.consumers (consumer_group);

-- The "group seeded" marker: written by the first pop of a (group, queue),
-- carrying the subscription start decided then. NULL = from the beginning.
CREATE TABLE IF NOT EXISTS queen.consumer_groups_metadata (
    queue_id          uuid NOT NULL REFERENCES queen.queues(id) ON DELETE CASCADE,
    consumer_group    text NOT NULL,
    subscription_from timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_id, consumer_group)
);

-- Dead-lettered messages, per consumer group. The payload is copied so the
-- entry survives retention of the original.
CREATE TABLE IF NOT EXISTS queen.dead_letters (
    seq            bigserial PRIMARY KEY,
    partition_id   uuid NOT NULL REFERENCES queen.partitions(id) ON DELETE CASCADE,
    consumer_group text NOT NULL,
    off            bigint NOT NULL,
    message_id     uuid NOT NULL,
    transaction_id text NOT NULL,
    payload        json,
    producer_sub   text,
    error_message  text NOT NULL,
    retry_count    integer NOT NULL,
    created_at     timestamptz NOT NULL,
    failed_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS dead_letters_failed ON queen.dead_letters (failed_at DESC);
