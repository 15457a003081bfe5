package pg

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"

	"queen-node/protocol"
)

// The fast push is the common case of a push outside a transaction request
// (a combined flush, or pg.DB.Push) as one statement (docs/storage.md, "The
// fast push"): every partition it names is one this node has pushed to
// before, so the node passes the partition ids it learned then, and no item
// is a duplicate. The statement locks those partitions (checking that each
// id still belongs to the queue and partition named, in the caller's
// tenant), inserts the items at
// base + seq, and moves each watermark. queen.push_v4 does the same work
// as a PL/pgSQL function of five statements and a subtransaction; measured
// with pg_stat_statements.track = all, about a third of its time was
// outside its statements (BenchmarkPushSpread).
//
// The locks follow push_v4's rule (docs/storage.md, "Skip-locked push
// flushes"): the partitions flagged $12 are locked first, in id order,
// waiting; only then, through the scalar subquery that reads all of them,
// the others SKIP LOCKED. A transaction therefore waits only while holding
// lower ids, as push_v4 does, and the two never deadlock. The rows of a
// partition it did not lock are not written. A partition flagged and not
// found (a stale cached id: the queue was deleted, or re-created under new
// ids) makes it write nothing at all. A duplicate transaction id violates
// the unique index, which aborts the statement (autocommit): nothing is
// written either.
//
// pg.DB.Push flags every partition, so it is stored whole or not at all,
// as with push_v4. A combined flush flags none: it never waits here. Its
// rows of a partition another transaction holds come back PushDeferred
// when they may (a first attempt); those that may not (rows deferred
// once) go to queen.push_v4 right after, in a transaction of their own,
// which waits for the lock. So the free partitions of a flush commit at
// once instead of waiting behind a held one (at 3 nodes a version that
// waited for them in this statement delivered 3,493 / 3,630 / 3,524
// msgs/s against push_v4's 5,521 / 3,302 / 5,151, docs/benchmarks.md).
// Should that second call fail, PushSome says which rows the first one
// stored (PartialPushError), for the combiner. pushFast therefore sends
// uniform flags; the gate between w and s keeps the lock rule should that
// change.
// The differential test (pushfast_test.go) holds the two paths to the same
// outcomes and the same log.
//
// Parameters: $1 tenant; per distinct partition $2 queue, $3 partition,
// $4 id, $12 may wait; per item $5 its partition (index into $2..$4, from
// 1), $6 seq within the partition (1..n), $7 transaction id, $8 message id,
// $9 trace id, $10 payload, $11 producer subject. Returns the indexes of
// the partitions it locked and wrote.
const fastPushSQL = `WITH r AS MATERIALIZED (
    SELECT * FROM unnest($2::text[], $3::text[], $4::text[]::uuid[], $12::boolean[]) WITH ORDINALITY AS r(qn, pn, pid, must, k)
),
w AS MATERIALIZED (
    SELECT r.k::int AS k, p.id, p.last_offset AS base
    FROM r
    JOIN queen.partitions p ON p.id = r.pid AND p.name = r.pn
    JOIN queen.queues q ON q.id = p.queue_id AND q.tenant = $1::text AND q.name = r.qn
    WHERE r.must
    ORDER BY p.id
    FOR NO KEY UPDATE OF p
),
s AS MATERIALIZED (
    SELECT r.k::int AS k, p.id, p.last_offset AS base
    FROM r
    JOIN queen.partitions p ON p.id = r.pid AND p.name = r.pn
    JOIN queen.queues q ON q.id = p.queue_id AND q.tenant = $1::text AND q.name = r.qn
    WHERE NOT r.must AND (SELECT count(*) FROM w) >= 0
    FOR NO KEY UPDATE OF p SKIP LOCKED
),
parts AS MATERIALIZED (
    SELECT * FROM w UNION ALL SELECT * FROM s
),
whole AS MATERIALIZED (
    SELECT (SELECT count(*) FROM w) = (SELECT count(*) FROM r WHERE r.must) AS ok
),
placed AS MATERIALIZED (
    SELECT parts.id AS pid, parts.base + i.seq AS off, i.txid, i.mid, i.trace, i.payload, i.sub
    FROM unnest($5::int[], $6::int[], $7::text[], $8::text[]::uuid[], $9::text[]::uuid[], $10::text[], $11::text[])
         AS i(k, seq, txid, mid, trace, payload, sub)
    JOIN parts ON parts.k = i.k
    WHERE (SELECT ok FROM whole)
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
SELECT parts.k FROM parts WHERE (SELECT ok FROM whole)`

