package pg

import (
	"context"
	"fmt"
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
// message of it deleted...) and nothing was written for it.
type CASResult struct {
	OK               bool
	Queue, Partition string
	Pending          bool // the partition has messages past the new cursor
}

// ackCASSQL resolves whole served batches as one UPDATE; pairs must be
// distinct by (partition, group). A matched row ends exactly where
// queen.ack_v1 would leave it given the completed acks of every message of
// the batch, carrying the live lease (docs/storage.md, "CAS ack"):
//
//   - lease_id = the pop's lease and lease_expires_at > clock_timestamp():
//     the very claim that served the batch is live, so batch_end is the
//     served end (compared too) and every item is a decision of that lease;
//   - acked = '{}' and committed_offset < First: nothing of the batch was
//     resolved yet. Every message in (cursor, End] was then served by this
//     claim: the claim serves all unresolved messages of (cursor at claim,
//     End] and the ones it skipped (remembered in acked) are passed since,
//     as acked is empty and a cursor only moves back by a seek, which
//     clears the lease. So resolving the batch moves the cursor exactly to
//     End (the lease ends, retry_count starts over);
//   - the N served messages still exist (a range count of the primary key):
//     ack_v1 answers "Message not found" for a deleted one;
//   - the partition belongs to the tenant (as in ack_v1's joins).
//
// Rows are locked in (partition, group) order, ack_v1's order, so a flush
// cannot deadlock with an ack or with another flush.
const ackCASSQL = `WITH u AS (
	SELECT * FROM unnest($1::int[], $2::text[], $3::text[]::uuid[], $4::text[], $5::text[],
	                     $6::bigint[], $7::bigint[], $8::int[])
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
	FOR UPDATE OF c)
UPDATE queen.consumers c
SET committed_offset = c.batch_end, lease_id = NULL, lease_owner = NULL, lease_expires_at = NULL,
    retry_count = 0, updated_at = clock_timestamp()
FROM l
WHERE c.partition_id = l.partition_id AND c.consumer_group = l.consumer_group
RETURNING l.i, l.qname, l.pname, l.last_offset > c.committed_offset`

// AckCAS applies the pairs in one statement (one round trip, one commit)
// and reports each, in input order. An error means nothing was written.
func (db *DB) AckCAS(ctx context.Context, pairs []CASPair) ([]CASResult, error) {
	n := len(pairs)
	out := make([]CASResult, n)
	if n == 0 {
		return out, nil
	}
	idx, tenants, pids, groups, leases := make([]int32, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	firsts, ends, counts := make([]int64, n), make([]int64, n), make([]int32, n)
	for i, p := range pairs {
		idx[i], tenants[i], pids[i], groups[i], leases[i] = int32(i), p.Tenant, p.PartitionID, p.Group, p.LeaseID
		firsts[i], ends[i], counts[i] = p.First, p.End, int32(p.N)
	}
	rs, err := db.pool.Query(ctx, ackCASSQL, idx, tenants, pids, groups, leases, firsts, ends, counts)
	if err != nil {
		return nil, fmt.Errorf("ack cas: %w", err)
	}
	defer rs.Close()
	for rs.Next() {
		var (
			i   int32
			r   CASResult
			pen *bool
		)
		if err := rs.Scan(&i, &r.Queue, &r.Partition, &pen); err != nil {
			return nil, fmt.Errorf("ack cas: scan: %w", err)
		}
		if i < 0 || int(i) >= n {
			return nil, fmt.Errorf("ack cas: row index %d out of %d", i, n)
		}
		r.OK, r.Pending = true, pen != nil && *pen
		out[i] = r
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("ack cas: %w", err)
	}
	return out, nil
}
