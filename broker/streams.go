package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"queen-node/hotlist"
	"queen-node/pg"
	"queen-node/protocol"
)

// Streams: the server side of Queen's stream processors (docs/api.md,
// "Streams"). A query's state lives in PostgreSQL per (query, source
// partition); a cycle commits state operations, sink pushes and the source
// ack in one transaction, which is what makes the state exactly-once. The
// registration and the state read are package reads'.

// ErrStreamNotFound: the query id is not the tenant's, or the partition is
// not one of its source queue's.
var ErrStreamNotFound = pg.ErrStreamNotFound

// ErrStreamPushMaintenance: a cycle with sink pushes while pushes are
// buffered (push maintenance, or a replay not finished); answered 503,
// which the stream client retries.
var ErrStreamPushMaintenance = fmt.Errorf("%w: cycles with push_items are refused until it is off and this node's buffer is replayed; retry later", ErrMaintenanceRefused)

// StreamStateOp is one state operation of a cycle.
type StreamStateOp struct {
	Delete bool   // false = upsert
	Key    string // any text PostgreSQL can hold
	Value  string // JSON text (upsert only)
}

// StreamAck is a cycle's source acknowledgement.
type StreamAck struct {
	TransactionID string // must be an unresolved message of the leased batch
	LeaseID       string // must be the live lease of (partition, group)
	Count         int    // messages acked from the batch start when the lease is kept
}

// StreamCycle is one POST /streams/v1/cycle.
type StreamCycle struct {
	QueryID, PartitionID, Group string
	Ops                         []StreamStateOp
	Push                        []PushItem
	Ack                         *StreamAck // nil = idle flush: state and pushes only
	ReleaseLease                bool
}

// StreamCycleResult reports a cycle. A refused cycle (Success false)
// applied nothing.
type StreamCycleResult struct {
	Success bool
	Error   string
	Acked   int // source messages acknowledged
	Pushed  int // sink messages stored
}

// streamRefusal is a cycle that must apply nothing.
type streamRefusal struct{ reason string }

func (e *streamRefusal) Error() string { return e.reason }

