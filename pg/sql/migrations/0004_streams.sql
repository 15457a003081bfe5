-- Migration 4: the streams tables (docs/api.md, "Streams").
--
-- One row per registered stream query per tenant. id is what the client
-- sends back as query_id on every call; it never changes for a (tenant,
-- name), so state survives worker and node restarts. config_hash is the
-- client's hash of the query's operator chain: a different hash is refused
-- unless the client asks for a reset.
CREATE TABLE IF NOT EXISTS queen.stream_queries (
    id           uuid PRIMARY KEY,
    tenant       text NOT NULL,
    name         text NOT NULL,
    source_queue text NOT NULL,
    sink_queue   text,
    config_hash  text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant, name)
);

-- The per-(query, source partition) key/value state. key is compared
-- byte-wise (COLLATE "C"): keys carry U+001F separators and key_prefix is a
-- literal prefix, so the primary key's btree serves the prefix range scan.
-- value is json, not jsonb: json keeps the client's text exactly (number
-- spelling, key order), so epoch-ms numbers come back as written.
-- window_end is the value's numeric top-level windowEnd (NULL when it has
-- none), taken out at write time: the ripe filter compares it without
-- parsing JSON in SQL, which fails on any value holding a \u0000 escape.
CREATE TABLE IF NOT EXISTS queen.stream_state (
    query_id     uuid NOT NULL REFERENCES queen.stream_queries(id) ON DELETE CASCADE,
    partition_id uuid NOT NULL,
    key          text COLLATE "C" NOT NULL,
    value        json NOT NULL,
    window_end   numeric,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (query_id, partition_id, key)
);
