-- queen.pop_v1 was the claim core (pg.Pop calls queen.pop_v2 since 856f416;
-- pop_v1 stays for nodes of the releases in between, and as the reference
-- of pop_v2's differential test). Given a queue, a group and candidate
-- partition names (or NULL for the SQL wildcard scan), it claims each
-- candidate with FOR UPDATE SKIP LOCKED on the (partition, group) consumer
-- row, reads up to the remaining budget, writes the lease (or commits at once
-- for autoAck) and reports a verdict per candidate in the same round trip:
--   took     frames delivered; o_drained = the served end reached the
--            watermark read at claim time; o_until = lease expiry
--   empty    nothing visible and no live lease (o_until = when a deferred
--            message becomes visible, if known)
--   leased   a live lease of this group until o_until
--   busy     another transaction holds the consumer row right now
--   requeue  not evaluated: the budget ran out first
-- p_max_bytes bounds the response: a message whose payload would take the
-- served bytes past it is not served (nor leased), unless nothing was served
-- yet, so one message always fits; 0 = no bound.
-- The first row is kind 'meta': whether the group marker already existed
-- (o_verdict 'seeded') or was written by this call ('fresh'), and the queue's
-- deferral options. The queue row and the group marker are provisioned on
-- first contact (a subscription may precede the first push).
-- 029898a added p_max_bytes to pop_v1 under the same name and dropped the
-- 13-argument form below, against the renaming rule (docs/storage.md,
-- "Schema migrations"): nodes of the release before could not pop once a
-- newer node had started. No release an upgrade can start from calls that
-- form any more, so the DROP stays as its retirement; a changed argument
-- list gets a new name (as pop_v2 did), never a new overload.
DROP FUNCTION IF EXISTS queen.pop_v1(text, text, text, text[], int, int, int, text, int, boolean, text, text, timestamptz);
CREATE OR REPLACE FUNCTION queen.pop_v1(
    p_tenant        text,
    p_queue         text,
    p_group         text,
    p_names         text[],
    p_scan_limit    int,
    p_budget        int,
    p_max_parts     int,
    p_lease_id      text,
    p_lease_seconds int,
    p_auto_ack      boolean,
    p_owner         text,
    p_sub_mode      text,
    p_sub_from      timestamptz,
    p_max_bytes     bigint)
RETURNS TABLE (o_kind text, o_pname text, o_pid uuid, o_verdict text, o_until timestamptz,
               o_drained boolean, o_off bigint, o_mid uuid, o_txid text, o_trace uuid,
               o_payload json, o_created timestamptz, o_sub text, o_retry int,
               o_delay int, o_window int)
LANGUAGE plpgsql
-- Generic plans: with the parameters known, every custom plan of the
-- message reads looks cheaper than the generic one (whose LIMIT is a
-- guess), so PL/pgSQL would plan them anew on every call (~85 us each).
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_q          queen.queues%ROWTYPE;
    v_now        timestamptz := clock_timestamp();
    v_from       timestamptz;
    v_seeded     boolean := true;
    v_names      text[];
    v_budget     int := p_budget;
    v_claimed    int := 0;
    v_lease_secs int;
    v_pid        uuid;
    v_last       bigint;
    v_lw         timestamptz;
    v_c          queen.consumers%ROWTYPE;
    v_m          record;
    v_count      int;
    v_end        bigint;
    v_seed       bigint;
    v_until      timestamptz;
    v_all        boolean;
    v_bytes      bigint := 0;    -- payload bytes served so far (plus a per-message allowance)
    v_size       bigint;
    v_full       boolean := false;
    v_acked      bigint[];
    v_nacked     int;
    v_aj         int;
    v_fast       boolean;
    v_envelope   int;  -- a message's size beyond its payload, transaction id and producerSub
    i            int;
BEGIN
    SELECT * INTO v_q FROM queen.queues q WHERE q.tenant = p_tenant AND q.name = p_queue;
    IF NOT FOUND THEN
        INSERT INTO queen.queues (id, tenant, name) VALUES (gen_random_uuid(), p_tenant, p_queue)
        ON CONFLICT (tenant, name) DO NOTHING;
        SELECT * INTO v_q FROM queen.queues q WHERE q.tenant = p_tenant AND q.name = p_queue;
        IF NOT FOUND THEN
            RETURN; -- deleted concurrently: nothing to serve
        END IF;
    END IF;

    SELECT md.subscription_from INTO v_from
    FROM queen.consumer_groups_metadata md
    WHERE md.queue_id = v_q.id AND md.consumer_group = p_group;
    IF NOT FOUND THEN
        v_seeded := false;
        INSERT INTO queen.consumer_groups_metadata (queue_id, consumer_group, subscription_from)
        VALUES (v_q.id, p_group, CASE p_sub_mode WHEN 'new' THEN v_now WHEN 'from' THEN p_sub_from ELSE NULL END)
        ON CONFLICT (queue_id, consumer_group) DO NOTHING;
        SELECT md.subscription_from INTO v_from
        FROM queen.consumer_groups_metadata md
        WHERE md.queue_id = v_q.id AND md.consumer_group = p_group;
    END IF;

    o_kind := 'meta'; o_pid := v_q.id; o_verdict := CASE WHEN v_seeded THEN 'seeded' ELSE 'fresh' END;
    o_delay := v_q.delayed_processing; o_window := v_q.window_buffer;
    RETURN NEXT;
    o_delay := NULL; o_window := NULL;

    v_lease_secs := CASE WHEN p_lease_seconds > 0 THEN p_lease_seconds
                         WHEN v_q.lease_time > 0 THEN v_q.lease_time ELSE queen.default_lease_seconds() END;

    IF p_names IS NULL THEN
        SELECT array_agg(s.name) INTO v_names
        FROM (SELECT p.name
              FROM queen.partitions p
              LEFT JOIN queen.consumers c ON c.partition_id = p.id AND c.consumer_group = p_group
              WHERE p.queue_id = v_q.id
                AND queen.partition_pending(p.last_offset, c.committed_offset)
                AND (c.lease_expires_at IS NULL OR c.lease_expires_at <= v_now)
              ORDER BY random()
              LIMIT p_scan_limit) s;
    ELSE
        v_names := p_names;
    END IF;

    -- Provision the group's missing consumer rows before taking any row
    -- lock, in partition id order (the order acks lock in): an insert that
    -- waits on another transaction's uncommitted insert of the same row
    -- then holds nothing that transaction could be waiting for. The cursor
    -- of a partition first seen by the group starts at the recorded
    -- subscription start.
    -- (The seed is computed in the select list, so only for missing rows.)
    -- A new cursor counts the dead-letter retry copies past its start that
    -- are for other groups as resolved (queen.dlq_copies_past, 80_dlq.sql).
    INSERT INTO queen.consumers (partition_id, consumer_group, committed_offset, batch_end, acked)
    SELECT s.id, p_group, s.seed, s.seed, queen.dlq_copies_past(s.id, p_group, s.seed)
    FROM (SELECT p.id,
                 CASE WHEN v_from IS NULL THEN 0 ELSE
                     COALESCE((SELECT max(m.off) FROM queen.messages m
                               WHERE m.partition_id = p.id AND m.created_at <= v_from), 0) END AS seed
          FROM queen.partitions p
          WHERE p.queue_id = v_q.id AND p.name = ANY (v_names)
            AND NOT EXISTS (SELECT 1 FROM queen.consumers c
                            WHERE c.partition_id = p.id AND c.consumer_group = p_group)
          ORDER BY p.id) s
    ON CONFLICT (partition_id, consumer_group) DO NOTHING;

    FOR i IN 1 .. COALESCE(array_length(v_names, 1), 0) LOOP
        o_kind := 'verdict'; o_pname := v_names[i]; o_pid := NULL; o_until := NULL; o_drained := NULL;
        o_off := NULL; o_mid := NULL; o_txid := NULL; o_trace := NULL; o_payload := NULL;
        o_created := NULL; o_sub := NULL; o_retry := NULL;

        IF v_budget <= 0 OR v_claimed >= p_max_parts THEN
            o_verdict := 'requeue'; RETURN NEXT; CONTINUE;
        END IF;

        -- The partition and its consumer row in one statement (the usual
        -- case); the steps below sort out a missing or locked row.
        SELECT p.id, p.last_offset, p.last_write_at, c.committed_offset, c.batch_end, c.lease_id,
               c.lease_expires_at, c.retry_count, c.acked
        INTO v_pid, v_last, v_lw, v_c.committed_offset, v_c.batch_end, v_c.lease_id,
             v_c.lease_expires_at, v_c.retry_count, v_c.acked
        FROM queen.partitions p
        JOIN queen.consumers c ON c.partition_id = p.id AND c.consumer_group = p_group
        WHERE p.queue_id = v_q.id AND p.name = v_names[i]
        FOR UPDATE OF c SKIP LOCKED;
        IF FOUND THEN
            o_pid := v_pid;
        ELSE
            SELECT p.id, p.last_offset, p.last_write_at INTO v_pid, v_last, v_lw
            FROM queen.partitions p WHERE p.queue_id = v_q.id AND p.name = v_names[i];
            IF NOT FOUND THEN
                o_verdict := 'empty'; RETURN NEXT; CONTINUE;
            END IF;
            o_pid := v_pid;
            SELECT c.* INTO v_c FROM queen.consumers c
            WHERE c.partition_id = v_pid AND c.consumer_group = p_group
            FOR UPDATE SKIP LOCKED;
        END IF;
        IF NOT FOUND THEN
            IF EXISTS (SELECT 1 FROM queen.consumers c WHERE c.partition_id = v_pid AND c.consumer_group = p_group) THEN
                o_verdict := 'busy'; RETURN NEXT; CONTINUE;
            END IF;
            -- First sight of this partition by the group: seed the cursor from
            -- the recorded subscription start.
            v_seed := 0;
            IF v_from IS NOT NULL THEN
                SELECT COALESCE(max(m.off), 0) INTO v_seed
                FROM queen.messages m WHERE m.partition_id = v_pid AND m.created_at <= v_from;
            END IF;
            INSERT INTO queen.consumers (partition_id, consumer_group, committed_offset, batch_end, acked)
            VALUES (v_pid, p_group, v_seed, v_seed, queen.dlq_copies_past(v_pid, p_group, v_seed))
            ON CONFLICT (partition_id, consumer_group) DO NOTHING;
            SELECT c.* INTO v_c FROM queen.consumers c
            WHERE c.partition_id = v_pid AND c.consumer_group = p_group
            FOR UPDATE SKIP LOCKED;
            IF NOT FOUND THEN
                o_verdict := 'busy'; RETURN NEXT; CONTINUE;
            END IF;
        END IF;

        IF v_c.lease_expires_at IS NOT NULL AND v_c.lease_expires_at > v_now THEN
            o_verdict := 'leased'; o_until := v_c.lease_expires_at; RETURN NEXT; CONTINUE;
        END IF;

        -- windowBuffer: the partition is served only once its newest message
        -- is at least windowBuffer seconds old.
        IF v_q.window_buffer > 0 AND v_last > v_c.committed_offset AND v_lw IS NOT NULL
           AND v_lw > v_now - make_interval(secs => v_q.window_buffer) THEN
            o_verdict := 'empty'; o_until := v_lw + make_interval(secs => v_q.window_buffer);
            RETURN NEXT; CONTINUE;
        END IF;

        -- The envelope: the queue, partition and group names at face value
        -- plus queen.row_envelope_bytes() for keys, ids and times (docs/api.md, "Input bounds").
        v_envelope := octet_length(p_queue) + 2 * octet_length(v_names[i]) + octet_length(p_group) + queen.row_envelope_bytes();
        v_count := 0; v_end := v_c.committed_offset; v_until := NULL; v_full := false;
        v_acked := v_c.acked; v_nacked := cardinality(v_acked); v_aj := 1; v_fast := false;
        IF v_nacked = 0 AND v_q.delayed_processing = 0 THEN
            -- The common case, set-based: nothing to skip and no deferral,
            -- so the served messages are the first v_budget of the range.
            -- One statement sizes them, a second returns them (a PL/pgSQL
            -- loop costs several us a message). When they would pass the
            -- byte cap, the loop below decides where to cut.
            SELECT count(*), max(w.off), COALESCE(sum(w.size), 0)
            INTO v_count, v_end, v_size
            FROM (SELECT m.off, CASE WHEN p_max_bytes > 0 THEN
                             COALESCE(octet_length(m.payload::text), 4) + octet_length(m.transaction_id)
                             + COALESCE(octet_length(m.producer_sub), 0) + v_envelope
                         ELSE 0 END AS size
                  FROM queen.messages m
                  WHERE m.partition_id = v_pid AND m.off > v_c.committed_offset AND m.off <= v_last
                  ORDER BY m.off
                  LIMIT v_budget) w;
            v_fast := p_max_bytes <= 0 OR v_bytes + v_size <= p_max_bytes OR (v_bytes = 0 AND v_count = 1);
            IF v_fast THEN
                v_bytes := v_bytes + v_size;
                IF v_count > 0 THEN
                    RETURN QUERY
                    SELECT 'msg'::text, v_names[i], v_pid, NULL::text, NULL::timestamptz, NULL::boolean,
                           m.off, m.id, m.transaction_id, m.trace_id, m.payload, m.created_at, m.producer_sub,
                           v_c.retry_count, NULL::int, NULL::int
                    FROM queen.messages m
                    WHERE m.partition_id = v_pid AND m.off > v_c.committed_offset AND m.off <= v_end
                    ORDER BY m.off;
                ELSE
                    v_end := v_c.committed_offset;
                END IF;
            ELSE
                v_count := 0; v_end := v_c.committed_offset;
            END IF;
        END IF;
        IF NOT v_fast THEN
            -- Messages acked past a gap (docs/api.md, "Acks") are skipped by a
            -- merge against the sorted consumers.acked: linear, whatever its size.
            FOR v_m IN
                SELECT m.off, m.id, m.transaction_id, m.trace_id, m.payload, m.created_at, m.producer_sub,
                       octet_length(m.transaction_id) + COALESCE(octet_length(m.producer_sub), 0) AS names
                FROM queen.messages m
                WHERE m.partition_id = v_pid AND m.off > v_c.committed_offset AND m.off <= v_last
                ORDER BY m.off
                LIMIT v_budget + v_nacked
            LOOP
                WHILE v_aj <= v_nacked AND v_acked[v_aj] < v_m.off LOOP
                    v_aj := v_aj + 1;
                END LOOP;
                CONTINUE WHEN v_aj <= v_nacked AND v_acked[v_aj] = v_m.off;
                IF v_q.delayed_processing > 0
                   AND v_m.created_at > v_now - make_interval(secs => v_q.delayed_processing) THEN
                    v_until := v_m.created_at + make_interval(secs => v_q.delayed_processing);
                    EXIT; -- later messages are younger still: keep partition order
                END IF;
                IF p_max_bytes > 0 THEN
                    v_size := COALESCE(octet_length(v_m.payload::text), 4) + v_m.names + v_envelope;
                    IF v_bytes + v_size > p_max_bytes AND v_bytes > 0 THEN
                        v_full := true;
                        EXIT;
                    END IF;
                    v_bytes := v_bytes + v_size;
                END IF;
                o_kind := 'msg'; o_verdict := NULL; o_until := NULL;
                o_off := v_m.off; o_mid := v_m.id; o_txid := v_m.transaction_id; o_trace := v_m.trace_id;
                o_payload := v_m.payload; o_created := v_m.created_at; o_sub := v_m.producer_sub;
                o_retry := v_c.retry_count;
                RETURN NEXT;
                v_count := v_count + 1; v_end := v_m.off;
                EXIT WHEN v_count >= v_budget;
            END LOOP;
        END IF;
        o_kind := 'verdict'; o_off := NULL; o_mid := NULL; o_txid := NULL; o_trace := NULL;
        o_payload := NULL; o_created := NULL; o_sub := NULL; o_retry := NULL;

        -- Every message up to the watermark was served or is acked already.
        v_all := v_count < v_budget AND v_until IS NULL AND NOT v_full;
        IF v_full AND v_count = 0 THEN
            -- the response is full before this partition's first message:
            -- not evaluated, and nothing after it either
            o_verdict := 'requeue'; RETURN NEXT;
            v_budget := 0;
            CONTINUE;
        END IF;
        IF v_count = 0 THEN
            IF v_all AND cardinality(v_c.acked) > 0 THEN
                -- Only remembered acks remain past the cursor: pass them.
                UPDATE queen.consumers c
                SET committed_offset = greatest(c.committed_offset,
                        (SELECT max(x) FROM unnest(c.acked) x WHERE x <= v_last)),
                    acked = ARRAY(SELECT x FROM unnest(c.acked) x WHERE x > v_last ORDER BY x),
                    updated_at = v_now
                WHERE c.partition_id = v_pid AND c.consumer_group = p_group;
            END IF;
            IF v_c.lease_id IS NOT NULL THEN
                -- an expired lease with nothing left to redeliver
                UPDATE queen.consumers c
                SET lease_id = NULL, lease_owner = NULL, lease_expires_at = NULL,
                    batch_end = c.committed_offset, updated_at = v_now
                WHERE c.partition_id = v_pid AND c.consumer_group = p_group;
            END IF;
            o_verdict := 'empty'; o_until := v_until; RETURN NEXT; CONTINUE;
        END IF;

        o_drained := v_end >= v_last OR v_all;
        IF p_auto_ack THEN
            IF v_all THEN
                -- remembered acks past the served end are passed too
                v_end := greatest(v_end, COALESCE((SELECT max(x) FROM unnest(v_c.acked) x WHERE x <= v_last), 0));
            END IF;
            UPDATE queen.consumers c
            SET committed_offset = v_end, batch_end = v_end, provisional = false,
                acked = ARRAY(SELECT x FROM unnest(c.acked) x WHERE x > v_end ORDER BY x),
                lease_id = NULL, lease_owner = NULL,
                lease_expires_at = NULL, retry_count = 0, updated_at = v_now
            WHERE c.partition_id = v_pid AND c.consumer_group = p_group;
            o_until := NULL;
        ELSE
            o_until := v_now + make_interval(secs => v_lease_secs);
            UPDATE queen.consumers c
            SET batch_end = v_end, lease_id = p_lease_id, lease_owner = p_owner, provisional = false,
                lease_expires_at = o_until, updated_at = v_now
            WHERE c.partition_id = v_pid AND c.consumer_group = p_group;
        END IF;
        o_verdict := 'took'; RETURN NEXT;
        v_budget := CASE WHEN v_full THEN 0 ELSE v_budget - v_count END;
        v_claimed := v_claimed + 1;
    END LOOP;
END;
$$;
