package pg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// QueueConfig is a queue row's configuration.
type QueueConfig struct {
	Namespace, Task                               string
	LeaseTime, RetryLimit, RetryDelay, Priority   int
	DelayedProcessing, WindowBuffer, MaxSize, TTL int
	DeadLetterQueue, DLQAfterMaxRetries           bool
	RetentionSeconds, CompletedRetentionSeconds   int
	RetentionEnabled, EncryptionEnabled           bool
	MaxWaitTimeSeconds, DedupWindowSeconds        int
}

// Configure creates the queue or replaces every option, and makes sure its
// Default partition exists. It returns the queue and Default partition ids.
func (db *DB) Configure(ctx context.Context, tenant, queue, defaultPartition string, c QueueConfig) (queueID, partitionID string, err error) {
	// A deadlock or a concurrent delete's foreign-key violation rolls the
	// whole transaction back: running it again is safe.
	err = db.InTxRetry(ctx, func(t *Tx) error {
		err := t.tx.QueryRow(ctx, `INSERT INTO queen.queues AS q (id, tenant, name, namespace, task,
				lease_time, retry_limit, retry_delay, priority, delayed_processing, window_buffer,
				max_size, ttl, dead_letter_queue, dlq_after_max_retries, retention_seconds,
				completed_retention_seconds, retention_enabled, encryption_enabled,
				max_wait_time_seconds, dedup_window_seconds)
			VALUES (gen_random_uuid(), $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14,
				$15, $16, $17, $18, $19, $20)
			ON CONFLICT (tenant, name) DO UPDATE SET namespace = EXCLUDED.namespace, task = EXCLUDED.task,
				lease_time = EXCLUDED.lease_time, retry_limit = EXCLUDED.retry_limit,
				retry_delay = EXCLUDED.retry_delay, priority = EXCLUDED.priority,
				delayed_processing = EXCLUDED.delayed_processing, window_buffer = EXCLUDED.window_buffer,
				max_size = EXCLUDED.max_size, ttl = EXCLUDED.ttl,
				dead_letter_queue = EXCLUDED.dead_letter_queue,
				dlq_after_max_retries = EXCLUDED.dlq_after_max_retries,
				retention_seconds = EXCLUDED.retention_seconds,
				completed_retention_seconds = EXCLUDED.completed_retention_seconds,
				retention_enabled = EXCLUDED.retention_enabled,
				encryption_enabled = EXCLUDED.encryption_enabled,
				max_wait_time_seconds = EXCLUDED.max_wait_time_seconds,
				dedup_window_seconds = EXCLUDED.dedup_window_seconds
			RETURNING q.id::text`,
			tenant, queue, c.Namespace, c.Task, c.LeaseTime, c.RetryLimit, c.RetryDelay, c.Priority,
			c.DelayedProcessing, c.WindowBuffer, c.MaxSize, c.TTL, c.DeadLetterQueue, c.DLQAfterMaxRetries,
			c.RetentionSeconds, c.CompletedRetentionSeconds, c.RetentionEnabled, c.EncryptionEnabled,
			c.MaxWaitTimeSeconds, c.DedupWindowSeconds).Scan(&queueID)
		if err != nil {
			return fmt.Errorf("configure %s: %w", queue, err)
		}
		_, err = t.tx.Exec(ctx, `INSERT INTO queen.partitions (id, queue_id, name)
			VALUES (gen_random_uuid(), $1, $2) ON CONFLICT (queue_id, name) DO NOTHING`, queueID, defaultPartition)
		if err != nil {
			return fmt.Errorf("configure %s: default partition: %w", queue, err)
		}
		err = t.tx.QueryRow(ctx, `SELECT id::text FROM queen.partitions WHERE queue_id = $1 AND name = $2`,
			queueID, defaultPartition).Scan(&partitionID)
		if err != nil {
			return fmt.Errorf("configure %s: default partition: %w", queue, err)
		}
		return nil
	})
	return queueID, partitionID, err
}

// detachedTenant owns the queue rows DeleteQueue has detached and not yet
// purged. No API request names it: a control character cannot come from
// the configuration of a real tenant by accident.
const detachedTenant = "\x01deleted"

// Bounds of DeleteQueue's wait for transactions that may still see the
// queue under its name.
const (
	detachWaitMax  = 2 * time.Second
	detachWaitPoll = 5 * time.Millisecond
)

