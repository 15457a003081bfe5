-- Migration 6: message traces (POST/GET /api/v1/traces, docs/api.md,
-- "Traces"). A trace belongs to a message of a partition; it goes with its
-- partition (a queue delete purges partitions, the FK cascade purges the
-- traces and their names). tenant is copied from the queue at insert so the
-- name-addressed reads filter on an index without joining queues.
CREATE TABLE queen.traces (
    id             uuid PRIMARY KEY,
    tenant         text NOT NULL,
    partition_id   uuid NOT NULL REFERENCES queen.partitions(id) ON DELETE CASCADE,
    transaction_id text NOT NULL,
    message_id     uuid NOT NULL,
    consumer_group text NOT NULL,
    event_type     text NOT NULL,
    data           jsonb NOT NULL,
    worker_id      text NOT NULL, -- the node that recorded it
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
-- GET /traces/:partitionId/:transactionId, and the FK cascade from partitions.
CREATE INDEX traces_message ON queen.traces (partition_id, transaction_id, created_at);

-- One row per (trace, name): GET /traces/by-name/:name pages through
-- trace_names_by_name in created_at order.
CREATE TABLE queen.trace_names (
    trace_id   uuid NOT NULL REFERENCES queen.traces(id) ON DELETE CASCADE,
    tenant     text NOT NULL,
    name       text NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (trace_id, name)
);
CREATE INDEX trace_names_by_name ON queen.trace_names (tenant, name, created_at, trace_id);

-- Per (partition, name) counters kept by the trace insert, so GET
-- /traces/names and the by-name total read a few rows per name instead of
-- counting traces. Per partition (not per tenant) so the FK cascade keeps
-- them right when a queue is deleted.
CREATE TABLE queen.trace_name_counts (
    partition_id  uuid NOT NULL REFERENCES queen.partitions(id) ON DELETE CASCADE,
    tenant        text NOT NULL,
    name          text NOT NULL,
    trace_count   bigint NOT NULL,
    message_count bigint NOT NULL, -- distinct transaction ids traced under the name
    last_seen     timestamptz NOT NULL,
    PRIMARY KEY (partition_id, name)
);
CREATE INDEX trace_name_counts_tenant ON queen.trace_name_counts (tenant, name);
