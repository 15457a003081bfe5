package pg

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"

	"queen-node/protocol"
)

// The fast push is a combined flush's common case as one statement
// (docs/storage.md, "The fast push"): every partition it names is one this
// node has pushed to before, so the node passes the partition ids it
// learned then, and no item is a duplicate. The statement locks those
// partitions SKIP LOCKED (checking that each id still belongs to the queue
// and partition named, in the caller's tenant), inserts the items at
// base + seq, and moves each watermark. queen.push_v4 does the same work
// as a PL/pgSQL function of five statements and a subtransaction; measured
// with pg_stat_statements.track = all, about a third of its time was
// outside its statements (BenchmarkPushSpread).
//
// It never waits for a lock, so it cannot deadlock and needs no lock
// order. A partition it did not lock (another node's flush holds it, or
// the cached id is stale: the queue was deleted, or re-created under new
// ids) is not written: its items come back PushDeferred when the caller
// may defer them, and otherwise go to queen.push_v4 right after, which
// waits for the lock and resolves names afresh. A duplicate transaction id
// violates the unique index, which aborts the whole statement (autocommit,
// so nothing was written): the flush then runs as queen.push_v4, which
// probes for duplicates. The differential test (pushfast_test.go) holds
// the two paths to the same outcomes and the same log.
//
// Parameters: $1 tenant; per distinct partition $2 queue, $3 partition,
// $4 id; per item $5 its partition (index into $2..$4, from 1), $6 seq
// within the partition (1..n), $7 transaction id, $8 message id, $9 trace
// id, $10 payload, $11 producer subject. Returns the indexes of the
// partitions it locked and wrote.
const fastPushSQL = `WITH parts AS MATERIALIZED (
    SELECT r.k::int AS k, p.id, p.last_offset AS base
    FROM unnest($2::text[], $3::text[], $4::text[]::uuid[]) WITH ORDINALITY AS r(qn, pn, pid, k)
    JOIN queen.partitions p ON p.id = r.pid AND p.name = r.pn
    JOIN queen.queues q ON q.id = p.queue_id AND q.tenant = $1::text AND q.name = r.qn
    FOR NO KEY UPDATE OF p SKIP LOCKED
),
placed AS MATERIALIZED (
    SELECT parts.id AS pid, parts.base + i.seq AS off, i.txid, i.mid, i.trace, i.payload, i.sub
    FROM unnest($5::int[], $6::int[], $7::text[], $8::text[]::uuid[], $9::text[]::uuid[], $10::text[], $11::text[])
         AS i(k, seq, txid, mid, trace, payload, sub)
    JOIN parts ON parts.k = i.k
),
ins AS (
    INSERT INTO queen.messages (partition_id, off, id, transaction_id, trace_id, payload, producer_sub, created_at)
    SELECT pl.pid, pl.off, pl.mid, pl.txid, pl.trace, pl.payload::json, pl.sub, clock_timestamp()
    FROM placed pl
    ORDER BY pl.pid, pl.off
),
upd AS (
    UPDATE queen.partitions p
    SET last_offset = f.top, last_write_at = clock_timestamp()
    FROM (SELECT pl.pid, max(pl.off) AS top FROM placed pl GROUP BY pl.pid) f
    WHERE p.id = f.pid
)
SELECT parts.k FROM parts`

// codeUniqueViolation on messages_txid is a duplicate transaction id. On
// the primary key it would be two writers at one offset, which the lock
// rules out: that stays an error rather than a silent fallback.
const codeUniqueViolation = "23505"

// pidCacheMax bounds the partition ids a node remembers for the fast push.
// Past it the cache starts over: a forgotten id costs one flush through
// queen.push_v4, which teaches it again.
const pidCacheMax = 100_000

type pidKey struct{ tenant, queue, partition string }

// pidCache maps the partitions this node pushed to onto their ids. An entry
// may be stale (the queue was deleted since); the fast push checks every id
// against its names under the lock, so a stale one only costs a fallback.
type pidCache struct {
	mu sync.Mutex
	m  map[pidKey]string
}

func (c *pidCache) get(k pidKey) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id, ok := c.m[k]
	return id, ok
}

