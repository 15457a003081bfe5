package broker

import (
	"context"
	"time"

	"queen-node/pg"
)

// The broker's side of the admin writes package reads makes (reads.Waker):
// after the write commits, the hot-list forgets or re-derives what it made
// stale and the queue's parked pops look again.

// AfterSeek re-derives group's ring on queue (a backwards seek makes
// partitions pending that the ring cleared: now rather than at the next
// floor) and wakes the queue's parked pops.
func (b *Broker) AfterSeek(ctx context.Context, tenant, queue, group string) error {
	if b.pre != nil {
		b.pre.dropQueue(tenant, queue, group) // claimed before the seek
	}
	if b.hot != nil {
		if r := b.hot.Lookup(queueKey(tenant, queue), group); r != nil {
			if w := b.hot.BeginReseed(r, time.Now(), true); w != nil {
				if err := b.reseed(ctx, w); err != nil {
					return wrap(err)
				}
			}
		}
	}
	b.gates.notify(queueKey(tenant, queue))
	return nil
}

// AfterGroupDelete forgets group's rings on queue ("" = every queue) and
// wakes the queue's parked pops.
func (b *Broker) AfterGroupDelete(tenant, queue, group string) {
	if b.pre != nil {
		b.pre.dropQueue(tenant, queue, group)
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
}

// AfterMessageDelete wakes the parked pops of the groups whose live lease
// the delete ended with messages left, as an ack that releases a lease
// would (ack.go).
func (b *Broker) AfterMessageDelete(tenant, partitionID string, res pg.DeleteResult) {
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
}
