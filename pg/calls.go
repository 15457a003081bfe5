package pg

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"queen-node/protocol"
)

// PopArgs are the inputs of the claim core.
type PopArgs struct {
	Tenant, Queue, Group string
	Names                []string // candidates; nil = SQL wildcard scan
	ScanLimit            int      // bound of the scan
	Budget               int      // messages in total
	MaxParts             int      // partitions claimed at most
	LeaseID              string
	LeaseSeconds         int // 0 = the queue's leaseTime
	AutoAck              bool
	Owner                string
	SubMode              protocol.SubMode
	SubFrom              *time.Time // with protocol.SubFrom
	MaxBytes             int64      // payload bytes of the response, about; one message always fits; 0 = no bound
	// Unprov are the candidates that may lack the group's consumer row
	// (queen.pop_v3's p_unprov); nil = all of them. Only with Names.
	Unprov []string
}

// Verdict is the claim core's answer for one candidate.
type Verdict struct {
	Name        string
	PartitionID string // "" when the partition does not exist
	Kind        protocol.Verdict
	Until       time.Time // took: lease expiry; leased: foreign lease expiry; empty: when deferred data becomes visible (zero if unknown)
	Drained     bool      // took: the served end reached the watermark read at claim time
}

// PopMessage is one claimed message.
type PopMessage struct {
	Partition, PartitionID string
	Off                    int64
	ID, TxID               string
	Trace                  *string
	Payload                []byte
	CreatedAt              time.Time
	Sub                    *string
	Retry                  int
}

// PopOutcome is the result of one claim-core call.
type PopOutcome struct {
	QueueID  string
	Seeded   bool // the group marker existed before this call
	Delay    int  // the queue's delayedProcessing, seconds
	Window   int  // the queue's windowBuffer, seconds
	Verdicts []Verdict
	Messages []PopMessage // grouped by partition, in offset order
	Fast     bool         // the fast claim answered (claimfast.go), not queen.pop_v3
}

// popSQL calls the claim core (queen.pop_v3, 22_pop_v3.sql): one row, the
// queue's values, then arrays per candidate and per served message.
const popSQL = `SELECT o_queue_id::text, o_seeded, o_delay, o_window,
		o_names, o_pids::text[], o_verdicts, o_until, o_drained, o_retries, o_counts,
		o_offs, o_ids::text[], o_txids, o_traces::text[], o_payloads::text[], o_created, o_subs
	FROM queen.pop_v3($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`

func popParams(a PopArgs) []any {
	// nil slices as SQL NULL, whatever the encoder does with them
	var names, unprov any
	if a.Names != nil {
		names = a.Names
	}
	if a.Unprov != nil {
		unprov = a.Unprov
	}
	return []any{a.Tenant, a.Queue, a.Group, names, a.ScanLimit, a.Budget, a.MaxParts, a.LeaseID,
		a.LeaseSeconds, a.AutoAck, a.Owner, a.SubMode, a.SubFrom, a.MaxBytes, unprov}
}

// Pop runs the claim core: the fast claim first when the job qualifies
// (claimfast.go), the general path otherwise or when it answers nothing.
func (db *DB) Pop(ctx context.Context, a PopArgs) (*PopOutcome, error) {
	outs, err := db.PopMany(ctx, []PopArgs{a})
	if err != nil {
		// one job: it was in the transaction that failed
		return nil, err
	}
	return outs[0], nil
}

// PopMany runs the claim core once per job, in one pipelined round trip and
// one transaction (implicit, one commit): each job that qualifies as the
// fast claim (claimfast.go), each other job as queen.pop_v3. The fast
// claims that answered nothing then run as pop_v3, in a second round trip
// and transaction. The outcomes are in job order.
//
// When the second transaction fails, the first committed: PopMany returns
// the error with the outcomes of the first's jobs and nil for the
// second's, which claimed nothing. Those outcomes must be delivered, not
// run again: an autoAck claim of the first has already moved its cursor.
// When the first fails, outs is nil and nothing was claimed, unless the
// failure hid the commit's outcome (a lost connection, as with any call)
// or came from reading the answer back (a malformed row: the transaction
// commits as the batch is closed, and the claims' leases run out).
func (db *DB) PopMany(ctx context.Context, jobs []PopArgs) ([]*PopOutcome, error) {
	outs, _, err := db.PopManyAcks(ctx, jobs, nil)
	return outs, err
}