// DeleteQueue deletes a queue with everything below it (partitions,
// messages, cursors, leases, dead letters, group markers), in two steps so
// that it never deadlocks with live traffic (docs/api.md, "queue delete"):
//
//  1. Detach: one short statement moves the queue row to detachedTenant.
//     From its commit on, every request that names the queue sees none and
//     starts a fresh one (push, configure, pop) or finds nothing (ack, DLQ).
//  2. Purge, once the transactions that began before the detach have ended
//     (bounded wait): lock the queue row, its consumer rows, then its
//     partitions, the order pops and acks take them in, and delete.
func (db *DB) DeleteQueue(ctx context.Context, tenant, queue string) (existed bool, err error) {
	var qid string
	err = db.retry(ctx, false, func() error {
		err := db.pool.QueryRow(ctx, `UPDATE queen.queues SET tenant = $3, name = id::text
			WHERE tenant = $1 AND name = $2 RETURNING id::text`, tenant, queue, detachedTenant).Scan(&qid)
		if errors.Is(err, pgx.ErrNoRows) {
			qid, err = "", nil
		}
		return err
	})
	if err != nil {
		return false, fmt.Errorf("delete queue %s: detach: %w", queue, err)
	}
	if qid == "" {
		return false, nil
	}
	start := time.Now()
	if err := db.waitOlderTransactions(ctx); err != nil {
		return true, fmt.Errorf("delete queue %s: %w", queue, err)
	}
	waited := time.Since(start)
	if err := db.purgeQueue(ctx, qid); err != nil {
		return true, fmt.Errorf("delete queue %s: %w", queue, err)
	}
	db.log.Debug("queue deleted", "queue", queue, "waited", waited, "purged_in", time.Since(start)-waited)
	db.purgeLeftovers(ctx)
	return true, nil
}

// purgeLeftovers purges queues detached by a delete that did not finish its
// purge (an error, a node stopped in between). They are invisible to the
// API already; this only frees their space.
func (db *DB) purgeLeftovers(ctx context.Context) {
	rs, err := db.pool.Query(ctx, `SELECT id::text FROM queen.queues WHERE tenant = $1 LIMIT 10`, detachedTenant)
	if err != nil {
		db.log.Warn("purge detached queues", "error", err)
		return
	}
	ids, err := pgx.CollectRows(rs, pgx.RowTo[string])
	if err != nil {
		db.log.Warn("purge detached queues", "error", err)
		return
	}
	for _, id := range ids {
		if err := db.purgeQueue(ctx, id); err != nil {
			db.log.Warn("purge detached queue", "queue_id", id, "error", err)
			return
		}
	}
}

