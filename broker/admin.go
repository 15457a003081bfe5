package broker

import (
	"context"

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
	if b.pre != nil {
		b.pre.dropQueue(tenant, queue, "")
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
