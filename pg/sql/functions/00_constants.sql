-- Numbers that the SQL functions and the Go code both use, each written
-- once here as an IMMUTABLE LANGUAGE sql function of no arguments: the
-- planner inlines and folds it, so a call costs what the literal did (also
-- in a cached generic plan). Each is a constant of package protocol too;
-- pg/protocol_test.go (TestSQLNumbers) ties the two spellings and fails
-- when a function body writes one of these numbers as a bare literal.

-- queen.default_lease_seconds: the lease of a queue whose leaseTime is 0
-- (protocol.DefaultLeaseSeconds; also the default of a lease extension).
CREATE OR REPLACE FUNCTION queen.default_lease_seconds()
RETURNS int
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 60
$$;

-- queen.row_envelope_bytes: what a row's keys, ids and times add to its
-- values in a JSON answer, for the byte bounds of pops and reads
-- (protocol.RowEnvelopeBytes; docs/api.md, "Input bounds").
CREATE OR REPLACE FUNCTION queen.row_envelope_bytes()
RETURNS int
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 400
$$;

-- queen.max_acked_past_gap: how many completed acks a (partition, group)
-- remembers past an unresolved message (consumers.acked) before it refuses
-- more (protocol.MaxAckedPastGap; docs/api.md, "Acks").
CREATE OR REPLACE FUNCTION queen.max_acked_past_gap()
RETURNS int
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 100000
$$;
