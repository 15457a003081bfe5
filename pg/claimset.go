package pg

import (
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
)

// The claim set is the fast claim (claimfast.go) for several claims of one
// flush in one statement: each claim is a row of the input arrays, and the
// statement does for each what fastClaimSQL does for one. A flush of k
// claims thus costs one executor run and one round of protocol messages
// instead of k, so a flight's length grows with its messages, not with a
// statement per claim (docs/storage.md, "The claim set").
//
// Its input never holds two claims of one consumer row (one partition of
// one group): claimSetJobs leaves the second to the single statement,
// after the set, where it finds the row leased and goes to pop_v3, as it
// would after the first's single statement. In one statement, both would
// read the row, the UPDATE would write it once with either claim's lease
// (the plan decides which), and RETURNING would answer only that one: no
// message twice, but not the answer the single statements give.
//
// A claim that gets no row here has written nothing and goes to pop_v3, as
// after the single statement. The differential test (claimset_test.go)
// holds the set to the single statement's outcomes.
//
// Its plan must not depend on the tables' sizes: the node prepares it
// once per connection (pgx's statement cache) and runs it under a generic
// plan (genericPlansSQL), perhaps made while the queue was small. So
// each claim finds its row in a LATERAL subquery on its own values, where every lookup is an equality on a
// unique key (the single statement's lookups), and the UPDATE finds the
// rows it locked by their ctid (no other transaction can move a row this
// statement locked) instead of a join that could become a scan of
// queen.consumers. One difference with the single statement: a row that
// another transaction updated and committed after this statement's
// snapshot, and still qualifies, is locked in its new version, which the
// UPDATE's scan of the snapshot does not see: that claim gets no row (the
// single statement finds the old version through the key and follows
// it), stays locked until the flush's first transaction ends, and goes to
// pop_v3 in the second. A second claim of the flush on that row (left out
// of the set) then takes it, where it would have found the first's lease.
//
// The byte cap's running sum is taken per claim, in its LATERAL
// subquery, over the rows the index returns in offset order: the flush's
// messages (with their payloads) are not sorted for it; the final ORDER
// BY, which scanClaimSet relies on, sorts the kept rows.
//
// Parameters, one element per claim: $1 tenant, $2 queue, $3 candidate,
// $4 group, $5 budget, $6 byte cap (<= 0: none), $7 lease id, $8 owner, $9
// lease seconds (0: the queue's leaseTime). The rows come back by claim
// (o_idx, 1-based) and offset.
const claimSetSQL = `WITH j AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[], $6::bigint[],
                         $7::text[], $8::text[], $9::int[])
        WITH ORDINALITY AS j(tenant, queue, name, grp, budget, cap, lease, owner, secs, idx)),
c AS MATERIALIZED (
    SELECT j.idx, j.queue, j.name, j.grp, j.budget, j.cap, j.lease, j.owner, x.*
    FROM j CROSS JOIN LATERAL (
        SELECT c.ctid AS rid, q.id AS qid, p.id AS pid, p.last_offset, c.committed_offset, c.retry_count,
               CASE WHEN j.secs > 0 THEN j.secs WHEN q.lease_time > 0 THEN q.lease_time
                    ELSE queen.default_lease_seconds() END AS lease_secs
        FROM queen.queues q
        JOIN queen.consumer_groups_metadata md ON md.queue_id = q.id AND md.consumer_group = j.grp
        JOIN queen.partitions p ON p.queue_id = q.id AND p.name = j.name
        JOIN queen.consumers c ON c.partition_id = p.id AND c.consumer_group = j.grp
        WHERE q.tenant = j.tenant AND q.name = j.queue
          AND q.delayed_processing = 0 AND q.window_buffer = 0
          AND cardinality(c.acked) = 0
          AND (c.lease_expires_at IS NULL OR c.lease_expires_at <= clock_timestamp())
          AND p.last_offset > c.committed_offset
        FOR UPDATE OF c SKIP LOCKED) x),
m AS MATERIALIZED (
    SELECT c.idx, l.*, (c.cap <= 0 OR l.run <= c.cap OR l.rn = 1) AS kept
    FROM c CROSS JOIN LATERAL (
        SELECT s.*, sum(s.size) OVER w AS run, row_number() OVER w AS rn
        FROM (
            SELECT m.off, m.id, m.transaction_id, m.trace_id, m.payload, m.created_at, m.producer_sub,
                   CASE WHEN c.cap > 0 THEN
                       COALESCE(octet_length(m.payload::text), 4) + octet_length(m.transaction_id)
                       + COALESCE(octet_length(m.producer_sub), 0)
                       + octet_length(c.queue) + 2 * octet_length(c.name) + octet_length(c.grp)
                       + queen.row_envelope_bytes()
                   ELSE 0 END AS size
            FROM queen.messages m
            WHERE m.partition_id = c.pid AND m.off > c.committed_offset AND m.off <= c.last_offset
            ORDER BY m.off
            LIMIT c.budget) s
        WINDOW w AS (ORDER BY s.off ROWS UNBOUNDED PRECEDING)) l),
a AS (
    SELECT m.idx, max(m.off) FILTER (WHERE m.kept) AS end_off, count(*) FILTER (WHERE m.kept) AS nkept,
           count(*) AS nread
    FROM m GROUP BY m.idx),
u AS (
    UPDATE queen.consumers cc
    SET batch_end = a.end_off, lease_id = c.lease, lease_owner = c.owner, provisional = false,
        lease_expires_at = clock_timestamp() + make_interval(secs => c.lease_secs),
        updated_at = clock_timestamp()
    FROM c JOIN a ON a.idx = c.idx
    WHERE cc.ctid = c.rid AND cc.partition_id = c.pid AND cc.consumer_group = c.grp
    RETURNING c.idx, c.qid, c.pid, cc.lease_expires_at, c.retry_count, c.last_offset, a.nread, a.nkept)
SELECT u.idx, u.qid::text, u.pid::text, u.lease_expires_at, u.retry_count, u.last_offset, u.nread, u.nkept,
       k.off, k.id::text, k.transaction_id, k.trace_id::text, k.payload::text, k.created_at, k.producer_sub
FROM u JOIN m k ON k.idx = u.idx AND k.kept
ORDER BY u.idx, k.off`

