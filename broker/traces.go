package broker

import (
	"context"
	"time"

	"queen-node/pg"
)

// TraceRequest is one trace event to record on a message (docs/api.md, "Traces").
type TraceRequest struct {
	PartitionID   string // a canonical UUID
	TransactionID string
	ConsumerGroup string
	EventType     string
	Data          []byte   // compact JSON
	Names         []string // distinct
}

// Trace is a stored trace event. Queue, Partition and Payload are set by
// TracesByName only; Payload is nil once the message is gone.
type Trace struct {
	ID, TransactionID, PartitionID, EventType, ConsumerGroup, WorkerID string
	Data                                                               []byte
	CreatedAt                                                          time.Time
	Names                                                              []string
	Queue, Partition                                                   string
	Payload                                                            []byte
}

// TraceName is one trace name of a tenant with its counters.
type TraceName struct {
	Name                     string
	TraceCount, MessageCount int64
	LastSeen                 time.Time
}

// RecordTrace stores a trace of the tenant's message; found is false when
// the tenant has no message with that partition and transaction id. The
// recording node's name is stored as the trace's worker id.
func (b *Broker) RecordTrace(ctx context.Context, tenant string, req TraceRequest) (id string, found bool, err error) {
	id, found, err = b.db.RecordTrace(ctx, tenant, pg.TraceInsert{
		PartitionID: req.PartitionID, TransactionID: req.TransactionID, Group: req.ConsumerGroup,
		EventType: req.EventType, Data: req.Data, Names: req.Names, Worker: b.cfg.NodeName,
	})
	return id, found, wrap(err)
}

// MessageTraces returns the traces of the tenant's message, oldest first, at most limit.
func (b *Broker) MessageTraces(ctx context.Context, tenant, partitionID, transactionID string, limit int) ([]Trace, error) {
	rows, err := b.db.MessageTraces(ctx, tenant, partitionID, transactionID, limit)
	if err != nil {
		return nil, wrap(err)
	}
	return toTraces(rows), nil
}

// TracesByName returns a page of the tenant's traces carrying name, oldest
// first, with their total count.
func (b *Broker) TracesByName(ctx context.Context, tenant, name string, limit, offset int) ([]Trace, int64, error) {
	rows, total, err := b.db.TracesByName(ctx, tenant, name, limit, offset)
	if err != nil {
		return nil, 0, wrap(err)
	}
	return toTraces(rows), total, nil
}

// TraceNames returns a page of the tenant's trace names, most recently seen
// first, with the number of names.
func (b *Broker) TraceNames(ctx context.Context, tenant string, limit, offset int) ([]TraceName, int64, error) {
	rows, total, err := b.db.TraceNames(ctx, tenant, limit, offset)
	if err != nil {
		return nil, 0, wrap(err)
	}
	out := make([]TraceName, len(rows))
	for i, r := range rows {
		out[i] = TraceName{Name: r.Name, TraceCount: r.TraceCount, MessageCount: r.MessageCount, LastSeen: r.LastSeen}
	}
	return out, total, nil
}

func toTraces(rows []pg.TraceRow) []Trace {
	out := make([]Trace, len(rows))
	for i, r := range rows {
		out[i] = Trace{ID: r.ID, TransactionID: r.TransactionID, PartitionID: r.PartitionID, EventType: r.EventType,
			ConsumerGroup: r.Group, WorkerID: r.Worker, Data: r.Data, CreatedAt: r.CreatedAt, Names: r.Names,
			Queue: r.Queue, Partition: r.Partition, Payload: r.Payload}
	}
	return out
}
