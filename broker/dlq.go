package broker

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"queen-node/hotlist"
	"queen-node/pg"
	"queen-node/protocol"
)

// ErrTxIDTaken: a dead-letter retry's copy would reuse a transaction id
// that a client already pushed to the partition (409).
var ErrTxIDTaken = pg.ErrTxIDTaken

// ErrDLQSuperseded: only superseded entries (409; docs/api.md, "Retry or
// drop a dead letter").
var ErrDLQSuperseded = pg.ErrDLQSuperseded

// ErrDLQRetryPushMaintenance: a retry is a push that cannot be buffered (it
// commits with the dead-letter entry's delete), so it is refused while
// pushes are buffered, as a transaction with pushes is, else the copy would
// overtake the buffered pushes (docs/api.md, "Maintenance modes"); 503.
var ErrDLQRetryPushMaintenance = fmt.Errorf("%w: dead-letter retries are refused until it is off and this node's buffer is replayed; retry later", ErrMaintenanceRefused)

// ErrNotFound: the tenant has no such dead letter (404). It is pg's, so
// package reads returns the same value for its reads.
var ErrNotFound = pg.ErrNotFound

// notFound answers pg's not-found as the bare ErrNotFound, and wraps the rest.
func notFound(err error) error {
	if errors.Is(err, pg.ErrNotFound) {
		return ErrNotFound
	}
	return wrap(err)
}

// DLQRetried is the copy a dead-letter retry appended.
type DLQRetried = pg.DLQRetried

// RetryDeadLetter delivers a dead-lettered message again to its group only
// (docs/api.md, "Retry or drop a dead letter"): the copy is committed, then
// announced exactly as a pushed message is (local wake-up, hot-list mark,
// mesh hint). ErrNotFound when the tenant has no such entry,
// ErrDLQSuperseded when all of them are superseded.
func (b *Broker) RetryDeadLetter(ctx context.Context, tenant, partitionID, txid, group string) (DLQRetried, error) {
	if b.maint.buffering() {
		return DLQRetried{}, ErrDLQRetryPushMaintenance
	}
	id, err := uuid.NewV7()
	if err != nil {
		return DLQRetried{}, fmt.Errorf("message id: %w", err)
	}
	r, err := b.db.RetryDeadLetter(ctx, tenant, partitionID, txid, group, id.String(), MaxNameBytes)
	if errors.Is(err, pg.ErrTxIDTaken) || errors.Is(err, pg.ErrDLQSuperseded) {
		return DLQRetried{}, err
	}
	if err != nil {
		return DLQRetried{}, notFound(err)
	}
	b.afterPush(tenant, []PushResult{{Status: protocol.PushQueued, TransactionID: r.TxID, MessageID: id.String(),
		PartitionID: partitionID, Queue: r.Queue, partition: r.Partition}}, hotlist.SourceLocal)
	return r, nil
}