// waitOlderTransactions waits until no other transaction of this database
// that began before now is still running: those may have looked the
// detached queue up by name and still write under it. Waiting makes the
// purge meet them as lock holders to wait for rather than as inserts that
// fail on a vanished row. After detachWaitMax it goes on: a straggler then
// gets a foreign-key violation, which the retries in this package absorb.
func (db *DB) waitOlderTransactions(ctx context.Context) error {
	var since time.Time
	if err := db.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&since); err != nil {
		return fmt.Errorf("wait: %w", err)
	}
	deadline := time.Now().Add(detachWaitMax)
	for {
		var older bool
		err := db.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND xact_start < $1)`,
			since).Scan(&older)
		if err != nil {
			return fmt.Errorf("wait: %w", err)
		}
		if !older || time.Now().After(deadline) {
			return nil
		}
		t := time.NewTimer(detachWaitPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// purgeQueue deletes a detached queue and everything below it.
func (db *DB) purgeQueue(ctx context.Context, qid string) error {
	return db.InTxRetry(ctx, func(t *Tx) error {
		// The queue row first: no partition or group marker can be added
		// under it from here on.
		if _, err := t.tx.Exec(ctx, `SELECT 1 FROM queen.queues WHERE id = $1 FOR UPDATE`, qid); err != nil {
			return fmt.Errorf("purge: lock queue: %w", err)
		}
		if _, err := t.tx.Exec(ctx, `SELECT 1 FROM queen.consumers c
				JOIN queen.partitions p ON p.id = c.partition_id
				WHERE p.queue_id = $1
				ORDER BY c.partition_id, c.consumer_group
				FOR UPDATE OF c`, qid); err != nil {
			return fmt.Errorf("purge: lock consumers: %w", err)
		}
		// Waits for in-flight pushes (they hold their partition rows), so
		// the message delete below sees what they appended.
		rs, err := t.tx.Query(ctx, `SELECT id FROM queen.partitions WHERE queue_id = $1
			ORDER BY id FOR UPDATE`, qid)
		if err != nil {
			return fmt.Errorf("purge: lock partitions: %w", err)
		}
		ids, err := pgx.CollectRows(rs, pgx.RowTo[[16]byte])
		if err != nil {
			return fmt.Errorf("purge: lock partitions: %w", err)
		}
		if _, err := t.tx.Exec(ctx, `DELETE FROM queen.messages WHERE partition_id = ANY($1)`, ids); err != nil {
			return fmt.Errorf("purge: messages: %w", err)
		}
		// Stream state has no foreign key to partitions. The stream_state
		// primary key (query_id, partition_id, key) serves one range per
		// (query, partition); stream queries are few.
		if _, err := t.tx.Exec(ctx, `DELETE FROM queen.stream_state
				WHERE query_id = ANY(ARRAY(SELECT id FROM queen.stream_queries)) AND partition_id = ANY($1)`, ids); err != nil {
			return fmt.Errorf("purge: stream state: %w", err)
		}
		// Cascades to consumers, dead letters and group markers.
		if _, err := t.tx.Exec(ctx, `DELETE FROM queen.partitions WHERE queue_id = $1`, qid); err != nil {
			return fmt.Errorf("purge: partitions: %w", err)
		}
		if _, err := t.tx.Exec(ctx, `DELETE FROM queen.queues WHERE id = $1`, qid); err != nil {
			return fmt.Errorf("purge: queue: %w", err)
		}
		return nil
	})
}

// DLQFilter selects dead letters; empty strings and nil times match all.
// A page is at most Limit rows from Offset and about MaxBytes of answer (0
// = no byte bound); its first row always comes.
type DLQFilter struct {
	Queue, Group, Partition string
	From, To                *time.Time
	Limit, Offset           int
	MaxBytes                int64
}

// DLQRow is one dead letter.
type DLQRow struct {
	MessageID, TxID, PartitionID, Queue, Partition, Group, Error string
	Retry                                                        int
	Payload                                                      []byte
	Sub                                                          *string
	CreatedAt, FailedAt                                          time.Time
	Superseded                                                   bool // a seek or a group delete took it back
}

// DLQPage is a page of dead letters: Total counts every match, More says
// the byte bound stopped the page before its row limit.
type DLQPage struct {
	Rows  []DLQRow
	Total int
	More  bool
}

// dlqWhere is queen.dlq_list_v1's filter, for the count.
const dlqWhere = `FROM queen.dead_letters d
	JOIN queen.partitions p ON p.id = d.partition_id
	JOIN queen.queues q ON q.id = p.queue_id
	WHERE q.tenant = $1 AND ($2 = '' OR q.name = $2) AND ($3 = '' OR d.consumer_group = $3)
	  AND ($4 = '' OR p.name = $4)
	  AND ($5::timestamptz IS NULL OR d.failed_at >= $5)
	  AND ($6::timestamptz IS NULL OR d.failed_at <= $6)`

// ListDLQ returns a page of matching dead letters, newest first
// (queen.dlq_list_v1, which stops at the byte bound), and their total count.
func (db *DB) ListDLQ(ctx context.Context, tenant string, f DLQFilter) (DLQPage, error) {
	var out DLQPage
	args := []any{tenant, f.Queue, f.Group, f.Partition, f.From, f.To}
	if err := db.pool.QueryRow(ctx, "SELECT count(*) "+dlqWhere, args...).Scan(&out.Total); err != nil {
		return DLQPage{}, fmt.Errorf("dlq count: %w", err)
	}
	rs, err := db.pool.Query(ctx, `SELECT o_message_id, o_txid, o_partition_id, o_queue, o_partition, o_group,
			o_error, o_retry_count, o_payload, o_producer_sub, o_created_at, o_failed_at, o_superseded, o_more
		FROM queen.dlq_list_v1($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		append(args, f.Limit, f.Offset, byteBound(f.MaxBytes))...)
	if err != nil {
		return DLQPage{}, fmt.Errorf("dlq list: %w", err)
	}
	defer rs.Close()
	for rs.Next() {
		var r DLQRow
		var more bool
		// The payload is scanned into []byte: held once, as stored.
		if err := rs.Scan(&r.MessageID, &r.TxID, &r.PartitionID, &r.Queue, &r.Partition, &r.Group,
			&r.Error, &r.Retry, &r.Payload, &r.Sub, &r.CreatedAt, &r.FailedAt, &r.Superseded, &more); err != nil {
			return DLQPage{}, fmt.Errorf("dlq scan: %w", err)
		}
		if more {
			out.More = true
			continue
		}
		if r.Payload == nil {
			r.Payload = []byte("null")
		}
		out.Rows = append(out.Rows, r)
	}
	if err := rs.Err(); err != nil {
		return DLQPage{}, fmt.Errorf("dlq list: %w", err)
	}
	return out, nil
}

