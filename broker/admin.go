package broker

import (
	"context"
	"time"

	"queen-node/pg"
	"queen-node/protocol"
)

// Configure creates a queue or replaces all of its options.
func (b *Broker) Configure(ctx context.Context, tenant string, req ConfigureRequest) (ConfigureResult, error) {
	o := req.Options
	qid, pid, err := b.db.Configure(ctx, tenant, req.Queue, DefaultPartition, pg.QueueConfig{
		Namespace: req.Namespace, Task: req.Task,
		LeaseTime: o.LeaseTime, RetryLimit: o.RetryLimit, RetryDelay: o.RetryDelay, Priority: o.Priority,
		DelayedProcessing: o.DelayedProcessing, WindowBuffer: o.WindowBuffer, MaxSize: o.MaxSize, TTL: o.TTL,
		DeadLetterQueue: o.DeadLetterQueue, DLQAfterMaxRetries: o.DLQAfterMaxRetries,
		RetentionSeconds: o.RetentionSeconds, CompletedRetentionSeconds: o.CompletedRetentionSeconds,
		RetentionEnabled: o.RetentionEnabled, EncryptionEnabled: o.EncryptionEnabled,
		MaxWaitTimeSeconds: o.MaxWaitTimeSeconds, DedupWindowSeconds: o.DedupWindowSeconds,
	})
	if err != nil {
		return ConfigureResult{}, wrap(err)
	}
	// Options such as delayedProcessing change what is visible: re-poll now.
	b.gates.notify(queueKey(tenant, req.Queue))
	return ConfigureResult{QueueID: qid, PartitionID: pid, Namespace: req.Namespace, Task: req.Task, Options: o}, nil
}

// DeleteQueue deletes a queue and everything in it, and answers the pops
// parked on it.
func (b *Broker) DeleteQueue(ctx context.Context, tenant, queue string) (bool, error) {
	existed, err := b.db.DeleteQueue(ctx, tenant, queue)
	if err != nil {
		return false, wrap(err)
	}
	if b.hot != nil {
		b.hot.DropQueue(queueKey(tenant, queue))
	}
	b.gates.markDeleted(queueKey(tenant, queue))
	return existed, nil
}

// ExtendLease renews every partition held by a live lease.
func (b *Broker) ExtendLease(ctx context.Context, tenant, leaseID string, seconds int) (LeaseResult, error) {
	if seconds <= 0 {
		seconds = protocol.DefaultLeaseSeconds
	}
	until, found, expired, err := b.db.ExtendLease(ctx, tenant, leaseID, seconds)
	if err != nil {
		return LeaseResult{}, wrap(err)
	}
	switch {
	case found:
		return LeaseResult{Success: true, ExpiresAt: until}, nil
	case expired:
		return LeaseResult{Error: "Lease already expired"}, nil
	default:
		return LeaseResult{Error: "Lease not found"}, nil
	}
}

// ListDLQ lists a page of dead letters, newest first, with the total match
// count.
func (b *Broker) ListDLQ(ctx context.Context, tenant string, q DLQQuery) (DLQPage, error) {
	page, err := b.db.ListDLQ(ctx, tenant, pg.DLQFilter{Queue: q.Queue, Group: q.Group,
		Partition: q.Partition, From: q.From, To: q.To, Limit: q.Limit, Offset: q.Offset, MaxBytes: q.MaxBytes})
	if err != nil {
		return DLQPage{}, wrap(err)
	}
	out := DLQPage{Entries: make([]DLQEntry, len(page.Rows)), Total: page.Total, Truncated: page.More}
	for i, r := range page.Rows {
		out.Entries[i] = DLQEntry{ID: r.MessageID, TransactionID: r.TxID, PartitionID: r.PartitionID,
			Queue: r.Queue, Partition: r.Partition, ConsumerGroup: r.Group, ErrorMessage: r.Error,
			RetryCount: r.Retry, Data: r.Payload, ProducerSub: r.Sub, CreatedAt: r.CreatedAt, FailedAt: r.FailedAt, Superseded: r.Superseded}
	}
	return out, nil
}

// DeleteConsumerGroup drops the group's cursors and leases on one queue of
// the tenant, or on all its queues when queue is "".
func (b *Broker) DeleteConsumerGroup(ctx context.Context, tenant, group, queue string, deleteMetadata bool) (int, error) {
	n, err := b.db.DeleteConsumerGroup(ctx, tenant, group, queue, deleteMetadata)
	if err != nil {
		return 0, wrap(err)
	}
	if b.hot != nil {
		// Over-forgetting is a harmless cold start; a stale ring that hides
		// the re-consume until the next floor is the real danger. Only this
		// tenant's rings: group names are shared across tenants.
		b.hot.DropGroup(tenant, queue, group)
	}
	if queue != "" {
		b.gates.notify(queueKey(tenant, queue))
	}
	return n, nil
}

// Seek moves the group's cursors on a queue and wakes its parked pops, since
// a backwards seek makes messages deliverable again.
func (b *Broker) Seek(ctx context.Context, tenant, group, queue string, toEnd bool, ts *time.Time) (int, error) {
	n, err := b.db.Seek(ctx, tenant, group, queue, toEnd, ts)
	if err != nil {
		return 0, wrap(err)
	}
	if b.hot != nil {
		// A backwards seek makes partitions pending that the ring cleared:
		// re-derive the ring now rather than at the next floor.
		if r := b.hot.Lookup(queueKey(tenant, queue), group); r != nil {
			if w := b.hot.BeginReseed(r, time.Now(), true); w != nil {
				if err := b.reseed(ctx, w); err != nil {
					return n, wrap(err)
				}
			}
		}
	}
	b.gates.notify(queueKey(tenant, queue))
	return n, nil
}
