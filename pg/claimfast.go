package pg

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"queen-node/protocol"
)

// The fast claim is the claim core's common case as one statement: a pop
// of one partition (partitions=1, the API's default) with a lease, whose
// first candidate has its consumer row, no live lease, no offsets acked past
// a gap, and messages past its cursor, in a queue without delayedProcessing
// or windowBuffer. It reads each message once, caps the bytes with a
// running sum, and writes the lease, as queen.pop_v3 does for such a
// candidate (docs/storage.md, "The fast claim"). PL/pgSQL runs pop_v3's
// six statements with an interpreter step between each, about half of its
// time; this statement does the same work in one executor run.
//
// Anything else gets no row back, has written nothing (the candidate's row
// was not locked, or was locked and left as it was), and goes to
// queen.pop_v3 with all its candidates, in a second transaction: the general
// path gives it the same answer it would have had alone. The differential
// test (claimfast_test.go) holds the two paths to the same outcomes.
//
// Parameters: $1 tenant, $2 queue, $3 candidate, $4 group, $5 budget,
// $6 byte cap (<= 0: none), $7 lease id, $8 owner, $9 lease seconds
// (0: the queue's leaseTime).
const fastClaimSQL = `WITH c AS (
    SELECT q.id AS qid, p.id AS pid, p.last_offset, c.committed_offset, c.retry_count,
           CASE WHEN $9::int > 0 THEN $9::int WHEN q.lease_time > 0 THEN q.lease_time
                ELSE queen.default_lease_seconds() END AS lease_secs
    FROM queen.queues q
    JOIN queen.consumer_groups_metadata md ON md.queue_id = q.id AND md.consumer_group = $4::text
    JOIN queen.partitions p ON p.queue_id = q.id AND p.name = $3::text
    JOIN queen.consumers c ON c.partition_id = p.id AND c.consumer_group = $4::text
    WHERE q.tenant = $1::text AND q.name = $2::text
      AND q.delayed_processing = 0 AND q.window_buffer = 0
      AND cardinality(c.acked) = 0
      AND (c.lease_expires_at IS NULL OR c.lease_expires_at <= clock_timestamp())
      AND p.last_offset > c.committed_offset
    FOR UPDATE OF c SKIP LOCKED),
m AS (
    SELECT l.*, sum(l.size) OVER (ORDER BY l.off ROWS UNBOUNDED PRECEDING) AS run,
           row_number() OVER (ORDER BY l.off) AS rn
    FROM c CROSS JOIN LATERAL (
        SELECT m.off, m.id, m.transaction_id, m.trace_id, m.payload, m.created_at, m.producer_sub,
               CASE WHEN $6::bigint > 0 THEN
                   COALESCE(octet_length(m.payload::text), 4) + octet_length(m.transaction_id)
                   + COALESCE(octet_length(m.producer_sub), 0)
                   + octet_length($2::text) + 2 * octet_length($3::text) + octet_length($4::text)
                   + queen.row_envelope_bytes()
               ELSE 0 END AS size
        FROM queen.messages m
        WHERE m.partition_id = c.pid AND m.off > c.committed_offset AND m.off <= c.last_offset
        ORDER BY m.off
        LIMIT $5::int) l),
k AS (
    SELECT * FROM m WHERE $6::bigint <= 0 OR m.run <= $6::bigint OR m.rn = 1),
u AS (
    UPDATE queen.consumers cc
    SET batch_end = (SELECT max(k.off) FROM k), lease_id = $7::text, lease_owner = $8::text, provisional = false,
        lease_expires_at = clock_timestamp() + make_interval(secs => c.lease_secs),
        updated_at = clock_timestamp()
    FROM c
    WHERE cc.partition_id = c.pid AND cc.consumer_group = $4::text AND EXISTS (SELECT 1 FROM k)
    RETURNING c.qid, c.pid, cc.lease_expires_at, c.retry_count, c.last_offset,
              (SELECT count(*) FROM m) AS nread, (SELECT count(*) FROM k) AS nkept)
SELECT u.qid::text, u.pid::text, u.lease_expires_at, u.retry_count, u.last_offset, u.nread, u.nkept,
       k.off, k.id::text, k.transaction_id, k.trace_id::text, k.payload::text, k.created_at, k.producer_sub
FROM u CROSS JOIN k
ORDER BY k.off`