// DeleteConsumerGroup removes the group's cursors and leases on one queue of
// the tenant (or all its queues when queue is ""), and its subscription
// markers when deleteMetadata is set.
func (db *DB) DeleteConsumerGroup(ctx context.Context, tenant, group, queue string, deleteMetadata bool) (int, error) {
	var n int
	// It deletes consumer rows in no particular order, so it can cross an
	// ack or pop: a deadlock rolls back the whole transaction, retry it.
	err := db.InTxRetry(ctx, func(t *Tx) error {
		// The group's gate, exclusively, then its markers: bulk
		// provisioning and claims hold both (shared) while they make rows,
		// so the delete below starts after they committed and sees them, or
		// they wait for it and find no marker (23_provision.sql,
		// 22_pop_v3.sql). The gate (queen.group_gate_v2) queues fairly, so
		// they cannot hold this delete off as share locks on a marker
		// could; the marker lock is what a node of function set 12 or older
		// takes alone. NO KEY UPDATE is enough to conflict with FOR SHARE,
		// and lets a FOR KEY SHARE holder (a foreign-key check, or
		// TestDLQRetryResurrectsDeletedGroup's device) be, as the marker
		// delete below always has.
		if err := lockGroupGates(ctx, t, tenant, group); err != nil {
			return fmt.Errorf("delete consumer group %s: %w", group, err)
		}
		if _, err := t.tx.Exec(ctx, `SELECT 1 FROM queen.consumer_groups_metadata m
			JOIN queen.queues q ON q.id = m.queue_id
			WHERE q.tenant = $1 AND m.consumer_group = $2 AND ($3 = '' OR q.name = $3)
			ORDER BY m.queue_id FOR NO KEY UPDATE OF m`, tenant, group, queue); err != nil {
			return fmt.Errorf("delete consumer group %s: lock markers: %w", group, err)
		}
		tag, err := t.tx.Exec(ctx, `DELETE FROM queen.consumers c
			USING queen.partitions p, queen.queues q
			WHERE c.partition_id = p.id AND p.queue_id = q.id AND q.tenant = $1
			  AND c.consumer_group = $2 AND ($3 = '' OR q.name = $3)`, tenant, group, queue)
		if err != nil {
			return fmt.Errorf("delete consumer group %s: %w", group, err)
		}
		n = int(tag.RowsAffected())
		// The group starts over: its dead-letter entries no longer tell
		// how a message was last resolved (ack_v2, docs/api.md "Acks").
		_, err = t.tx.Exec(ctx, `UPDATE queen.dead_letters d SET superseded = true
			FROM queen.partitions p, queen.queues q
			WHERE d.partition_id = p.id AND p.queue_id = q.id AND q.tenant = $1
			  AND d.consumer_group = $2 AND ($3 = '' OR q.name = $3) AND NOT d.superseded`, tenant, group, queue)
		if err != nil {
			return fmt.Errorf("delete consumer group %s: dead letters: %w", group, err)
		}
		if deleteMetadata {
			_, err = t.tx.Exec(ctx, `DELETE FROM queen.consumer_groups_metadata m
				USING queen.queues q
				WHERE m.queue_id = q.id AND q.tenant = $1 AND m.consumer_group = $2
				  AND ($3 = '' OR q.name = $3)`, tenant, group, queue)
			if err != nil {
				return fmt.Errorf("delete consumer group %s metadata: %w", group, err)
			}
		}
		return nil
	})
	return n, err
}

