-- Admin actions on one dead letter (docs/api.md, "Retry or drop a dead
-- letter"). An entry is named by (partition, transaction id, group). Only a
-- live entry (no seek or group delete superseded it) can be retried: a
-- superseded one is pending for its group again, or the group is gone. Any
-- entry can be dropped, since the DLQ list shows them all. Both remove
-- every entry of that triple, superseded ones included: those are older
-- resolutions of the same message for the same group, and the DLQ list
-- would otherwise go on showing the message.

-- queen.dlq_copies_past returns the offsets past p_after of the partition's
-- retried copies that are for a group other than p_group, sorted: what a
-- cursor starting at p_after must count as resolved (its acked offsets).
-- Called where a cursor is created or moved back (queen.pop_v*, ack_v1,
-- pg.Seek); queen.dlq_copies has a row only per retry, so this is one
-- primary-key range probe that finds nothing almost always. (plpgsql, not
-- sql: a body is checked only when run, so the function files still load
-- on a database whose migrations have not run yet, pg TestMigrate*.)
CREATE OR REPLACE FUNCTION queen.dlq_copies_past(p_pid uuid, p_group text, p_after bigint)
RETURNS bigint[]
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT COALESCE(array_agg(x.off ORDER BY x.off), '{}')
            FROM queen.dlq_copies x
            WHERE x.partition_id = p_pid AND x.off > p_after AND x.for_group <> p_group);
END;
$$;