// fastClaimable reports whether job a tries the fast claim first: a lease
// on one partition, named candidates. Whether the node knows the first
// candidate's consumer row (a.Unprov) does not matter: the statement
// finds the row (and the group's marker) or answers nothing, and a miss costs one short statement
// before pop_v3, against a pop_v3 call (several times dearer) for every
// hit. Besides the misses every fast claim has (an empty, leased or held
// first candidate), a missing row misses: on a new queue or group, until
// the claims and the bulk provisioning have made the rows. Hits on rows the
// node has not learnt: every claim of a restarted node on a queue it
// served before (docs/storage.md, "The fast claim").
func fastClaimable(a PopArgs) bool {
	return len(a.Names) > 0 && a.MaxParts == 1 && !a.AutoAck && a.Budget > 0 && a.LeaseID != ""
}

func fastParams(a PopArgs) []any {
	return []any{a.Tenant, a.Queue, a.Names[0], a.Group, a.Budget, a.MaxBytes, a.LeaseID, a.Owner, a.LeaseSeconds}
}

// scanFast reads the fast claim's rows into the outcome pop_v3 would have
// given: the first candidate took, the others were not evaluated
// (requeue), as a claim of one partition stops at its first take. nil: no
// row, the claim goes to the general path.
func scanFast(rs pgx.Rows, a PopArgs) (*PopOutcome, error) {
	var (
		out  *PopOutcome
		head fastHead
		row  fastRow
	)
	// The claim's columns repeat on every message row: read on the first
	// only (nil skips a column), as the payload is read once into bytes.
	cols := head.dest()
	skip := make([]any, len(cols))
	dest := make([]any, 0, len(cols)+7)
	for rs.Next() {
		if out != nil {
			cols = skip
		}
		if err := rs.Scan(row.dest(append(dest[:0], cols...))...); err != nil {
			return nil, fmt.Errorf("scan: %w", err)
		}
		if out == nil {
			out = head.outcome(a)
		}
		out.Messages = append(out.Messages, row.message(a, head))
	}
	if err := rs.Err(); err != nil {
		return nil, err
	}
	if out == nil {
		return nil, nil
	}
	if err := head.finish(out, a); err != nil {
		return nil, fmt.Errorf("fast claim: %w", err)
	}
	return out, nil
}

// fastHead is a fast claim's own columns, repeated on each of its rows.
type fastHead struct {
	qid, pid     string
	until        time.Time
	retry        int32
	last         int64 // the partition's watermark at claim time
	nread, nkept int64 // messages read past the cursor, and kept within the byte cap
}

func (h *fastHead) dest() []any {
	return []any{&h.qid, &h.pid, &h.until, &h.retry, &h.last, &h.nread, &h.nkept}
}

// outcome is the claim's answer before its messages: the first candidate
// took, the others were not evaluated.
func (h *fastHead) outcome(a PopArgs) *PopOutcome {
	out := &PopOutcome{QueueID: h.qid, Seeded: true, Fast: true, Verdicts: make([]Verdict, len(a.Names)),
		Messages: make([]PopMessage, 0, h.nkept)}
	out.Verdicts[0] = Verdict{Name: a.Names[0], PartitionID: h.pid, Kind: protocol.VerdictTook, Until: h.until}
	for i := 1; i < len(a.Names); i++ {
		out.Verdicts[i] = Verdict{Name: a.Names[i], Kind: protocol.VerdictRequeue}
	}
	return out
}

// finish checks that every kept message came back and sets Drained as
// pop_v3 does: the served end reached the watermark read at claim time,
// or every message up to it was served (fewer than the budget, none left
// out by the byte cap).
func (h *fastHead) finish(out *PopOutcome, a PopArgs) error {
	if int64(len(out.Messages)) != h.nkept {
		return fmt.Errorf("%d rows for %d messages", len(out.Messages), h.nkept)
	}
	end := out.Messages[len(out.Messages)-1].Off
	full := h.nkept < h.nread
	out.Verdicts[0].Drained = end >= h.last || (h.nkept < int64(a.Budget) && !full)
	return nil
}

// fastRow is one served message's columns.
type fastRow struct {
	off        int64
	id, txid   string
	trace, sub *string
	pay        []byte
	created    time.Time
}

// dest appends the row's columns, in the statements' order, to cols.
func (r *fastRow) dest(cols []any) []any {
	*r = fastRow{}
	return append(cols, &r.off, &r.id, &r.txid, &r.trace, &r.pay, &r.created, &r.sub)
}

func (r *fastRow) message(a PopArgs, h fastHead) PopMessage {
	m := PopMessage{Partition: a.Names[0], PartitionID: h.pid, Off: r.off, ID: r.id, TxID: r.txid, Trace: r.trace,
		CreatedAt: r.created, Sub: r.sub, Retry: int(h.retry), Payload: r.pay}
	if r.pay == nil {
		m.Payload = []byte("null")
	}
	return m
}
