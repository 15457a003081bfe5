package pg

import (
	"context"
	"errors"
	"fmt"

	"queen-node/protocol"
)

// ErrTxIDTaken: the transaction id a dead-letter retry would give its copy
// is already used in the partition (a client pushed that very id).
var ErrTxIDTaken = errors.New("transaction id of the retried copy is already used in the partition")

// ErrDLQSuperseded: the group's entries of the message are all superseded
// (a seek moved the group's cursor back over the message, so it is pending
// for the group again, or the group was deleted): there is nothing to retry.
var ErrDLQSuperseded = errors.New("dead letter superseded: a seek moved the group's cursor back over the message (the group reads it again) or the group was deleted; drop the entry instead")

// DLQRetried is the copy a dead-letter retry appended.
type DLQRetried struct {
	Queue, Partition string
	TxID             string // the copy's transaction id
	Offset           int64
}

// RetryDeadLetter appends a copy of the group's live dead-letter entry of
// the message for that group only and deletes the entry
// (queen.dlq_retry_v2, one statement, retried on a deadlock). mid is the
// copy's message id; maxTxID bounds its transaction id in bytes.
// ErrNotFound when the tenant has no such entry, ErrDLQSuperseded when it
// has only superseded ones, ErrTxIDTaken when the copy's transaction id is
// used already.
func (db *DB) RetryDeadLetter(ctx context.Context, tenant, partitionID, txid, group, mid string, maxTxID int) (DLQRetried, error) {
	var outcome protocol.DLQRetryOutcome
	var queue, part, txID *string
	var off *int64
	err := db.retry(ctx, false, func() error {
		return db.pool.QueryRow(ctx, `SELECT o_outcome, o_queue, o_partition, o_txid, o_off
			FROM queen.dlq_retry_v2($1, $2::uuid, $3, $4, $5::uuid, $6)`,
			tenant, partitionID, txid, group, mid, maxTxID).Scan(&outcome, &queue, &part, &txID, &off)
	})
	if err != nil {
		return DLQRetried{}, fmt.Errorf("retry dead letter %s/%s/%s: %w", partitionID, txid, group, err)
	}
	switch outcome {
	case protocol.DLQRetried:
		return DLQRetried{Queue: deref(queue), Partition: deref(part), TxID: deref(txID), Offset: *off}, nil
	case protocol.DLQNotFound:
		return DLQRetried{}, ErrNotFound
	case protocol.DLQSuperseded:
		return DLQRetried{}, ErrDLQSuperseded
	case protocol.DLQTaken:
		return DLQRetried{}, fmt.Errorf("retry dead letter %s/%s/%s as %s: %w", partitionID, txid, group, deref(txID), ErrTxIDTaken)
	}
	return DLQRetried{}, fmt.Errorf("retry dead letter %s/%s/%s: unknown outcome %q", partitionID, txid, group, outcome)
}

// DropDeadLetter deletes the group's dead-letter entries of the message
// (queen.dlq_drop_v1), superseded or not, and returns how many; ErrNotFound
// when the tenant has no such entry.
func (db *DB) DropDeadLetter(ctx context.Context, tenant, partitionID, txid, group string) (int, error) {
	var n int
	err := db.retry(ctx, false, func() error {
		return db.pool.QueryRow(ctx, `SELECT queen.dlq_drop_v1($1, $2::uuid, $3, $4)`,
			tenant, partitionID, txid, group).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("drop dead letter %s/%s/%s: %w", partitionID, txid, group, err)
	}
	if n == 0 {
		return 0, ErrNotFound
	}
	return n, nil
}
