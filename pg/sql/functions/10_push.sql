-- Pushes and the lock order they follow (see docs/storage.md, "Lock order").
--
-- Creating a queue or partition and appending to it are separate steps:
-- queen.ensure_partitions_v1 creates what is missing in its own short
-- transaction (queues in name order, then partitions in (queue id, name)
-- order) and commits; queen.push_v4 then only locks rows that already exist,
-- in partition id order. A push therefore never waits on another push's
-- uncommitted insert while holding partition locks, which is what made
-- push_v2 deadlock (issue 9 item 3).
--
-- The lock is FOR NO KEY UPDATE, not FOR UPDATE: a pop or ack that seeds a
-- consumer row holds FOR KEY SHARE on its partition (the foreign key) until
-- it commits; FOR UPDATE would conflict with it.
DROP FUNCTION IF EXISTS queen.push_v1(text, text[], text[], text[], uuid[], uuid[], text[], text[]);
DROP FUNCTION IF EXISTS queen.push_v2(text, text[], text[], int[], text[], uuid[], uuid[], text[], text[]);

-- queen.ensure_partitions_v1 creates the missing queues (default options) and
-- partitions named by the pairs (p_queues[i], p_partitions[i]). Run it alone,
-- in autocommit: its inserts are the only locks it takes.
CREATE OR REPLACE FUNCTION queen.ensure_partitions_v1(
    p_tenant     text,
    p_queues     text[],
    p_partitions text[])
RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_n int;
BEGIN
    INSERT INTO queen.queues (id, tenant, name)
    SELECT gen_random_uuid(), p_tenant, s.qn
    FROM (SELECT DISTINCT u.qn FROM unnest(p_queues) AS u(qn)) s
    ORDER BY s.qn
    ON CONFLICT (tenant, name) DO NOTHING;

    -- A new statement: it sees the queues created just now or by a
    -- concurrent first push that committed while we waited on it.
    INSERT INTO queen.partitions (id, queue_id, name)
    SELECT gen_random_uuid(), q.id, s.pn
    FROM (SELECT DISTINCT t.qn, t.pn FROM unnest(p_queues, p_partitions) AS t(qn, pn)) s
    JOIN queen.queues q ON q.tenant = p_tenant AND q.name = s.qn
    ORDER BY q.id, s.pn
    ON CONFLICT (queue_id, name) DO NOTHING;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END;
$$;

-- queen.lock_partitions_v1 locks the existing partitions named by the pairs,
-- in partition id order, and returns them with their current watermark (a
-- locked row is read in its latest committed version). Missing pairs are
-- simply absent from the result.
CREATE OR REPLACE FUNCTION queen.lock_partitions_v1(
    p_tenant     text,
    p_queues     text[],
    p_partitions text[])
RETURNS TABLE (o_qn text, o_pn text, o_pid uuid, o_base bigint)
LANGUAGE sql AS $$
    SELECT s.qn, s.pn, p.id, p.last_offset
    FROM (SELECT DISTINCT t.qn, t.pn FROM unnest(p_queues, p_partitions) AS t(qn, pn)) s
    JOIN queen.queues q ON q.tenant = p_tenant AND q.name = s.qn
    JOIN queen.partitions p ON p.queue_id = q.id AND p.name = s.pn
    ORDER BY p.id
    FOR NO KEY UPDATE OF p
$$;

-- queen.lock_tx_consumers_v1 locks, in (partition, group) order, the
-- consumer rows a transaction request will touch: those holding one of
-- p_leases and those its ack operations name. A transaction takes these
-- before its partitions, the order a queue delete uses too.
CREATE OR REPLACE FUNCTION queen.lock_tx_consumers_v1(
    p_leases text[],
    p_pids   uuid[],
    p_groups text[])
RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_n int;
BEGIN
    PERFORM 1
    FROM queen.consumers c
    WHERE (c.partition_id, c.consumer_group) IN (
              SELECT x.partition_id, x.consumer_group
              FROM queen.consumers x WHERE x.lease_id = ANY(p_leases)
              UNION
              SELECT a.pid, COALESCE(NULLIF(a.grp, ''), '__QUEUE_MODE__')
              FROM unnest(p_pids, p_groups) AS a(pid, grp))
    ORDER BY c.partition_id, c.consumer_group
    FOR UPDATE OF c;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END;
$$;