// Seek moves the group's cursor on every partition of the queue where it has
// one: to the newest message (toEnd) or to the last message created at or
// before ts. Leases are released and retry counters reset.
func (db *DB) Seek(ctx context.Context, tenant, group, queue string, toEnd bool, ts *time.Time) (int, error) {
	// Two statements in one transaction: the group's consumer rows are
	// locked first (key order), then moved by a statement whose snapshot
	// starts after any retry or push that held them committed, so its
	// target and the copies it keeps in acked (queen.dlq_copies_past) see
	// what that retry wrote; a single UPDATE waiting on the rows would keep
	// its older snapshot and drop a copy for another group. A deadlock with
	// an ack rolls it back whole: retry it.
	// The dead-letter entries past the new cursor are superseded: those
	// messages are pending again (ack_v2, docs/api.md "Acks", rule 5).
	var n int
	err := db.InTxRetry(ctx, func(t *Tx) error {
		if _, err := t.tx.Exec(ctx, `SELECT 1 FROM queen.consumers c
			JOIN queen.partitions p ON p.id = c.partition_id
			JOIN queen.queues q ON q.id = p.queue_id
			WHERE q.tenant = $1 AND q.name = $3 AND c.consumer_group = $2
			ORDER BY c.partition_id FOR UPDATE OF c`, tenant, group, queue); err != nil {
			return err
		}
		return t.tx.QueryRow(ctx, `WITH s AS (UPDATE queen.consumers c
		SET committed_offset = t.target, batch_end = t.target,
			acked = queen.dlq_copies_past(c.partition_id, $2, t.target),
			lease_id = NULL, lease_owner = NULL, lease_expires_at = NULL, retry_count = 0,
			provisional = false, updated_at = clock_timestamp()
		FROM (SELECT p.id, CASE WHEN $4 THEN p.last_offset ELSE
				COALESCE((SELECT max(m.off) FROM queen.messages m
				          WHERE m.partition_id = p.id AND m.created_at <= $5), 0) END AS target
			FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
			WHERE q.tenant = $1 AND q.name = $3) t
		WHERE c.partition_id = t.id AND c.consumer_group = $2
		RETURNING c.partition_id, c.committed_offset),
		d AS (UPDATE queen.dead_letters d SET superseded = true FROM s
			WHERE d.partition_id = s.partition_id AND d.consumer_group = $2
			  AND d.off > s.committed_offset AND NOT d.superseded)
		SELECT count(*) FROM s`,
			tenant, group, queue, toEnd, ts).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("seek %s/%s: %w", group, queue, err)
	}
	return n, nil
}

// MaxMatchQueues bounds MatchQueues: a namespace/task pop considers at most
// this many queues (the first by priority, then name).
const MaxMatchQueues = 1000

// MatchQueues returns the names of the tenant's queues whose namespace and
// task match ("" matches any value), highest priority first, ties in name
// (byte) order, at most MaxMatchQueues of them.
func (db *DB) MatchQueues(ctx context.Context, tenant, namespace, task string) ([]string, error) {
	rs, err := db.pool.Query(ctx, `SELECT name FROM queen.queues
		WHERE tenant = $1 AND ($2 = '' OR namespace = $2) AND ($3 = '' OR task = $3)
		ORDER BY priority DESC, name COLLATE "C" LIMIT $4`, tenant, namespace, task, MaxMatchQueues)
	if err != nil {
		return nil, fmt.Errorf("match queues: %w", err)
	}
	names, err := pgx.CollectRows(rs, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("match queues: %w", err)
	}
	return names, nil
}

// lockGroupGates takes the group's gate (queen.group_gate_v2: one per
// tenant and group, on all its queues) exclusively until the transaction
// ends. Claims and bulk provisioning make a group's rows only under it held
// shared, and an advisory lock queues fairly, so they cannot hold this off.
func lockGroupGates(ctx context.Context, t *Tx, tenant, group string) error {
	if _, err := t.tx.Exec(ctx, `SELECT pg_advisory_xact_lock(queen.group_gate_v2($1, $2))`, tenant, group); err != nil {
		return fmt.Errorf("lock group gate: %w", err)
	}
	return nil
}
