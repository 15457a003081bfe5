-- queen.push_v2 appends a batch in one round trip. The caller removes
-- in-batch duplicates and numbers each item within its partition (p_seqs,
-- 1..n). Queues and partitions are created on demand; the touched partitions
-- are row-locked in id order (so concurrent pushes cannot deadlock), which
-- serialises offset allocation: offsets increase in commit order. The
-- duplicate check runs under those locks; a duplicate leaves a hole in the
-- offsets, which readers tolerate.
-- The lock is FOR NO KEY UPDATE, not FOR UPDATE: a pop that seeds a consumer
-- row holds FOR KEY SHARE on its partition (the foreign key) until it
-- commits, visiting partitions in random order; FOR UPDATE would conflict
-- with it and deadlock against a multi-partition push.
DROP FUNCTION IF EXISTS queen.push_v1(text, text[], text[], text[], uuid[], uuid[], text[], text[]);

CREATE OR REPLACE FUNCTION queen.push_v2(
    p_tenant     text,
    p_queues     text[],
    p_partitions text[],
    p_seqs       int[],
    p_txids      text[],
    p_ids        uuid[],
    p_traces     uuid[],
    p_payloads   text[],
    p_subs       text[])
RETURNS TABLE (o_idx int, o_status text, o_mid uuid, o_pid uuid)
LANGUAGE plpgsql AS $$
DECLARE
    v_want int;
    v_have int;
BEGIN
    SELECT count(*) INTO v_want
    FROM (SELECT DISTINCT t.qn, t.pn FROM unnest(p_queues, p_partitions) AS t(qn, pn)) s;

    PERFORM 1
    FROM queen.partitions p
    JOIN queen.queues q ON q.id = p.queue_id
    JOIN (SELECT DISTINCT t.qn, t.pn FROM unnest(p_queues, p_partitions) AS t(qn, pn)) s
      ON q.tenant = p_tenant AND q.name = s.qn AND p.name = s.pn
    ORDER BY p.id
    FOR NO KEY UPDATE OF p;
    GET DIAGNOSTICS v_have = ROW_COUNT;

    IF v_have < v_want THEN
        INSERT INTO queen.queues (id, tenant, name)
        SELECT gen_random_uuid(), p_tenant, s.qn
        FROM (SELECT DISTINCT u.qn FROM unnest(p_queues) AS u(qn)) s
        ORDER BY s.qn -- a fixed order, so two first pushes cannot deadlock
        ON CONFLICT (tenant, name) DO NOTHING;

        INSERT INTO queen.partitions (id, queue_id, name)
        SELECT gen_random_uuid(), q.id, s.pn
        FROM (SELECT DISTINCT t.qn, t.pn FROM unnest(p_queues, p_partitions) AS t(qn, pn)) s
        JOIN queen.queues q ON q.tenant = p_tenant AND q.name = s.qn
        ORDER BY q.id, s.pn
        ON CONFLICT (queue_id, name) DO NOTHING;

        PERFORM 1
        FROM queen.partitions p
        JOIN queen.queues q ON q.id = p.queue_id
        JOIN (SELECT DISTINCT t.qn, t.pn FROM unnest(p_queues, p_partitions) AS t(qn, pn)) s
          ON q.tenant = p_tenant AND q.name = s.qn AND p.name = s.pn
        ORDER BY p.id
        FOR NO KEY UPDATE OF p;
    END IF;

    -- A new statement: its snapshot sees every push that committed before
    -- we obtained the locks, so last_offset is current.
    RETURN QUERY
    WITH items AS (
        SELECT i.ord::int AS ord, i.qn, i.pn, i.seq, i.txid, i.mid, i.trace, i.payload, i.sub
        FROM unnest(p_queues, p_partitions, p_seqs, p_txids, p_ids, p_traces, p_payloads, p_subs)
             WITH ORDINALITY AS i(qn, pn, seq, txid, mid, trace, payload, sub, ord)
    ),
    parts AS (
        SELECT p.id, s.qn, s.pn, p.last_offset AS base, s.n
        FROM (SELECT it.qn, it.pn, max(it.seq) AS n FROM items it GROUP BY it.qn, it.pn) s
        JOIN queen.queues q ON q.tenant = p_tenant AND q.name = s.qn
        JOIN queen.partitions p ON p.queue_id = q.id AND p.name = s.pn
    ),
    -- Duplicates by index probe (a LATERAL LIMIT 1 keeps the planner from a
    -- merge anti-join that reads the whole partition while its statistics
    -- are young). The partition locks make the probe race-free; the unique
    -- index remains the last word.
    checked AS (
        SELECT it.*, parts.id AS pid, parts.base, ex.id AS existing
        FROM items it
        LEFT JOIN parts ON parts.qn = it.qn AND parts.pn = it.pn
        LEFT JOIN LATERAL (
            SELECT m.id FROM queen.messages m
            WHERE m.partition_id = parts.id AND m.transaction_id = it.txid
            LIMIT 1) ex ON true
    ),
    upd AS (
        UPDATE queen.partitions p
        SET last_offset = parts.base + parts.n, last_write_at = clock_timestamp()
        FROM parts
        WHERE p.id = parts.id
        RETURNING 1
    ),
    ins AS (
        INSERT INTO queen.messages (partition_id, off, id, transaction_id, trace_id, payload, producer_sub, created_at)
        SELECT c.pid, c.base + c.seq, c.mid, c.txid, c.trace, c.payload::json, c.sub, clock_timestamp()
        FROM checked c
        WHERE c.pid IS NOT NULL AND c.existing IS NULL
        ORDER BY c.pid, c.seq
        RETURNING 1
    )
    SELECT c.ord - 1,
           CASE WHEN c.pid IS NULL THEN 'failed'
                WHEN c.existing IS NULL THEN 'queued'
                ELSE 'duplicate' END,
           COALESCE(c.existing, c.mid),
           c.pid
    FROM checked c
    ORDER BY c.ord;
END;
$$;
