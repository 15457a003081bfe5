package pg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// TraceInsert is one trace event to record (docs/api.md, "Traces").
type TraceInsert struct {
	PartitionID, TransactionID, Group, EventType string
	Data                                         []byte // compact JSON
	Names                                        []string
	Worker                                       string // the recording node's name
}

// TraceRow is a stored trace. The message fields (Queue, Partition,
// Payload) are filled by TracesByName only.
type TraceRow struct {
	ID, TransactionID, PartitionID, EventType, Group, Worker string
	Data                                                     []byte
	CreatedAt                                                time.Time
	Names                                                    []string
	Queue, Partition                                         string
	Payload                                                  []byte // nil when the message is gone
}

// TraceName is one trace name with its counters over the tenant's partitions.
type TraceName struct {
	Name                     string
	TraceCount, MessageCount int64
	LastSeen                 time.Time
}

// RecordTrace stores a trace of the tenant's message (partition id,
// transaction id). found is false when the tenant has no such message.
func (db *DB) RecordTrace(ctx context.Context, tenant string, in TraceInsert) (id string, found bool, err error) {
	err = db.InTxRetry(ctx, func(t *Tx) error {
		id, found = "", false
		// messages_txid serves the message; the queues/partitions join
		// makes another tenant's partition id look absent.
		var msgID string
		err := t.tx.QueryRow(ctx, `SELECT m.id::text FROM queen.messages m
			JOIN queen.partitions p ON p.id = m.partition_id
			JOIN queen.queues q ON q.id = p.queue_id
			WHERE m.partition_id = $2::uuid AND m.transaction_id = $3 AND q.tenant = $1
			FOR KEY SHARE OF p`, tenant, in.PartitionID, in.TransactionID).Scan(&msgID)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("record trace: find message: %w", err)
		}
		// Traces of one message are recorded one at a time (a
		// transaction-scoped advisory lock on the message, the last lock
		// taken): message_count below asks whether the message already has
		// a trace under a name, which a concurrent uncommitted trace would
		// not show, so both would count the message.
		if _, err := t.tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('queen.trace:' || $1 || '/' || $2, 0))`,
			in.PartitionID, in.TransactionID); err != nil {
			return fmt.Errorf("record trace: lock message: %w", err)
		}
		var at time.Time
		err = t.tx.QueryRow(ctx, `INSERT INTO queen.traces (id, tenant, partition_id, transaction_id,
				message_id, consumer_group, event_type, data, worker_id)
			VALUES (gen_random_uuid(), $1, $2::uuid, $3, $4::uuid, $5, $6, $7::jsonb, $8)
			RETURNING id::text, created_at`,
			tenant, in.PartitionID, in.TransactionID, msgID, in.Group, in.EventType, string(in.Data), in.Worker).Scan(&id, &at)
		if err != nil {
			return fmt.Errorf("record trace: insert: %w", err)
		}
		if len(in.Names) > 0 {
			// message_count counts a (message, name) once: the EXISTS reads
			// the message's other traces through traces_message. Before the
			// names insert, so this trace's own names do not count.
			_, err = t.tx.Exec(ctx, `INSERT INTO queen.trace_name_counts AS c
					(partition_id, tenant, name, trace_count, message_count, last_seen)
				SELECT $1::uuid, $2, n, 1,
					CASE WHEN EXISTS (SELECT 1 FROM queen.traces t JOIN queen.trace_names tn ON tn.trace_id = t.id
						WHERE t.partition_id = $1::uuid AND t.transaction_id = $3 AND tn.name = n) THEN 0 ELSE 1 END,
					$5
				FROM unnest($4::text[]) AS n
				ON CONFLICT (partition_id, name) DO UPDATE SET trace_count = c.trace_count + 1,
					message_count = c.message_count + EXCLUDED.message_count,
					last_seen = greatest(c.last_seen, EXCLUDED.last_seen)`,
				in.PartitionID, tenant, in.TransactionID, in.Names, at)
			if err != nil {
				return fmt.Errorf("record trace: name counts: %w", err)
			}
			_, err = t.tx.Exec(ctx, `INSERT INTO queen.trace_names (trace_id, tenant, name, created_at)
				SELECT $1::uuid, $2, n, $4 FROM unnest($3::text[]) AS n`, id, tenant, in.Names, at)
			if err != nil {
				return fmt.Errorf("record trace: names: %w", err)
			}
		}
		found = true
		return nil
	})
	return id, found, err
}

// Page bounds a list read: at most Limit rows from Offset, and about
// MaxBytes of answer (0 = no byte bound); the first row always comes
// (docs/api.md, "Read answers").
type Page struct {
	Limit, Offset int
	MaxBytes      int64
}

// TracePage is a page of traces: Total counts every match (TracesByName
// only), More says the byte bound stopped the page before its row limit.
type TracePage struct {
	Rows  []TraceRow
	Total int64
	More  bool
}

// MessageTraces returns a page of the traces of the tenant's message,
// oldest first (queen.message_traces_v1, traces_message index).
func (db *DB) MessageTraces(ctx context.Context, tenant, partitionID, txID string, p Page) (TracePage, error) {
	rs, err := db.pool.Query(ctx, `SELECT o_id, o_txid, o_pid, o_event, o_group, o_worker, o_data, o_created_at,
			o_names, NULL::text, NULL::text, NULL::text, o_more
		FROM queen.message_traces_v1($1, $2::uuid, $3, $4, $5, $6)`,
		tenant, partitionID, txID, p.Limit, p.Offset, byteBound(p.MaxBytes))
	if err != nil {
		return TracePage{}, fmt.Errorf("message traces: %w", err)
	}
	return scanTraces(rs, false)
}

// TracesByName returns a page of the tenant's traces carrying name, oldest
// first, with their message's payload (queen.traces_by_name_v1,
// trace_names_by_name), and their total (trace_name_counts).
func (db *DB) TracesByName(ctx context.Context, tenant, name string, p Page) (TracePage, error) {
	var total int64
	err := db.pool.QueryRow(ctx, `SELECT COALESCE(sum(trace_count), 0)::bigint FROM queen.trace_name_counts
		WHERE tenant = $1 AND name = $2`, tenant, name).Scan(&total)
	if err != nil {
		return TracePage{}, fmt.Errorf("traces by name: total: %w", err)
	}
	rs, err := db.pool.Query(ctx, `SELECT o_id, o_txid, o_pid, o_event, o_group, o_worker, o_data, o_created_at,
			o_names, o_queue, o_partition, o_payload, o_more
		FROM queen.traces_by_name_v1($1, $2, $3, $4, $5)`, tenant, name, p.Limit, p.Offset, byteBound(p.MaxBytes))
	if err != nil {
		return TracePage{}, fmt.Errorf("traces by name: %w", err)
	}
	out, err := scanTraces(rs, true)
	out.Total = total
	return out, err
}

// scanTraces reads the rows of queen.message_traces_v1 or
// queen.traces_by_name_v1 (withMessage: the queue, partition and payload
// columns are set). Data and payloads are scanned into []byte: held once.
func scanTraces(rs pgx.Rows, withMessage bool) (TracePage, error) {
	defer rs.Close()
	out := TracePage{Rows: []TraceRow{}}
	for rs.Next() {
		var r TraceRow
		var queue, partition *string
		var more bool
		if err := rs.Scan(&r.ID, &r.TransactionID, &r.PartitionID, &r.EventType, &r.Group, &r.Worker, &r.Data,
			&r.CreatedAt, &r.Names, &queue, &partition, &r.Payload, &more); err != nil {
			return TracePage{}, fmt.Errorf("scan trace: %w", err)
		}
		if more {
			out.More = true
			continue
		}
		if withMessage && queue != nil && partition != nil {
			r.Queue, r.Partition = *queue, *partition
		}
		out.Rows = append(out.Rows, r)
	}
	if err := rs.Err(); err != nil {
		return TracePage{}, fmt.Errorf("read traces: %w", err)
	}
	return out, nil
}

// TraceNames returns a page of the tenant's trace names, most recently seen
// first, and how many names it has. trace_name_counts_tenant serves both:
// the rows read are the tenant's (partition, name) pairs, not its traces.
func (db *DB) TraceNames(ctx context.Context, tenant string, limit, offset int) ([]TraceName, int64, error) {
	var total int64
	err := db.pool.QueryRow(ctx, `SELECT count(DISTINCT name) FROM queen.trace_name_counts WHERE tenant = $1 AND trace_count > 0`, tenant).Scan(&total)
	if err != nil {
		return nil, 0, fmt.Errorf("trace names: total: %w", err)
	}
	rs, err := db.pool.Query(ctx, `SELECT name, sum(trace_count)::bigint, sum(message_count)::bigint, max(last_seen)
		FROM queen.trace_name_counts WHERE tenant = $1
		GROUP BY name HAVING sum(trace_count) > 0 ORDER BY max(last_seen) DESC, name LIMIT $2 OFFSET $3`, tenant, limit, offset)
	if err != nil {
		return nil, 0, fmt.Errorf("trace names: %w", err)
	}
	defer rs.Close()
	out := []TraceName{}
	for rs.Next() {
		var n TraceName
		if err := rs.Scan(&n.Name, &n.TraceCount, &n.MessageCount, &n.LastSeen); err != nil {
			return nil, 0, fmt.Errorf("scan trace name: %w", err)
		}
		out = append(out, n)
	}
	if err := rs.Err(); err != nil {
		return nil, 0, fmt.Errorf("trace names: %w", err)
	}
	return out, total, nil
}
