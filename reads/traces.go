package reads

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
func (s *Service) RecordTrace(ctx context.Context, tenant string, req TraceRequest) (id string, found bool, err error) {
	id, found, err = s.db.RecordTrace(ctx, tenant, pg.TraceInsert{
		PartitionID: req.PartitionID, TransactionID: req.TransactionID, Group: req.ConsumerGroup,
		EventType: req.EventType, Data: req.Data, Names: req.Names, Worker: s.node,
	})
	return id, found, wrap(err)
}

// ReadPage bounds a list read: at most Limit rows from Offset, and about
// MaxBytes of answer (0 = no byte bound); the first row always comes.
type ReadPage = pg.Page

// TracePage is a page of traces. Total counts every match (TracesByName
// only); Truncated says MaxBytes stopped the page before Limit: more
// traces follow at Offset + len(Traces).
type TracePage struct {
	Traces    []Trace
	Total     int64
	Truncated bool
}

// MessageTraces returns a page of the traces of the tenant's message, oldest first.
func (s *Service) MessageTraces(ctx context.Context, tenant, partitionID, transactionID string, p ReadPage) (TracePage, error) {
	page, err := s.db.MessageTraces(ctx, tenant, partitionID, transactionID, p)
	if err != nil {
		return TracePage{}, wrap(err)
	}
	return toTracePage(page), nil
}

// TracesByName returns a page of the tenant's traces carrying name, oldest
// first, with their total count.
func (s *Service) TracesByName(ctx context.Context, tenant, name string, p ReadPage) (TracePage, error) {
	page, err := s.db.TracesByName(ctx, tenant, name, p)
	if err != nil {
		return TracePage{}, wrap(err)
	}
	return toTracePage(page), nil
}

// TraceNames returns a page of the tenant's trace names, most recently seen
// first, with the number of names.
func (s *Service) TraceNames(ctx context.Context, tenant string, limit, offset int) ([]TraceName, int64, error) {
	rows, total, err := s.db.TraceNames(ctx, tenant, limit, offset)
	if err != nil {
		return nil, 0, wrap(err)
	}
	out := make([]TraceName, len(rows))
	for i, r := range rows {
		out[i] = TraceName{Name: r.Name, TraceCount: r.TraceCount, MessageCount: r.MessageCount, LastSeen: r.LastSeen}
	}
	return out, total, nil
}

func toTracePage(page pg.TracePage) TracePage {
	out := make([]Trace, len(page.Rows))
	for i, r := range page.Rows {
		out[i] = Trace{ID: r.ID, TransactionID: r.TransactionID, PartitionID: r.PartitionID, EventType: r.EventType,
			ConsumerGroup: r.Group, WorkerID: r.Worker, Data: r.Data, CreatedAt: r.CreatedAt, Names: r.Names,
			Queue: r.Queue, Partition: r.Partition, Payload: r.Payload}
	}
	return TracePage{Traces: out, Total: page.Total, Truncated: page.More}
}
