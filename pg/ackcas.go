package pg

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// CASPair asks to resolve, in one compare-and-set, the whole batch a pop
// served to (PartitionID, Group) under LeaseID: the N messages with offsets
// First..End (holes allowed), End being the last one served.
type CASPair struct {
	Tenant, PartitionID, Group, LeaseID string
	First, End                          int64
	N                                   int
}

// CASResult reports one CASPair. OK false: the row did not match (lease
// ended, expired or re-claimed, part of the batch resolved already, a
// message of it deleted...) or another transaction held it, and nothing
// was written for it.
type CASResult struct {
	OK               bool
	Queue, Partition string
	Pending          bool // the partition has messages past the new cursor
}

// ackCASSQL is queen.ack_cas_v1's statement (35_ack_cas.sql, where the
// conditions under which a row matches are argued), sent as it is: the
// PL/pgSQL call around it cost about as much as the statement (its
// RETURN QUERY copy and the function's plan_cache_mode setting, set and
// reset on every call; docs/storage.md, "CAS ack"). The function stays for
// nodes of earlier releases during a rolling upgrade, and
// TestAckCASStatementIsTheFunctions holds the two to the same text. text[]:
// see push.
const ackCASSQL = `WITH u AS (
        SELECT * FROM unnest($1::int[], $2::text[], $3::text[]::uuid[], $4::text[], $5::text[], $6::bigint[],
                             $7::bigint[], $8::int[])
               AS u(i, tenant, pid, grp, lease, first_off, end_off, n)),
    l AS (
        SELECT c.partition_id, c.consumer_group, u.i, q.name AS qname, p.name AS pname, p.last_offset
        FROM u
        JOIN queen.consumers c ON c.partition_id = u.pid AND c.consumer_group = u.grp
        JOIN queen.partitions p ON p.id = u.pid
        JOIN queen.queues q ON q.id = p.queue_id AND q.tenant = u.tenant
        WHERE c.lease_id = u.lease AND c.lease_expires_at > clock_timestamp()
          AND c.batch_end = u.end_off AND c.committed_offset < u.first_off
          AND cardinality(c.acked) = 0
          AND (SELECT count(*) FROM queen.messages m
               WHERE m.partition_id = u.pid AND m.off >= u.first_off AND m.off <= u.end_off) = u.n
        ORDER BY c.partition_id, c.consumer_group
        FOR UPDATE OF c SKIP LOCKED),
    w AS (
        UPDATE queen.consumers c
        SET provisional = false, committed_offset = c.batch_end, lease_id = NULL, lease_owner = NULL, lease_expires_at = NULL,
            retry_count = 0, updated_at = clock_timestamp()
        FROM l
        WHERE c.partition_id = l.partition_id AND c.consumer_group = l.consumer_group
        RETURNING l.i, l.qname, l.pname, l.last_offset > c.committed_offset AS pending)
    SELECT w.i, w.qname, w.pname, w.pending FROM w`

// AckCAS applies the pairs in one statement (one round trip, one commit)
// and reports each, in input order. An error means nothing was written,
// unless it came from reading the answer back (a malformed row): the
// statement's transaction then commits as the batch is closed, as for any
// call whose answer is lost.
func (db *DB) AckCAS(ctx context.Context, pairs []CASPair) ([]CASResult, error) {
	if len(pairs) == 0 {
		return []CASResult{}, nil
	}
	// The flight's batch with acks only (popBatch): the same statement,
	// under the same plan setting.
	_, cas, err := db.popBatch(ctx, nil, nil, nil, false, pairs)
	return cas, err
}

// genericPlansSQL and resetPlansSQL bracket the statements that take their
// claims or acks as arrays (ackCASSQL, claimSetSQL) in their batch. Their
// plan must not depend on the arrays' lengths, and PostgreSQL's plan cache
// may otherwise plan them again on every call: it keeps the generic plan
// only when that plan's estimated cost is below the custom plans' average,
// and a generic plan assumes 10 elements per array. Measured on a queue of
// 10,000 partitions: one run's claim set was planned 2,362 times in 2,429
// calls (3.3 s of planning, 1.4 ms each, against 1.1 s of execution), the
// next run's 56 times. The setting is the session's, for those statements
// only: RESET follows them in the same batch, and a transaction that fails
// rolls it back (docs/storage.md, "The claim set").
const (
	genericPlansSQL = "SET plan_cache_mode = force_generic_plan"
	resetPlansSQL   = "RESET plan_cache_mode"
)

// casParams are ackCASSQL's parameters for pairs.
func casParams(pairs []CASPair) []any {
	n := len(pairs)
	idx, tenants, pids, groups, leases := make([]int32, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	firsts, ends, counts := make([]int64, n), make([]int64, n), make([]int32, n)
	for i, p := range pairs {
		idx[i], tenants[i], pids[i], groups[i], leases[i] = int32(i), p.Tenant, p.PartitionID, p.Group, p.LeaseID
		firsts[i], ends[i], counts[i] = p.First, p.End, int32(p.N)
	}
	return []any{idx, tenants, pids, groups, leases, firsts, ends, counts}
}

// scanCAS reads ackCASSQL's rows for n pairs and closes rs.
func scanCAS(rs pgx.Rows, n int) ([]CASResult, error) {
	out := make([]CASResult, n)
	defer rs.Close()
	for rs.Next() {
		var (
			i   int32
			r   CASResult
			pen *bool
		)
		if err := rs.Scan(&i, &r.Queue, &r.Partition, &pen); err != nil {
			return nil, fmt.Errorf("scan: %w", err)
		}
		if i < 0 || int(i) >= n {
			return nil, fmt.Errorf("row index %d out of %d", i, n)
		}
		r.OK, r.Pending = true, pen != nil && *pen
		out[i] = r
	}
	if err := rs.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