// PopManyAcks is PopMany with CAS acks (AckCAS) in its first transaction,
// ahead of the claims: one commit for both. The acks' results come back
// whenever that transaction committed, also when the second failed.
func (db *DB) PopManyAcks(ctx context.Context, jobs []PopArgs, pairs []CASPair) ([]*PopOutcome, []CASResult, error) {
	outs := make([]*PopOutcome, len(jobs))
	all := make([]int, len(jobs))
	for i := range jobs {
		all[i] = i
	}
	again, cas, err := db.popBatch(ctx, jobs, all, outs, true, pairs)
	if err != nil {
		return nil, nil, err
	}
	if len(again) == 0 {
		return outs, cas, nil
	}
	if _, _, err := db.popBatch(ctx, jobs, again, outs, false, nil); err != nil {
		for _, i := range again {
			outs[i] = nil // read before the failure, perhaps, but rolled back
		}
		return outs, cas, err
	}
	return outs, cas, nil
}

// popBatch runs the CAS acks of pairs and jobs[idx...] in one pipelined
// batch (one transaction) and fills outs: with fast, the claims the fast
// claim takes as one claim set (claimset.go), the others of them as single
// fast claims after it, and the rest as pop_v3. It returns the jobs whose
// fast claim answered nothing. With no jobs it is AckCAS's call.
func (db *DB) popBatch(ctx context.Context, jobs []PopArgs, idx []int, outs []*PopOutcome, fast bool, pairs []CASPair) ([]int, []CASResult, error) {
	b := &pgx.Batch{}
	var set []int
	rest := idx
	if fast && !db.noClaimSets {
		set, rest = claimSetJobs(jobs, idx)
	}
	generic := len(pairs) > 0 || len(set) > 0
	if generic {
		b.Queue(genericPlansSQL)
	}
	if len(pairs) > 0 {
		b.Queue(ackCASSQL, casParams(pairs)...)
	}
	if len(set) > 0 {
		b.Queue(claimSetSQL, claimSetParams(jobs, set)...)
	}
	if generic {
		b.Queue(resetPlansSQL) // the other statements keep the session's mode
	}
	isFast := make([]bool, len(rest))
	for k, i := range rest {
		a := jobs[i]
		if fast && fastClaimable(a) {
			isFast[k] = true
			b.Queue(fastClaimSQL, fastParams(a)...)
		} else {
			b.Queue(popSQL, popParams(a)...)
		}
	}
	what, acksWhat := "pop", "pop: ack cas" // errors name the call
	if len(idx) == 0 {
		what, acksWhat = "ack cas", "ack cas" // AckCAS: acks alone
	}
	br := db.pool.SendBatch(ctx, b)
	if generic {
		if _, err := br.Exec(); err != nil {
			br.Close()
			// (also any error of sending the batch)
			return nil, nil, fmt.Errorf("%s: %w", what, err)
		}
	}
	var cas []CASResult
	if len(pairs) > 0 {
		rs, err := br.Query()
		if err == nil {
			cas, err = scanCAS(rs, len(pairs))
		}
		if err != nil {
			br.Close()
			return nil, nil, fmt.Errorf("%s: %w", acksWhat, err)
		}
	}
	var again []int
	if len(set) > 0 {
		rs, err := br.Query()
		if err == nil {
			err = scanClaimSet(rs, jobs, set, outs)
			rs.Close()
		}
		if err != nil {
			br.Close()
			return nil, nil, fmt.Errorf("pop: claim set of %d: %w", len(set), err)
		}
		db.claimSetFlushes.Add(1)
		for _, i := range set {
			if outs[i] == nil {
				again = append(again, i)
			}
		}
	}
	if generic {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return nil, nil, fmt.Errorf("%s: reset plan_cache_mode: %w", what, err)
		}
	}
	for k, i := range rest {
		a := jobs[i]
		rs, err := br.Query()
		if err != nil {
			br.Close()
			return nil, nil, fmt.Errorf("pop %s (job %d of %d): %w", a.Queue, i+1, len(jobs), err)
		}
		var out *PopOutcome
		if isFast[k] {
			out, err = scanFast(rs, a)
		} else {
			out, err = scanPop(rs)
		}
		rs.Close()
		if err != nil {
			br.Close()
			return nil, nil, fmt.Errorf("pop %s (job %d of %d): %w", a.Queue, i+1, len(jobs), err)
		}
		if out == nil {
			again = append(again, i)
		}
		outs[i] = out
	}
	// Close reads the Sync: the commit's outcome.
	if err := br.Close(); err != nil {
		return nil, nil, fmt.Errorf("%s: commit of %d jobs and %d acks: %w", what, len(idx), len(pairs), err)
	}
	slices.Sort(again) // the set's misses came first: back to job order
	return again, cas, nil
}

