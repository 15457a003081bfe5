-- Migration 7: samples for the status and analytics reads (package stats,
-- docs/api.md, "Status and analytics"). Every table is append-only and
-- trimmed by the sampler by sampled_at (docs/operations.md, "Samples").

-- One row per node per interval. Counter columns are deltas since the
-- node's previous sample (a restart starts from zero, no reset to detect);
-- the rest are levels at sampled_at.
CREATE TABLE queen.node_samples (
    sampled_at    timestamptz NOT NULL,
    node          text NOT NULL,
    interval_ms   integer NOT NULL,
    pushes        bigint NOT NULL,
    pushed_items  bigint NOT NULL,
    duplicates    bigint NOT NULL,
    pops          bigint NOT NULL,
    popped_items  bigint NOT NULL,
    pops_empty    bigint NOT NULL,
    acks          bigint NOT NULL,
    acks_refused  bigint NOT NULL,
    dead_lettered bigint NOT NULL,
    transactions  bigint NOT NULL,
    cpu_user_us   bigint NOT NULL,
    cpu_system_us bigint NOT NULL,
    parked        integer NOT NULL,
    pool_max      integer NOT NULL,
    pool_total    integer NOT NULL,
    pool_idle     integer NOT NULL,
    pool_acquired integer NOT NULL,
    rss_bytes     bigint NOT NULL,
    heap_bytes    bigint NOT NULL,
    goroutines    integer NOT NULL,
    PRIMARY KEY (sampled_at, node) -- range reads and the trim
);

-- One row per queue per queue-sampling round (taken by one node at a time),
-- written only when a figure moved or a backlog exists. The cumulative
-- columns come from the partition watermarks and consumer cursors; the
-- *_delta columns are the change since the queue's previous row.
CREATE TABLE queen.queue_samples (
    queue_id          uuid NOT NULL REFERENCES queen.queues(id) ON DELETE CASCADE,
    tenant            text NOT NULL,
    sampled_at        timestamptz NOT NULL,
    pushed            bigint NOT NULL, -- sum of partitions.last_offset
    consumed          bigint NOT NULL, -- sum of consumers.committed_offset, every group
    trimmed           bigint NOT NULL, -- sum over partitions of (first stored offset - 1)
    pending           bigint NOT NULL, -- sum of (last_offset - slowest group's committed_offset)
    processing        bigint NOT NULL, -- messages under live leases
    oldest_pending_at timestamptz,     -- the oldest message some group has not passed
    pushed_delta      bigint NOT NULL,
    consumed_delta    bigint NOT NULL,
    trimmed_delta     bigint NOT NULL,
    PRIMARY KEY (queue_id, sampled_at) -- a queue's previous row; the FK cascade
);
CREATE INDEX queue_samples_tenant ON queen.queue_samples (tenant, sampled_at);
CREATE INDEX queue_samples_time ON queen.queue_samples (sampled_at);

-- Long-polls parked per (node, queue) at each node sample, for the queues
-- that have any. Names, not ids: the wake gates are keyed by name.
CREATE TABLE queen.parked_samples (
    tenant     text NOT NULL,
    queue      text NOT NULL,
    sampled_at timestamptz NOT NULL,
    node       text NOT NULL,
    parked     integer NOT NULL,
    PRIMARY KEY (tenant, sampled_at, queue, node)
);
CREATE INDEX parked_samples_time ON queen.parked_samples (sampled_at);

-- Which node took the last queue-sampling round, and when: the row lock
-- makes one node per round take it.
CREATE TABLE queen.stats_rounds (
    name    text PRIMARY KEY,
    last_at timestamptz NOT NULL,
    node    text NOT NULL
);
