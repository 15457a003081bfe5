-- queen.ack_cas_v1 resolves whole served batches by compare-and-set, one
-- (partition, group) per input position, all in one statement: the CAS ack
-- of broker/ackcas.go (docs/storage.md, "CAS ack"). A row matches only when
-- the result is exactly what queen.ack_v1 would write and answer for the
-- completed acks, under the live lease, of every message of the batch:
--
--   - lease_id = the pop's lease and lease_expires_at > clock_timestamp():
--     the very claim that served the batch is live, so batch_end is the
--     served end (compared too) and every item is a decision of that lease;
--   - acked = '{}' and committed_offset < p_firsts: nothing of the batch was
--     resolved yet. Every message in (cursor, end] was then served by this
--     claim: a claim serves all unresolved messages of (its cursor, end],
--     the ones it skipped (remembered in acked) were passed since, as acked
--     is empty, and a cursor moves back only by a seek, which ends the
--     lease. So resolving the batch moves the cursor exactly to end, the
--     lease ends and retry_count starts over, as in ack_v1;
--   - the p_counts served messages still exist (a range count of the
--     primary key; no other message is in that range, by the previous
--     point): ack_v1 answers "Message not found" for a deleted one;
--   - the partition belongs to the tenant, as in ack_v1's joins.
--
-- Pairs must be distinct. A row another transaction holds (an ack on the
-- general path, a seek, a purge) is skipped, not waited for: its pair does
-- not match, and the caller sends it to the general path, which waits for
-- it alone. So a held row never holds up the other pairs of the call, nor
-- the node's next call (one runs at a time: broker/ackcas.go), and no call
-- can deadlock. Only the matched positions come back; o_pending is ack_v1's: the
-- partition has messages past the new cursor. A plan built for the values
-- of each call costs more than running it (several joins for one or a few
-- rows): the generic plan is kept.
CREATE OR REPLACE FUNCTION queen.ack_cas_v1(
    p_idx     int[],
    p_tenants text[],
    p_pids    uuid[],
    p_groups  text[],
    p_leases  text[],
    p_firsts  bigint[],
    p_ends    bigint[],
    p_counts  int[])
RETURNS TABLE (o_idx int, o_queue text, o_partition text, o_pending boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    RETURN QUERY
    WITH u AS (
        SELECT * FROM unnest(p_idx, p_tenants, p_pids, p_groups, p_leases, p_firsts, p_ends, p_counts)
               AS u(i, tenant, pid, grp, lease, first_off, end_off, n)),
    l AS (
        SELECT c.partition_id, c.consumer_group, u.i, q.name AS qname, p.name AS pname, p.last_offset
        FROM u
        JOIN queen.consumers c ON c.partition_id = u.pid AND c.consumer_group = u.grp
        JOIN queen.partitions p ON p.id = u.pid
        JOIN queen.queues q ON q.id = p.queue_id AND q.tenant = u.tenant
        WHERE c.lease_id = u.lease AND c.lease_expires_at > clock_timestamp()
          AND c.batch_end = u.end_off AND c.committed_offset < u.first_off
          AND cardinality(c.acked) = 0
          AND (SELECT count(*) FROM queen.messages m
               WHERE m.partition_id = u.pid AND m.off >= u.first_off AND m.off <= u.end_off) = u.n
        ORDER BY c.partition_id, c.consumer_group
        FOR UPDATE OF c SKIP LOCKED),
    w AS (
        UPDATE queen.consumers c
        SET provisional = false, committed_offset = c.batch_end, lease_id = NULL, lease_owner = NULL, lease_expires_at = NULL,
            retry_count = 0, updated_at = clock_timestamp()
        FROM l
        WHERE c.partition_id = l.partition_id AND c.consumer_group = l.consumer_group
        RETURNING l.i, l.qname, l.pname, l.last_offset > c.committed_offset AS pending)
    SELECT w.i, w.qname, w.pname, w.pending FROM w;
END;
$$;
