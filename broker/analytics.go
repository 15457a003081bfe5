package broker

// The node core's side of the status and analytics reads and of the stats
// sampler (docs/api.md, "Status and analytics"). The row types are package
// pg's, re-exported: they are plain data and have one definition.

import (
	"context"
	"sort"
	"time"

	"queen-node/hotlist"
	"queen-node/pg"
)

// Row types of the status and analytics reads and of the sampler.
type (
	StatusFilter     = pg.StatusFilter
	SampleRange      = pg.Range
	QueueInfo        = pg.StatusQueue
	PartitionFigures = pg.PartitionFigures
	QueueMessage     = pg.QueueMessage
	QueueOpsRow      = pg.QueueOpsRow
	ParkedRow        = pg.ParkedRow
	NodeMetric       = pg.NodeMetric
	NodeSeriesRow    = pg.NodeSeriesRow
	NodeSample       = pg.NodeSample
	ParkedSample     = pg.ParkedSample
)

// The node metric sets of the analytics reads; their SQL expressions live in pg.
var (
	SystemMetrics = pg.SystemMetrics
	WorkerMetrics = pg.WorkerMetrics
)

// NodeName is the name this node writes its samples under.
func (b *Broker) NodeName() string { return b.cfg.NodeName }

// ParkedQueues returns the queues with long-polls parked on this node now,
// busiest first, at most limit. It takes the gates' lock once, like
// Snapshot's parked count.
func (b *Broker) ParkedQueues(limit int) []ParkedSample {
	b.gates.mu.Lock()
	type parked struct {
		key  hotlist.Key
		refs int
	}
	keys := make([]parked, 0, len(b.gates.m))
	for key, g := range b.gates.m {
		if g.refs > 0 {
			keys = append(keys, parked{key, g.refs})
		}
	}
	b.gates.mu.Unlock()
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].refs != keys[j].refs {
			return keys[i].refs > keys[j].refs
		}
		return keys[i].key.Less(keys[j].key)
	})
	out := make([]ParkedSample, len(keys))
	for i, p := range keys {
		tenant, queue := p.key.Split()
		out[i] = ParkedSample{Tenant: tenant, Queue: queue, Parked: p.refs}
	}
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

// WriteNodeSample stores this node's sample and its parked long-polls.
func (b *Broker) WriteNodeSample(ctx context.Context, s NodeSample, parked []ParkedSample) error {
	return wrap(b.db.InsertNodeSample(ctx, s, parked))
}

// SampleQueues takes a queue-sampling round unless another node took one
// less than minGap ago.
func (b *Broker) SampleQueues(ctx context.Context, minGap time.Duration) (took bool, rows int64, err error) {
	took, rows, err = b.db.SampleQueues(ctx, b.cfg.NodeName, minGap)
	return took, rows, wrap(err)
}

// TrimSamples deletes samples older than before in bounded batches.
func (b *Broker) TrimSamples(ctx context.Context, before time.Time, batch, rounds int) (int64, error) {
	n, err := b.db.TrimSamples(ctx, before, batch, rounds)
	return n, wrap(err)
}

// TenantQueues returns a page of the tenant's queues matching f, newest first.
func (b *Broker) TenantQueues(ctx context.Context, tenant string, f StatusFilter, limit, offset int) ([]QueueInfo, error) {
	out, err := b.db.TenantQueues(ctx, tenant, f, limit, offset)
	return out, wrap(err)
}

// TenantPartitions returns the watermark figures of the tenant's partitions
// of the queues matching f, at most limit.
func (b *Broker) TenantPartitions(ctx context.Context, tenant string, f StatusFilter, limit int) ([]PartitionFigures, error) {
	out, err := b.db.TenantPartitions(ctx, tenant, f, limit)
	return out, wrap(err)
}

// DeadLetterCounts returns per partition id the dead letters no seek has superseded.
func (b *Broker) DeadLetterCounts(ctx context.Context, tenant string, f StatusFilter) (map[string]int64, error) {
	out, err := b.db.DeadLetterCounts(ctx, tenant, f)
	return out, wrap(err)
}

// QueueMessages returns the newest messages of the tenant's queue with
// their state for group; found is false without such a queue.
func (b *Broker) QueueMessages(ctx context.Context, tenant, queue, group string, limit, offset int) ([]QueueMessage, bool, error) {
	out, found, err := b.db.QueueMessages(ctx, tenant, queue, group, limit, offset)
	return out, found, wrap(err)
}

// QueueOps aggregates the tenant's queue samples per bucket.
func (b *Broker) QueueOps(ctx context.Context, tenant string, f StatusFilter, r SampleRange, perQueue bool, limit int) ([]QueueOpsRow, error) {
	out, err := b.db.QueueOps(ctx, tenant, f, r, perQueue, limit)
	return out, wrap(err)
}

// ParkedByQueue aggregates the tenant's parked long-poll samples per bucket and queue.
func (b *Broker) ParkedByQueue(ctx context.Context, tenant, queue string, r SampleRange, limit int) ([]ParkedRow, error) {
	out, err := b.db.ParkedByQueue(ctx, tenant, queue, r, limit)
	return out, wrap(err)
}

// NodeSeries aggregates every node's samples per bucket.
func (b *Broker) NodeSeries(ctx context.Context, metrics []NodeMetric, stats bool, r SampleRange) ([]NodeSeriesRow, error) {
	out, err := b.db.NodeSeries(ctx, metrics, stats, r)
	return out, wrap(err)
}

// PostgresStats returns PostgreSQL's statistics for the queen schema as JSON.
func (b *Broker) PostgresStats(ctx context.Context) ([]byte, error) {
	out, err := b.db.PostgresStats(ctx)
	return out, wrap(err)
}
