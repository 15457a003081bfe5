-- queen.push_v1 appends a batch in one round trip. Queues and partitions are
-- created on demand; the touched partitions are row-locked in id order (so
-- concurrent pushes cannot deadlock), which serialises offset allocation and
-- makes the (partition, transaction id) duplicate check race-free.
CREATE OR REPLACE FUNCTION queen.push_v1(
    p_tenant     text,
    p_queues     text[],
    p_partitions text[],
    p_txids      text[],
    p_ids        uuid[],
    p_traces     uuid[],
    p_payloads   text[],
    p_subs       text[])
RETURNS TABLE (idx int, status text, message_id uuid, partition_id uuid, transaction_id text)
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO queen.queues (id, tenant, name)
    SELECT gen_random_uuid(), p_tenant, s.qn
    FROM (SELECT DISTINCT u.qn FROM unnest(p_queues) AS u(qn)) s
    WHERE NOT EXISTS (SELECT 1 FROM queen.queues q WHERE q.tenant = p_tenant AND q.name = s.qn)
    ON CONFLICT (tenant, name) DO NOTHING;

    INSERT INTO queen.partitions (id, queue_id, name)
    SELECT gen_random_uuid(), q.id, s.pn
    FROM (SELECT DISTINCT t.qn, t.pn FROM unnest(p_queues, p_partitions) AS t(qn, pn)) s
    JOIN queen.queues q ON q.tenant = p_tenant AND q.name = s.qn
    WHERE NOT EXISTS (SELECT 1 FROM queen.partitions p WHERE p.queue_id = q.id AND p.name = s.pn)
    ON CONFLICT (queue_id, name) DO NOTHING;

    PERFORM 1
    FROM queen.partitions p
    JOIN queen.queues q ON q.id = p.queue_id
    JOIN (SELECT DISTINCT t.qn, t.pn FROM unnest(p_queues, p_partitions) AS t(qn, pn)) s
      ON q.tenant = p_tenant AND q.name = s.qn AND p.name = s.pn
    ORDER BY p.id
    FOR UPDATE OF p;

    -- A new statement: its snapshot sees every push that committed before
    -- we obtained the locks, so last_offset and the duplicate check are current.
    RETURN QUERY
    WITH items AS (
        SELECT i.ord::int AS ord, i.txid, i.mid, i.trace, i.payload, i.sub,
               p.id AS pid, p.last_offset
        FROM unnest(p_queues, p_partitions, p_txids, p_ids, p_traces, p_payloads, p_subs)
             WITH ORDINALITY AS i(qn, pn, txid, mid, trace, payload, sub, ord)
        JOIN queen.queues q ON q.tenant = p_tenant AND q.name = i.qn
        JOIN queen.partitions p ON p.queue_id = q.id AND p.name = i.pn
    ),
    ex AS (
        SELECT it.ord, m.id AS mid
        FROM items it
        JOIN queen.messages m ON m.partition_id = it.pid AND m.transaction_id = it.txid
    ),
    fresh AS (
        SELECT it.*, row_number() OVER (PARTITION BY it.pid, it.txid ORDER BY it.ord) AS rn
        FROM items it
        WHERE NOT EXISTS (SELECT 1 FROM ex WHERE ex.ord = it.ord)
    ),
    numbered AS (
        SELECT f.ord, f.pid, f.txid, f.mid, f.trace, f.payload, f.sub,
               f.last_offset + row_number() OVER (PARTITION BY f.pid ORDER BY f.ord) AS newoff
        FROM fresh f
        WHERE f.rn = 1
    ),
    ins AS (
        INSERT INTO queen.messages (partition_id, off, id, transaction_id, trace_id, payload, producer_sub, created_at)
        SELECT n.pid, n.newoff, n.mid, n.txid, n.trace, n.payload::json, n.sub, clock_timestamp()
        FROM numbered n
        ORDER BY n.pid, n.newoff
        RETURNING 1
    ),
    upd AS (
        UPDATE queen.partitions p
        SET last_offset = x.maxoff, last_write_at = clock_timestamp()
        FROM (SELECT n.pid, max(n.newoff) AS maxoff FROM numbered n GROUP BY n.pid) x
        WHERE p.id = x.pid
        RETURNING 1
    )
    SELECT a.ord::int - 1,
           CASE WHEN it.pid IS NULL THEN 'failed'
                WHEN ex.mid IS NOT NULL THEN 'duplicate'
                WHEN n.ord = a.ord THEN 'queued'
                ELSE 'duplicate' END,
           COALESCE(ex.mid, n.mid),
           it.pid,
           a.txid
    FROM unnest(p_txids) WITH ORDINALITY AS a(txid, ord)
    LEFT JOIN items it ON it.ord = a.ord
    LEFT JOIN ex ON ex.ord = a.ord
    LEFT JOIN numbered n ON n.pid = it.pid AND n.txid = it.txid
    ORDER BY a.ord;
END;
$$;
