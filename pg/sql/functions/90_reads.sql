-- Reads bounded in bytes (docs/api.md, "Read answers"). Each walks its rows
-- in answer order, adds up what each row will cost in the JSON answer, and
-- stops at p_max_bytes: the node never receives more than the budget (or a
-- page's first row alone, when that is larger), and PostgreSQL detoasts no
-- large value past it (a plain query with a running sum would size every
-- row up to the row limit). Strings count as their JSON text (to_json:
-- quotes and escapes included), JSON values as their stored text, plus a
-- fixed allowance per row for its keys, ids and times. plpgsql: the FOR
-- loop's cursor fetches rows as it goes and keeps their large values
-- toasted until they are used, and the body is checked only when run, so
-- the file loads before the migrations it reads (as 80_dlq.sql).

-- queen.stream_state_read_v1 returns the state rows of (query, partition)
-- that pass the filters, in key order, all or none: past p_max_rows rows it
-- returns one row with o_refused 'rows', past p_max_bytes one row with
-- o_refused 'bytes' (a stream client cannot page, so a partial state
-- would be taken for the whole). The first pass sizes the rows without
-- returning any, the second returns them; both see the calling statement's
-- snapshot (STABLE), so they read the same rows.
CREATE OR REPLACE FUNCTION queen.stream_state_read_v1(p_query uuid, p_partition uuid, p_prefix text,
    p_ripe bigint, p_keys text[], p_max_rows integer, p_max_bytes bigint)
RETURNS TABLE (o_key text, o_value text, o_refused text)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    r record;
    n integer := 0;
    total bigint := 0;
BEGIN
    -- The primary key (query_id, partition_id, key) serves the scan; with a
    -- prefix its key >= bound starts the range at the prefix.
    FOR r IN SELECT s.key, s.value FROM queen.stream_state s
        WHERE s.query_id = p_query AND s.partition_id = p_partition
          AND (p_prefix IS NULL OR (s.key >= (p_prefix COLLATE "C") AND starts_with(s.key, p_prefix)))
          AND (cardinality(p_keys) = 0 OR s.key = ANY (p_keys))
          AND (p_ripe IS NULL OR s.window_end <= p_ripe)
        ORDER BY s.key LIMIT p_max_rows + 1
    LOOP
        n := n + 1;
        IF n > p_max_rows THEN
            o_key := ''; o_refused := 'rows';
            RETURN NEXT;
            RETURN;
        END IF;
        -- {"key":K,"value":V},
        total := total + 20 + octet_length(to_json(r.key)::text) + octet_length(r.value::text);
        IF total > p_max_bytes THEN
            o_key := ''; o_refused := 'bytes';
            RETURN NEXT;
            RETURN;
        END IF;
    END LOOP;
    RETURN QUERY SELECT s.key, s.value::text, NULL::text FROM queen.stream_state s
        WHERE s.query_id = p_query AND s.partition_id = p_partition
          AND (p_prefix IS NULL OR (s.key >= (p_prefix COLLATE "C") AND starts_with(s.key, p_prefix)))
          AND (cardinality(p_keys) = 0 OR s.key = ANY (p_keys))
          AND (p_ripe IS NULL OR s.window_end <= p_ripe)
        ORDER BY s.key LIMIT p_max_rows;
END;
$$;

-- queen.dlq_list_v1 returns a page of the tenant's dead letters (the
-- filters of GET /api/v1/dlq; '' and NULL match all), newest first, at most
-- p_limit from p_offset, and about p_max_bytes of them: the first row always
-- comes (it was accepted under the request body limit), the ones after it
-- while the total stays within p_max_bytes. When rows remain, one more row
-- says so: o_more true, no payload, the other columns those of the row
-- before it (to be ignored).
CREATE OR REPLACE FUNCTION queen.dlq_list_v1(p_tenant text, p_queue text, p_group text, p_partition text,
    p_from timestamptz, p_to timestamptz, p_limit integer, p_offset integer, p_max_bytes bigint)
