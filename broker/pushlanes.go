package broker

import (
	"context"

	"queen-node/pg"
)

// pushLanes splits a node's group commit into lanes by partition: each lane
// is a pushCombiner with its own flight, and a partition's rows always go
// through the same lane. One flight was busy 97% of the time at full load
// and its statement runs on one PostgreSQL core; two lanes write disjoint
// partitions, so their flushes run side by side without waiting for each
// other's row locks or deferring rows (docs/benchmarks.md, "fifteenth
// session"). A partition's rows keep their order because its lane flushes
// one at a time, in arrival order. A push whose rows span lanes is queued
// in each, then waits for all: its partitions may commit in separate
// transactions, as docs/api.md ("a push's transactions") allows.
type pushLanes struct {
	lanes []*pushCombiner
}

// laneOf is the lane of a partition: FNV-1a of its queue and name, mixed
// (murmur3's finalizer) before it is reduced: FNV's low bits see only the
// low bits of each byte, so modulo 2 alone it would put names of the same
// letters in any order ("p12", "p21"), or "p0", "p2", "p4", in one lane.
// TestLaneOfSpreadsNames holds the spread.
func laneOf(queue, partition string, lanes int) int {
	h := uint32(2166136261)
	for i := 0; i < len(queue); i++ {
		h = (h ^ uint32(queue[i])) * 16777619
	}
	h *= 16777619 // a zero byte between the two: ("ab","c") and ("a","bc") differ
	for i := 0; i < len(partition); i++ {
		h = (h ^ uint32(partition[i])) * 16777619
	}
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return int(h % uint32(lanes))
}

// pushLaneCount is the lanes a node runs: PushLanes, but at most a quarter
// of the pool (one at least), since each lane holds a connection while it flushes (and a
// failed flush's replays one each), and claims, acks and the rest need
// theirs.
func pushLaneCount(cfg Config) int {
	return max(1, min(cfg.PushLanes, int(cfg.PG.MaxConns)/4))
}

// push stores rows through their lanes and returns every outcome with Idx
// into rows. A lane's error is the push's, once every lane has answered
// (what the others wrote stays written; a retry finds it a duplicate).
func (p *pushLanes) push(ctx context.Context, tenant string, rows []pg.PushRow) ([]pg.PushOutcome, error) {
	n := len(p.lanes)
	if n == 1 || len(rows) == 0 {
		return p.lanes[0].push(ctx, tenant, rows)
	}
	idx := make([][]int, n) // each lane's rows, as indexes into rows
	for i := range rows {
		l := laneOf(rows[i].Queue, rows[i].Partition, n)
		idx[l] = append(idx[l], i)
	}
	reqs := make([]*pushReq, n)
	for l, ix := range idx {
		if len(ix) == len(rows) { // one lane: no copy
			return p.lanes[l].push(ctx, tenant, rows)
		}
		if len(ix) == 0 {
			continue
		}
		sub := make([]pg.PushRow, len(ix))
		for k, i := range ix {
			sub[k] = rows[i]
		}
		reqs[l] = p.lanes[l].enqueue(ctx, tenant, sub)
	}
	all := make([]pg.PushOutcome, 0, len(rows))
	var first error
	for l, r := range reqs {
		if r == nil {
			continue
		}
		outs, err := r.await(ctx)
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		for _, o := range outs {
			if o.Idx < 0 || o.Idx >= len(idx[l]) {
				continue // never; pushResults reports a row without an outcome not stored
			}
			o.Idx = idx[l][o.Idx]
			all = append(all, o)
		}
	}
	if first != nil {
		return nil, first
	}
	return all, nil
}
