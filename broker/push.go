package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"queen-node/hotlist"
	"queen-node/pg"
	"queen-node/protocol"
)

// Push appends items: every item is stored (or reported a duplicate) and
// committed before Push returns, and the queues' parked pops are woken. A
// partition's items commit together and in order; a push's partitions may
// commit in separate transactions (docs/api.md, "a push's transactions").
func (b *Broker) Push(ctx context.Context, tenant string, producerSub *string, items []PushItem) ([]PushResult, error) {
	b.stats.Pushes.Add(1)
	if len(items) == 0 {
		return []PushResult{}, nil
	}
	if res, ok, err := b.bufferPush(tenant, producerSub, items); ok {
		return res, err // push maintenance (maintenance.go)
	}
	ctx, cancel := context.WithTimeout(ctx, dbRequestTimeout)
	defer cancel()
	return b.pushStore(ctx, tenant, producerSub, items)
}

// dbRequestTimeout bounds the database work of one push or ack request. A
// primary that stops answering without closing its connections (a frozen
// host, a network partition; the failover manager promotes a standby
// meanwhile) would otherwise hold a request whose statement went to it
// until its client gives up; with the bound it answers 503 and the client
// retries (docs/operations.md, "Running on Patroni"). Generous: a healthy
// server answers a push or an ack in milliseconds.
const dbRequestTimeout = 10 * time.Second

// pushStore stores items in PostgreSQL: the push path behind the buffer,
// which the buffer's replay also takes.
func (b *Broker) pushStore(ctx context.Context, tenant string, producerSub *string, items []PushItem) ([]PushResult, error) {
	rows, err := pushRows(items, producerSub)
	if err != nil {
		return nil, err
	}
	var outs []pg.PushOutcome
	if b.push != nil {
		outs, err = b.push.push(ctx, tenant, rows)
	} else {
		b.stats.PushFlushes.Add(1)
		outs, err = b.db.Push(ctx, tenant, rows)
	}
	if errors.Is(err, pg.ErrQueueDeleted) {
		// Only when deletes keep removing the queue between our attempts
		// to re-create it (docs/api.md, "queue delete").
		return nil, ErrQueueDeleted
	}
	if err != nil {
		return nil, wrap(err)
	}
	res := pushResults(items, rows, outs)
	if b.push == nil {
		b.afterPush(tenant, res, hotlist.SourceLocal)
	} // else the combiner ran it at each commit (afterCommit)
	return res, nil
}

// afterCommit is afterPush for the rows one combined flush wrote, whether
// or not their clients still wait (pushCombiner.onCommit).
func (b *Broker) afterCommit(tenant string, rows []pg.PushRow, outs []pg.PushOutcome) {
	res := make([]PushResult, len(rows))
	for i, r := range rows {
		res[i] = PushResult{Status: outs[i].Status, Queue: r.Queue, partition: r.Partition}
	}
	b.afterPush(tenant, res, hotlist.SourceLocal)
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
		res[i] = PushResult{Index: i, Status: protocol.PushFailed, TransactionID: rows[i].TxID,
			TraceID: items[i].TraceID, Queue: items[i].Queue, Error: "not stored", partition: rows[i].Partition}
	}
	for _, o := range outs {
		if o.Idx < 0 || o.Idx >= len(res) {
			continue
		}
		r := &res[o.Idx]
		r.Status, r.MessageID, r.PartitionID = o.Status, o.MessageID, o.PartitionID
		if o.Status != protocol.PushFailed {
			r.Error = ""
		} else {
			r.Error = "queue or partition was deleted during the push"
		}
	}
	return res
}

// afterPush runs once the push committed. Without the hot-list it wakes
// each touched queue once. With it, it marks each touched partition on every
// group ring of its queue: a local push marks quietly (the wake tick wakes
// parked pops), a transaction commit wakes at once.
func (b *Broker) afterPush(tenant string, res []PushResult, src hotlist.Source) {
	type part struct{ queue, partition string }
	counts := make(map[part]int, 1)
	for _, r := range res {
		switch r.Status {
		case protocol.PushQueued:
			b.stats.PushedItems.Add(1)
			counts[part{r.Queue, r.partition}]++
		case protocol.PushDuplicate:
			b.stats.Duplicates.Add(1)
		}
	}
	if ref := b.mesh.Load(); ref != nil && ref.h.HasPeers() {
		// Every local push hints the peers, not only a ring transition here:
		// the pushing node usually has no ring for the peers' groups.
		for p := range counts {
			ref.h.Enqueue(tenant, p.queue, p.partition)
		}
	}
	if b.hot == nil {
		woken := make(map[string]struct{}, 1)
		for p := range counts {
			if _, ok := woken[p.queue]; !ok {
				woken[p.queue] = struct{}{}
				b.gates.notify(queueKey(tenant, p.queue))
			}
		}
		return
	}
	byQueue := make(map[string][]hotlist.PartMark, 1)
	for p, n := range counts {
		byQueue[p.queue] = append(byQueue[p.queue], hotlist.PartMark{Name: p.partition, Count: n})
	}
	now := time.Now()
	for q, parts := range byQueue {
		key := queueKey(tenant, q)
		if b.hot.Mark(key, parts, src, now) {
			b.gates.notify(key)
		}
	}
	b.kickWakes()
}
