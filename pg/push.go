package pg

import (
	"context"
	"errors"
	"fmt"

	"queen-node/protocol"
)

// ErrQueueDeleted means the queues or partitions a push names kept
// disappearing under it (a delete between creating them and appending, on
// every attempt): nothing was stored.
var ErrQueueDeleted = errors.New("queue deleted during the push")

// ensureRounds bounds how often a push re-creates partitions that a
// concurrent delete removed before it could lock them.
const ensureRounds = 4

// errMissing is push_v4's "a queue or partition does not exist" answer
// (o_missing > 0).
var errMissing = errors.New("partitions missing")

// PushRow is one message to append.
type PushRow struct {
	Queue, Partition, TxID string
	ID                     string  // UUIDv7 chosen by the caller
	Trace                  *string // UUID or nil
	Payload                string  // JSON text
	Sub                    *string // producer subject or nil
}

// PushOutcome reports one PushRow, in input order.
type PushOutcome struct {
	Idx         int
	Status      protocol.PushStatus // PushQueued or PushDuplicate
	MessageID   string
	PartitionID string
	TxID        string
}

// QueuePartition names a partition of a queue.
type QueuePartition struct{ Queue, Partition string }

// Partitions returns the distinct (queue, partition) pairs of rows.
func Partitions(rows []PushRow) []QueuePartition {
	parts := make([]QueuePartition, len(rows))
	for i, r := range rows {
		parts[i] = QueuePartition{r.Queue, r.Partition}
	}
	return dedupParts(parts)
}

// queueOnly keeps the queue names of parts (for dedupParts).
func queueOnly(parts []QueuePartition) []QueuePartition {
	out := make([]QueuePartition, len(parts))
	for i, p := range parts {
		out[i] = QueuePartition{Queue: p.Queue}
	}
	return out
}