RETURNS TABLE (o_message_id text, o_txid text, o_partition_id text, o_queue text, o_partition text,
    o_group text, o_error text, o_retry_count integer, o_payload text, o_producer_sub text,
    o_created_at timestamptz, o_failed_at timestamptz, o_superseded boolean, o_more boolean)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    r record;
    n integer := 0;
    total bigint := 0;
    size bigint;
BEGIN
    FOR r IN SELECT d.message_id, d.transaction_id, d.partition_id, q.name AS qname, p.name AS pname,
            d.consumer_group, d.error_message, d.retry_count, d.payload, d.producer_sub, d.created_at,
            d.failed_at, d.superseded
        FROM queen.dead_letters d
        JOIN queen.partitions p ON p.id = d.partition_id
        JOIN queen.queues q ON q.id = p.queue_id
        WHERE q.tenant = p_tenant AND (p_queue = '' OR q.name = p_queue)
          AND (p_group = '' OR d.consumer_group = p_group) AND (p_partition = '' OR p.name = p_partition)
          AND (p_from IS NULL OR d.failed_at >= p_from) AND (p_to IS NULL OR d.failed_at <= p_to)
        ORDER BY d.failed_at DESC, d.seq DESC LIMIT p_limit OFFSET p_offset
    LOOP
        o_payload := r.payload::text; -- detoasted once, for its size and the answer
        -- queen.row_envelope_bytes(): keys, two ids, two times, retry count, superseded.
        size := queen.row_envelope_bytes() + octet_length(to_json(r.transaction_id)::text) + octet_length(to_json(r.qname)::text)
            + octet_length(to_json(r.pname)::text) + octet_length(to_json(r.consumer_group)::text)
            + octet_length(to_json(r.error_message)::text)
            + COALESCE(octet_length(to_json(r.producer_sub)::text), 4)
            + COALESCE(octet_length(o_payload), 4);
        IF n > 0 AND total + size > p_max_bytes THEN
            o_payload := NULL; o_more := true;
            RETURN NEXT;
            RETURN;
        END IF;
        n := n + 1;
        total := total + size;
        o_message_id := r.message_id::text; o_txid := r.transaction_id; o_partition_id := r.partition_id::text;
        o_queue := r.qname; o_partition := r.pname; o_group := r.consumer_group; o_error := r.error_message;
        o_retry_count := r.retry_count; o_producer_sub := r.producer_sub;
        o_created_at := r.created_at; o_failed_at := r.failed_at; o_superseded := r.superseded;
        o_more := false;
        RETURN NEXT;
    END LOOP;
END;
$$;

-- queen.traces_by_name_v1 returns a page of the tenant's traces carrying
-- p_name (trace_names_by_name), oldest first, each with its message's
-- queue, partition and payload (NULL once retention deleted the message):
-- at most p_limit from p_offset and about p_max_bytes, with the first-row
-- rule and the o_more marker of queen.dlq_list_v1.
CREATE OR REPLACE FUNCTION queen.traces_by_name_v1(p_tenant text, p_name text, p_limit integer,
    p_offset integer, p_max_bytes bigint)
RETURNS TABLE (o_id text, o_txid text, o_pid text, o_event text, o_group text, o_worker text, o_data text,
    o_created_at timestamptz, o_names text[], o_queue text, o_partition text, o_payload text, o_more boolean)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    r record;
    n integer := 0;
    total bigint := 0;
    size bigint;