// StreamCycle commits a cycle in one transaction: the state operations in
// order, then the sink pushes (as POST /api/v1/push would store them), then
// the source ack. Refusals (ErrStreamNotFound aside) are results.
func (b *Broker) StreamCycle(ctx context.Context, tenant string, producerSub *string, c StreamCycle) (StreamCycleResult, error) {
	// The ops' net effect per key, in first-touch order: applying them in
	// array order leaves each key as its last op says.
	writes := make([]pg.StreamStateWrite, 0, len(c.Ops))
	at := make(map[string]int, len(c.Ops))
	for _, op := range c.Ops {
		w := pg.StreamStateWrite{Key: op.Key}
		if !op.Delete {
			val := op.Value
			w.Value, w.WindowEnd = &val, windowEnd(val)
		}
		if i, ok := at[op.Key]; ok {
			writes[i] = w
			continue
		}
		at[op.Key] = len(writes)
		writes = append(writes, w)
	}
	rows, err := pushRows(c.Push, producerSub)
	if err != nil {
		return StreamCycleResult{}, err
	}
	// Sink pushes commit with the ack, so they cannot be buffered: refused
	// as a transaction with pushes is, else they would overtake the
	// buffered pushes (docs/api.md, "Maintenance modes").
	if len(rows) > 0 && b.maint.buffering() {
		return StreamCycleResult{}, ErrStreamPushMaintenance
	}
	locks := pg.TxLocks{Parts: pg.Partitions(rows)}
	if c.Ack != nil {
		locks.Acks = []pg.ConsumerKey{{PartitionID: c.PartitionID, Group: c.Group}}
	}
	var res StreamCycleResult
	var pushed []PushResult
	var acked []pg.AckOutcome
	err = b.db.InPushTx(ctx, tenant, locks, func(t *pg.Tx) error {
		res, pushed, acked = StreamCycleResult{}, nil, nil // a retry starts over
		source, err := t.LockStreamPartition(ctx, tenant, c.QueryID, c.PartitionID)
		if err != nil {
			return err
		}
		var ackTxIDs []string
		if c.Ack != nil {
			batch, live, err := t.StreamBatch(ctx, tenant, source, c.PartitionID, c.Group, c.Ack.LeaseID)
			if err != nil {
				return err
			}
			if !live {
				return &streamRefusal{protocol.ErrInvalidLease + " (leaseId is not the live lease of this partition and consumer_group)"}
			}
			if c.Ack.TransactionID != "" && !contains(batch, c.Ack.TransactionID) {
				// Already acknowledged (a retried cycle whose answer was
				// lost) or never in this batch: applying it would ack or
				// push twice.
				return &streamRefusal{fmt.Sprintf("transactionId %q is not an unacknowledged message of the leased batch", c.Ack.TransactionID)}
			}
			n := len(batch)
			if !c.ReleaseLease {
				n = max(0, min(c.Ack.Count, n)) // envelopes may outnumber messages: clamp
			}
			ackTxIDs = batch[:n]
		}
		if err := t.WriteStreamState(ctx, c.QueryID, c.PartitionID, writes); err != nil {
			return err
		}
		if len(rows) > 0 {
			outs, err := t.Push(ctx, tenant, rows)
			if err != nil {
				return err
			}
			pushed = pushResults(c.Push, rows, outs)
			for _, pr := range pushed {
				if pr.Status == protocol.PushFailed {
					return &streamRefusal{fmt.Sprintf("push to %s: %s", pr.Queue, pr.Error)}
				}
				if pr.Status == protocol.PushQueued {
					res.Pushed++
				}
			}
		}
		if len(ackTxIDs) > 0 {
			items := make([]AckItem, len(ackTxIDs))
			for i, id := range ackTxIDs {
				items[i] = AckItem{TransactionID: id, PartitionID: c.PartitionID, Group: c.Group,
					LeaseID: c.Ack.LeaseID, Status: protocol.AckCompleted}
			}
			outs, err := t.Ack(ctx, tenant, ackRows(items))
			if err != nil {
				return err
			}
			for i, o := range outs {
				if !o.Success {
					return &streamRefusal{fmt.Sprintf("ack %s: %s", ackTxIDs[i], o.Error)}
				}
			}
			acked = outs
			res.Acked = len(outs)
		}
		return nil
	})
	var refused *streamRefusal
	switch {
	case err == nil:
	case errors.Is(err, pg.ErrStreamNotFound):
		return StreamCycleResult{}, ErrStreamNotFound
	case errors.Is(err, pg.ErrQueueDeleted):
		return StreamCycleResult{Error: "a queue was deleted during the cycle; nothing was applied"}, nil
	case errors.As(err, &refused):
		b.log.Named("streams").Debug("cycle refused", "tenant", tenant, "query_id", c.QueryID,
			"partition_id", c.PartitionID, "reason", refused.reason)
		return StreamCycleResult{Error: refused.reason}, nil
	default:
		return StreamCycleResult{}, wrap(fmt.Errorf("stream cycle: %w", err))
	}
	res.Success = true
	// After commit, the same wakes as a transaction: pushes mark the hot-list
	// and hint the mesh; a released lease with messages left wakes pops.
	b.afterPush(tenant, pushed, hotlist.SourceCommit)
	b.afterAck(tenant, acked)
	return res, nil
}

// windowEnd returns the JSON number text of value's top-level windowEnd,
// or nil when value is not an object or its windowEnd is not a number.
// value is valid JSON (the request was decoded).
func windowEnd(value string) *string {
	if !strings.HasPrefix(strings.TrimSpace(value), "{") {
		return nil
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(value), &obj) != nil {
		return nil
	}
	raw := bytes.TrimSpace(obj["windowEnd"])
	if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return nil
	}
	s := string(raw)
	return &s
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
