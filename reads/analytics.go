package reads

// The status and analytics reads (docs/api.md, "Status and analytics"),
// over the samples the stats sampler writes through the broker. The row
// types are package pg's, re-exported: they are plain data and have one
// definition.

import (
	"context"

	"queen-node/pg"
)

// Row types of the status and analytics reads.
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
)

// The node metric sets of the analytics reads; their SQL expressions live in pg.
var (
	SystemMetrics = pg.SystemMetrics
	WorkerMetrics = pg.WorkerMetrics
)

// TenantQueues returns a page of the tenant's queues matching f, newest first.
func (s *Service) TenantQueues(ctx context.Context, tenant string, f StatusFilter, limit, offset int) ([]QueueInfo, error) {
	out, err := s.db.TenantQueues(ctx, tenant, f, limit, offset)
	return out, wrap(err)
}

// TenantPartitions returns the watermark figures of the tenant's partitions
// of the queues matching f, at most limit.
func (s *Service) TenantPartitions(ctx context.Context, tenant string, f StatusFilter, limit int) ([]PartitionFigures, error) {
	out, err := s.db.TenantPartitions(ctx, tenant, f, limit)
	return out, wrap(err)
}

// DeadLetterCounts returns per partition id the dead letters no seek has superseded.
func (s *Service) DeadLetterCounts(ctx context.Context, tenant string, f StatusFilter) (map[string]int64, error) {
	out, err := s.db.DeadLetterCounts(ctx, tenant, f)
	return out, wrap(err)
}

// QueueMessages returns the newest messages of the tenant's queue with
// their state for group; found is false without such a queue.
func (s *Service) QueueMessages(ctx context.Context, tenant, queue, group string, limit, offset int) ([]QueueMessage, bool, error) {
	out, found, err := s.db.QueueMessages(ctx, tenant, queue, group, limit, offset)
	return out, found, wrap(err)
}

// QueueOps aggregates the tenant's queue samples per bucket.
func (s *Service) QueueOps(ctx context.Context, tenant string, f StatusFilter, r SampleRange, perQueue bool, limit int) ([]QueueOpsRow, error) {
	out, err := s.db.QueueOps(ctx, tenant, f, r, perQueue, limit)
	return out, wrap(err)
}

// ParkedByQueue aggregates the tenant's parked long-poll samples per bucket and queue.
func (s *Service) ParkedByQueue(ctx context.Context, tenant, queue string, r SampleRange, limit int) ([]ParkedRow, error) {
	out, err := s.db.ParkedByQueue(ctx, tenant, queue, r, limit)
	return out, wrap(err)
}

// NodeSeries aggregates every node's samples per bucket.
func (s *Service) NodeSeries(ctx context.Context, metrics []NodeMetric, stats bool, r SampleRange) ([]NodeSeriesRow, error) {
	out, err := s.db.NodeSeries(ctx, metrics, stats, r)
	return out, wrap(err)
}

// PostgresStats returns PostgreSQL's statistics for the queen schema as JSON.
func (s *Service) PostgresStats(ctx context.Context) ([]byte, error) {
	out, err := s.db.PostgresStats(ctx)
	return out, wrap(err)
}
