package pg

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"

	"queen-node/protocol"
)

// StreamQuery is a registration request (POST /streams/v1/queries).
type StreamQuery struct {
	Name, SourceQueue string
	SinkQueue         *string // nil for a query without a sink (foreach)
	ConfigHash        string
	Reset             bool
}

// StreamRegistration is what RegisterStreamQuery decided.
type StreamRegistration struct {
	ID       string
	Fresh    bool // the query did not exist
	Reset    bool // the hash changed under reset: the state was wiped
	Mismatch bool // the hash changed without reset: nothing was changed
}

// RegisterStreamQuery creates the (tenant, name) query or finds it. A
// different config hash is a mismatch unless q.Reset, which deletes every
// state row of the query and stores the new hash. The same hash keeps the
// state even with q.Reset (docs/api.md, "Streams").
func (db *DB) RegisterStreamQuery(ctx context.Context, tenant, newID string, q StreamQuery) (StreamRegistration, error) {
	var out StreamRegistration
	err := db.InTxRetry(ctx, func(t *Tx) error {
		out = StreamRegistration{}
		err := t.tx.QueryRow(ctx, `INSERT INTO queen.stream_queries (id, tenant, name, source_queue, sink_queue, config_hash)
			VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (tenant, name) DO NOTHING RETURNING id::text`,
			newID, tenant, q.Name, q.SourceQueue, q.SinkQueue, q.ConfigHash).Scan(&out.ID)
		if err == nil {
			out.Fresh = true
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		// FOR UPDATE: a reset waits for running cycles, which hold the row
		// FOR KEY SHARE (LockStreamPartition), so it never wipes under one.
		var hash string
		err = t.tx.QueryRow(ctx, `SELECT id::text, config_hash FROM queen.stream_queries
			WHERE tenant = $1 AND name = $2 FOR UPDATE`, tenant, q.Name).Scan(&out.ID, &hash)
		if err != nil {
			return err // no rows cannot happen: queries are never deleted
		}
		switch {
		case hash == q.ConfigHash:
		case !q.Reset:
			out.Mismatch = true
			return nil
		default:
			out.Reset = true
			// Served by the primary key's (query_id, ...) prefix.
			if _, err := t.tx.Exec(ctx, `DELETE FROM queen.stream_state WHERE query_id = $1`, out.ID); err != nil {
				return err
			}
		}
		_, err = t.tx.Exec(ctx, `UPDATE queen.stream_queries
			SET source_queue = $2, sink_queue = $3, config_hash = $4, updated_at = now() WHERE id = $1`,
			out.ID, q.SourceQueue, q.SinkQueue, q.ConfigHash)
		return err
	})
	if err != nil {
		return StreamRegistration{}, fmt.Errorf("register stream query %q: %w", q.Name, err)
	}
	return out, nil
}

// StreamStateFilter narrows a state read; nil fields do not filter.
type StreamStateFilter struct {
	Keys           []string // exact keys; nil or empty = all
	KeyPrefix      *string  // literal, byte-wise prefix
	RipeAtOrBefore *int64   // only values whose numeric windowEnd is at or below it
}

// StreamStateRow is one state entry; Value is the JSON text as stored.
type StreamStateRow struct {
	Key   string
	Value []byte
}

// A state read is all or nothing: these refuse one past its bounds.
var (
	ErrStreamStateRows  = errors.New("state read past its row bound")
	ErrStreamStateBytes = errors.New("state read past its byte bound")
)

// ErrStreamNotFound means the query is not the tenant's, or the partition
// is not one of its source queue's.
var ErrStreamNotFound = errors.New("stream query or partition not found")

// streamScope checks that queryID is the tenant's and partitionID a
// partition of its source queue; it returns the source queue's name.
// Primary-key lookups on stream_queries and partitions, and the queues
// (tenant, name) unique index.
func streamScope(ctx context.Context, q querier, tenant, queryID, partitionID string, lock bool) (string, error) {
	sql := `SELECT sq.source_queue FROM queen.stream_queries sq
		WHERE sq.id = $2 AND sq.tenant = $1
		  AND EXISTS (SELECT 1 FROM queen.partitions p JOIN queen.queues qu ON qu.id = p.queue_id
		              WHERE p.id = $3 AND qu.tenant = $1 AND qu.name = sq.source_queue)`
	if lock {
		sql += ` FOR KEY SHARE OF sq`
	}
	var source string
	err := q.QueryRow(ctx, sql, tenant, queryID, partitionID).Scan(&source)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrStreamNotFound
	}
	return source, err
}

// StreamState returns the state rows of (queryID, partitionID) that pass
// f, in key order: all of them, or ErrStreamStateRows past limit rows and
// ErrStreamStateBytes past about maxBytes of answer (0 = no byte bound),
// found by queen.stream_state_read_v1 without sending any value.
func (db *DB) StreamState(ctx context.Context, tenant, queryID, partitionID string, f StreamStateFilter, limit int, maxBytes int64) ([]StreamStateRow, error) {
	var rows []StreamStateRow
	keys := f.Keys
	if keys == nil {
		keys = []string{}
	}
	err := db.InTxRetry(ctx, func(t *Tx) error {
		rows = nil
		if _, err := streamScope(ctx, t.tx, tenant, queryID, partitionID, false); err != nil {
			return err
		}
		rs, err := t.tx.Query(ctx, `SELECT o_key, o_value, o_refused
			FROM queen.stream_state_read_v1($1, $2, $3, $4, $5, $6, $7)`,
			queryID, partitionID, f.KeyPrefix, f.RipeAtOrBefore, keys, limit, byteBound(maxBytes))
		if err != nil {
			return err
		}
		defer rs.Close()
		for rs.Next() {
			var r StreamStateRow
			var refused *string
			// Scanned into []byte: the value is held once, as sent.
			if err := rs.Scan(&r.Key, &r.Value, &refused); err != nil {
				return err
			}
			switch {
			case refused == nil:
				rows = append(rows, r)
			case *refused == protocol.StateRefusedRows:
				return ErrStreamStateRows
			case *refused == protocol.StateRefusedBytes:
				return ErrStreamStateBytes
			default:
				return fmt.Errorf("unknown refusal %q", *refused)
			}
		}
		return rs.Err()
	})
	if errors.Is(err, ErrStreamNotFound) || errors.Is(err, ErrStreamStateRows) || errors.Is(err, ErrStreamStateBytes) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("read stream state: %w", err)
	}
	return rows, nil
}

