package broker

import (
	"context"
	"time"

	"github.com/google/uuid"

	"queen-node/pg"
	"queen-node/protocol"
)

// Ack resolves messages (docs/api.md, "Acks"). Results
// come back in input order; per-item failures are results, not errors.
func (b *Broker) Ack(ctx context.Context, tenant string, items []AckItem) ([]AckResult, error) {
	return b.AckPeer(ctx, tenant, items, nil)
}

// AckPeer is Ack for acks a peer forwarded, with the claims it asks to
// have taken ahead for its clients' next pops (PeerClaim, prefetch.go).
func (b *Broker) AckPeer(ctx context.Context, tenant string, items []AckItem, peers []PeerClaim) ([]AckResult, error) {
	if len(items) == 0 {
		return []AckResult{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, dbRequestTimeout) // see push.go
	defer cancel()
	var (
		outs []pg.AckOutcome
		used bool
		err  error
	)
	if b.acks != nil {
		outs, used, err = b.ackWithCAS(ctx, tenant, items, peers)
	}
	if !used {
		outs, err = b.ackGeneral(ctx, tenant, items)
	}
	if err != nil {
		return nil, wrap(err) // the bound above running out is a 503 too
	}
	b.afterAck(tenant, outs)
	res := make([]AckResult, len(items))
	for i, o := range outs {
		res[i] = AckResult{Index: i, TransactionID: items[i].TransactionID, Success: o.Success,
			Error: o.Error, QueueName: o.Queue, PartitionName: o.Partition,
			LeaseReleased: o.Released, DLQ: o.DLQ}
		if !o.Success && o.Error == "" {
			res[i].Error = protocol.ErrMessageNotFound
		}
	}
	return res, nil
}

// ackGeneral runs the items through queen.ack_v2.
func (b *Broker) ackGeneral(ctx context.Context, tenant string, items []AckItem) ([]pg.AckOutcome, error) {
	b.stats.AcksGeneral.Add(int64(len(items)))
	// One autocommit call: a deadlock or a concurrent delete rolls it back
	// whole, so running it again cannot apply an item twice.
	var outs []pg.AckOutcome
	err := b.db.Retry(ctx, func() (err error) {
		outs, err = b.db.Ack(ctx, tenant, ackRows(items))
		return err
	})
	if err != nil {
		return nil, wrap(err)
	}
	return outs, nil
}

func ackRows(items []AckItem) []pg.AckRow {
	rows := make([]pg.AckRow, len(items))
	for i, it := range items {
		pid := uuid.Nil.String()
		if u, err := uuid.Parse(it.PartitionID); err == nil {
			// The canonical spelling: uuid.Parse also reads forms that
			// PostgreSQL's uuid input refuses (urn:uuid:...).
			pid = u.String()
		}
		// Otherwise not an id we ever issued: it matches no partition, so
		// the item reports "Message not found" instead of failing the call.
		rows[i] = pg.AckRow{Group: it.Group, PartitionID: pid, TxID: it.TransactionID,
			Status: it.Status, LeaseID: it.LeaseID, Error: it.Error}
	}
	return rows
}

// afterAck counts and wakes: a released lease on a partition that still has
// messages (a retry, or pushes that arrived during the lease) is work for
// parked pops right now rather than at lease expiry.
func (b *Broker) afterAck(tenant string, outs []pg.AckOutcome) {
	var woken, released map[string]struct{}
	for _, o := range outs {
		b.stats.Acks.Add(1)
		if !o.Success {
			b.stats.AcksRefused.Add(1)
		}
		if o.DLQ {
			b.stats.DeadLettered.Add(1)
		}
		if !o.Released || o.Queue == "" {
			continue
		}
		// Every item of a released (partition, group) reports it; act once.
		pg := o.PartitionID + "\x00" + o.Group
		if _, ok := released[pg]; ok {
			continue
		}
		if released == nil {
			released = make(map[string]struct{}, 1)
		}
		released[pg] = struct{}{}
		if b.hot != nil {
			// Promote on ack: ready again if the partition is still pending,
			// cleared only if the claim drained it and nothing was marked since.
			if !b.hot.AckRelease(queueKey(tenant, o.Queue), o.Group, o.PartitionID, o.Pending, time.Now()) {
				continue
			}
		} else if !o.Pending {
			continue
		}
		if _, ok := woken[o.Queue]; ok {
			continue
		}
		if woken == nil {
			woken = make(map[string]struct{}, 1)
		}
		woken[o.Queue] = struct{}{}
		b.gates.notify(queueKey(tenant, o.Queue))
	}
}