func scanPop(rs pgx.Rows) (*PopOutcome, error) {
	var (
		pids, traces, payloads, subs []*string
		seeded                       *bool
		delay, window                *int32
		names, verdicts, ids, txids  []string
		until                        []*time.Time
		drained                      []bool
		retries, counts              []int32
		offs                         []int64
		created                      []time.Time
	)
	var qid *string
	if !rs.Next() {
		if err := rs.Err(); err != nil {
			return nil, err
		}
		return nil, errors.New("no answer row")
	}
	if err := rs.Scan(&qid, &seeded, &delay, &window, &names, &pids, &verdicts, &until, &drained, &retries,
		&counts, &offs, &ids, &txids, &traces, &payloads, &created, &subs); err != nil {
		return nil, fmt.Errorf("scan: %w", err)
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, err
	}
	nv, nm := len(names), len(offs)
	if len(pids) != nv || len(verdicts) != nv || len(until) != nv || len(drained) != nv || len(retries) != nv ||
		len(counts) != nv || len(ids) != nm || len(txids) != nm || len(traces) != nm || len(payloads) != nm ||
		len(created) != nm || len(subs) != nm {
		return nil, errors.New("arrays of unequal length")
	}
	out := &PopOutcome{QueueID: deref(qid), Seeded: seeded != nil && *seeded,
		Delay: int(derefInt(delay)), Window: int(derefInt(window))}
	if nv > 0 {
		out.Verdicts = make([]Verdict, nv)
	}
	if nm > 0 {
		out.Messages = make([]PopMessage, 0, nm)
	}
	for i := range names {
		v := Verdict{Name: names[i], PartitionID: deref(pids[i]), Kind: protocol.Verdict(verdicts[i]), Drained: drained[i]}
		if until[i] != nil {
			v.Until = *until[i]
		}
		out.Verdicts[i] = v
		for k := 0; k < int(counts[i]); k++ {
			j := len(out.Messages)
			if j >= nm {
				return nil, errors.New("more messages counted than answered")
			}
			m := PopMessage{Partition: names[i], PartitionID: v.PartitionID, Off: offs[j], ID: ids[j], TxID: txids[j],
				Trace: traces[j], CreatedAt: created[j], Sub: subs[j], Retry: int(retries[i])}
			if payloads[j] != nil {
				m.Payload = []byte(*payloads[j])
			} else {
				m.Payload = []byte("null")
			}
			out.Messages = append(out.Messages, m)
		}
	}
	if len(out.Messages) != nm {
		return nil, errors.New("messages not counted by any candidate")
	}
	return out, nil
}

// ReleaseClaim ends lease on the given partitions of group only: a claim
// taken ahead that no pop took (broker/prefetch.go). Rows of other
// partitions under the same lease id are left alone, so a release that
// comes late never ends another claim under that id. It returns how many
// rows it released.
func (db *DB) ReleaseClaim(ctx context.Context, group, lease string, partitionIDs []string) (int64, error) {
	var n int64
	err := db.Retry(ctx, func() error {
		// Rows are locked in (partition, group) order, as in ReleaseLeases.
		tag, err := db.pool.Exec(ctx, `WITH l AS (
				SELECT partition_id FROM queen.consumers
				WHERE partition_id = ANY($1::uuid[]) AND consumer_group = $2 AND lease_id = $3
				ORDER BY partition_id FOR UPDATE)
			UPDATE queen.consumers c
			SET lease_id = NULL, lease_owner = NULL, lease_expires_at = NULL, batch_end = c.committed_offset
			FROM l WHERE c.partition_id = l.partition_id AND c.consumer_group = $2 AND c.lease_id = $3`,
			partitionIDs, group, lease)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		return nil
	})
	return n, err
}

