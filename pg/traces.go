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

// traceNamesOf is the sorted names of trace t (trace_names primary key).
const traceNamesOf = `COALESCE((SELECT array_agg(tn.name ORDER BY tn.name) FROM queen.trace_names tn WHERE tn.trace_id = t.id), '{}')`

// MessageTraces returns the traces of the tenant's message, oldest first,
// at most limit (traces_message index).
func (db *DB) MessageTraces(ctx context.Context, tenant, partitionID, txID string, limit int) ([]TraceRow, error) {
	rs, err := db.pool.Query(ctx, `SELECT t.id::text, t.transaction_id, t.partition_id::text, t.event_type,
			t.consumer_group, t.worker_id, t.data::text, t.created_at, `+traceNamesOf+`
		FROM queen.traces t
		WHERE t.partition_id = $2::uuid AND t.transaction_id = $3 AND t.tenant = $1
		ORDER BY t.created_at, t.id LIMIT $4`, tenant, partitionID, txID, limit)
	if err != nil {
		return nil, fmt.Errorf("message traces: %w", err)
	}
	return scanTraces(rs, false)
}

// TracesByName returns a page of the tenant's traces carrying name, oldest
// first (trace_names_by_name), and their total (trace_name_counts).
func (db *DB) TracesByName(ctx context.Context, tenant, name string, limit, offset int) ([]TraceRow, int64, error) {
	var total int64
	err := db.pool.QueryRow(ctx, `SELECT COALESCE(sum(trace_count), 0)::bigint FROM queen.trace_name_counts
		WHERE tenant = $1 AND name = $2`, tenant, name).Scan(&total)
	if err != nil {
		return nil, 0, fmt.Errorf("traces by name: total: %w", err)
	}
	// The message payload is looked up by messages_txid; it is null once
	// retention deleted the message.
	rs, err := db.pool.Query(ctx, `SELECT t.id::text, t.transaction_id, t.partition_id::text, t.event_type,
			t.consumer_group, t.worker_id, t.data::text, t.created_at, `+traceNamesOf+`,
			q.name, p.name, m.payload::text
		FROM queen.trace_names n
		JOIN queen.traces t ON t.id = n.trace_id
		JOIN queen.partitions p ON p.id = t.partition_id
		JOIN queen.queues q ON q.id = p.queue_id
		LEFT JOIN queen.messages m ON m.partition_id = t.partition_id AND m.transaction_id = t.transaction_id
		WHERE n.tenant = $1 AND n.name = $2
		ORDER BY n.created_at, n.trace_id LIMIT $3 OFFSET $4`, tenant, name, limit, offset)
	if err != nil {
		return nil, 0, fmt.Errorf("traces by name: %w", err)
	}
	out, err := scanTraces(rs, true)
	return out, total, err
}

func scanTraces(rs pgx.Rows, withMessage bool) ([]TraceRow, error) {
	defer rs.Close()
	out := []TraceRow{}
	for rs.Next() {
		var r TraceRow
		var data string
		dst := []any{&r.ID, &r.TransactionID, &r.PartitionID, &r.EventType, &r.Group, &r.Worker, &data, &r.CreatedAt, &r.Names}
		var payload *string
		if withMessage {
			dst = append(dst, &r.Queue, &r.Partition, &payload)
		}
		if err := rs.Scan(dst...); err != nil {
			return nil, fmt.Errorf("scan trace: %w", err)
		}
		r.Data = []byte(data)
		if payload != nil {
			r.Payload = []byte(*payload)
		}
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("read traces: %w", err)
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