func dedupParts(parts []QueuePartition) []QueuePartition {
	seen := make(map[QueuePartition]bool, len(parts))
	out := make([]QueuePartition, 0, len(parts))
	for _, p := range parts {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// Push appends rows in one transaction: every row is stored or reported a
// duplicate, or nothing is stored. Missing queues and partitions are created
// first, in their own short transaction (see sql/functions/10_push.sql for the lock
// order). Deadlocks are retried.
func (db *DB) Push(ctx context.Context, tenant string, rows []PushRow) ([]PushOutcome, error) {
	for round := 0; ; round++ {
		var outs []PushOutcome
		err := db.retry(ctx, false, func() error {
			var err error
			outs, err = push(ctx, db.pool, tenant, rows)
			return err
		})
		if !errors.Is(err, errMissing) {
			return outs, err
		}
		if round == ensureRounds {
			return nil, ErrQueueDeleted
		}
		if err := db.EnsurePartitions(ctx, tenant, Partitions(rows)); err != nil {
			return nil, err
		}
	}
}

// Push appends rows inside the transaction. The partitions must exist and
// should be locked already (InPushTx); a missing one is ErrQueueDeleted.
func (t *Tx) Push(ctx context.Context, tenant string, rows []PushRow) ([]PushOutcome, error) {
	outs, err := push(ctx, t.tx, tenant, rows)
	if errors.Is(err, errMissing) {
		return nil, ErrQueueDeleted
	}
	return outs, err
}

// EnsurePartitions creates the missing queues (default options) and
// partitions in one short transaction of its own.
func (db *DB) EnsurePartitions(ctx context.Context, tenant string, parts []QueuePartition) error {
	queues, names := splitParts(parts)
	// A foreign-key violation here means a delete removed the queue row
	// under the partition insert; the retry creates the queue afresh.
	err := db.retry(ctx, true, func() error {
		_, err := db.pool.Exec(ctx, `SELECT queen.ensure_partitions_v1($1, $2, $3)`, tenant, queues, names)
		return err
	})
	if err != nil {
		return fmt.Errorf("create partitions: %w", err)
	}
	return nil
}

func splitParts(parts []QueuePartition) (queues, names []string) {
	queues, names = make([]string, len(parts)), make([]string, len(parts))
	for i, p := range parts {
		queues[i], names[i] = p.Queue, p.Partition
	}
	return queues, names
}

// TxLocks is what a transaction request will touch, locked up front in one
// global order: its queue rows (KEY SHARE, by id), consumer rows (by
// partition, group), then partitions (by id). Locking per operation instead let two transactions cross.
type TxLocks struct {
	Leases []string         // required lease ids
	Acks   []ConsumerKey    // consumer rows its ack operations name
	Parts  []QueuePartition // partitions its push operations append to
}

// ConsumerKey names a (partition, consumer group) cursor row.
type ConsumerKey struct{ PartitionID, Group string }

// InPushTx runs fn in one transaction after creating the partitions in
// locks.Parts (committed separately, before) and taking every lock in
// locks in the global order. A deadlock, serialization failure or a
// concurrent delete's foreign-key violation rolls back and runs fn again,
// which must therefore start from scratch. Partitions deleted between their
// creation and the lock are created again (bounded; then ErrQueueDeleted).
func (db *DB) InPushTx(ctx context.Context, tenant string, locks TxLocks, fn func(*Tx) error) error {
	pids, groups := make([]string, len(locks.Acks)), make([]string, len(locks.Acks))
	for i, k := range locks.Acks {
		pids[i], groups[i] = k.PartitionID, k.Group
	}
	locks.Parts = dedupParts(locks.Parts)
	queues, names := splitParts(locks.Parts)
	var distinctQueues []string
	for _, p := range dedupParts(queueOnly(locks.Parts)) {
		distinctQueues = append(distinctQueues, p.Queue)
	}
	for round := 0; ; round++ {
		if len(locks.Parts) > 0 {
			if err := db.EnsurePartitions(ctx, tenant, locks.Parts); err != nil {
				return err
			}
		}
		err := db.InTxRetry(ctx, func(t *Tx) error {
			if len(locks.Parts) > 0 {
				// KEY SHARE on the queue rows keeps their names from being
				// detached by a delete (pg.DB.DeleteQueue) until we commit,
				// so every push operation resolves its names to the very
				// partitions locked below, not to a re-created queue's.
				var n int
				err := t.tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM queen.queues q
					WHERE q.tenant = $1 AND q.name = ANY($2) ORDER BY q.id FOR KEY SHARE) x`,
					tenant, distinctQueues).Scan(&n)
				if err != nil {
					return fmt.Errorf("lock queues: %w", err)
				}
				if n < len(distinctQueues) {
					return errMissing
				}
			}
			if len(locks.Leases) > 0 || len(pids) > 0 {
				// text[] cast to uuid[]: see push.
				if _, err := t.tx.Exec(ctx, `SELECT queen.lock_tx_consumers_v1($1, $2::text[]::uuid[], $3)`,
					locks.Leases, pids, groups); err != nil {
					return fmt.Errorf("lock consumers: %w", err)
				}
			}
			if len(locks.Parts) > 0 {
				var n int
				err := t.tx.QueryRow(ctx, `SELECT count(*) FROM queen.lock_partitions_v1($1, $2, $3)`,
					tenant, queues, names).Scan(&n)
				if err != nil {
					return fmt.Errorf("lock partitions: %w", err)
				}
				if n < len(locks.Parts) {
					return errMissing
				}
			}
			return fn(t)
		})
		if !errors.Is(err, errMissing) {
			return err
		}
		if round == ensureRounds {
			return ErrQueueDeleted
		}
	}
}

func push(ctx context.Context, q querier, tenant string, rows []PushRow) ([]PushOutcome, error) {
	// Remove in-batch duplicates (the first occurrence wins) and number the
	// unique items within their partition, so the SQL side needs no window
	// functions.
	type pkey struct{ q, p string }
	type tkey struct{ q, p, tx string }
	first := make(map[tkey]int, len(rows))
	seq := make(map[pkey]int32, 4)
	uniq := make([]int, 0, len(rows)) // positions in rows
	dupOf := make([]int, len(rows))   // -1 or the position of the first occurrence
	for i, r := range rows {
		k := tkey{r.Queue, r.Partition, r.TxID}
		if j, ok := first[k]; ok {
			dupOf[i] = j
			continue
		}
		first[k] = i
		dupOf[i] = -1
		uniq = append(uniq, i)
	}
	n := len(uniq)
	queues, parts, txids, ids := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	seqs, traces, payloads, subs := make([]int32, n), make([]*string, n), make([]string, n), make([]*string, n)
	for j, i := range uniq {
		r := rows[i]
		pk := pkey{r.Queue, r.Partition}
		seq[pk]++
		queues[j], parts[j], seqs[j], txids[j], ids[j] = r.Queue, r.Partition, seq[pk], r.TxID, r.ID
		traces[j], payloads[j], subs[j] = r.Trace, r.Payload, r.Sub
	}
	// uuid arrays go as text[] cast by PostgreSQL: pgx has no binary
	// encoding of a Go string as uuid, so a []string bound to a uuid[]
	// parameter first fails in binary, building an error that formats the
	// whole array, and is then sent again as text. Measured on 2 x 100
	// elements: 454 allocations and 49 KB that way, 122 and 26 KB as text[].
	var missing int
	var sts []string
	var mids, pids []string
	err := q.QueryRow(ctx, `SELECT o_missing, o_statuses, o_mids::text[], o_pids::text[]
		FROM queen.push_v4($1, $2, $3, $4, $5, $6::text[]::uuid[], $7::text[]::uuid[], $8, $9)`,
		tenant, queues, parts, seqs, txids, ids, traces, payloads, subs).Scan(&missing, &sts, &mids, &pids)
	if err != nil {
		return nil, fmt.Errorf("push: %w", err)
	}
	if missing > 0 {
		return nil, errMissing
	}
	if len(sts) != n || len(mids) != n || len(pids) != n {
		return nil, fmt.Errorf("push: %d items answered %d statuses, %d ids, %d partitions", n, len(sts), len(mids), len(pids))
	}
	out := make([]PushOutcome, len(rows))
	for j, i := range uniq {
		st := protocol.PushStatus(sts[j])
		if st == protocol.PushDuplicate && mids[j] == rows[i].ID {
			// The stored message is this row itself: an earlier attempt of
			// this very push committed although its caller saw an error (a
			// flush that timed out during its commit, then replayed). The
			// id is new for every request, so a client's own retry of a
			// stored message still reads duplicate.
			st = protocol.PushQueued
		}
		out[i] = PushOutcome{Idx: i, Status: st, MessageID: mids[j], PartitionID: pids[j], TxID: rows[i].TxID}
	}
	for i, j := range dupOf {
		if j < 0 {
			continue
		}
		o := out[j]
		o.Status = protocol.PushDuplicate
		o.Idx, o.TxID = i, rows[i].TxID
		out[i] = o
	}
	return out, nil
}