// claimSetJobs picks the jobs of idx that go into the claim set: those the
// fast claim takes (fastClaimable), the first of each consumer row only.
// The rest are returned in rest, in order. A set of fewer than two claims
// is none: one claim goes as the single statement, whose plan is simpler.
//
// The set runs before the rest, so a fast claim goes ahead of a general
// claim (pop_v3: several partitions, autoAck...) that came before it in
// the flush. That decides only which of two claims naming the same
// partition in one flush gets it, which is rare (the hot-list hands a
// partition to one pop at a time), and either order is one in which the
// two could have arrived.
func claimSetJobs(jobs []PopArgs, idx []int) (set, rest []int) {
	type row struct{ tenant, queue, name, group string }
	seen := map[row]bool{}
	for _, i := range idx {
		a := jobs[i]
		if !fastClaimable(a) || a.Budget > math.MaxInt32 || a.LeaseSeconds > math.MaxInt32 {
			// (the set's int arrays; the single statement's
			// encoder refuses such a value with an error)
			rest = append(rest, i)
			continue
		}
		key := row{a.Tenant, a.Queue, a.Names[0], a.Group}
		if seen[key] {
			rest = append(rest, i)
			continue
		}
		seen[key] = true
		set = append(set, i)
	}
	if len(set) < 2 {
		return nil, idx
	}
	return set, rest
}

// claimSetParams lays the claims of set out as the statement's arrays.
func claimSetParams(jobs []PopArgs, set []int) []any {
	n := len(set)
	var (
		tenants, queues, names, groups, leases, owners = make([]string, n), make([]string, n),
			make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		budgets, secs = make([]int32, n), make([]int32, n)
		caps          = make([]int64, n)
	)
	for k, i := range set {
		a := jobs[i]
		tenants[k], queues[k], names[k], groups[k] = a.Tenant, a.Queue, a.Names[0], a.Group
		budgets[k], caps[k], leases[k], owners[k], secs[k] = int32(a.Budget), a.MaxBytes, a.LeaseID, a.Owner, int32(a.LeaseSeconds)
	}
	return []any{tenants, queues, names, groups, budgets, caps, leases, owners, secs}
}

// scanClaimSet reads the claim set's rows into outs[set[k]] for each
// claim k that took its candidate, with the outcome the single statement
// gives (scanFast, whose pieces it shares). Claims with no row are left
// nil: they go to pop_v3.
func scanClaimSet(rs pgx.Rows, jobs []PopArgs, set []int, outs []*PopOutcome) error {
	heads := make([]fastHead, len(set)) // per claim, as read on its first row
	var (
		idx  int64 // the claim of the row, 1-based
		head fastHead
		row  fastRow
		cur  = -1 // the claim of the rows being read
	)
	cols := append([]any{&idx}, head.dest()...)
	dest := make([]any, 0, len(cols)+7)
	for rs.Next() {
		if err := rs.Scan(row.dest(append(dest[:0], cols...))...); err != nil {
			return fmt.Errorf("scan: %w", err)
		}
		if idx < 1 || idx > int64(len(set)) {
			return fmt.Errorf("row of claim %d, %d claims sent", idx, len(set))
		}
		k := int(idx - 1)
		a := jobs[set[k]]
		if k != cur {
			if outs[set[k]] != nil {
				return fmt.Errorf("claim %d answered twice", idx)
			}
			cur, heads[k] = k, head
			outs[set[k]] = head.outcome(a)
		}
		outs[set[k]].Messages = append(outs[set[k]].Messages, row.message(a, heads[k]))
	}
	if err := rs.Err(); err != nil {
		return err
	}
	for k, i := range set {
		if outs[i] == nil {
			continue
		}
		if err := heads[k].finish(outs[i], jobs[i]); err != nil {
			return fmt.Errorf("claim %d: %w", k+1, err)
		}
	}
	return nil
}
