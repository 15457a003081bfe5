package broker

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"queen-node/pg"
)

// Push appends items atomically: every item is stored (or reported a
// duplicate) and committed before Push returns, and then wakes the queues'
// parked pops.
func (b *Broker) Push(ctx context.Context, tenant string, producerSub *string, items []PushItem) ([]PushResult, error) {
	b.stats.Pushes.Add(1)
	if len(items) == 0 {
		return []PushResult{}, nil
	}
	rows, err := pushRows(items, producerSub)
	if err != nil {
		return nil, err
	}
	outs, err := b.db.Push(ctx, tenant, rows)
	if err != nil {
		return nil, wrap(err)
	}
	res := pushResults(items, rows, outs)
	b.afterPush(tenant, res)
	return res, nil
}

func pushRows(items []PushItem, producerSub *string) ([]pg.PushRow, error) {
	if producerSub != nil && *producerSub == "" {
		producerSub = nil // an empty subject is stored as null
	}
	rows := make([]pg.PushRow, len(items))
	for i, it := range items {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("message id: %w", err)
		}
		r := pg.PushRow{Queue: it.Queue, Partition: it.Partition, TxID: it.TransactionID,
			ID: id.String(), Trace: it.TraceID, Payload: string(it.Payload), Sub: producerSub}
		if r.Partition == "" {
			r.Partition = DefaultPartition
		}
		if r.TxID == "" {
			r.TxID = r.ID // a UUIDv7, as the clients would generate
		}
		if len(it.Payload) == 0 {
			r.Payload = "{}"
		}
		rows[i] = r
	}
	return rows, nil
}

func pushResults(items []PushItem, rows []pg.PushRow, outs []pg.PushOutcome) []PushResult {
	res := make([]PushResult, len(items))
	for i := range items {
		res[i] = PushResult{Index: i, Status: "failed", TransactionID: rows[i].TxID,
			TraceID: items[i].TraceID, Queue: items[i].Queue, Error: "not stored"}
	}
	for _, o := range outs {
		if o.Idx < 0 || o.Idx >= len(res) {
			continue
		}
		r := &res[o.Idx]
		r.Status, r.MessageID, r.PartitionID = o.Status, o.MessageID, o.PartitionID
		if o.Status != "failed" {
			r.Error = ""
		} else {
			r.Error = "queue or partition was deleted during the push"
		}
	}
	return res
}

// afterPush runs once the push committed: count, then wake each touched
// queue once.
func (b *Broker) afterPush(tenant string, res []PushResult) {
	seen := make(map[string]struct{}, 1)
	for _, r := range res {
		switch r.Status {
		case "queued":
			b.stats.PushedItems.Add(1)
		case "duplicate":
			b.stats.Duplicates.Add(1)
			continue
		default:
			continue
		}
		if _, ok := seen[r.Queue]; ok {
			continue
		}
		seen[r.Queue] = struct{}{}
		b.gates.notify(queueKey(tenant, r.Queue))
	}
}