// learn records the partition ids of the stored outcomes.
func (c *pidCache) learn(tenant string, rows []PushRow, outs []PushOutcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, o := range outs {
		if o.PartitionID == "" || i >= len(rows) {
			continue
		}
		k := pidKey{tenant, rows[i].Queue, rows[i].Partition}
		if c.m[k] == o.PartitionID {
			continue
		}
		if c.m == nil || len(c.m) >= pidCacheMax {
			c.m = make(map[pidKey]string)
		}
		c.m[k] = o.PartitionID
	}
}

// forget drops the entries of parts (stale ids).
func (c *pidCache) forget(tenant string, parts []QueuePartition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range parts {
		delete(c.m, pidKey{tenant, p.Queue, p.Partition})
	}
}

// pushFast tries rows as the fast push. ok false means it wrote nothing and
// the caller runs the whole flush as queen.push_v4 (a partition without a
// known id, or a duplicate). Otherwise outs holds the outcome of every row
// it answered (queued, or deferred where wait allows) and rest the
// positions of the rows it did not: those may not be deferred, and their
// partitions were not locked, so they go to queen.push_v4.
func (db *DB) pushFast(ctx context.Context, tenant string, rows []PushRow, wait []bool) (outs []PushOutcome, rest []int, ok bool, err error) {
	pl := planPush(rows)
	pids := make([]string, len(pl.parts))
	queues, names := splitParts(pl.parts)
	for k, p := range pl.parts {
		id, found := db.pids.get(pidKey{tenant, p.Queue, p.Partition})
		if !found {
			return nil, nil, false, nil
		}
		pids[k] = id
	}
	n := len(pl.uniq)
	ks, txids, ids := make([]int32, n), make([]string, n), make([]string, n)
	traces, payloads, subs := make([]*string, n), make([]string, n), make([]*string, n)
	for j, i := range pl.uniq {
		r := rows[i]
		ks[j], txids[j], ids[j] = pl.part[j]+1, r.TxID, r.ID
		traces[j], payloads[j], subs[j] = r.Trace, r.Payload, r.Sub
	}
	rs, err := db.pool.Query(ctx, fastPushSQL, tenant, queues, names, pids,
		ks, pl.seqs, txids, ids, traces, payloads, subs)
	if err != nil {
		return nil, nil, false, fmt.Errorf("fast push: %w", err)
	}
	locked := make([]bool, len(pl.parts))
	for rs.Next() {
		var k int
		if err := rs.Scan(&k); err != nil {
			rs.Close()
			return nil, nil, false, fmt.Errorf("fast push: scan: %w", err)
		}
		if k >= 1 && k <= len(locked) {
			locked[k-1] = true
		}
	}
	if err := rs.Err(); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == codeUniqueViolation && pgErr.ConstraintName == "messages_txid" {
			db.pushFastFallbacks.Add(1)
			return nil, nil, false, nil // a duplicate: nothing was written
		}
		return nil, nil, false, fmt.Errorf("fast push: %w", err)
	}
	// A partition whose items may not be deferred waits for its lock in
	// queen.push_v4; so do the items of a partition that was not deferrable
	// for any of them (the combiner's second attempt).
	mustWait := make([]bool, len(pl.parts))
	for i, r := range rows {
		if wait == nil || wait[i] {
			mustWait[pl.partOf(r)] = true
		}
	}
	outs = make([]PushOutcome, len(rows))
	var stale []QueuePartition
	for j, i := range pl.uniq {
		k := pl.part[j]
		switch {
		case locked[k]:
			outs[i] = PushOutcome{Idx: i, Status: protocol.PushQueued, MessageID: rows[i].ID, PartitionID: pids[k], TxID: rows[i].TxID}
		case mustWait[k]:
			rest = append(rest, i)
		default:
			outs[i] = PushOutcome{Idx: i, Status: protocol.PushDeferred, TxID: rows[i].TxID}
		}
	}
	for k := range pl.parts {
		if !locked[k] && mustWait[k] {
			stale = append(stale, pl.parts[k])
		}
	}
	if len(stale) > 0 {
		// Not locked although the combiner's first attempt found it held
		// too: the id may be stale. queen.push_v4 resolves it afresh.
		db.pids.forget(tenant, stale)
	}
	// The in-batch copies of the rows left to queen.push_v4 go there too
	// (the first occurrence decides their answer); the others are answered
	// from their first occurrence.
	for i, first := range pl.dupOf {
		if first >= 0 && outs[first].Status == "" {
			rest = append(rest, i)
		}
	}
	pl.answerCopies(rows, outs)
	db.pushFastFlushes.Add(1)
	return outs, rest, true, nil
}