// byteBound is a read's byte bound as the SQL functions take it: 0 (no
// bound) is the largest bigint.
func byteBound(maxBytes int64) int64 {
	if maxBytes <= 0 {
		return math.MaxInt64
	}
	return maxBytes
}

// LockStreamPartition checks the cycle's scope (as StreamState) and
// serialises cycles of one (query, partition) until the transaction ends:
// the query row FOR KEY SHARE (so a reset, which takes it FOR UPDATE, waits;
// a same-hash registration's plain UPDATE does not) and a transaction-scoped
// advisory lock on the pair. It returns the source queue's name. Callers
// take it after every other lock of the transaction (pg.InPushTx), so two
// cycles cannot wait on each other's row locks while holding it.
func (t *Tx) LockStreamPartition(ctx context.Context, tenant, queryID, partitionID string) (string, error) {
	source, err := streamScope(ctx, t.tx, tenant, queryID, partitionID, true)
	if err != nil {
		return "", err
	}
	if _, err := t.tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('queen.stream:' || $1 || '/' || $2, 0))`,
		queryID, partitionID); err != nil {
		return "", fmt.Errorf("lock stream partition: %w", err)
	}
	return source, nil
}

// StreamBatch returns the transaction ids of the unresolved messages of the
// live lease leaseID of (partitionID, group), in offset order; live is false
// when that lease is not the live one. The consumer row must be locked
// already (InPushTx with the pair in TxLocks.Acks). Messages are read by
// the primary key range (partition_id, committed_offset < off <= batch_end),
// skipping those acked past a gap.
func (t *Tx) StreamBatch(ctx context.Context, tenant, sourceQueue, partitionID, group, leaseID string) (txids []string, live bool, err error) {
	var committed, end int64
	var acked []int64
	err = t.tx.QueryRow(ctx, `SELECT c.committed_offset, c.batch_end, c.acked FROM queen.consumers c
		JOIN queen.partitions p ON p.id = c.partition_id
		JOIN queen.queues q ON q.id = p.queue_id AND q.tenant = $1 AND q.name = $2
		WHERE c.partition_id = $3 AND c.consumer_group = $4
		  AND c.lease_id = $5 AND c.lease_expires_at > clock_timestamp()`,
		tenant, sourceQueue, partitionID, group, leaseID).Scan(&committed, &end, &acked)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("stream batch: consumer: %w", err)
	}
	rs, err := t.tx.Query(ctx, `SELECT m.off, m.transaction_id FROM queen.messages m
		WHERE m.partition_id = $1 AND m.off > $2 AND m.off <= $3 ORDER BY m.off`, partitionID, committed, end)
	if err != nil {
		return nil, false, fmt.Errorf("stream batch: messages: %w", err)
	}
	skip := make(map[int64]bool, len(acked))
	for _, o := range acked {
		skip[o] = true
	}
	var off int64
	var txid string
	_, err = pgx.ForEachRow(rs, []any{&off, &txid}, func() error {
		if !skip[off] {
			txids = append(txids, txid)
		}
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("stream batch: messages: %w", err)
	}
	return txids, true, nil
}

// StreamStateWrite is the net effect of a cycle's state operations on one
// key: Value nil deletes it. WindowEnd is the value's numeric top-level
// windowEnd as JSON number text, or nil.
type StreamStateWrite struct {
	Key       string
	Value     *string
	WindowEnd *string
}

// WriteStreamState applies writes (distinct keys) to (queryID,
// partitionID): one statement for the deletes, one for the upserts, both
// on the primary key.
func (t *Tx) WriteStreamState(ctx context.Context, queryID, partitionID string, writes []StreamStateWrite) error {
	var delKeys, upKeys, upVals []string
	var upEnds []*string
	for _, w := range writes {
		if w.Value == nil {
			delKeys = append(delKeys, w.Key)
		} else {
			upKeys, upVals, upEnds = append(upKeys, w.Key), append(upVals, *w.Value), append(upEnds, w.WindowEnd)
		}
	}
	if len(delKeys) > 0 {
		if _, err := t.tx.Exec(ctx, `DELETE FROM queen.stream_state
			WHERE query_id = $1 AND partition_id = $2 AND key = ANY($3::text[])`, queryID, partitionID, delKeys); err != nil {
			return fmt.Errorf("delete stream state: %w", err)
		}
	}
	if len(upKeys) > 0 {
		if _, err := t.tx.Exec(ctx, `INSERT INTO queen.stream_state (query_id, partition_id, key, value, window_end)
			SELECT $1, $2, k, v::json, e::numeric FROM unnest($3::text[], $4::text[], $5::text[]) AS u(k, v, e)
			ON CONFLICT (query_id, partition_id, key)
			DO UPDATE SET value = excluded.value, window_end = excluded.window_end, updated_at = now()`,
			queryID, partitionID, upKeys, upVals, upEnds); err != nil {
			return fmt.Errorf("upsert stream state: %w", err)
		}
	}
	return nil
}
