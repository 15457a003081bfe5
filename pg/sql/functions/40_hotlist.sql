-- queen.hotlist_reseed_v1 enumerates a (queue, group)'s probably-pending
-- partitions with the same test as the SQL candidate scan
-- (queen.partition_pending, 00_predicates.sql), keyset-paginated in id order
-- so the broker walks a large set in bounded chunks. It deliberately
-- over-includes lease-held partitions: they are still pending, the ring must
-- hold them, and the claim core will answer 'leased'.
CREATE OR REPLACE FUNCTION queen.hotlist_reseed_v1(
    p_tenant text,
    p_queue  text,
    p_group  text,
    p_after  uuid,
    p_limit  int)
RETURNS TABLE (o_pid uuid, o_name text)
LANGUAGE sql STABLE AS $$
    SELECT p.id, p.name
    FROM queen.queues q
    JOIN queen.partitions p ON p.queue_id = q.id
    LEFT JOIN queen.consumers c ON c.partition_id = p.id AND c.consumer_group = p_group
    WHERE q.tenant = p_tenant AND q.name = p_queue
      AND (p_after IS NULL OR p.id > p_after)
      AND queen.partition_pending(p.last_offset, c.committed_offset)
    ORDER BY p.id
    LIMIT p_limit
$$;

-- queen.hotlist_reseed_v2 is v1 plus each partition's age since its last
-- write (o_age_ms, NULL before the first push), measured on the database's
-- clock so node clock skew does not enter it: an early reseed after lost
-- hints (docs/hotlist.md, "Early reseeds after lost hints") reports how long
-- a partition it found missing from the ring had been dark. Served by the
-- same indexes as v1: queues by (tenant, name), partitions_queue_id
-- (queue_id, id) for the keyset walk, consumers' primary key
-- (partition_id, consumer_group). v1 stays for nodes not yet upgraded.
CREATE OR REPLACE FUNCTION queen.hotlist_reseed_v2(
    p_tenant text,
    p_queue  text,
    p_group  text,
    p_after  uuid,
    p_limit  int)
RETURNS TABLE (o_pid uuid, o_name text, o_age_ms bigint)
LANGUAGE sql STABLE AS $$
    SELECT p.id, p.name,
           (extract(epoch FROM clock_timestamp() - p.last_write_at) * 1000)::bigint
    FROM queen.queues q
    JOIN queen.partitions p ON p.queue_id = q.id
    LEFT JOIN queen.consumers c ON c.partition_id = p.id AND c.consumer_group = p_group
    WHERE q.tenant = p_tenant AND q.name = p_queue
      AND (p_after IS NULL OR p.id > p_after)
      AND queen.partition_pending(p.last_offset, c.committed_offset)
    ORDER BY p.id
    LIMIT p_limit
$$;
