package broker

import (
	"context"
	"errors"
	"time"

	"queen-node/pg"
)

// The read side of the EXTENDED endpoints (docs/api.md, "Resources,
// messages and consumer groups") is computed by package pg; its row types
// are the broker's too.
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

// ErrNotFound: the queue, partition or message does not exist in the
// caller's tenant (404).
var ErrNotFound = errors.New("not found")

// notFound maps pg's not-found to the broker's, and wraps the rest.
func notFound(err error) error {
	if errors.Is(err, pg.ErrNotFound) {
		return ErrNotFound
	}
	return wrap(err)
}

// Overview returns the tenant's totals.
func (b *Broker) Overview(ctx context.Context, tenant string) (Overview, error) {
	o, err := b.db.Overview(ctx, tenant)
	return o, wrap(err)
}

// ListQueues returns a page of the tenant's queues and the match count.
func (b *Broker) ListQueues(ctx context.Context, tenant string, f QueueFilter) ([]QueueRow, int, error) {
	rows, total, err := b.db.ListQueues(ctx, tenant, f)
	return rows, total, wrap(err)
}

// DetailOpts chooses the partitions of a queue's detail.
type DetailOpts = pg.DetailOpts

// MaxDetailPartitions bounds the partitions of a queue's detail.
const MaxDetailPartitions = pg.MaxDetailPartitions

// GetQueue returns one queue of the tenant with its partitions and groups.
func (b *Broker) GetQueue(ctx context.Context, tenant, queue string, o DetailOpts) (QueueDetail, error) {
	d, err := b.db.GetQueue(ctx, tenant, queue, o)
	return d, notFound(err)
}

// ListNamespaces sums the tenant's queues by namespace.
func (b *Broker) ListNamespaces(ctx context.Context, tenant string) ([]CountRow, error) {
	rows, err := b.db.ListNamespaces(ctx, tenant)
	return rows, wrap(err)
}

// ListTasks sums the tenant's queues by task.
func (b *Broker) ListTasks(ctx context.Context, tenant string) ([]CountRow, error) {
	rows, err := b.db.ListTasks(ctx, tenant)
	return rows, wrap(err)
}

// ListGroups returns a page of the tenant's (group, queue) pairs.
func (b *Broker) ListGroups(ctx context.Context, tenant string, f GroupFilter) ([]GroupRow, error) {
	rows, err := b.db.ListGroups(ctx, tenant, f)
	return rows, wrap(err)
}

// GroupCursors returns the group's cursors on the tenant's queues.
func (b *Broker) GroupCursors(ctx context.Context, tenant, group string) ([]CursorRow, error) {
	rows, err := b.db.GroupCursors(ctx, tenant, group)
	return rows, wrap(err)
}

// QueueCursors is one group's cursors on one queue (pg.GroupQueueCursors).
type QueueCursors = pg.QueueCursors

// GroupQueueCursors returns group's cursors on one queue, most lagging
// first, at most limit, with counts over all of them.
func (b *Broker) GroupQueueCursors(ctx context.Context, tenant, group, queue string, limit int) (QueueCursors, error) {
	c, err := b.db.GroupQueueCursors(ctx, tenant, group, queue, limit)
	return c, wrap(err)
}

// Lagging returns the tenant's cursors lagging more than minLag.
func (b *Broker) Lagging(ctx context.Context, tenant string, minLag time.Duration, limit int) ([]CursorRow, error) {
	rows, err := b.db.Lagging(ctx, tenant, minLag, limit)
	return rows, wrap(err)
}

// ListMessages returns a page of a queue's messages with their status.
func (b *Broker) ListMessages(ctx context.Context, tenant string, f MessageFilter) ([]MessageRow, MessageMode, error) {
	rows, mode, err := b.db.ListMessages(ctx, tenant, f)
	return rows, mode, notFound(err)
}

// GetMessage returns one message with its status for group.
func (b *Broker) GetMessage(ctx context.Context, tenant, partitionID, txid, group string) (MessageRow, error) {
	m, err := b.db.GetMessage(ctx, tenant, partitionID, txid, group)
	return m, notFound(err)
}

// DeleteMessage deletes one message. A group whose live lease the delete
// ended (the deleted message was the last unresolved one of its batch) may
// have messages waiting behind that lease: its parked pops are woken as an
// ack that releases a lease would wake them (ack.go).
func (b *Broker) DeleteMessage(ctx context.Context, tenant, partitionID, txid string) (DeleteResult, error) {
	res, err := b.db.DeleteMessage(ctx, tenant, partitionID, txid)
	if err != nil {
		return DeleteResult{}, notFound(err)
	}
	key := queueKey(tenant, res.Queue)
	wake := false
	for _, c := range res.Cursors {
		if !c.Released {
			continue
		}
		if b.hot != nil {
			wake = b.hot.AckRelease(key, c.Group, partitionID, c.Pending, time.Now()) || wake
		} else {
			wake = wake || c.Pending
		}
	}
	if wake {
		b.gates.notify(key)
	}
	return res, nil
}

// UpdateSubscription moves the group's recorded subscription start on every
// queue of the tenant.
func (b *Broker) UpdateSubscription(ctx context.Context, tenant, group string, from time.Time) (int, error) {
	n, err := b.db.UpdateSubscription(ctx, tenant, group, from)
	return n, wrap(err)
}

// SeekPartitionToEnd moves the group's cursor on one partition to its end.
// Nothing becomes deliverable, so nothing is woken; a hot-list ring that
// still lists the partition finds it empty on its next probe.
func (b *Broker) SeekPartitionToEnd(ctx context.Context, tenant, group, queue, partition string) error {
	return notFound(b.db.SeekPartitionToEnd(ctx, tenant, group, queue, partition))
}
