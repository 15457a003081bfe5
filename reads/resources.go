package reads

import (
	"context"
	"time"

	"queen-node/pg"
)

// The reads of the EXTENDED endpoints (docs/api.md, "Resources, messages
// and consumer groups") are computed by package pg; its row types are
// these.
type (
	Counts        = pg.Counts
	Overview      = pg.Overview
	QueueRow      = pg.QueueRow
	QueueFilter   = pg.QueueFilter
	QueueDetail   = pg.QueueDetail
	PartitionRow  = pg.PartitionRow
	CountRow      = pg.CountRow
	GroupRow      = pg.GroupRow
	GroupFilter   = pg.GroupFilter
	CursorRow     = pg.CursorRow
	MessageFilter = pg.MessageFilter
	MessageRow    = pg.MessageRow
	MessageMode   = pg.Mode
	DeleteResult  = pg.DeleteResult
)

// Overview returns the tenant's totals.
func (s *Service) Overview(ctx context.Context, tenant string) (Overview, error) {
	o, err := s.db.Overview(ctx, tenant)
	return o, wrap(err)
}

// ListQueues returns a page of the tenant's queues and the match count.
func (s *Service) ListQueues(ctx context.Context, tenant string, f QueueFilter) ([]QueueRow, int, error) {
	rows, total, err := s.db.ListQueues(ctx, tenant, f)
	return rows, total, wrap(err)
}

// DetailOpts chooses the partitions of a queue's detail.
type DetailOpts = pg.DetailOpts

// MaxDetailPartitions bounds the partitions of a queue's detail.
const MaxDetailPartitions = pg.MaxDetailPartitions

// GetQueue returns one queue of the tenant with its partitions and groups.
func (s *Service) GetQueue(ctx context.Context, tenant, queue string, o DetailOpts) (QueueDetail, error) {
	d, err := s.db.GetQueue(ctx, tenant, queue, o)
	return d, notFound(err)
}

// ListNamespaces sums the tenant's queues by namespace.
func (s *Service) ListNamespaces(ctx context.Context, tenant string) ([]CountRow, error) {
	rows, err := s.db.ListNamespaces(ctx, tenant)
	return rows, wrap(err)
}

// ListTasks sums the tenant's queues by task.
func (s *Service) ListTasks(ctx context.Context, tenant string) ([]CountRow, error) {
	rows, err := s.db.ListTasks(ctx, tenant)
	return rows, wrap(err)
}

// ListGroups returns a page of the tenant's (group, queue) pairs.
func (s *Service) ListGroups(ctx context.Context, tenant string, f GroupFilter) ([]GroupRow, error) {
	rows, err := s.db.ListGroups(ctx, tenant, f)
	return rows, wrap(err)
}

// GroupCursors returns the group's cursors on the tenant's queues.
func (s *Service) GroupCursors(ctx context.Context, tenant, group string) ([]CursorRow, error) {
	rows, err := s.db.GroupCursors(ctx, tenant, group)
	return rows, wrap(err)
}

// QueueCursors is one group's cursors on one queue (pg.GroupQueueCursors).
type QueueCursors = pg.QueueCursors

// GroupQueueCursors returns group's cursors on one queue, most lagging
// first, at most limit, with counts over all of them.
func (s *Service) GroupQueueCursors(ctx context.Context, tenant, group, queue string, limit int) (QueueCursors, error) {
	c, err := s.db.GroupQueueCursors(ctx, tenant, group, queue, limit)
	return c, wrap(err)
}

// Lagging returns the tenant's cursors lagging more than minLag.
func (s *Service) Lagging(ctx context.Context, tenant string, minLag time.Duration, limit int) ([]CursorRow, error) {
	rows, err := s.db.Lagging(ctx, tenant, minLag, limit)
	return rows, wrap(err)
}

// ListMessages returns a page of a queue's messages with their status.
func (s *Service) ListMessages(ctx context.Context, tenant string, f MessageFilter) ([]MessageRow, MessageMode, error) {
	rows, mode, err := s.db.ListMessages(ctx, tenant, f)
	return rows, mode, notFound(err)
}

// GetMessage returns one message with its status for group.
func (s *Service) GetMessage(ctx context.Context, tenant, partitionID, txid, group string) (MessageRow, error) {
	m, err := s.db.GetMessage(ctx, tenant, partitionID, txid, group)
	return m, notFound(err)
}

// DeleteMessage deletes one message. A group whose live lease the delete
// ended (the deleted message was the last unresolved one of its batch) may
// have messages waiting behind that lease: the Waker wakes its parked pops
// as an ack that releases a lease would.
func (s *Service) DeleteMessage(ctx context.Context, tenant, partitionID, txid string) (DeleteResult, error) {
	res, err := s.db.DeleteMessage(ctx, tenant, partitionID, txid)
	if err != nil {
		return DeleteResult{}, notFound(err)
	}
	s.wake.AfterMessageDelete(tenant, partitionID, res)
	return res, nil
}
