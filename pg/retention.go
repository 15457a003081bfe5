package pg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// RetentionLeaseTTL is how long the retention lease lasts without being
// renewed; a pass renews it between batches, so only a node that died or
// lost the database mid-pass holds it this long.
const RetentionLeaseTTL = 2 * time.Minute

// ErrRetentionLeaseLost ends a pass whose lease expired under it (another
// node may be running one now).
var ErrRetentionLeaseLost = errors.New("retention lease lost")

// RetentionSession holds the retention lease (a row of queen.singletons,
// migration 10) on a dedicated connection. Its calls run as short
// transactions (one statement each, or the few of one completed batch:
// RetentionDelete), so no row lock or old snapshot is held for the pass's
// length.
//
// A lease row, not a session-level advisory lock: a transaction-mode pooler
// (PgBouncer) gives each transaction any server connection, so a session
// lock would be taken on one and never freed (docs/operations.md,
// "Retention").
type RetentionSession struct {
	conn    *pgxpool.Conn
	token   string
	renewed time.Time // when the lease was last extended, by this node's clock
}

// TryRetentionLock takes the retention lease without waiting. ok is false
// when another session (another node) holds a lease that has not expired;
// the caller then skips its pass. A held session must be Released.
func (db *DB) TryRetentionLock(ctx context.Context, node string) (s *RetentionSession, ok bool, err error) {
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("retention: acquire: %w", err)
	}
	s = &RetentionSession{conn: conn, token: uuid.NewString(), renewed: time.Now()}
	rows, err := conn.Query(ctx, `INSERT INTO queen.singletons AS l (name, holder, node, until)
		VALUES ('retention', $1, $2, now() + make_interval(secs => $3))
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, node = excluded.node, until = excluded.until
		WHERE l.until < now()
		RETURNING 1`, s.token, node, RetentionLeaseTTL.Seconds())
	if err == nil {
		ok = rows.Next()
		rows.Close()
		err = rows.Err()
	}
	if err != nil || !ok {
		conn.Release()
		if err != nil {
			return nil, false, fmt.Errorf("retention: take lease: %w", err)
		}
		return nil, false, nil
	}
	return s, true, nil
}

// renew extends the lease when a quarter of its time has passed since the
// last extension; ErrRetentionLeaseLost when it expired and another session
// took it (or it was released).
func (s *RetentionSession) renew(ctx context.Context) error {
	if time.Since(s.renewed) < RetentionLeaseTTL/4 {
		return nil
	}
	tag, err := s.conn.Exec(ctx, `UPDATE queen.singletons SET until = now() + make_interval(secs => $2)
		WHERE name = 'retention' AND holder = $1`, s.token, RetentionLeaseTTL.Seconds())
	if err != nil {
		return fmt.Errorf("retention: renew lease: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrRetentionLeaseLost
	}
	s.renewed = time.Now()
	return nil
}

// Release frees the lease and returns the connection to the pool. A lease
// that cannot be freed (the database is away) expires by itself after
// RetentionLeaseTTL.
func (s *RetentionSession) Release() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = s.conn.Exec(ctx, `DELETE FROM queen.singletons WHERE name = 'retention' AND holder = $1`, s.token)
	s.conn.Release()
}

// RetentionPartition is one partition's retention plan, read at the start
// of its turn: the queue's options turned into cut-off times (computed by
// PostgreSQL's clock, so node clocks do not matter) and the consumer state
// that decides what is "completed" (docs/api.md, "Retention").
type RetentionPartition struct {
	ID         string
	LastOffset int64

	// Floor is the lowest committed_offset of the partition's consumer rows
	// (every group, __QUEUE_MODE__ included); HasFloor is false without any.
	Floor    int64
	HasFloor bool
	// Blocked: a group subscribed to the queue from the beginning has no
	// consumer row on this partition yet, so nothing here is completed.
	Blocked bool
	// SeedFrom: the earliest subscription start of the groups subscribed
	// to the queue with a start time but no consumer row here; a message
	// is passed by them only if created at or before it. Nil = none.
	SeedFrom *time.Time

	// CompletedCut: completed messages created before it are deleted (the
	// later of the dedup window's and completedRetentionSeconds' cuts).
	CompletedCut time.Time
	// PendingCut: pending messages created before it are deleted
	// (retentionSeconds, maxWaitTimeSeconds); nil = pending messages stay.
	PendingCut *time.Time
	// Messages in (LeaseLo, LeaseHi] are under a live lease of some group:
	// the pending rules leave them alone while it lives. LeaseHi < LeaseLo
	// means no live lease.
	LeaseLo, LeaseHi int64

	// The partition's oldest message (by offset), if any.
	FirstOff     int64
	FirstCreated time.Time
	HasMessages  bool
}

