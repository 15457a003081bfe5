-- queen.provision_group_v1 creates a consumer group's missing consumer rows
-- for one page of a queue's partitions: the p_limit partitions with the
-- lowest ids past p_after (NULL: from the first), in id order. It is the
-- bulk form of the provisioning queen.pop_v3 does for its candidates
-- (22_pop_v3.sql): a node calls it page by page once a group pops a queue
-- with partitions the node does not know to have their row, so that a
-- queue of N partitions costs N/p_limit statements instead of one general
-- claim per partition (broker/provision.go; docs/storage.md, "Bulk
-- provisioning").
--
-- A row is seeded exactly as queen.pop_v3 seeds it on first sight: the
-- cursor starts at the group's recorded subscription start, and counts
-- the dead-letter retry copies past it that are for other groups as
-- resolved. The group marker must exist (the group's first pop made it):
-- without it the subscription start is not decided yet, and nothing is
-- written or returned. The group's gate (queen.group_gate_v2) is held
-- shared until the commit, taken before anything else: a group delete
-- takes it exclusively before it deletes the rows
-- (pg.DB.DeleteConsumerGroup), so it either sees this call's rows or makes
-- it find no marker, and never leaves rows of a deleted group; and, the
-- lock queueing fairly, passes cannot hold a waiting delete off. The marker
-- is held too (FOR SHARE, after the gate), for the deletes of nodes of
-- function set 12 or older, which lock the markers only. Rows are
-- inserted in partition id order with nothing else locked but these,
-- as queen.pop_v3's provisioning of its candidates inserts them; pop_v3's
-- first-sight insert of a single candidate (in candidate order, after
-- that) can still cross a page and deadlock with it, which PostgreSQL
-- breaks and both sides retry (pg.DB.Retry). Run it alone, in autocommit. Every partition of the page comes back, with or without a
-- new row: each has its row once this commits (a row made by a concurrent
-- claim is waited for by ON CONFLICT), and o_new counts the rows this
-- call made. Its rows are marked provisional (migration 11) until the group
-- reads them: a subscription update moves them to the new start.
CREATE OR REPLACE FUNCTION queen.provision_group_v1(
    p_tenant text,
    p_queue  text,
    p_group  text,
    p_after  uuid,
    p_limit  int)
RETURNS TABLE (o_queue_id uuid, o_pid uuid, o_name text, o_new int)
LANGUAGE plpgsql AS $$
DECLARE
    v_qid  uuid;
    v_from timestamptz;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(queen.group_gate_v2(p_tenant, p_group));
    SELECT q.id, md.subscription_from INTO v_qid, v_from
    FROM queen.queues q
    JOIN queen.consumer_groups_metadata md ON md.queue_id = q.id AND md.consumer_group = p_group
    WHERE q.tenant = p_tenant AND q.name = p_queue
    FOR SHARE OF md;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH page AS MATERIALIZED (
        SELECT p.id, p.name
        FROM queen.partitions p
        WHERE p.queue_id = v_qid AND (p_after IS NULL OR p.id > p_after)
        ORDER BY p.id
        LIMIT greatest(p_limit, 1)),
    ins AS (
        INSERT INTO queen.consumers (partition_id, consumer_group, committed_offset, batch_end, acked, provisional)
        SELECT s.id, p_group, s.seed, s.seed, queen.dlq_copies_past(s.id, p_group, s.seed), true
        FROM (SELECT pg.id,
                     CASE WHEN v_from IS NULL THEN 0 ELSE
                         COALESCE((SELECT max(m.off) FROM queen.messages m
                                   WHERE m.partition_id = pg.id AND m.created_at <= v_from), 0) END AS seed
              FROM page pg
              WHERE NOT EXISTS (SELECT 1 FROM queen.consumers c
                                WHERE c.partition_id = pg.id AND c.consumer_group = p_group)
              ORDER BY pg.id) s
        ON CONFLICT (partition_id, consumer_group) DO NOTHING
        RETURNING 1)
    SELECT v_qid, pg.id, pg.name, (SELECT count(*) FROM ins)::int
    FROM page pg
    ORDER BY pg.id;
END;
$$;