-- queen.push_v4 appends a batch in one round trip. The caller removes
-- in-batch duplicates and numbers each item within its partition (p_seqs,
-- 1..n). It locks the touched partitions, which serialises offset
-- allocation: offsets increase in commit order. The duplicate check runs
-- under the locks; a duplicate takes no offset, so pushes leave no holes
-- (deletes and retention can, and readers tolerate them).
--
-- p_wait says, per item, whether its partition may be waited for. The
-- partitions of items with p_wait true (all of them when p_wait is NULL)
-- are locked first, in id order, waiting as usual; the others are then
-- locked SKIP LOCKED, and the items of a partition that another
-- transaction holds (another node's push flush) are not written: they come
-- back 'deferred', and the caller sends them again with p_wait true. So
-- flushes of different nodes that overlap write their disjoint parts side
-- by side instead of queueing behind each other's commits, and an item is
-- deferred at most once (docs/storage.md, "Skip-locked push flushes").
-- A transaction only ever waits while holding locks of lower ids than the
-- one it waits for: no deadlock.
--
-- All items of a partition are written or deferred together, so p_seqs
-- stays a dense numbering of what is written. When a queue or partition
-- does not exist (or a partition to wait for vanished under a concurrent
-- delete) nothing is written: its items come back 'missing', the others
-- 'deferred', and the caller creates the partitions with
-- queen.ensure_partitions_v1 and calls again.
CREATE OR REPLACE FUNCTION queen.push_v4(
    p_tenant     text,
    p_queues     text[],
    p_partitions text[],
    p_seqs       int[],
    p_txids      text[],
    p_ids        uuid[],
    p_traces     uuid[],
    p_payloads   text[],
    p_subs       text[],
    p_wait       boolean[])
RETURNS TABLE (o_idx int, o_status text, o_mid uuid, o_pid uuid)
LANGUAGE plpgsql AS $$
DECLARE
    v_want  int;
    v_must  int;
    v_rqns  text[];    -- resolved pairs: queue, partition, id, may wait
    v_rpns  text[];
    v_rpids uuid[];
    v_rmust boolean[];
    v_qns   text[];    -- locked pairs and their watermark
    v_pns   text[];
    v_pids  uuid[];
    v_bases bigint[];
    v_sqns  text[];
    v_spns  text[];
    v_spids uuid[];
    v_sbases bigint[];
    v_fast  boolean := false;
    -- The fast path below is a subtransaction. Only when this call is its
    -- transaction's first writer (an autocommit push or combined flush): a
    -- transaction request may push thousands of times in one transaction,
    -- and past 64 subtransactions PostgreSQL's snapshots, everyone's, have
    -- to look them up in pg_subtrans.
    v_first boolean := pg_current_xact_id_if_assigned() IS NULL;
BEGIN
    -- Names to ids, without locks, counting the distinct pairs asked for.
    SELECT array_agg(s.qn), array_agg(s.pn), array_agg(p.id), array_agg(s.must),
           (SELECT count(*) FROM (SELECT DISTINCT t.qn, t.pn FROM unnest(p_queues, p_partitions) AS t(qn, pn)) d)
    INTO v_rqns, v_rpns, v_rpids, v_rmust, v_want
    FROM (SELECT t.qn, t.pn, bool_or(COALESCE(t.w, true)) AS must
          FROM unnest(p_queues, p_partitions, p_wait) AS t(qn, pn, w)
          GROUP BY t.qn, t.pn) s
    JOIN queen.queues q ON q.tenant = p_tenant AND q.name = s.qn
    JOIN queen.partitions p ON p.queue_id = q.id AND p.name = s.pn;

    IF COALESCE(array_length(v_rpids, 1), 0) = v_want THEN
        v_must := (SELECT count(*) FROM unnest(v_rmust) m WHERE m);
        -- Partitions are named by these ids from here on, never looked up
        -- again: a later statement's snapshot may no longer see a queue that
        -- a concurrent delete detached meanwhile.
        IF v_must > 0 THEN
            SELECT array_agg(l.qn), array_agg(l.pn), array_agg(l.id), array_agg(l.base)
            INTO v_qns, v_pns, v_pids, v_bases
            FROM (SELECT r.qn, r.pn, p.id, p.last_offset AS base
                  FROM unnest(v_rqns, v_rpns, v_rpids, v_rmust) AS r(qn, pn, id, must)
                  JOIN queen.partitions p ON p.id = r.id
                  WHERE r.must
                  ORDER BY p.id
                  FOR NO KEY UPDATE OF p) l;
        END IF;
        IF COALESCE(array_length(v_pids, 1), 0) = v_must THEN
            IF v_must < v_want THEN
                SELECT array_agg(l.qn), array_agg(l.pn), array_agg(l.id), array_agg(l.base)
                INTO v_sqns, v_spns, v_spids, v_sbases
                FROM (SELECT r.qn, r.pn, p.id, p.last_offset AS base
                      FROM unnest(v_rqns, v_rpns, v_rpids, v_rmust) AS r(qn, pn, id, must)
                      JOIN queen.partitions p ON p.id = r.id
                      WHERE NOT r.must
                      ORDER BY p.id
                      FOR NO KEY UPDATE OF p SKIP LOCKED) l;
                v_qns := COALESCE(v_qns, '{}') || COALESCE(v_sqns, '{}');
                v_pns := COALESCE(v_pns, '{}') || COALESCE(v_spns, '{}');
                v_pids := COALESCE(v_pids, '{}') || COALESCE(v_spids, '{}');
                v_bases := COALESCE(v_bases, '{}') || COALESCE(v_sbases, '{}');
            END IF;
        ELSE
            v_rpids := v_pids; -- a partition to wait for was deleted: it is missing now
            v_rqns := v_qns; v_rpns := v_pns;
        END IF;
    END IF;

    IF COALESCE(array_length(v_rpids, 1), 0) < v_want THEN
        RETURN QUERY
        SELECT (i.ord - 1)::int,
               CASE WHEN r.qn IS NULL THEN 'missing' ELSE 'deferred' END,
               i.mid, NULL::uuid
        FROM unnest(p_queues, p_partitions, p_ids) WITH ORDINALITY AS i(qn, pn, mid, ord)
        LEFT JOIN unnest(v_rqns, v_rpns) AS r(qn, pn) ON r.qn = i.qn AND r.pn = i.pn
        ORDER BY i.ord;
        RETURN;
    END IF;
    IF v_pids IS NULL OR cardinality(v_pids) = 0 THEN
        -- every partition is held by another transaction
        RETURN QUERY
        SELECT (i.ord - 1)::int, 'deferred'::text, i.mid, NULL::uuid
        FROM unnest(p_ids) WITH ORDINALITY AS i(mid, ord)
        ORDER BY i.ord;
        RETURN;
    END IF;

    -- First the common case, no duplicate: the caller numbered each item
    -- within its partition (p_seqs), so its offset is base + seq, and the
    -- unique index on (partition, transaction id) is the duplicate check
    -- (its insert descends the index anyway; a probe before it was a second
    -- descent per message, about half of this statement). A duplicate
    -- raises unique_violation, which rolls back this block's
    -- subtransaction, and the probing statement below decides instead.
    IF v_first THEN BEGIN
        WITH items AS (
            SELECT i.qn, i.pn, i.seq, i.txid, i.mid, i.trace, i.payload, i.sub
            FROM unnest(p_queues, p_partitions, p_seqs, p_txids, p_ids, p_traces, p_payloads, p_subs)
                 AS i(qn, pn, seq, txid, mid, trace, payload, sub)
        ),
        parts AS (
            SELECT l.pid AS id, l.qn, l.pn, l.base
            FROM unnest(v_qns, v_pns, v_pids, v_bases) AS l(qn, pn, pid, base)
        ),
        placed AS (
            SELECT parts.id AS pid, parts.base + it.seq AS off, it.*
            FROM items it JOIN parts ON parts.qn = it.qn AND parts.pn = it.pn
        ),
        upd AS (
            UPDATE queen.partitions p
            SET last_offset = f.top, last_write_at = clock_timestamp()
            FROM (SELECT pl.pid, max(pl.off) AS top FROM placed pl GROUP BY pl.pid) f
            WHERE p.id = f.pid
            RETURNING 1
        ),
        ins AS (
            INSERT INTO queen.messages (partition_id, off, id, transaction_id, trace_id, payload, producer_sub, created_at)
            SELECT pl.pid, pl.off, pl.mid, pl.txid, pl.trace, pl.payload::json, pl.sub, clock_timestamp()
            FROM placed pl
            ORDER BY pl.pid, pl.off
            RETURNING 1
        )
        SELECT count(*) INTO v_want FROM ins;
        v_fast := true;
    EXCEPTION WHEN unique_violation THEN
        NULL; -- a duplicate (or a concurrent push of the same id): probe below
    END; END IF;
    IF v_fast THEN
        -- Answered from the inputs, after the block: rows returned inside
        -- it would stay returned had it rolled back.
        RETURN QUERY
        SELECT (i.ord - 1)::int, CASE WHEN l.pid IS NULL THEN 'deferred' ELSE 'queued' END, i.mid, l.pid
        FROM unnest(p_queues, p_partitions, p_ids) WITH ORDINALITY AS i(qn, pn, mid, ord)
        LEFT JOIN unnest(v_qns, v_pns, v_pids) AS l(qn, pn, pid) ON l.qn = i.qn AND l.pn = i.pn
        ORDER BY i.ord;
        RETURN;
    END IF;

    RETURN QUERY
    WITH items AS (
        SELECT i.ord::int AS ord, i.qn, i.pn, i.seq, i.txid, i.mid, i.trace, i.payload, i.sub
        FROM unnest(p_queues, p_partitions, p_seqs, p_txids, p_ids, p_traces, p_payloads, p_subs)
             WITH ORDINALITY AS i(qn, pn, seq, txid, mid, trace, payload, sub, ord)
    ),
    parts AS (
        SELECT l.pid AS id, l.qn, l.pn, l.base
        FROM unnest(v_qns, v_pns, v_pids, v_bases) AS l(qn, pn, pid, base)
    ),
    -- Duplicates by index probe (a LATERAL LIMIT 1 keeps the planner from a
    -- merge anti-join that reads the whole partition while its statistics
    -- are young). The partition locks make the probe race-free; the unique
    -- index remains the last word.
    checked AS (
        SELECT it.*, parts.id AS pid, parts.base, ex.id AS existing
        FROM items it
        JOIN parts ON parts.qn = it.qn AND parts.pn = it.pn
        LEFT JOIN LATERAL (
            SELECT m.id FROM queen.messages m
            WHERE m.partition_id = parts.id AND m.transaction_id = it.txid
            LIMIT 1) ex ON true
    ),
    -- Offsets are given to the new messages only, in request order, so a
    -- duplicate takes none: a duplicate that left a hole at the end of a
    -- partition would keep it looking pending (last_offset past every
    -- cursor) with nothing left to deliver.
    fresh AS (
        SELECT c.*, row_number() OVER (PARTITION BY c.pid ORDER BY c.seq) AS rn
        FROM checked c
        WHERE c.existing IS NULL
    ),
    upd AS (
        UPDATE queen.partitions p
        SET last_offset = parts.base + f.n, last_write_at = clock_timestamp()
        FROM parts
        JOIN (SELECT fr.pid, count(*) AS n FROM fresh fr GROUP BY fr.pid) f ON f.pid = parts.id
        WHERE p.id = parts.id
        RETURNING 1
    ),
    ins AS (
        INSERT INTO queen.messages (partition_id, off, id, transaction_id, trace_id, payload, producer_sub, created_at)
        SELECT f.pid, f.base + f.rn, f.mid, f.txid, f.trace, f.payload::json, f.sub, clock_timestamp()
        FROM fresh f
        ORDER BY f.pid, f.rn
        RETURNING 1
    )
    SELECT it.ord - 1,
           CASE WHEN c.ord IS NULL THEN 'deferred' WHEN c.existing IS NULL THEN 'queued' ELSE 'duplicate' END,
           COALESCE(c.existing, it.mid),
           c.pid
    FROM items it
    LEFT JOIN checked c ON c.ord = it.ord
    ORDER BY it.ord;
END;
$$;

-- queen.push_v3 is push_v4 waiting for every partition, for nodes of the
-- previous function set: a missing queue or partition is its single row
-- (o_idx -1, 'missing').
CREATE OR REPLACE FUNCTION queen.push_v3(
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
LANGUAGE sql AS $$
    WITH r AS MATERIALIZED (
        SELECT * FROM queen.push_v4(p_tenant, p_queues, p_partitions, p_seqs, p_txids, p_ids,
                                    p_traces, p_payloads, p_subs, NULL))
    SELECT r.o_idx, r.o_status, r.o_mid, r.o_pid FROM r
    WHERE NOT EXISTS (SELECT 1 FROM r x WHERE x.o_status = 'missing')
    UNION ALL
    SELECT -1, 'missing', NULL, NULL
    WHERE EXISTS (SELECT 1 FROM r x WHERE x.o_status = 'missing')
$$;