// groupsNotStartedSQL joins, per partition p, the groups subscribed to its
// queue without a consumer row on it: blocked when one of them starts from
// the beginning, seed_from the earliest start of the others. The plan and
// the completed batch's floor read share it.
const groupsNotStartedSQL = `LEFT JOIN LATERAL (
    SELECT bool_or(md.subscription_from IS NULL) AS blocked, min(md.subscription_from) AS seed_from
    FROM queen.consumer_groups_metadata md
    WHERE md.queue_id = p.queue_id
      AND NOT EXISTS (SELECT 1 FROM queen.consumers c2
                      WHERE c2.partition_id = p.id AND c2.consumer_group = md.consumer_group)) r ON true
`

// retentionPlanSQL reads a page of partitions in id order (keyset on the
// partitions primary key) with everything the pass needs for each. Per
// partition it costs index probes only: the consumers primary key
// (partition_id, consumer_group), consumer_groups_metadata's primary key
// (queue_id, consumer_group) and the first entry of the messages primary
// key (partition_id, off). No message is scanned.
const retentionPlanSQL = `
SELECT p.id::text, p.last_offset,
       c.floor, c.lease_lo, c.lease_hi,
       COALESCE(r.blocked, false), r.seed_from,
       greatest(now() - make_interval(secs => greatest(q.dedup_window_seconds, 0)),
                CASE WHEN q.retention_enabled AND q.completed_retention_seconds > 0
                     THEN now() - make_interval(secs => q.completed_retention_seconds) END),
       greatest(CASE WHEN q.retention_enabled AND q.retention_seconds > 0
                     THEN now() - make_interval(secs => q.retention_seconds) END,
                CASE WHEN q.max_wait_time_seconds > 0
                     THEN now() - make_interval(secs => q.max_wait_time_seconds) END),
       f.off, f.created_at
FROM queen.partitions p
JOIN queen.queues q ON q.id = p.queue_id
LEFT JOIN LATERAL (
    SELECT min(c.committed_offset) AS floor,
           min(c.committed_offset) FILTER (WHERE c.lease_expires_at > now()) AS lease_lo,
           max(c.batch_end) FILTER (WHERE c.lease_expires_at > now()) AS lease_hi
    FROM queen.consumers c WHERE c.partition_id = p.id) c ON true
` + groupsNotStartedSQL + `LEFT JOIN LATERAL (
    SELECT m.off, m.created_at FROM queen.messages m
    WHERE m.partition_id = p.id ORDER BY m.off LIMIT 1) f ON true
WHERE p.id > $1::uuid
ORDER BY p.id
LIMIT $2`

// RetentionPartitions returns up to limit partitions with an id after
// after ("" = from the start), in id order, with their retention plan.
func (s *RetentionSession) RetentionPartitions(ctx context.Context, after string, limit int) ([]RetentionPartition, error) {
	if err := s.renew(ctx); err != nil {
		return nil, err
	}
	if after == "" {
		after = "00000000-0000-0000-0000-000000000000"
	}
	rows, err := s.conn.Query(ctx, retentionPlanSQL, after, limit)
	if err != nil {
		return nil, fmt.Errorf("retention: read partitions: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (RetentionPartition, error) {
		var p RetentionPartition
		var floor, leaseLo, leaseHi, firstOff *int64
		var firstCreated *time.Time
		if err := row.Scan(&p.ID, &p.LastOffset, &floor, &leaseLo, &leaseHi, &p.Blocked, &p.SeedFrom,
			&p.CompletedCut, &p.PendingCut, &firstOff, &firstCreated); err != nil {
			return p, err
		}
		if floor != nil {
			p.Floor, p.HasFloor = *floor, true
		}
		p.LeaseLo, p.LeaseHi = 0, -1
		if leaseLo != nil && leaseHi != nil {
			p.LeaseLo, p.LeaseHi = *leaseLo, *leaseHi
		}
		if firstOff != nil && firstCreated != nil {
			p.FirstOff, p.FirstCreated, p.HasMessages = *firstOff, *firstCreated, true
		}
		return p, nil
	})
	if err != nil {
		return nil, fmt.Errorf("retention: read partitions: %w", err)
	}
	return out, nil
}

