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

// ackCASSQL calls queen.ack_cas_v1 (35_ack_cas.sql, where the conditions
// under which a row matches are argued). text[]: see push.
const ackCASSQL = `SELECT o_idx, o_queue, o_partition, o_pending
	FROM queen.ack_cas_v1($1, $2, $3::text[]::uuid[], $4, $5, $6, $7, $8)`

// AckCAS applies the pairs in one statement (one round trip, one commit)
// and reports each, in input order. An error means nothing was written.
func (db *DB) AckCAS(ctx context.Context, pairs []CASPair) ([]CASResult, error) {
	if len(pairs) == 0 {
		return []CASResult{}, nil
	}
	rs, err := db.pool.Query(ctx, ackCASSQL, casParams(pairs)...)
	if err != nil {
		return nil, fmt.Errorf("ack cas: %w", err)
	}
	return scanCAS(rs, len(pairs))
}

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
