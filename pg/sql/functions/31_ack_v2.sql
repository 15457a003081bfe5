-- queen.ack_v2 is queen.ack_v1 (30_ack.sql: the same rules and statements,
-- both paths) answering one row per item and nothing else: o_idx is always
-- the item's 0-based input position, never -1. ack_v1's summary row per
-- (partition, group) is folded into its items: o_released (the group's
-- lease ended with this call) and o_pending (the partition has messages
-- past the group's cursor after the call) are true only on a successful
-- item of a (partition, group) where that holds. o_off is the message's
-- offset, NULL when no message has the item's transaction id. The items of
-- a (partition, group) are answered together once it is applied; rows come
-- in no particular order. ack_v1 stays for nodes of the previous release.
CREATE OR REPLACE FUNCTION queen.ack_v2(
    p_tenant   text,
    p_groups   text[],
    p_pids     uuid[],
    p_txids    text[],
    p_statuses text[],
    p_leases   text[],
    p_errors   text[],
    p_tx_mode  boolean)
RETURNS TABLE (o_idx int, o_success boolean, o_error text, o_queue text, o_partition text,
               o_released boolean, o_dlq boolean, o_pending boolean, o_pid uuid, o_group text,
               o_off bigint)
LANGUAGE plpgsql AS $$
DECLARE
    -- Bound of consumers.acked: a client acking far ahead of an open gap
    -- (without leases) must not grow one row without limit.
    c_max_acked  constant int := queen.max_acked_past_gap();
    v_now        timestamptz := clock_timestamp();
    r            record;
    v_c          record;
    v_key        text := NULL;
    v_pid        uuid;
    v_group      text;
    v_queue      text;
    v_pname      text;
    v_last       bigint;
    v_committed  bigint;
    v_old        bigint[];  -- consumers.acked at the start of the call (sorted)
    v_nold       int;
    v_j          int;       -- merge position in v_old (items come in offset order)
    v_new        bigint[];  -- offsets this call resolved past a gap (ascending)
    v_all        bigint[];
    v_n          int;
    v_batch_end  bigint;
    v_lease      text;
    v_live       boolean;
    v_retry      int;
    v_decision   text;
    v_release    boolean;
    v_released   boolean;
    v_this_dlq   boolean;
    v_resolved   boolean;
    v_resolve    boolean;
    v_norow      boolean;   -- the (partition, group) has no cursor row: its items carry leases
    v_try        int;
    -- the answers of the current (partition, group)'s items, returned when
    -- it is flushed, once its lease and pending flags are known
    b_idx        int[] := '{}';
    b_ok         boolean[] := '{}';
    b_err        text[] := '{}';
    b_dlq        boolean[] := '{}';
    b_off        bigint[] := '{}';
BEGIN
    -- BEGIN fast path
    -- The common case, set-based: completed acks, outside a transaction,
    -- of the first messages past the cursor of one (partition, group), up
    -- to the end of the batch of its live lease or short of it, all
    -- carrying that lease, with no acks remembered past a gap. It writes
    -- and answers exactly what the general loop below would
    -- (pg/ack_fast_test.go compares the two on random batches); anything
    -- else falls through to that loop, which takes the consumer row lock
    -- again.
    DECLARE
        f_n        int := cardinality(p_pids);
        f_pid      uuid;
        f_group    text;
        f_queue    text;
        f_pname    text;
        f_cur      bigint;
        f_end      bigint;
        f_ok       boolean;
        f_distinct bigint;
        f_max      bigint;
        f_offs     bigint[];
        f_release  boolean;
        f_last     bigint;
    BEGIN
        IF NOT p_tx_mode AND f_n > 0 AND f_n < c_max_acked
           AND cardinality(p_groups) = f_n AND cardinality(p_txids) = f_n
           AND cardinality(p_statuses) = f_n AND cardinality(p_leases) = f_n
           AND cardinality(p_errors) = f_n
           AND p_pids <@ ARRAY[p_pids[1]] AND p_groups <@ ARRAY[p_groups[1]]
           AND p_leases[1] <> '' AND p_leases <@ ARRAY[p_leases[1]]
           AND p_statuses <@ ARRAY['completed', 'success', '']
        THEN
            f_pid := p_pids[1];
            f_group := COALESCE(NULLIF(p_groups[1], ''), '__QUEUE_MODE__');
            -- the consumer row, locked if the partition is this tenant's
            SELECT c.committed_offset, c.batch_end,
                   c.lease_id = p_leases[1] AND c.lease_expires_at > v_now AND cardinality(c.acked) = 0,
                   q.name, p.name
            INTO f_cur, f_end, f_ok, f_queue, f_pname
            FROM queen.consumers c
            JOIN queen.partitions p ON p.id = c.partition_id
            JOIN queen.queues q ON q.id = p.queue_id AND q.tenant = p_tenant
            WHERE c.partition_id = f_pid AND c.consumer_group = f_group
            FOR UPDATE OF c;
            IF FOUND AND f_ok THEN
                -- The items must be the first n messages past the cursor
                -- (one range of the primary key; offsets can have holes
                -- where a duplicate push skipped one), each named once:
                -- n distinct matches. The sub-selects hide the values from
                -- the planner, so that PL/pgSQL settles on one generic
                -- plan: with them known, every custom plan looks cheaper
                -- than the generic one (whose LIMIT is a guess), so it
                -- would plan anew on each call, which costs more than
                -- running the statement.
                SELECT count(DISTINCT m.off), max(m.off), array_agg(m.off ORDER BY a.ord)
                INTO f_distinct, f_max, f_offs
                FROM unnest(p_txids) WITH ORDINALITY AS a(txid, ord)
                LEFT JOIN (SELECT m.off, m.transaction_id FROM queen.messages m
                           WHERE m.partition_id = (SELECT f_pid) AND m.off > (SELECT f_cur)
                           ORDER BY m.off LIMIT (SELECT f_n)) m ON m.transaction_id = a.txid;
                IF f_distinct = f_n AND f_max <= f_end THEN
                    -- The whole batch resolved: the lease ends and the retry
                    -- counter starts over. A prefix: the lease lives on.
                    f_release := f_max = f_end;
                    UPDATE queen.consumers c
                    SET provisional = false, committed_offset = f_max,
                        lease_id = CASE WHEN f_release THEN NULL ELSE c.lease_id END,
                        lease_owner = CASE WHEN f_release THEN NULL ELSE c.lease_owner END,
                        lease_expires_at = CASE WHEN f_release THEN NULL ELSE c.lease_expires_at END,
                        retry_count = CASE WHEN f_release THEN 0 ELSE c.retry_count END,
                        updated_at = v_now
                    WHERE c.partition_id = f_pid AND c.consumer_group = f_group
                    RETURNING (SELECT p.last_offset FROM queen.partitions p WHERE p.id = f_pid) INTO f_last;
                    RAISE DEBUG 'queen.ack_v2: fast path'; -- pg/ack_fast_test.go counts it
                    -- the items in offset order
                    RETURN QUERY
                    SELECT (u.ord - 1)::int, true, NULL::text, f_queue, f_pname, f_release, false,
                           f_max < f_last, f_pid, f_group, u.off
                    FROM unnest(f_offs) WITH ORDINALITY AS u(off, ord)
                    ORDER BY u.off;
                    RETURN;
                END IF;
            END IF;
        END IF;
    END;
    -- END fast path

    -- The items in application order, then one sentinel row that flushes
    -- the last (partition, group).
    FOR r IN
        SELECT false AS sentinel, (a.ord - 1)::int AS idx,
               COALESCE(NULLIF(a.grp, ''), '__QUEUE_MODE__') AS grp,
               a.pid, a.txid,
               COALESCE(NULLIF(lower(a.st), ''), 'completed') AS st,
               NULLIF(a.lease, '') AS lease,
               NULLIF(a.err, '') AS err,
               m.off, q.name AS qname, p.name AS pname, q.retry_limit, p.last_offset,
               -- some found item of the (partition, group) carries no lease
               -- and resolves its message: completed, dlq, or failed in a
               -- transaction. Where the row is missing no lease is live, so
               -- a lease-less retry, or failed outside a transaction, would
               -- change nothing there, and an invalid status is refused.
               COALESCE(bool_or(COALESCE(a.lease, '') = ''
                                AND (COALESCE(NULLIF(lower(a.st), ''), 'completed') IN ('completed', 'success', 'dlq')
                                     OR (p_tx_mode AND lower(a.st) = 'failed')))
                            FILTER (WHERE m.off IS NOT NULL)
                        OVER (PARTITION BY a.pid, COALESCE(NULLIF(a.grp, ''), '__QUEUE_MODE__')), false) AS makes_row
        FROM unnest(p_groups, p_pids, p_txids, p_statuses, p_leases, p_errors)
             WITH ORDINALITY AS a(grp, pid, txid, st, lease, err, ord)
        LEFT JOIN queen.partitions p ON p.id = a.pid
        LEFT JOIN queen.queues q ON q.id = p.queue_id AND q.tenant = p_tenant
        LEFT JOIN queen.messages m ON q.id IS NOT NULL AND m.partition_id = a.pid AND m.transaction_id = a.txid
        UNION ALL
        SELECT true, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
        ORDER BY sentinel, pid, grp, off NULLS FIRST, idx
    LOOP
        IF NOT r.sentinel AND r.off IS NULL THEN
            o_idx := r.idx; o_success := false; o_error := 'Message not found';
            o_queue := r.qname; o_partition := r.pname; o_released := false; o_dlq := false;
            o_pending := false; o_pid := r.pid; o_group := r.grp; o_off := NULL;
            RETURN NEXT;
            CONTINUE;
        END IF;

        IF r.sentinel OR v_key IS DISTINCT FROM (r.pid::text || '/' || r.grp) THEN
            IF v_key IS NOT NULL THEN
                -- Flush the previous (partition, group). First the cursor:
                -- it passes the resolved offsets that follow it, directly or
                -- across offsets no message holds (a duplicate push skips its
                -- offset), and stops at the first unresolved message.
                -- (None without a row: its items were all refused.)
                v_released := false;
                IF NOT v_norow THEN
                    v_all := v_old || v_new;
                    IF cardinality(v_new) > 0 AND cardinality(v_old) > 0 THEN
                        v_all := ARRAY(SELECT DISTINCT x FROM unnest(v_all) x ORDER BY x);
                    END IF;
                    v_n := cardinality(v_all);
                    v_j := 1;
                    WHILE v_j <= v_n LOOP
                        IF v_all[v_j] > v_committed THEN
                            EXIT WHEN v_all[v_j] > v_committed + 1 AND EXISTS (
                                SELECT 1 FROM queen.messages m
                                WHERE m.partition_id = v_pid AND m.off > v_committed AND m.off < v_all[v_j]);
                            v_committed := v_all[v_j];
                        END IF;
                        v_j := v_j + 1;
                    END LOOP;
                    v_all := v_all[v_j:v_n];
                    IF v_all IS NULL THEN
                        v_all := '{}';
                    END IF;

                    IF v_release AND v_lease IS NOT NULL THEN
                        v_released := v_live; v_lease := NULL; v_batch_end := v_committed;
                    ELSIF v_lease IS NOT NULL AND v_committed >= v_batch_end THEN
                        -- the held batch is fully resolved (acked or dead-lettered): the
                        -- retry counter starts over; a call that resolves nothing keeps it
                        v_released := v_live; v_lease := NULL;
                        IF v_decision IS DISTINCT FROM 'retry' THEN
                            v_retry := 0;
                        END IF;
                    END IF;
                    UPDATE queen.consumers c
                    -- a pass's mark goes with the first ack that moves the cursor or
                    -- its acked offsets (refused and no-op acks leave it)
                    SET provisional = c.provisional AND v_committed = c.committed_offset AND v_all = c.acked,
                        committed_offset = v_committed, batch_end = greatest(v_batch_end, v_committed),
                        acked = v_all,
                        lease_id = v_lease,
                        lease_owner = CASE WHEN v_lease IS NULL THEN NULL ELSE c.lease_owner END,
                        lease_expires_at = CASE WHEN v_lease IS NULL THEN NULL ELSE c.lease_expires_at END,
                        retry_count = v_retry, updated_at = v_now
                    WHERE c.partition_id = v_pid AND c.consumer_group = v_group;
                END IF;
                -- the group's items, a successful one with the group's flags
                RETURN QUERY
                SELECT b.i, b.ok, b.err, v_queue, v_pname, b.ok AND v_released, b.dlq,
                       b.ok AND NOT v_norow AND v_committed < v_last, v_pid, v_group, b.off
                FROM unnest(b_idx, b_ok, b_err, b_dlq, b_off) AS b(i, ok, err, dlq, off);
                b_idx := '{}'; b_ok := '{}'; b_err := '{}'; b_dlq := '{}'; b_off := '{}';
            END IF;
            EXIT WHEN r.sentinel;

            v_key := r.pid::text || '/' || r.grp;
            v_pid := r.pid; v_group := r.grp; v_queue := r.qname; v_pname := r.pname;
            -- Only an ack without a lease that resolves a message makes the
            -- group's cursor when it has none (docs/api.md, "Acks", rule 7).
            -- One with a lease never needs it: a lease lives in the cursor
            -- row, so without the row (the group was deleted since the pop)
            -- the lease is gone and the ack is refused below. Making the row
            -- for it, or for an ack that writes nothing, would leave a cursor
            -- at 0 of a group without its marker, which a group made again
            -- with `new` or `from` would then read from the start.
            FOR v_try IN 1 .. 3 LOOP
                IF r.makes_row THEN
                    INSERT INTO queen.consumers (partition_id, consumer_group) VALUES (r.pid, r.grp)
                    ON CONFLICT (partition_id, consumer_group) DO NOTHING;
                    IF FOUND THEN
                        -- a cursor created here: other groups' dead-letter retry
                        -- copies are resolved for it (80_dlq.sql). Only then: the
                        -- VALUES list runs on every ack, new cursor or not.
                        UPDATE queen.consumers c SET acked = queen.dlq_copies_past(r.pid, r.grp, 0)
                        WHERE c.partition_id = r.pid AND c.consumer_group = r.grp;
                    END IF;
                END IF;
                SELECT c.* INTO v_c FROM queen.consumers c
                WHERE c.partition_id = r.pid AND c.consumer_group = r.grp FOR UPDATE;
                v_norow := NOT FOUND;
                -- not found after the insert: a group delete removed the row
                -- between the two statements; make it again
                EXIT WHEN NOT v_norow OR NOT r.makes_row;
            END LOOP;
            IF v_norow AND r.makes_row THEN
                RAISE EXCEPTION 'consumer row of group % deleted during an ack', r.grp USING ERRCODE = '40001';
            END IF;
            SELECT p.last_offset INTO v_last FROM queen.partitions p WHERE p.id = r.pid;
            v_committed := v_c.committed_offset;
            v_old := v_c.acked; v_nold := cardinality(v_old); v_j := 1; v_new := '{}';
            v_batch_end := v_c.batch_end; v_lease := v_c.lease_id;
            v_live := v_c.lease_id IS NOT NULL AND v_c.lease_expires_at > v_now;
            v_retry := v_c.retry_count; v_decision := NULL; v_release := false;
        END IF;

        v_this_dlq := false; v_resolve := false;
        o_idx := r.idx; o_queue := r.qname; o_partition := r.pname; o_released := false;
        o_pending := false; o_pid := r.pid; o_group := r.grp; o_off := r.off; o_dlq := false;
        IF r.st NOT IN ('completed', 'success', 'failed', 'dlq', 'retry') THEN
            o_success := false; o_error := 'Invalid status';
            b_idx := b_idx || r.idx; b_ok := b_ok || o_success; b_err := b_err || o_error;
            b_dlq := b_dlq || o_dlq; b_off := b_off || r.off;
            CONTINUE;
        END IF;
        IF v_norow THEN
            -- No cursor row, so no lease (the group was deleted since the
            -- pop), and the item resolves nothing: a lease-less failed or
            -- retry is told success and changes nothing, as with a row.
            o_success := r.lease IS NULL;
            o_error := CASE WHEN r.lease IS NULL THEN NULL ELSE 'Invalid or expired lease' END;
            b_idx := b_idx || r.idx; b_ok := b_ok || o_success; b_err := b_err || o_error;
            b_dlq := b_dlq || o_dlq; b_off := b_off || r.off;
            CONTINUE;
        END IF;

        -- Resolved already: at or before the cursor, remembered past it, or
        -- resolved by an earlier item of this call (items of one partition
        -- come in offset order, so that one is the last remembered).
        WHILE v_j <= v_nold AND v_old[v_j] < r.off LOOP
            v_j := v_j + 1;
        END LOOP;
        v_resolved := r.off <= v_committed
                      OR (v_j <= v_nold AND v_old[v_j] = r.off)
                      OR (cardinality(v_new) > 0 AND v_new[cardinality(v_new)] = r.off);

        IF v_resolved AND r.st IN ('completed', 'success')
           AND (r.lease IS NULL OR (v_live AND r.lease = v_c.lease_id) OR NOT EXISTS (
                SELECT 1 FROM queen.dead_letters d
                WHERE d.partition_id = r.pid AND d.consumer_group = r.grp AND d.off = r.off
                  AND NOT d.superseded)) THEN
            -- idempotent: a retried completed ack whose first answer was lost.
            -- A message dead-lettered meanwhile was not completed: a stale
            -- lease's completed ack for it is refused below, not told success.
            -- An entry a seek or a group delete superseded does not count:
            -- the message was pending again since, and may have been completed.
            o_success := true; o_error := NULL;
            b_idx := b_idx || r.idx; b_ok := b_ok || o_success; b_err := b_err || o_error;
            b_dlq := b_dlq || o_dlq; b_off := b_off || r.off;
            CONTINUE;
        END IF;
        IF r.lease IS NOT NULL AND NOT (v_live AND r.lease = v_c.lease_id) THEN
            o_success := false; o_error := 'Invalid or expired lease';
            b_idx := b_idx || r.idx; b_ok := b_ok || o_success; b_err := b_err || o_error;
            b_dlq := b_dlq || o_dlq; b_off := b_off || r.off;
            CONTINUE;
        END IF;

        IF v_resolved THEN
            NULL; -- resolved before: success, nothing changes
        ELSIF v_nold + cardinality(v_new) >= c_max_acked AND r.off > v_committed + 1 THEN
            o_success := false; o_error := 'Too many acks past an unresolved message';
            b_idx := b_idx || r.idx; b_ok := b_ok || o_success; b_err := b_err || o_error;
            b_dlq := b_dlq || o_dlq; b_off := b_off || r.off;
            CONTINUE;
        ELSIF r.st IN ('completed', 'success') THEN
            v_resolve := true;
        ELSIF r.st = 'retry' THEN
            v_release := true;
        ELSIF r.st = 'dlq' OR p_tx_mode THEN
            -- Dead-lettered, so resolved: the lease lives on for the rest of
            -- the batch (a transaction failing one message and completing
            -- the next under the same lease must not lose the lease between
            -- its two operations).
            v_this_dlq := true;
        ELSE -- failed
            -- A failed delivery is decided once, and only while its lease is
            -- live and the message was delivered under it. Otherwise the
            -- message simply stays unresolved: the cursor cannot pass it, so
            -- the next pop after the lease delivers it again.
            IF v_decision IS NULL AND v_live AND r.off <= v_batch_end THEN
                IF v_retry < r.retry_limit THEN
                    v_decision := 'retry'; v_retry := v_retry + 1; v_release := true;
                ELSE
                    v_decision := 'dlq';
                END IF;
            END IF;
            v_this_dlq := COALESCE(v_decision = 'dlq', false);
        END IF;

        IF v_this_dlq THEN
            INSERT INTO queen.dead_letters (partition_id, consumer_group, off, message_id, transaction_id,
                                            payload, producer_sub, error_message, retry_count, created_at)
            SELECT m.partition_id, r.grp, m.off, m.id, m.transaction_id, m.payload, m.producer_sub,
                   COALESCE(r.err, CASE WHEN p_tx_mode OR r.st = 'dlq' THEN 'Unknown error' ELSE 'Retries exhausted' END),
                   v_retry, m.created_at
            FROM queen.messages m WHERE m.partition_id = r.pid AND m.off = r.off;
            v_resolve := true;
        END IF;
        IF v_resolve THEN
            IF r.off = v_committed + 1 AND cardinality(v_new) = 0 THEN
                v_committed := r.off; -- the in-order case: no set to keep
            ELSE
                v_new := array_append(v_new, r.off);
            END IF;
        END IF;
        o_idx := r.idx; o_success := true; o_error := NULL; o_dlq := v_this_dlq;
        o_queue := r.qname; o_partition := r.pname; o_released := false; o_pending := false;
        o_pid := r.pid; o_group := r.grp; o_off := r.off;
        b_idx := b_idx || r.idx; b_ok := b_ok || o_success; b_err := b_err || o_error;
        b_dlq := b_dlq || o_dlq; b_off := b_off || r.off;
    END LOOP;
END;
$$;