// Completes reports whether the completed rule can apply to any message of
// the partition: some group has a cursor and none is waiting to start.
func (p *RetentionPartition) Completes() bool { return p.HasFloor && !p.Blocked }

// Youngest is the latest cut-off of the partition's rules: no message
// created at or after it can be deleted now.
func (p *RetentionPartition) Youngest() time.Time {
	y := time.Time{}
	if p.Completes() {
		y = p.CompletedCut
	}
	if p.PendingCut != nil && p.PendingCut.After(y) {
		y = *p.PendingCut
	}
	return y
}

// Upper is the highest offset any rule may delete: the watermark read with
// the plan when a pending rule applies, else the completed floor.
func (p *RetentionPartition) Upper() int64 {
	if p.PendingCut != nil {
		return p.LastOffset
	}
	if p.Completes() {
		return p.Floor
	}
	return 0
}

// RetentionBatch is what one delete batch did.
type RetentionBatch struct {
	Examined  int   // messages looked at (at most the batch size)
	LastOff   int64 // the highest offset looked at; the next batch starts after it
	Completed int64 // completed messages deleted (dedup window or completedRetentionSeconds)
	Pending   int64 // pending messages deleted (retentionSeconds or maxWaitTimeSeconds)
	Young     bool  // a message looked at was too young for every rule: later ones are too
}

// retentionDeleteSQL deletes, among the next $4 messages of one partition
// after offset $2 and up to $3 (a range of the messages primary key
// (partition_id, off), so it reads only those rows), the ones a rule
// selects. Its row locks are those of at most $4 messages, which no push
// or pop waits for (pushes insert new offsets; pops read without locking
// messages). A batch of the completed rule runs it after taking the
// partition row's lock (RetentionDelete); one of the pending rules alone
// runs it as its own transaction and never locks the partition row.
//
// completed: passed by every group's cursor ($5 = lowest committed_offset,
// $6 = a group waits to start from the beginning, $7 = earliest start of
// groups not started here). Completed messages go once created before $8;
// pending ones once created before $9 (NULL = never), unless under a live
// lease ($10, $11].
const retentionDeleteSQL = `
WITH c AS (
    SELECT m.off, m.created_at,
           (m.off <= $5::bigint AND NOT $6::boolean
            AND ($7::timestamptz IS NULL OR m.created_at <= $7::timestamptz)) AS completed
    FROM queen.messages m
    WHERE m.partition_id = $1::uuid AND m.off > $2::bigint AND m.off <= $3::bigint
    ORDER BY m.off
    LIMIT $4),
d AS (
    DELETE FROM queen.messages m
    USING c
    WHERE m.partition_id = $1::uuid AND m.off = c.off
      AND ((c.completed AND c.created_at < $8::timestamptz)
           OR (NOT c.completed AND c.created_at < $9::timestamptz
               AND NOT (c.off > $10::bigint AND c.off <= $11::bigint)))
    RETURNING c.completed, m.transaction_id, m.off),
-- A deleted dead-letter retry copy's record goes with it (80_dlq.sql).
dc AS (
    DELETE FROM queen.dlq_copies x
    USING d
    WHERE x.partition_id = $1::uuid AND x.off = d.off
    RETURNING 1),
-- The deleted messages' traces go with them (traces_message probes, none
-- when nothing was traced), and the per-name counters drop by what went:
-- a message's traces all go at once, so each name loses the message too.
-- trace_names rows follow by their foreign key's cascade. Data-modifying
-- CTEs run whether or not the final SELECT reads them.
tn AS (
    SELECT n.name, count(*) AS traces, count(DISTINCT t.transaction_id) AS msgs
    FROM d
    JOIN queen.traces t ON t.partition_id = $1::uuid AND t.transaction_id = d.transaction_id
    JOIN queen.trace_names n ON n.trace_id = t.id
    GROUP BY n.name),
dt AS (
    DELETE FROM queen.traces t
    USING d
    WHERE t.partition_id = $1::uuid AND t.transaction_id = d.transaction_id
    RETURNING 1),
uc AS (
    UPDATE queen.trace_name_counts k
    SET trace_count = greatest(k.trace_count - tn.traces, 0), message_count = greatest(k.message_count - tn.msgs, 0)
    FROM tn
    WHERE k.partition_id = $1::uuid AND k.name = tn.name
    RETURNING 1)
SELECT (SELECT count(*) FROM c)::int,
       COALESCE((SELECT max(off) FROM c), $2::bigint),
       (SELECT count(*) FROM d WHERE d.completed),
       (SELECT count(*) FROM d WHERE NOT d.completed),
       COALESCE((SELECT bool_or(c.created_at >= $12::timestamptz) FROM c), false)`