BEGIN
    FOR r IN
        SELECT t.id, t.transaction_id, t.partition_id, t.event_type, t.consumer_group, t.worker_id, t.data,
            t.created_at, x.names, q.name AS qname, p.name AS pname, m.payload
        FROM queen.trace_names tn
        JOIN queen.traces t ON t.id = tn.trace_id
        JOIN queen.partitions p ON p.id = t.partition_id
        JOIN queen.queues q ON q.id = p.queue_id
        LEFT JOIN queen.messages m ON m.partition_id = t.partition_id AND m.transaction_id = t.transaction_id
        CROSS JOIN LATERAL (SELECT COALESCE(array_agg(n2.name ORDER BY n2.name), '{}') AS names
            FROM queen.trace_names n2 WHERE n2.trace_id = t.id) x
        WHERE tn.tenant = p_tenant AND tn.name = p_name
        ORDER BY tn.created_at, tn.trace_id LIMIT p_limit OFFSET p_offset
    LOOP
        o_data := r.data::text; -- each detoasted once, for its size and the answer
        o_payload := r.payload::text;
        -- queen.row_envelope_bytes(): keys, two ids and the time.
        size := queen.row_envelope_bytes() + octet_length(to_json(r.transaction_id)::text) + octet_length(to_json(r.event_type)::text)
            + octet_length(to_json(r.consumer_group)::text) + octet_length(to_json(r.worker_id)::text)
            + octet_length(o_data) + octet_length(to_json(r.names)::text)
            + octet_length(to_json(r.qname)::text) + octet_length(to_json(r.pname)::text)
            + COALESCE(octet_length(o_payload), 4);
        IF n > 0 AND total + size > p_max_bytes THEN
            o_data := NULL; o_payload := NULL; o_more := true;
            RETURN NEXT;
            RETURN;
        END IF;
        n := n + 1;
        total := total + size;
        o_id := r.id::text; o_txid := r.transaction_id; o_pid := r.partition_id::text; o_event := r.event_type;
        o_group := r.consumer_group; o_worker := r.worker_id; o_created_at := r.created_at;
        o_names := r.names; o_queue := r.qname; o_partition := r.pname;
        o_more := false;
        RETURN NEXT;
    END LOOP;
END;
$$;

-- queen.message_traces_v1 returns a page of the traces of the tenant's
-- message (p_pid, p_txid) (traces_message), oldest first, at most p_limit
-- from p_offset and about p_max_bytes, with the first-row rule and the
-- o_more marker of queen.dlq_list_v1.
CREATE OR REPLACE FUNCTION queen.message_traces_v1(p_tenant text, p_pid uuid, p_txid text, p_limit integer,
    p_offset integer, p_max_bytes bigint)
RETURNS TABLE (o_id text, o_txid text, o_pid text, o_event text, o_group text, o_worker text, o_data text,
    o_created_at timestamptz, o_names text[], o_more boolean)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    r record;
    n integer := 0;
    total bigint := 0;
    size bigint;
BEGIN
    FOR r IN
        SELECT t.id, t.transaction_id, t.partition_id, t.event_type, t.consumer_group, t.worker_id, t.data,
            t.created_at, x.names
        FROM queen.traces t
        CROSS JOIN LATERAL (SELECT COALESCE(array_agg(n2.name ORDER BY n2.name), '{}') AS names
            FROM queen.trace_names n2 WHERE n2.trace_id = t.id) x
        WHERE t.partition_id = p_pid AND t.transaction_id = p_txid AND t.tenant = p_tenant
        ORDER BY t.created_at, t.id LIMIT p_limit OFFSET p_offset
    LOOP
        o_data := r.data::text; -- once, for its size and the answer
        -- queen.row_envelope_bytes(): keys, the id and the time.
        size := queen.row_envelope_bytes() + octet_length(to_json(r.event_type)::text) + octet_length(to_json(r.consumer_group)::text)
            + octet_length(to_json(r.worker_id)::text) + octet_length(o_data)
            + octet_length(to_json(r.names)::text);
        IF n > 0 AND total + size > p_max_bytes THEN
            o_data := NULL; o_more := true;
            RETURN NEXT;
            RETURN;
        END IF;
        n := n + 1;
        total := total + size;
        o_id := r.id::text; o_txid := r.transaction_id; o_pid := r.partition_id::text; o_event := r.event_type;
        o_group := r.consumer_group; o_worker := r.worker_id; o_created_at := r.created_at;
        o_names := r.names; o_more := false;
        RETURN NEXT;
    END LOOP;
END;
$$;
