-- queen.pop_v3 is queen.pop_v2 (21_pop_v2.sql: the same statements, paths,
-- verdicts and writes) answering one row whose columns each mean one thing,
-- instead of pop_v2's rows of three kinds ('meta', 'verdict', 'msg') over 16
-- nullable columns:
--   o_queue_id   the queue's id; NULL only when the queue was deleted while
--                the call created it (then nothing else is set and the
--                arrays are empty);
--   o_seeded     the group marker existed before the call (false: this call
--                wrote it);
--   o_delay, o_window  the queue's delayedProcessing and windowBuffer;
-- one element per candidate, in evaluation order:
--   o_names      the candidate's name;
--   o_pids       its partition id (NULL when it does not exist, or when it
--                was requeued before being looked up);
--   o_verdicts   took, empty, leased, busy or requeue (protocol.Verdict);
--   o_until      took: the lease's expiry (NULL with autoAck); leased: the
--                foreign lease's expiry; empty: when deferred data becomes
--                visible (NULL if unknown); NULL otherwise;
--   o_drained    took, and the served end reached the watermark read at
--                claim time (false otherwise);
--   o_retries    took: the retry count of the served messages (0 otherwise);
--   o_counts     how many of the messages below are this candidate's (0
--                unless took);
-- one element per served message, grouped by candidate in the order above
-- (o_counts says where each candidate's run ends), in offset order:
--   o_offs, o_ids, o_txids, o_traces, o_payloads, o_created, o_subs.
-- The arrays are built in memory as pop_v2 built its rows (the fast path
-- appends the arrays its one read aggregated). pop_v2 stays for nodes of
-- the previous release during a rolling upgrade.
CREATE OR REPLACE FUNCTION queen.pop_v3(
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
    p_max_bytes     bigint,
    p_unprov        text[],
    OUT o_queue_id  uuid,
    OUT o_seeded    boolean,
    OUT o_delay     int,
    OUT o_window    int,
    OUT o_names     text[],
    OUT o_pids      uuid[],
    OUT o_verdicts  text[],
    OUT o_until     timestamptz[],
    OUT o_drained   boolean[],
    OUT o_retries   int[],
    OUT o_counts    int[],
    OUT o_offs      bigint[],
    OUT o_ids       uuid[],
    OUT o_txids     text[],
    OUT o_traces    uuid[],
    OUT o_payloads  json[],
    OUT o_created   timestamptz[],
    OUT o_subs      text[])
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
    v_unprov     text[];
    v_read       int;
    a_off        bigint[];
    a_id         uuid[];
    a_txid       text[];
    a_trace      uuid[];
    a_payload    json[];
    a_created    timestamptz[];
    a_sub        text[];
    i            int;
    -- the current candidate's verdict
    r_pid        uuid;
    r_verdict    text;
    r_until      timestamptz;
    r_drained    boolean;
    v_marked     boolean := false; -- the group's gate is held and its marker exists
BEGIN
    o_names := '{}'; o_pids := '{}'; o_verdicts := '{}'; o_until := '{}'; o_drained := '{}';
    o_retries := '{}'; o_counts := '{}'; o_offs := '{}'; o_ids := '{}'; o_txids := '{}';
    o_traces := '{}'; o_payloads := '{}'; o_created := '{}'; o_subs := '{}';
    SELECT * INTO v_q FROM queen.queues q WHERE q.tenant = p_tenant AND q.name = p_queue;
    IF NOT FOUND THEN
        -- The gate before the queue row too, for the reason given below for
        -- the marker: an uncommitted queue row held while waiting for the
        -- gate could close a cycle with a delete and a merged flush whose
        -- claim of the same queue name waits on that row.
        IF p_unprov IS NULL OR cardinality(p_unprov) > 0 THEN
            PERFORM pg_advisory_xact_lock_shared(queen.group_gate_v2(p_tenant, p_group));
        END IF;
        INSERT INTO queen.queues (id, tenant, name) VALUES (gen_random_uuid(), p_tenant, p_queue)
        ON CONFLICT (tenant, name) DO NOTHING;
        SELECT * INTO v_q FROM queen.queues q WHERE q.tenant = p_tenant AND q.name = p_queue;
        IF NOT FOUND THEN
            RETURN; -- deleted concurrently: nothing to serve (o_queue_id NULL)
        END IF;
    END IF;

    SELECT md.subscription_from INTO v_from
    FROM queen.consumer_groups_metadata md
    WHERE md.queue_id = v_q.id AND md.consumer_group = p_group;
    IF NOT FOUND THEN
        v_seeded := false;
        -- A claim that may make rows takes the group's gate before it
        -- makes the marker, as a delete takes the gate before the markers:
        -- holding an uncommitted marker while waiting for the gate could
        -- close a cycle with a delete and a merged flush waiting on it.
        IF p_unprov IS NULL OR cardinality(p_unprov) > 0 THEN
            PERFORM pg_advisory_xact_lock_shared(queen.group_gate_v2(p_tenant, p_group));
        END IF;
        INSERT INTO queen.consumer_groups_metadata (queue_id, consumer_group, subscription_from)
        VALUES (v_q.id, p_group, CASE p_sub_mode WHEN 'new' THEN v_now WHEN 'from' THEN p_sub_from ELSE NULL END)
        ON CONFLICT (queue_id, consumer_group) DO NOTHING;
        SELECT md.subscription_from INTO v_from
        FROM queen.consumer_groups_metadata md
        WHERE md.queue_id = v_q.id AND md.consumer_group = p_group;
    END IF;

    o_queue_id := v_q.id; o_seeded := v_seeded;
    o_delay := v_q.delayed_processing; o_window := v_q.window_buffer;

    v_lease_secs := CASE WHEN p_lease_seconds > 0 THEN p_lease_seconds
                         WHEN v_q.lease_time > 0 THEN v_q.lease_time ELSE queen.default_lease_seconds() END;

    IF p_names IS NULL THEN
        SELECT array_agg(s.name), COALESCE(array_agg(s.name) FILTER (WHERE s.missing), '{}')
        INTO v_names, v_unprov
        FROM (SELECT p.name, c.partition_id IS NULL AS missing
              FROM queen.partitions p
              LEFT JOIN queen.consumers c ON c.partition_id = p.id AND c.consumer_group = p_group
              WHERE p.queue_id = v_q.id
                AND queen.partition_pending(p.last_offset, c.committed_offset)
                AND (c.lease_expires_at IS NULL OR c.lease_expires_at <= v_now)
              ORDER BY random()
              LIMIT p_scan_limit) s;
    ELSE
        v_names := p_names;
        v_unprov := COALESCE(p_unprov, p_names);
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
    -- Skipped when no candidate can lack its row (p_unprov): even with every
    -- row present, the statement costs more than the rest of the claim.
    IF cardinality(v_unprov) > 0 AND EXISTS (
            SELECT 1 FROM queen.partitions p
            WHERE p.queue_id = v_q.id AND p.name = ANY (v_unprov)
              AND NOT EXISTS (SELECT 1 FROM queen.consumers c
                              WHERE c.partition_id = p.id AND c.consumer_group = p_group)) THEN
        -- Hold the group's gate (queen.group_gate_v2, shared) while its rows
        -- are made: a group delete takes it exclusively before it locks the
        -- markers and deletes the rows, so it either waits for this claim and
        -- then deletes the rows made here, or ends first, and the marker is
        -- made again below, as the first pop after a delete makes it. With
        -- the marker read unlocked above, a delete could remove the marker
        -- and the rows while these were being made, and they would outlive
        -- their group. (Only when a row is missing: a claim whose rows all
        -- exist, such as one of a restarted node, takes no lock.) The marker
        -- is held too, after the gate: a node of function set 12 or older
        -- deletes a group by locking its markers only, without the gate.
        PERFORM pg_advisory_xact_lock_shared(queen.group_gate_v2(p_tenant, p_group));
        FOR v_try IN 1 .. 3 LOOP
            SELECT md.subscription_from INTO v_from
            FROM queen.consumer_groups_metadata md
            WHERE md.queue_id = v_q.id AND md.consumer_group = p_group
            FOR SHARE;
            IF FOUND THEN
                v_marked := true;
                EXIT;
            END IF;
            v_seeded := false;
            INSERT INTO queen.consumer_groups_metadata (queue_id, consumer_group, subscription_from)
            VALUES (v_q.id, p_group, CASE p_sub_mode WHEN 'new' THEN v_now WHEN 'from' THEN p_sub_from ELSE NULL END)
            ON CONFLICT (queue_id, consumer_group) DO NOTHING;
        END LOOP;
        IF NOT v_marked THEN
            -- not found after each insert: the caller retries the claim
            RAISE EXCEPTION 'consumer group % of queue % deleted during a claim', p_group, p_queue
                USING ERRCODE = '40001';
        END IF;
        o_seeded := v_seeded;
        INSERT INTO queen.consumers (partition_id, consumer_group, committed_offset, batch_end, acked)
        SELECT s.id, p_group, s.seed, s.seed, queen.dlq_copies_past(s.id, p_group, s.seed)
        FROM (SELECT p.id,
                     CASE WHEN v_from IS NULL THEN 0 ELSE
                         COALESCE((SELECT max(m.off) FROM queen.messages m
                                   WHERE m.partition_id = p.id AND m.created_at <= v_from), 0) END AS seed
              FROM queen.partitions p
              WHERE p.queue_id = v_q.id AND p.name = ANY (v_unprov)
                AND NOT EXISTS (SELECT 1 FROM queen.consumers c
                                WHERE c.partition_id = p.id AND c.consumer_group = p_group)
              ORDER BY p.id) s
        ON CONFLICT (partition_id, consumer_group) DO NOTHING;
    END IF;

    FOR i IN 1 .. COALESCE(array_length(v_names, 1), 0) LOOP
        r_pid := NULL; r_verdict := NULL; r_until := NULL; r_drained := false; v_count := 0;
        -- Runs once: EXIT cand ends the candidate with its verdict in r_*,
        -- recorded after the block.
        <<cand>>
        LOOP
            IF v_budget <= 0 OR v_claimed >= p_max_parts THEN
                r_verdict := 'requeue'; EXIT cand;
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
                r_pid := v_pid;
            ELSE
                SELECT p.id, p.last_offset, p.last_write_at INTO v_pid, v_last, v_lw
                FROM queen.partitions p WHERE p.queue_id = v_q.id AND p.name = v_names[i];
                IF NOT FOUND THEN
                    r_verdict := 'empty'; EXIT cand;
                END IF;
                r_pid := v_pid;
                SELECT c.* INTO v_c FROM queen.consumers c
                WHERE c.partition_id = v_pid AND c.consumer_group = p_group
                FOR UPDATE SKIP LOCKED;
            END IF;
            IF NOT FOUND THEN
                IF EXISTS (SELECT 1 FROM queen.consumers c WHERE c.partition_id = v_pid AND c.consumer_group = p_group) THEN
                    r_verdict := 'busy'; EXIT cand;
                END IF;
                -- First sight of this partition by the group: seed the cursor from
                -- the recorded subscription start. The row is made under the
                -- group's gate, as above; here the claim may already hold
                -- other candidates' rows, which a group delete locks after
                -- the gate, so it does not wait: a gate held or wanted by a
                -- delete or a subscription update, or a marker gone or
                -- locked (an older node's delete), makes the candidate busy.
                IF NOT v_marked THEN
                    IF NOT pg_try_advisory_xact_lock_shared(queen.group_gate_v2(p_tenant, p_group)) THEN
                        r_verdict := 'busy'; EXIT cand;
                    END IF;
                    SELECT md.subscription_from INTO v_from
                    FROM queen.consumer_groups_metadata md
                    WHERE md.queue_id = v_q.id AND md.consumer_group = p_group
                    FOR SHARE SKIP LOCKED;
                    IF NOT FOUND THEN
                        r_verdict := 'busy'; EXIT cand;
                    END IF;
                    v_marked := true;
                END IF;
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
                    r_verdict := 'busy'; EXIT cand;
                END IF;
            END IF;

            IF v_c.lease_expires_at IS NOT NULL AND v_c.lease_expires_at > v_now THEN
                r_verdict := 'leased'; r_until := v_c.lease_expires_at; EXIT cand;
            END IF;

            -- windowBuffer: the partition is served only once its newest message
            -- is at least windowBuffer seconds old.
            IF v_q.window_buffer > 0 AND v_last > v_c.committed_offset AND v_lw IS NOT NULL
               AND v_lw > v_now - make_interval(secs => v_q.window_buffer) THEN
                r_verdict := 'empty'; r_until := v_lw + make_interval(secs => v_q.window_buffer);
                EXIT cand;
            END IF;

            -- The envelope: the queue, partition and group names at face value
            -- plus queen.row_envelope_bytes() for keys, ids and times (docs/api.md, "Input bounds").
            v_envelope := octet_length(p_queue) + 2 * octet_length(v_names[i]) + octet_length(p_group) + queen.row_envelope_bytes();
            v_count := 0; v_end := v_c.committed_offset; v_until := NULL; v_full := false;
            v_acked := v_c.acked; v_nacked := cardinality(v_acked); v_aj := 1; v_fast := false;
            IF v_nacked = 0 AND v_q.delayed_processing = 0 THEN
                -- The common case, set-based: nothing to skip and no deferral,
                -- so the served messages are a prefix of the first v_budget of
                -- the range: those whose running byte sum stays within the cap
                -- (the first one always, when nothing was served yet). One read
                -- keeps them in arrays, which are returned from memory; count,
                -- end and bytes come from the same statement. (The aggregates
                -- take the rows in the window's order, which is offset order:
                -- an ORDER BY in each would sort seven times.)
                SELECT count(*) FILTER (WHERE w.keep), count(*), max(w.off) FILTER (WHERE w.keep),
                       COALESCE(sum(w.size) FILTER (WHERE w.keep), 0),
                       array_agg(w.off) FILTER (WHERE w.keep),
                       array_agg(w.id) FILTER (WHERE w.keep),
                       array_agg(w.transaction_id) FILTER (WHERE w.keep),
                       array_agg(w.trace_id) FILTER (WHERE w.keep),
                       array_agg(w.payload) FILTER (WHERE w.keep),
                       array_agg(w.created_at) FILTER (WHERE w.keep),
                       array_agg(w.producer_sub) FILTER (WHERE w.keep)
                INTO v_count, v_read, v_end, v_size, a_off, a_id, a_txid, a_trace, a_payload, a_created, a_sub
                FROM (SELECT r.*, (p_max_bytes <= 0 OR v_bytes + r.run <= p_max_bytes
                                   OR (v_bytes = 0 AND r.rn = 1)) AS keep
                      FROM (SELECT l.*, sum(l.size) OVER (ORDER BY l.off ROWS UNBOUNDED PRECEDING) AS run,
                                   row_number() OVER (ORDER BY l.off) AS rn
                            FROM (SELECT m.off, m.id, m.transaction_id, m.trace_id, m.payload, m.created_at,
                                         m.producer_sub,
                                         CASE WHEN p_max_bytes > 0 THEN
                                             COALESCE(octet_length(m.payload::text), 4) + octet_length(m.transaction_id)
                                             + COALESCE(octet_length(m.producer_sub), 0) + v_envelope
                                         ELSE 0 END AS size
                                  FROM queen.messages m
                                  WHERE m.partition_id = v_pid AND m.off > v_c.committed_offset AND m.off <= v_last
                                  ORDER BY m.off
                                  LIMIT v_budget) l) r) w;
                v_fast := true;
                v_full := v_count < v_read;
                v_bytes := v_bytes + v_size;
                IF v_count > 0 THEN
                    o_offs := o_offs || a_off; o_ids := o_ids || a_id; o_txids := o_txids || a_txid;
                    o_traces := o_traces || a_trace; o_payloads := o_payloads || a_payload;
                    o_created := o_created || a_created; o_subs := o_subs || a_sub;
                ELSE
                    v_end := v_c.committed_offset;
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
                    o_offs := o_offs || v_m.off; o_ids := o_ids || v_m.id;
                    o_txids := o_txids || v_m.transaction_id; o_traces := o_traces || v_m.trace_id;
                    o_payloads := o_payloads || v_m.payload; o_created := o_created || v_m.created_at;
                    o_subs := o_subs || v_m.producer_sub;
                    v_count := v_count + 1; v_end := v_m.off;
                    EXIT WHEN v_count >= v_budget;
                END LOOP;
            END IF;

            -- Every message up to the watermark was served or is acked already.
            v_all := v_count < v_budget AND v_until IS NULL AND NOT v_full;
            IF v_full AND v_count = 0 THEN
                -- the response is full before this partition's first message:
                -- not evaluated, and nothing after it either
                r_verdict := 'requeue';
                v_budget := 0;
                EXIT cand;
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
                r_verdict := 'empty'; r_until := v_until; EXIT cand;
            END IF;

            r_drained := v_end >= v_last OR v_all;
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
                r_until := NULL;
            ELSE
                r_until := v_now + make_interval(secs => v_lease_secs);
                UPDATE queen.consumers c
                SET batch_end = v_end, lease_id = p_lease_id, lease_owner = p_owner, provisional = false,
                    lease_expires_at = r_until, updated_at = v_now
                WHERE c.partition_id = v_pid AND c.consumer_group = p_group;
            END IF;
            r_verdict := 'took';
            v_budget := CASE WHEN v_full THEN 0 ELSE v_budget - v_count END;
            v_claimed := v_claimed + 1;
            EXIT cand;
        END LOOP;
        o_names := o_names || v_names[i]; o_pids := o_pids || r_pid; o_verdicts := o_verdicts || r_verdict;
        o_until := o_until || r_until; o_drained := o_drained || r_drained;
        o_retries := o_retries || CASE WHEN r_verdict = 'took' THEN v_c.retry_count ELSE 0 END;
        o_counts := o_counts || CASE WHEN r_verdict = 'took' THEN v_count ELSE 0 END;
    END LOOP;
END;
$$;