// retentionFloorSQL reads one partition's completed floor again, as the
// plan does (retentionPlanSQL): the lowest cursor, whether a group
// subscribed from the beginning has no cursor here yet, and the earliest
// start of the groups subscribed with one.
const retentionFloorSQL = `
SELECT (SELECT min(c.committed_offset) FROM queen.consumers c WHERE c.partition_id = p.id),
       COALESCE(r.blocked, false), r.seed_from
FROM queen.partitions p
` + groupsNotStartedSQL + `WHERE p.id = $1::uuid`

// retentionLockTimeout bounds the wait for a partition's row lock before a
// batch that may delete completed messages; past it the partition waits
// for the next pass.
const retentionLockTimeout = "500ms"

// RetentionDelete runs one delete batch of at most limit messages of p
// after offset after.
//
// A batch that may delete completed messages first takes the partition
// row's FOR UPDATE lock, then reads the floor again, then deletes, in one
// transaction. The floor the plan read can be stale: a group's first pop
// inserts its consumer row (its cursor before these messages) and serves
// the messages in one transaction, which the plan could not see. That
// insert holds the partition row's FOR KEY SHARE lock (the foreign key)
// until it commits, which FOR UPDATE waits for; the floor read after the
// lock sees the new cursor, and a first pop that comes later waits for
// this commit and finds the messages gone before it reads. So a message is
// never deleted as completed after a pop served it (docs/api.md,
// "Retention"). The lock also holds back pushes to the partition for the
// batch's length (pushes take FOR NO KEY UPDATE); a batch deletes at most
// limit messages. A lock not granted within retentionLockTimeout ends the
// partition's turn in this pass (Young, nothing deleted).
func (s *RetentionSession) RetentionDelete(ctx context.Context, p *RetentionPartition, after int64, limit int) (RetentionBatch, error) {
	var b RetentionBatch
	if err := s.renew(ctx); err != nil {
		return b, err
	}
	floor := int64(-1)
	if p.HasFloor {
		floor = p.Floor
	}
	if !p.Completes() {
		// pending rules only: they do not depend on the cursors
		err := s.conn.QueryRow(ctx, retentionDeleteSQL, p.ID, after, p.Upper(), limit,
			floor, p.Blocked, p.SeedFrom, p.CompletedCut, p.PendingCut, p.LeaseLo, p.LeaseHi, p.Youngest()).
			Scan(&b.Examined, &b.LastOff, &b.Completed, &b.Pending, &b.Young)
		if err != nil {
			return b, fmt.Errorf("retention: delete in partition %s: %w", p.ID, err)
		}
		return b, nil
	}
	err := pgx.BeginFunc(ctx, s.conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+retentionLockTimeout+"'"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT 1 FROM queen.partitions WHERE id = $1::uuid FOR UPDATE`, p.ID); err != nil {
			return err
		}
		var fresh *int64
		blocked, seedFrom := false, (*time.Time)(nil)
		if err := tx.QueryRow(ctx, retentionFloorSQL, p.ID).Scan(&fresh, &blocked, &seedFrom); err != nil {
			if errors.Is(err, pgx.ErrNoRows) { // the partition is gone: nothing to delete
				b.Young = true
				return nil
			}
			return err
		}
		floor := int64(-1)
		if fresh != nil {
			floor = *fresh
		}
		return tx.QueryRow(ctx, retentionDeleteSQL, p.ID, after, p.Upper(), limit,
			floor, blocked, seedFrom, p.CompletedCut, p.PendingCut, p.LeaseLo, p.LeaseHi, p.Youngest()).
			Scan(&b.Examined, &b.LastOff, &b.Completed, &b.Pending, &b.Young)
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available: next pass
		return RetentionBatch{LastOff: after, Young: true}, nil
	}
	if err != nil {
		return RetentionBatch{}, fmt.Errorf("retention: delete in partition %s: %w", p.ID, err)
	}
	return b, nil
}

// retentionAdvanceSQL moves the cursors of one partition's groups over the
// offsets no message holds any more, up to $2 (the watermark the pass read
// with its plan, so every message at or below it was committed when the
// pass planned). A cursor stops before the first message still stored,
// whatever its state. Only cursors followed by a hole (no message at
// committed_offset + 1, a primary-key probe; pushes leave no holes) are
// locked and moved, so a pass that runs it for every lagging partition
// writes nothing where there is nothing to pass. Without it a group whose
// unread messages the pending rules deleted would look pending (cursor
// below the watermark) with nothing to deliver until the next push.
//
// Only groups without a live lease move (a live lease's batch is the
// client's; it ends by acks or expiry as usual), and a consumer row a pop
// or ack holds right now is skipped (SKIP LOCKED), so the pass never waits
// for the hot path; the next pass moves it. The remembered acks the
// cursor passes are dropped, and a retry count whose batch is gone starts
// over. Served by the consumers primary key and, per group, one probe of
// the messages primary key (partition_id, off).
const retentionAdvanceSQL = `
UPDATE queen.consumers c
SET committed_offset = t.target,
    batch_end = greatest(c.batch_end, t.target),
    acked = ARRAY(SELECT x FROM unnest(c.acked) x WHERE x > t.target ORDER BY x),
    retry_count = CASE WHEN t.target >= c.batch_end THEN 0 ELSE c.retry_count END,
    updated_at = now()
FROM (SELECT l.consumer_group,
             least(COALESCE((SELECT min(m.off) FROM queen.messages m
                             WHERE m.partition_id = $1::uuid AND m.off > l.committed_offset), $2::bigint + 1) - 1,
                   $2::bigint) AS target
      FROM (SELECT c2.consumer_group, c2.committed_offset
            FROM queen.consumers c2
            WHERE c2.partition_id = $1::uuid AND c2.committed_offset < $2::bigint
              AND (c2.lease_expires_at IS NULL OR c2.lease_expires_at <= now())
              AND NOT EXISTS (SELECT 1 FROM queen.messages m
                              WHERE m.partition_id = $1::uuid AND m.off = c2.committed_offset + 1)
            FOR UPDATE SKIP LOCKED) l) t
WHERE c.partition_id = $1::uuid AND c.consumer_group = t.consumer_group AND t.target > c.committed_offset`

// RetentionAdvance moves p's cursors over deleted offsets up to upTo and
// returns how many groups moved.
func (s *RetentionSession) RetentionAdvance(ctx context.Context, p *RetentionPartition, upTo int64) (int64, error) {
	if err := s.renew(ctx); err != nil {
		return 0, err
	}
	tag, err := s.conn.Exec(ctx, retentionAdvanceSQL, p.ID, upTo)
	if err != nil {
		return 0, fmt.Errorf("retention: advance cursors in partition %s: %w", p.ID, err)
	}
	return tag.RowsAffected(), nil
}
