-- Reads and edits behind the EXTENDED resource, message and consumer-group
-- endpoints (docs/api.md, "Resources, messages and consumer groups").

-- queen.message_status: a message's status for one consumer group, from
-- the group's consumer row alone (no message read). p_committed is NULL
-- when the group has no consumer row for the partition. 'dead_letter' is
-- decided by the caller (an index probe of dead_letters), since it needs a
-- table.
CREATE OR REPLACE FUNCTION queen.message_status(
    p_off bigint, p_committed bigint, p_acked bigint[], p_batch_end bigint, p_live boolean)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN p_off <= COALESCE(p_committed, 0) OR p_off = ANY (COALESCE(p_acked, '{}')) THEN 'completed'
        WHEN COALESCE(p_live, false) AND p_off <= p_batch_end THEN 'processing'
        ELSE 'pending' END
$$;

-- queen.list_messages_v1 lists the messages of one queue (p_qid, already
-- resolved in the caller's tenant), optionally of one partition, newest
-- first within a partition, partitions in id order, with the status each
-- has for p_group. It never reads a partition past what it returns: every
-- read is a range of the messages primary key (partition_id, off) walked
-- backwards with a LIMIT of what is still wanted (p_offset skipped rows plus
-- p_limit), partitions come from partitions_queue_id (queue_id, id), so a
-- call reads at most p_offset + p_limit messages plus one index probe per
-- partition. p_status narrows the range from the group's cursor:
--   pending     past the cursor, and past the live lease's batch
--   processing  inside the live lease's batch
--   completed   at or before the cursor, or acked past a gap
--   dead_letter the group's dead-letter entries (dead_letters_message)
--   NULL        every message
CREATE OR REPLACE FUNCTION queen.list_messages_v1(
    p_qid       uuid,
    p_partition text,
    p_group     text,
    p_status    text,
    p_limit     int,
    p_offset    int)
RETURNS TABLE (o_pid uuid, o_pname text, o_off bigint, o_mid uuid, o_txid text, o_trace uuid,
               o_created timestamptz, o_sub text, o_status text, o_lease_until timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    v_now   timestamptz := clock_timestamp();
    v_skip  int := GREATEST(p_offset, 0);
    v_left  int := p_limit;
    p       record;
    m       record;
    v_cur   bigint;    -- the group's cursor (0 without a consumer row)
    v_bend  bigint;
    v_acked bigint[];
    v_until timestamptz;
    v_live  boolean;
    v_lo    bigint;
    v_hi    bigint;
BEGIN
    FOR p IN
        SELECT pt.id, pt.name, pt.last_offset FROM queen.partitions pt
        WHERE pt.queue_id = p_qid AND (p_partition IS NULL OR pt.name = p_partition)
        ORDER BY pt.id
    LOOP
        EXIT WHEN v_left <= 0;
        SELECT cs.committed_offset, cs.batch_end, cs.acked, cs.lease_expires_at
        INTO v_cur, v_bend, v_acked, v_until
        FROM queen.consumers cs WHERE cs.partition_id = p.id AND cs.consumer_group = p_group;
        IF NOT FOUND THEN
            v_cur := 0; v_bend := 0; v_acked := '{}'; v_until := NULL;
        END IF;
        v_live := v_until IS NOT NULL AND v_until > v_now;

        IF p_status = 'dead_letter' THEN
            FOR m IN
                SELECT d.off, d.message_id AS id, d.transaction_id, NULL::uuid AS trace_id,
                       d.created_at, d.producer_sub
                FROM queen.dead_letters d
                WHERE d.partition_id = p.id AND d.consumer_group = p_group AND NOT d.superseded
                ORDER BY d.off DESC
                LIMIT v_skip + v_left
            LOOP
                IF v_skip > 0 THEN v_skip := v_skip - 1; CONTINUE; END IF;
                o_pid := p.id; o_pname := p.name; o_off := m.off; o_mid := m.id; o_txid := m.transaction_id;
                o_trace := NULL; o_created := m.created_at; o_sub := m.producer_sub;
                o_status := 'dead_letter'; o_lease_until := NULL;
                RETURN NEXT;
                v_left := v_left - 1;
                EXIT WHEN v_left <= 0;
            END LOOP;
            CONTINUE;
        END IF;

        IF p_status = 'completed' AND cardinality(v_acked) > 0 THEN
            -- acked past a gap: above the cursor, so newest first they come first
            FOR m IN
                SELECT ms.off, ms.id, ms.transaction_id, ms.trace_id, ms.created_at, ms.producer_sub
                FROM queen.messages ms
                WHERE ms.partition_id = p.id AND ms.off = ANY (v_acked)
                ORDER BY ms.off DESC
                LIMIT v_skip + v_left
            LOOP
                IF v_skip > 0 THEN v_skip := v_skip - 1; CONTINUE; END IF;
                o_pid := p.id; o_pname := p.name; o_off := m.off; o_mid := m.id; o_txid := m.transaction_id;
                o_trace := m.trace_id; o_created := m.created_at; o_sub := m.producer_sub;
                o_status := CASE WHEN EXISTS (SELECT 1 FROM queen.dead_letters d
                                              WHERE d.partition_id = p.id AND d.consumer_group = p_group
                                                AND d.off = m.off AND NOT d.superseded)
                            THEN 'dead_letter' ELSE 'completed' END;
                o_lease_until := NULL;
                RETURN NEXT;
                v_left := v_left - 1;
                EXIT WHEN v_left <= 0;
            END LOOP;
            CONTINUE WHEN v_left <= 0;
        END IF;

        -- the offset range (v_lo, v_hi] the status allows
        v_lo := 0; v_hi := p.last_offset;
        IF p_status = 'pending' THEN
            v_lo := CASE WHEN v_live THEN GREATEST(v_cur, v_bend) ELSE v_cur END;
        ELSIF p_status = 'processing' THEN
            IF NOT v_live THEN CONTINUE; END IF;
            v_lo := v_cur; v_hi := LEAST(v_bend, p.last_offset);
        ELSIF p_status = 'completed' THEN
            v_hi := LEAST(v_cur, p.last_offset);
        END IF;
        CONTINUE WHEN v_hi <= v_lo;

        FOR m IN
            SELECT ms.off, ms.id, ms.transaction_id, ms.trace_id, ms.created_at, ms.producer_sub
            FROM queen.messages ms
            WHERE ms.partition_id = p.id AND ms.off > v_lo AND ms.off <= v_hi
              AND (p_status IS NULL OR p_status = 'completed' OR NOT (ms.off = ANY (v_acked)))
            ORDER BY ms.off DESC
            LIMIT v_skip + v_left
        LOOP
            IF v_skip > 0 THEN v_skip := v_skip - 1; CONTINUE; END IF;
            o_pid := p.id; o_pname := p.name; o_off := m.off; o_mid := m.id; o_txid := m.transaction_id;
            o_trace := m.trace_id; o_created := m.created_at; o_sub := m.producer_sub;
            o_status := queen.message_status(m.off, v_cur, v_acked, v_bend, v_live);
            IF o_status = 'completed' AND EXISTS (SELECT 1 FROM queen.dead_letters d
                                                  WHERE d.partition_id = p.id AND d.consumer_group = p_group
                                                    AND d.off = m.off AND NOT d.superseded) THEN
                o_status := 'dead_letter';
            END IF;
            o_lease_until := CASE WHEN o_status = 'processing' THEN v_until END;
            RETURN NEXT;
            v_left := v_left - 1;
            EXIT WHEN v_left <= 0;
        END LOOP;
    END LOOP;
END;
$$;

-- queen.delete_message_v1 deletes one message of the tenant and keeps every
-- group's cursor whole: for each group that has not passed the message, its
-- offset counts as resolved (as if acked), so the cursor passes the hole
-- once everything before it is resolved, and a live lease whose batch is
-- now fully resolved ends (docs/api.md, "Deleting a message"). Consumer rows
-- are locked in (partition_id, consumer_group) order, the order acks and
-- pops lock in, before the message row is touched.
-- Returns no row when the message does not exist in the tenant; otherwise
-- one row per consumer row it changed (o_group NULL when none), with
-- whether its lease ended and whether messages remain past its cursor.
CREATE OR REPLACE FUNCTION queen.delete_message_v1(p_tenant text, p_pid uuid, p_txid text)
RETURNS TABLE (o_queue text, o_partition text, o_group text, o_released boolean, o_pending boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_off   bigint;
    v_queue text;
    v_pname text;
    v_last  bigint;
    v_any   boolean := false;
    c       record;
    v_a     bigint[];
    v_u     bigint;
    v_new   bigint;
    v_rel   boolean;
BEGIN
    -- messages_txid (partition_id, transaction_id) finds it
    SELECT m.off, q.name, pt.name INTO v_off, v_queue, v_pname
    FROM queen.messages m
    JOIN queen.partitions pt ON pt.id = m.partition_id
    JOIN queen.queues q ON q.id = pt.queue_id AND q.tenant = p_tenant
    WHERE m.partition_id = p_pid AND m.transaction_id = p_txid;
    IF NOT FOUND THEN
        RETURN;
    END IF;

    -- the consumer rows of the partition, locked in key order (primary key)
    PERFORM 1 FROM queen.consumers cs WHERE cs.partition_id = p_pid
    ORDER BY cs.consumer_group FOR UPDATE;

    DELETE FROM queen.messages m WHERE m.partition_id = p_pid AND m.off = v_off;
    -- a dead-letter retry copy's record goes with it (80_dlq.sql)
    DELETE FROM queen.dlq_copies x WHERE x.partition_id = p_pid AND x.off = v_off;
    SELECT pt.last_offset INTO v_last FROM queen.partitions pt WHERE pt.id = p_pid;

    FOR c IN
        SELECT cs.consumer_group, cs.committed_offset, cs.batch_end, cs.acked, cs.lease_id, cs.lease_expires_at
        FROM queen.consumers cs
        WHERE cs.partition_id = p_pid AND cs.committed_offset < v_off
        ORDER BY cs.consumer_group
    LOOP
        v_any := true;
        v_a := ARRAY(SELECT DISTINCT x FROM unnest(c.acked || v_off) x ORDER BY x);
        -- the first message past the cursor that is not resolved: a walk of
        -- the primary key that skips only the resolved offsets
        SELECT m.off INTO v_u FROM queen.messages m
        WHERE m.partition_id = p_pid AND m.off > c.committed_offset AND NOT (m.off = ANY (v_a))
        ORDER BY m.off LIMIT 1;
        -- the cursor passes every resolved offset before it (all when none)
        SELECT GREATEST(c.committed_offset, max(x)) INTO v_new
        FROM unnest(v_a) x WHERE v_u IS NULL OR x < v_u;
        v_new := COALESCE(v_new, c.committed_offset);
        v_rel := c.lease_id IS NOT NULL AND v_new >= c.batch_end;
        UPDATE queen.consumers cs
        SET committed_offset = v_new,
            batch_end = GREATEST(cs.batch_end, v_new),
            acked = ARRAY(SELECT x FROM unnest(v_a) x WHERE x > v_new ORDER BY x),
            lease_id = CASE WHEN v_rel THEN NULL ELSE cs.lease_id END,
            lease_owner = CASE WHEN v_rel THEN NULL ELSE cs.lease_owner END,
            lease_expires_at = CASE WHEN v_rel THEN NULL ELSE cs.lease_expires_at END,
            retry_count = CASE WHEN v_rel THEN 0 ELSE cs.retry_count END,
            updated_at = clock_timestamp()
        WHERE cs.partition_id = p_pid AND cs.consumer_group = c.consumer_group;
        o_queue := v_queue; o_partition := v_pname; o_group := c.consumer_group;
        o_released := v_rel AND c.lease_expires_at > clock_timestamp();
        o_pending := v_new < v_last;
        RETURN NEXT;
    END LOOP;
    IF NOT v_any THEN
        o_queue := v_queue; o_partition := v_pname; o_group := NULL; o_released := false; o_pending := false;
        RETURN NEXT;
    END IF;
END;
$$;
