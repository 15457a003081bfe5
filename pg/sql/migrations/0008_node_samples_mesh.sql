-- Migration 8: the mesh and hot-list figures of a node sample (package
-- stats; docs/operations.md, "Samples"), so the dashboard's charts of them
-- survive a reload. Deltas since the node's previous sample, like the
-- request counters of migration 7; rows written before this read 0.
ALTER TABLE queen.node_samples
    ADD COLUMN frames_sent    bigint NOT NULL DEFAULT 0, -- hint frames sent to peers
    ADD COLUMN frames_received bigint NOT NULL DEFAULT 0, -- hint frames received and accepted
    ADD COLUMN hints_sent     bigint NOT NULL DEFAULT 0,
    ADD COLUMN hints_received bigint NOT NULL DEFAULT 0,
    ADD COLUMN dropped        bigint NOT NULL DEFAULT 0, -- frames dropped (chaos + full send queues) + coalescer drops
    ADD COLUMN gaps           bigint NOT NULL DEFAULT 0, -- received frames showing missed frames
    ADD COLUMN reseeds        bigint NOT NULL DEFAULT 0; -- hot-list reseed passes
