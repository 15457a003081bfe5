package reads

import (
	"context"
	"encoding/json"
	"time"

	"queen-node/pg"
)

// The dead-letter list and drop (docs/api.md, "Dead letters"); a retry is
// a push and stays in the broker.

// DLQQuery filters GET /api/v1/dlq.
type DLQQuery struct {
	Queue     string
	Group     string
	Partition string
	From, To  *time.Time
	Limit     int
	Offset    int
	MaxBytes  int64 // about this much answer at most (0 = no bound); the first entry always comes
}

// DLQPage is a page of dead letters. Total counts every match; Truncated
// says MaxBytes stopped the page before Limit: more entries follow at
// Offset + len(Entries).
type DLQPage struct {
	Entries   []DLQEntry
	Total     int
	Truncated bool
}

// DLQEntry is one dead-lettered message.
type DLQEntry struct {
	ID            string
	TransactionID string
	PartitionID   string
	Queue         string
	Partition     string
	ConsumerGroup string
	ErrorMessage  string
	RetryCount    int
	Data          json.RawMessage
	ProducerSub   *string
	CreatedAt     time.Time
	FailedAt      time.Time
	Superseded    bool // a seek or a group delete took it back: drop only, no retry
}

// ListDLQ lists a page of dead letters, newest first, with the total match
// count.
func (s *Service) ListDLQ(ctx context.Context, tenant string, q DLQQuery) (DLQPage, error) {
	page, err := s.db.ListDLQ(ctx, tenant, pg.DLQFilter{Queue: q.Queue, Group: q.Group,
		Partition: q.Partition, From: q.From, To: q.To, Limit: q.Limit, Offset: q.Offset, MaxBytes: q.MaxBytes})
	if err != nil {
		return DLQPage{}, wrap(err)
	}
	out := DLQPage{Entries: make([]DLQEntry, len(page.Rows)), Total: page.Total, Truncated: page.More}
	for i, r := range page.Rows {
		out.Entries[i] = DLQEntry{ID: r.MessageID, TransactionID: r.TxID, PartitionID: r.PartitionID,
			Queue: r.Queue, Partition: r.Partition, ConsumerGroup: r.Group, ErrorMessage: r.Error,
			RetryCount: r.Retry, Data: r.Payload, ProducerSub: r.Sub, CreatedAt: r.CreatedAt, FailedAt: r.FailedAt, Superseded: r.Superseded}
	}
	return out, nil
}

// DropDeadLetter deletes the group's dead-letter entries of the message and
// returns how many, superseded ones included; ErrNotFound when the tenant
// has no such entry.
func (s *Service) DropDeadLetter(ctx context.Context, tenant, partitionID, txid, group string) (int, error) {
	n, err := s.db.DropDeadLetter(ctx, tenant, partitionID, txid, group)
	return n, notFound(err)
}
