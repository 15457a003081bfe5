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

// txAbort carries why a transaction rolled back.
type txAbort struct{ reason string }

func (e *txAbort) Error() string { return e.reason }

// Transaction applies ack and push operations all or nothing. Every id in
// requiredLeases must be a live lease before anything is applied. A failed
// transaction is a result (Success false), not an error.
func (b *Broker) Transaction(ctx context.Context, tenant string, producerSub *string, ops []TxOp, requiredLeases []string) (TxResult, error) {
	b.stats.Transactions.Add(1)
	if err := b.checkTxMaintenance(ops); err != nil {
		return TxResult{}, err
	}
	res := TxResult{TransactionID: uuid.NewString()}
	// Everything the transaction will lock is known before it starts, so it
	// is locked up front in one global order (pg.TxLocks) instead of op by
	// op, which let two transactions cross.
	locks := pg.TxLocks{Leases: requiredLeases}
	pushRowsOf := make([][]pg.PushRow, len(ops))
	for i, op := range ops {
		switch op.Type {
		case "ack":
			r := ackRows([]AckItem{op.Ack})[0]
			locks.Acks = append(locks.Acks, pg.ConsumerKey{PartitionID: r.PartitionID, Group: r.Group})
		case "push":
			rows, err := pushRows(op.Items, producerSub)
			if err != nil {
				return TxResult{}, err
			}
			pushRowsOf[i] = rows
			locks.Parts = append(locks.Parts, pg.Partitions(rows)...)
		}
	}
	var pushed []PushResult
	var acked []pg.AckOutcome
	err := b.db.InPushTx(ctx, tenant, locks, func(t *pg.Tx) error {
		// A retry runs this again from the start.
		res.Results, pushed, acked = nil, nil, nil
		ok, err := t.CheckLeases(ctx, tenant, requiredLeases)
		if err != nil {
			return err
		}
		if !ok {
			return &txAbort{protocol.ErrInvalidLease}
		}
		for i, op := range ops {
			switch op.Type {
			case "ack":
				outs, err := t.Ack(ctx, tenant, ackRows([]AckItem{op.Ack}))
				if err != nil {
					return err
				}
				o := outs[0]
				r := TxOpResult{Index: len(res.Results), Type: "ack", Success: o.Success,
					TransactionID: op.Ack.TransactionID, Error: o.Error, DLQ: o.DLQ}
				res.Results = append(res.Results, r)
				if !o.Success {
					return &txAbort{fmt.Sprintf("operation %d (ack %s): %s", i, op.Ack.TransactionID, o.Error)}
				}
				acked = append(acked, o)
			case "push":
				if len(op.Items) == 0 {
					continue
				}
				rows := pushRowsOf[i]
				outs, err := t.Push(ctx, tenant, rows)
				if err != nil {
					return err
				}
				prs := pushResults(op.Items, rows, outs)
				for _, pr := range prs {
					res.Results = append(res.Results, TxOpResult{Index: len(res.Results), Type: "push",
						Success: pr.Status != protocol.PushFailed, TransactionID: pr.TransactionID,
						MessageID: pr.MessageID, PartitionID: pr.PartitionID, QueueName: pr.Queue,
						Status: pr.Status, Error: pr.Error})
					if pr.Status == protocol.PushFailed {
						return &txAbort{fmt.Sprintf("operation %d (push to %s): %s", i, pr.Queue, pr.Error)}
					}
				}
				pushed = append(pushed, prs...)
			default:
				return &txAbort{fmt.Sprintf("operation %d: unknown type %q (want ack or push)", i, op.Type)}
			}
		}
		return nil
	})
	if errors.Is(err, pg.ErrQueueDeleted) {
		res.Success, res.Error = false, "a queue was deleted during the transaction; nothing was applied"
		return res, nil
	}
	var abort *txAbort
	if errors.As(err, &abort) {
		res.Success, res.Error = false, abort.reason
		return res, nil
	}
	if err != nil {
		return TxResult{}, wrap(err)
	}
	res.Success = true
	b.afterPush(tenant, pushed, hotlist.SourceCommit)
	b.afterAck(tenant, acked)
	return res, nil
}