// codeUniqueViolation on messages_txid is a duplicate transaction id. On
// the primary key it would be two writers at one offset, which the lock
// rules out: that stays an error rather than a silent fallback.
const codeUniqueViolation = "23505"

// pidCacheMax bounds the partition ids a node remembers for the fast push.
// Past it each new id evicts an arbitrary one: a forgotten id costs one
// flush through queen.push_v4, which teaches it again.
const pidCacheMax = 100_000

type pidKey struct{ tenant, queue, partition string }

// pidCache maps the partitions this node pushed to onto their ids. An entry
// may be stale (the queue was deleted since); the fast push checks every id
// against its names under the lock, so a stale one costs a fallback, or in
// a combined flush's first attempt a deferral (it cannot tell a deleted
// partition from a held one): one more flush, whose wait relearns it.
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
		if c.m == nil {
			c.m = make(map[pidKey]string)
		}
		if len(c.m) >= pidCacheMax {
			for old := range c.m { // one arbitrary entry: map order is random
				delete(c.m, old)
				break
			}
		}
		c.m[k] = o.PartitionID
	}
}

// pushFast tries rows as the fast push. ok false means it wrote nothing and
// the caller runs them as queen.push_v4 (a partition without a known id, a
// stale id of a partition Push waits for, or a duplicate). Otherwise outs
// answers every row it wrote (queued) or may defer (deferred), and rest
// holds the positions of the rows it did neither: rows of a combined flush
// that may not be deferred, whose partition it did not lock.
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
	// A partition may wait when any of its rows may (an in-batch copy's
	// flag counts, as in push). Push's statement waits for them; a combined
	// flush's waits for none and leaves the held ones to push_v4.
	mustWait := make([]bool, len(pl.parts))
	for i, r := range rows {
		if wait == nil || wait[i] {
			mustWait[pl.partOf(r)] = true
		}
	}
	flags := mustWait
	if wait != nil {
		flags = make([]bool, len(pl.parts))
	}
	rs, err := db.pool.Query(ctx, fastPushSQL, tenant, queues, names, pids,
		ks, pl.seqs, txids, ids, traces, payloads, subs, flags)
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
	written := false
	for k := range pl.parts {
		if wait == nil && !locked[k] {
			return nil, nil, false, nil // a stale id: nothing was written
		}
		written = written || locked[k]
	}
	outs = make([]PushOutcome, len(rows))
	for j, i := range pl.uniq {
		switch k := pl.part[j]; {
		case locked[k]:
			outs[i] = PushOutcome{Idx: i, Status: protocol.PushQueued, MessageID: rows[i].ID, PartitionID: pids[k], TxID: rows[i].TxID}
		case mustWait[k]:
			rest = append(rest, i)
		default:
			outs[i] = PushOutcome{Idx: i, Status: protocol.PushDeferred, TxID: rows[i].TxID}
		}
	}
	// An in-batch copy goes with its first occurrence: to push_v4 when that
	// one does, else it is answered from it.
	for i, first := range pl.dupOf {
		if first >= 0 && outs[first].Status == "" {
			rest = append(rest, i)
		}
	}
	if !written && len(rest) > 0 {
		return nil, nil, false, nil // nothing to split: push_v4 in one transaction
	}
	pl.answerCopies(rows, outs)
	if written {
		db.pushFastFlushes.Add(1)
	}
	return outs, rest, true, nil
}