// ReleaseLeases ends the given leases of tenant's queues (their messages
// become claimable at once) in one statement. Rows of other tenants are
// never touched. It returns the leases it released rows of (a lease
// nobody claimed, or one already ended, has none) and, in busy, those
// with rows another transaction holds: those rows are skipped, not waited
// for, so one held row cannot hold up the others (the caller tries those
// leases again, broker/release.go).
func (db *DB) ReleaseLeases(ctx context.Context, tenant string, leaseIDs []string) (released, busy map[string]bool, err error) {
	// Rows are locked in (partition, group) order, the order acks and pops
	// take them in.
	err = db.Retry(ctx, func() error {
		released, busy = map[string]bool{}, map[string]bool{}
		rows, err := db.pool.Query(ctx, `WITH seen AS (
				SELECT c.partition_id, c.consumer_group, c.lease_id FROM queen.consumers c
				JOIN queen.partitions p ON p.id = c.partition_id
				JOIN queen.queues q ON q.id = p.queue_id AND q.tenant = $1
				WHERE c.lease_id = ANY($2::text[])),
			l AS (
				SELECT c.partition_id, c.consumer_group, c.lease_id FROM queen.consumers c
				JOIN seen s ON s.partition_id = c.partition_id AND s.consumer_group = c.consumer_group
				WHERE c.lease_id = s.lease_id
				ORDER BY c.partition_id, c.consumer_group FOR UPDATE OF c SKIP LOCKED),
			u AS (
				UPDATE queen.consumers c
				SET lease_id = NULL, lease_owner = NULL, lease_expires_at = NULL, batch_end = c.committed_offset
				FROM l WHERE c.partition_id = l.partition_id AND c.consumer_group = l.consumer_group
				  AND c.lease_id = l.lease_id
				RETURNING l.partition_id, l.consumer_group, l.lease_id)
			SELECT u.lease_id, true FROM u
			UNION ALL
			SELECT s.lease_id, false FROM seen s
			WHERE NOT EXISTS (SELECT 1 FROM l WHERE l.partition_id = s.partition_id AND l.consumer_group = s.consumer_group)`,
			tenant, leaseIDs)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id string
			var done bool
			if err := rows.Scan(&id, &done); err != nil {
				rows.Close()
				return err
			}
			if done {
				released[id] = true
			} else {
				busy[id] = true
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, nil, fmt.Errorf("release leases: %w", err)
	}
	return released, busy, nil
}

// AckRow is one acknowledgement.
type AckRow struct {
	Group, PartitionID, TxID string
	Status                   protocol.AckStatus // as the client sent it; ack_v2 lowercases it, "" = completed
	LeaseID, Error           string
}

// AckOutcome reports one AckRow.
type AckOutcome struct {
	Idx         int
	Success     bool
	Error       string
	Queue       string
	Partition   string
	Released    bool // the (partition, group) lease ended with this call
	DLQ         bool
	Pending     bool // the partition still has messages after the group's cursor
	PartitionID string
	Group       string
}

// Ack applies acknowledgements in one round trip (queen.ack_v2). Outcomes
// are returned in input order.
func (db *DB) Ack(ctx context.Context, tenant string, rows []AckRow) ([]AckOutcome, error) {
	return ack(ctx, db.pool, tenant, rows, false)
}

// Ack applies acknowledgements inside the transaction; a failed ack is
// dead-lettered at once (transaction semantics).
func (t *Tx) Ack(ctx context.Context, tenant string, rows []AckRow) ([]AckOutcome, error) {
	return ack(ctx, t.tx, tenant, rows, true)
}

func ack(ctx context.Context, q querier, tenant string, rows []AckRow, txMode bool) ([]AckOutcome, error) {
	n := len(rows)
	groups, pids, txids, sts, leases, errs := make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n)
	for i, r := range rows {
		groups[i], pids[i], txids[i], sts[i], leases[i], errs[i] = r.Group, r.PartitionID, r.TxID, string(r.Status), r.LeaseID, r.Error
	}
	rs, err := q.Query(ctx, `SELECT o_idx, o_success, o_error, o_queue, o_partition, o_released, o_dlq,
			o_pending, o_pid, o_group
		FROM queen.ack_v2($1, $2, $3::text[]::uuid[], $4, $5, $6, $7, $8)`, // text[]: see push
		tenant, groups, pids, txids, sts, leases, errs, txMode)
	if err != nil {
		return nil, fmt.Errorf("ack: %w", err)
	}
	defer rs.Close()
	out := make([]AckOutcome, n)
	for rs.Next() {
		var o AckOutcome
		var e, qn, pn, pid *string
		if err := rs.Scan(&o.Idx, &o.Success, &e, &qn, &pn, &o.Released, &o.DLQ, &o.Pending, &pid, &o.Group); err != nil {
			return nil, fmt.Errorf("ack: scan: %w", err)
		}
		if o.Idx < 0 || o.Idx >= n {
			return nil, fmt.Errorf("ack: item %d of %d answered", o.Idx, n)
		}
		o.Error, o.Queue, o.Partition, o.PartitionID = deref(e), deref(qn), deref(pn), deref(pid)
		out[o.Idx] = o
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("ack: %w", err)
	}
	return out, nil
}

// CheckLeases tells whether every lease id is live, locking the consumer rows
// it covers for the rest of the transaction.
func (t *Tx) CheckLeases(ctx context.Context, tenant string, leaseIDs []string) (bool, error) {
	if len(leaseIDs) == 0 {
		return true, nil
	}
	var live int
	err := t.tx.QueryRow(ctx, `SELECT count(DISTINCT x.lease_id) FROM (
			SELECT c.lease_id FROM queen.consumers c
			JOIN queen.partitions p ON p.id = c.partition_id
			JOIN queen.queues q ON q.id = p.queue_id AND q.tenant = $1
			WHERE c.lease_id = ANY($2) AND c.lease_expires_at > clock_timestamp()
			ORDER BY c.partition_id, c.consumer_group
			FOR UPDATE OF c) x`, tenant, leaseIDs).Scan(&live)
	if err != nil {
		return false, fmt.Errorf("check leases: %w", err)
	}
	distinct := map[string]bool{}
	for _, id := range leaseIDs {
		distinct[id] = true
	}
	return live == len(distinct), nil
}

// ExtendLease pushes a live lease's expiry to max(current, now + seconds)
// on every partition it holds. It returns the new expiry, or found=false
// with expired telling why.
func (db *DB) ExtendLease(ctx context.Context, tenant, leaseID string, seconds int) (until time.Time, found, expired bool, err error) {
	// Rows are locked in (partition, group) order, as in ReleaseLeases.
	var ts []time.Time
	err = db.Retry(ctx, func() error {
		rs, err := db.pool.Query(ctx, `WITH l AS (
				SELECT c.partition_id, c.consumer_group FROM queen.consumers c
				JOIN queen.partitions p ON p.id = c.partition_id
				JOIN queen.queues q ON q.id = p.queue_id AND q.tenant = $1
				WHERE c.lease_id = $2 AND c.lease_expires_at > clock_timestamp()
				ORDER BY c.partition_id, c.consumer_group FOR UPDATE OF c)
			UPDATE queen.consumers c
			SET lease_expires_at = greatest(c.lease_expires_at, clock_timestamp() + make_interval(secs => $3))
			FROM l WHERE c.partition_id = l.partition_id AND c.consumer_group = l.consumer_group
			  AND c.lease_id = $2 AND c.lease_expires_at > clock_timestamp()
			RETURNING c.lease_expires_at`, tenant, leaseID, seconds)
		if err != nil {
			return err
		}
		ts, err = pgx.CollectRows(rs, pgx.RowTo[time.Time])
		return err
	})
	if err != nil {
		return time.Time{}, false, false, fmt.Errorf("extend lease: %w", err)
	}
	for _, t := range ts {
		if t.After(until) {
			until = t
		}
	}
	if len(ts) > 0 {
		return until, true, false, nil
	}
	err = db.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM queen.consumers WHERE lease_id = $1)`, leaseID).Scan(&expired)
	if err != nil {
		return time.Time{}, false, false, fmt.Errorf("extend lease: %w", err)
	}
	return time.Time{}, false, expired, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func derefInt(i *int32) int32 {
	if i == nil {
		return 0
	}
	return *i
}

// ReseedRow is one probably-pending partition.
type ReseedRow struct {
	PartitionID, Name string
	AgeMs             *int64 // since its last write, on the database's clock; nil before the first push
}

// ReseedPage returns up to limit probably-pending partitions of (queue,
// group) with ids after `after` ("" = from the start), in id order.
func (db *DB) ReseedPage(ctx context.Context, tenant, queue, group, after string, limit int) ([]ReseedRow, error) {
	var afterArg any
	if after != "" {
		afterArg = after
	}
	rs, err := db.pool.Query(ctx, `SELECT o_pid::text, o_name, o_age_ms FROM queen.hotlist_reseed_v2($1, $2, $3, $4::uuid, $5)`,
		tenant, queue, group, afterArg, limit)
	if err != nil {
		return nil, fmt.Errorf("reseed %s/%s: %w", queue, group, err)
	}
	rows, err := pgx.CollectRows(rs, pgx.RowToStructByPos[ReseedRow])
	if err != nil {
		return nil, fmt.Errorf("reseed %s/%s: %w", queue, group, err)
	}
	return rows, nil
}