-- queen.dlq_retry_v1 delivers a dead-lettered message again to its group
-- only, in one transaction: it appends a copy (the entry's payload and
-- producer subject, the original's trace id while the original exists) at
-- the partition's next offset the way queen.push_v4 does, records it in
-- queen.dlq_copies as being for that group, counts that offset as already
-- resolved for every other group with a cursor on the partition (as
-- queen.delete_message_v1 does for a hole; a cursor created or moved back
-- later gets it from queen.dlq_copies_past), and deletes the entry.
-- The copy's transaction id is p_txid || '~retry-' || the entry's seq, or
-- md5(p_txid) || '~retry-' || seq when that would pass p_max_bytes, so a
-- client can always ack it. Lock order (docs/storage.md, "Lock order"): the
-- partition's consumer rows in key order, the entry, then the partition row.
-- Returns no row when the tenant has no such entry; o_superseded when it
-- has only superseded ones, o_taken when the copy's transaction id already
-- exists in the partition (nothing changed in either case).
CREATE OR REPLACE FUNCTION queen.dlq_retry_v1(
    p_tenant    text,
    p_pid       uuid,
    p_txid      text,
    p_group     text,
    p_mid       uuid,
    p_max_bytes int)
RETURNS TABLE (o_queue text, o_partition text, o_txid text, o_off bigint, o_taken boolean, o_superseded boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_queue text;
    v_pname text;
    v_seq   bigint;
    v_off   bigint;
    v_new   bigint;
    v_txid  text;
    v_now   timestamptz := clock_timestamp();
BEGIN
    SELECT q.name, p.name INTO v_queue, v_pname
    FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id AND q.tenant = p_tenant
    WHERE p.id = p_pid;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    o_queue := v_queue; o_partition := v_pname; o_taken := false; o_superseded := false;

    -- Serialises retries of one partition (a second retry of the same
    -- entry then finds it gone) and keeps the cursors still while the copy
    -- is counted as resolved for the other groups.
    PERFORM 1 FROM queen.consumers cs WHERE cs.partition_id = p_pid
    ORDER BY cs.consumer_group FOR UPDATE;

    SELECT d.seq, d.off INTO v_seq, v_off
    FROM queen.dead_letters d
    WHERE d.partition_id = p_pid AND d.consumer_group = p_group AND d.transaction_id = p_txid
      AND NOT d.superseded
    ORDER BY d.seq DESC LIMIT 1
    FOR UPDATE;
    IF NOT FOUND THEN
        IF EXISTS (SELECT 1 FROM queen.dead_letters d
                   WHERE d.partition_id = p_pid AND d.consumer_group = p_group AND d.transaction_id = p_txid) THEN
            o_superseded := true;
            RETURN NEXT;
        END IF;
        RETURN;
    END IF;

    v_txid := p_txid || '~retry-' || v_seq;
    IF octet_length(v_txid) > p_max_bytes THEN
        v_txid := md5(p_txid) || '~retry-' || v_seq;
    END IF;

    SELECT p.last_offset + 1 INTO v_new FROM queen.partitions p WHERE p.id = p_pid FOR NO KEY UPDATE;
    IF EXISTS (SELECT 1 FROM queen.messages m WHERE m.partition_id = p_pid AND m.transaction_id = v_txid) THEN
        o_txid := v_txid; o_taken := true;
        RETURN NEXT;
        RETURN;
    END IF;

    INSERT INTO queen.messages (partition_id, off, id, transaction_id, trace_id, payload, producer_sub, created_at)
    SELECT p_pid, v_new, p_mid, v_txid,
           (SELECT m.trace_id FROM queen.messages m
            WHERE m.partition_id = p_pid AND m.off = v_off AND m.transaction_id = p_txid),
           d.payload, d.producer_sub, v_now
    FROM queen.dead_letters d WHERE d.seq = v_seq;
    UPDATE queen.partitions p SET last_offset = v_new, last_write_at = v_now WHERE p.id = p_pid;
    INSERT INTO queen.dlq_copies (partition_id, off, for_group) VALUES (p_pid, v_new, p_group);

    -- Every other group: the copy is resolved. A cursor with no unresolved
    -- message before the copy passes it; otherwise the offset joins acked
    -- (it is the largest, so acked stays sorted, distinct, past the cursor).
    UPDATE queen.consumers cs
    SET committed_offset = CASE WHEN u.open THEN cs.committed_offset ELSE v_new END,
        batch_end = CASE WHEN u.open THEN cs.batch_end ELSE GREATEST(cs.batch_end, v_new) END,
        acked = CASE WHEN u.open THEN cs.acked || v_new ELSE '{}' END,
        updated_at = v_now
    FROM (SELECT c2.consumer_group,
                 EXISTS (SELECT 1 FROM queen.messages m
                         WHERE m.partition_id = p_pid AND m.off > c2.committed_offset AND m.off < v_new
                           AND NOT (m.off = ANY (c2.acked))) AS open
          FROM queen.consumers c2
          WHERE c2.partition_id = p_pid AND c2.consumer_group <> p_group) u
    WHERE cs.partition_id = p_pid AND cs.consumer_group = u.consumer_group;

    DELETE FROM queen.dead_letters d
    WHERE d.partition_id = p_pid AND d.consumer_group = p_group AND d.transaction_id = p_txid;

    o_txid := v_txid; o_off := v_new;
    RETURN NEXT;
END;
$$;

-- queen.dlq_retry_v2 is queen.dlq_retry_v1 answering one row whose
-- o_outcome says what happened (protocol.DLQRetryOutcome):
--   'retried'     the copy was appended: o_txid and o_off are the copy's;
--   'not_found'   the tenant has no such entry (o_queue, o_partition NULL
--                 when it has no such partition either);
--   'superseded'  the group's entries of the message are all superseded;
--   'taken'       the copy's transaction id (o_txid) already exists in the
--                 partition.
-- Nothing changed unless 'retried'. o_queue and o_partition name the
-- partition whenever it is the tenant's. dlq_retry_v1 (no row for not
-- found, flag columns for the rest) stays for nodes of the previous release.
CREATE OR REPLACE FUNCTION queen.dlq_retry_v2(
    p_tenant    text,
    p_pid       uuid,
    p_txid      text,
    p_group     text,
    p_mid       uuid,
    p_max_bytes int,
    OUT o_outcome   text,
    OUT o_queue     text,
    OUT o_partition text,
    OUT o_txid      text,
    OUT o_off       bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_queue text;
    v_pname text;
    v_seq   bigint;
    v_off   bigint;
    v_new   bigint;
    v_txid  text;
    v_now   timestamptz := clock_timestamp();
BEGIN
    SELECT q.name, p.name INTO v_queue, v_pname
    FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id AND q.tenant = p_tenant
    WHERE p.id = p_pid;
    IF NOT FOUND THEN
        o_outcome := 'not_found';
        RETURN;
    END IF;
    o_queue := v_queue; o_partition := v_pname;

    -- Serialises retries of one partition (a second retry of the same
    -- entry then finds it gone) and keeps the cursors still while the copy
    -- is counted as resolved for the other groups.
    PERFORM 1 FROM queen.consumers cs WHERE cs.partition_id = p_pid
    ORDER BY cs.consumer_group FOR UPDATE;

    SELECT d.seq, d.off INTO v_seq, v_off
    FROM queen.dead_letters d
    WHERE d.partition_id = p_pid AND d.consumer_group = p_group AND d.transaction_id = p_txid
      AND NOT d.superseded
    ORDER BY d.seq DESC LIMIT 1
    FOR UPDATE;
    IF NOT FOUND THEN
        o_outcome := CASE WHEN EXISTS (
                              SELECT 1 FROM queen.dead_letters d
                              WHERE d.partition_id = p_pid AND d.consumer_group = p_group AND d.transaction_id = p_txid)
                          THEN 'superseded' ELSE 'not_found' END;
        RETURN;
    END IF;

    v_txid := p_txid || '~retry-' || v_seq;
    IF octet_length(v_txid) > p_max_bytes THEN
        v_txid := md5(p_txid) || '~retry-' || v_seq;
    END IF;

    SELECT p.last_offset + 1 INTO v_new FROM queen.partitions p WHERE p.id = p_pid FOR NO KEY UPDATE;
    IF EXISTS (SELECT 1 FROM queen.messages m WHERE m.partition_id = p_pid AND m.transaction_id = v_txid) THEN
        o_outcome := 'taken'; o_txid := v_txid;
        RETURN;
    END IF;

    INSERT INTO queen.messages (partition_id, off, id, transaction_id, trace_id, payload, producer_sub, created_at)
    SELECT p_pid, v_new, p_mid, v_txid,
           (SELECT m.trace_id FROM queen.messages m
            WHERE m.partition_id = p_pid AND m.off = v_off AND m.transaction_id = p_txid),
           d.payload, d.producer_sub, v_now
    FROM queen.dead_letters d WHERE d.seq = v_seq;
    UPDATE queen.partitions p SET last_offset = v_new, last_write_at = v_now WHERE p.id = p_pid;
    INSERT INTO queen.dlq_copies (partition_id, off, for_group) VALUES (p_pid, v_new, p_group);

    -- Every other group: the copy is resolved. A cursor with no unresolved
    -- message before the copy passes it; otherwise the offset joins acked
    -- (it is the largest, so acked stays sorted, distinct, past the cursor).
    UPDATE queen.consumers cs
    SET committed_offset = CASE WHEN u.open THEN cs.committed_offset ELSE v_new END,
        batch_end = CASE WHEN u.open THEN cs.batch_end ELSE GREATEST(cs.batch_end, v_new) END,
        acked = CASE WHEN u.open THEN cs.acked || v_new ELSE '{}' END,
        updated_at = v_now
    FROM (SELECT c2.consumer_group,
                 EXISTS (SELECT 1 FROM queen.messages m
                         WHERE m.partition_id = p_pid AND m.off > c2.committed_offset AND m.off < v_new
                           AND NOT (m.off = ANY (c2.acked))) AS open
          FROM queen.consumers c2
          WHERE c2.partition_id = p_pid AND c2.consumer_group <> p_group) u
    WHERE cs.partition_id = p_pid AND cs.consumer_group = u.consumer_group;

    DELETE FROM queen.dead_letters d
    WHERE d.partition_id = p_pid AND d.consumer_group = p_group AND d.transaction_id = p_txid;

    o_outcome := 'retried'; o_txid := v_txid; o_off := v_new;
END;
$$;

-- queen.dlq_drop_v1 deletes the group's entries of the message, superseded
-- or not; it returns how many rows went, 0 when the tenant has no such
-- entry.
CREATE OR REPLACE FUNCTION queen.dlq_drop_v1(
    p_tenant text,
    p_pid    uuid,
    p_txid   text,
    p_group  text)
RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_n int;
BEGIN
    DELETE FROM queen.dead_letters d
    USING queen.partitions p, queen.queues q
    WHERE d.partition_id = p_pid AND d.consumer_group = p_group AND d.transaction_id = p_txid
      AND p.id = d.partition_id AND q.id = p.queue_id AND q.tenant = p_tenant;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END;
$$;
