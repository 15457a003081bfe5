package reads

import (
	"context"
	"time"
)

// The consumer group writes of the admin API (docs/api.md, "Consumer
// groups"): they move or drop cursors, and the ones that can make messages
// deliverable again tell the Waker.

// UpdateSubscription moves the group's recorded subscription start on every
// queue of the tenant.
func (s *Service) UpdateSubscription(ctx context.Context, tenant, group string, from time.Time) (int, error) {
	n, err := s.db.UpdateSubscription(ctx, tenant, group, from)
	return n, wrap(err)
}

// SeekPartitionToEnd moves the group's cursor on one partition to its end.
// Nothing becomes deliverable; the Waker is told as for a seek all the
// same, so that a claim taken ahead before it (broker/prefetch.go) is not
// handed out after it.
func (s *Service) SeekPartitionToEnd(ctx context.Context, tenant, group, queue, partition string) error {
	if err := notFound(s.db.SeekPartitionToEnd(ctx, tenant, group, queue, partition)); err != nil {
		return err
	}
	return s.wake.AfterSeek(ctx, tenant, queue, group)
}

// DeleteConsumerGroup drops the group's cursors and leases on one queue of
// the tenant, or on all its queues when queue is "".
func (s *Service) DeleteConsumerGroup(ctx context.Context, tenant, group, queue string, deleteMetadata bool) (int, error) {
	n, err := s.db.DeleteConsumerGroup(ctx, tenant, group, queue, deleteMetadata)
	if err != nil {
		return 0, wrap(err)
	}
	s.wake.AfterGroupDelete(tenant, queue, group)
	return n, nil
}

// Seek moves the group's cursors on a queue and has its parked pops woken,
// since a backwards seek makes messages deliverable again.
func (s *Service) Seek(ctx context.Context, tenant, group, queue string, toEnd bool, ts *time.Time) (int, error) {
	n, err := s.db.Seek(ctx, tenant, group, queue, toEnd, ts)
	if err != nil {
		return 0, wrap(err)
	}
	if err := s.wake.AfterSeek(ctx, tenant, queue, group); err != nil {
		return n, wrap(err)
	}
	return n, nil
}
